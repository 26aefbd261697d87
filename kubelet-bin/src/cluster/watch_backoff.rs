//! The backoff of the kubelet's watches (mirrors client-go `tools/cache/reflector.go` of the
//! API servers this kubelet is tested against, v1.20: `initConnBackoffManager` and
//! `backoffManager`, both `NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)`).
//!
//! The reflector keeps two backoffs:
//! - re-opening a watch the server could not be reached for (connection refused, 429) waits
//!   on the *connection* backoff and resumes from the same resourceVersion;
//! - everything that ends a list-and-watch (a failed list, a watch that ended in an error such
//!   as `410 Gone`) waits on the *list-and-watch* backoff before the relist.
//!
//! kube-runtime's `default_backoff` has one backoff for both, so an outage grows it to its cap
//! (30 s, up to 60 s with jitter) while the watch is re-opened, and when the restarted server
//! answers that watch with `410 Gone` (its new watch cache starts at the current etcd
//! revision), the relist waits that grown backoff once more: a pod bound after the restart was
//! seen up to two minutes late. Here, as in the reflector, the relist after the 410 takes the
//! first step of its own backoff (0.8–1.6 s). Each backoff has kube's (= the reflector's)
//! numbers and resets after 2 min without a failure, and both reset on any event (kube's
//! `StreamBackoff` rule).

use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use tracing::debug;

/// The two backoffs of a reflector.
#[derive(Default)]
struct Backoffs {
    /// Upstream `initConnBackoffManager`: re-opening a watch.
    connection: DefaultBackoff,
    /// Upstream `backoffManager`: the relist after a list-and-watch ended.
    list_and_watch: DefaultBackoff,
}

impl Backoffs {
    /// How long to wait after `error` before the watcher is polled again.
    fn after(&mut self, error: &watcher::Error) -> Option<Duration> {
        if reopens_the_watch(error) {
            self.connection.next()
        } else {
            self.list_and_watch.next()
        }
    }

    fn reset(&mut self) {
        self.connection.reset();
        self.list_and_watch.reset();
    }
}

/// Whether kube-runtime's watcher answers `error` by opening the watch again from the same
/// resourceVersion (a watch that could not be started), not by a relist.
pub fn reopens_the_watch(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchStartFailed(_))
}

/// `events` (a kube-runtime watcher) with the reflector's two backoffs: after an error, the
/// next event is waited for only once the backoff of that error's kind has passed. Use it
/// where kube-runtime's `default_backoff` would go.
///
/// Cancel safe: dropping a pending `next()` loses nothing.
pub fn reflector_backoff<K, S>(
    events: S,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Send,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send,
{
    let state = (Box::pin(events), Backoffs::default(), None::<Duration>);
    futures::stream::unfold(state, |(mut events, mut backoffs, delay)| async move {
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        let item = events.next().await?;
        let delay = match &item {
            Ok(_) => {
                backoffs.reset();
                None
            }
            Err(error) => {
                let delay = backoffs.after(error);
                debug!(
                    ?delay,
                    reopen = reopens_the_watch(error),
                    "watch failed; backing off"
                );
                delay
            }
        };
        Some((item, (events, backoffs, delay)))
    })
}

/// Feeds every event of a watch of `api` (with `config`, through [`reflector_backoff`]) to
/// `apply` until `token` is cancelled or the watch ends; a failed list or watch is logged as
/// `watching <what>; retrying` and retried by the backoff. The loop of the kubelet's object
/// caches (services, RuntimeClasses, its Node).
pub async fn watch_until_cancelled<K>(
    api: kube::Api<K>,
    config: watcher::Config,
    what: &str,
    token: tokio_util::sync::CancellationToken,
    mut apply: impl FnMut(Event<K>),
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let events = reflector_backoff(watcher::watcher(api, config));
    futures::pin_mut!(events);
    loop {
        tokio::select! {
            biased;
            () = token.cancelled() => return,
            event = events.next() => match event {
                Some(Ok(event)) => apply(event),
                Some(Err(e)) => tracing::warn!(error = %e, "watching {what}; retrying"),
                None => return,
            },
        }
    }
}

#[cfg(test)]
#[path = "watch_backoff_tests.rs"]
mod tests;
