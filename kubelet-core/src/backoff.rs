//! Per-key exponential backoff, as client-go's `flowcontrol.Backoff`, on tokio time.
//!
//! Used for container restarts (CrashLoopBackOff, keyed by pod, container and spec hash) and
//! image pulls. Mirrors `k8s.io/client-go/util/flowcontrol/backoff.go`: the first failure
//! waits `initial`, each further one doubles up to `max`, and an entry that has seen no
//! failure for `2 × max` starts over.
//!
//! Two ways to measure a window, as upstream: from the last [`Backoff::next`]
//! ([`Backoff::remaining`], upstream `IsInBackOffSinceUpdate`, used for image pulls) or from
//! an event such as a container's exit ([`Backoff::remaining_since`], upstream
//! `IsInBackOffSince`, used for container restarts).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

#[derive(Clone, Copy, Debug)]
struct Entry {
    backoff: Duration,
    last_update: Instant,
}

/// A thread-safe map of per-key backoff windows.
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Backoff {
    /// A backoff starting at `initial` and doubling up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Upstream's container restart backoff: 10 s doubling to 300 s.
    pub fn crash_loop_default() -> Self {
        Self::new(Duration::from_secs(10), Duration::from_secs(300))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // A poisoned map only means another thread panicked mid-update; the data is plain.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn expired(&self, entry: &Entry, now: Instant) -> bool {
        now.saturating_duration_since(entry.last_update) > self.max * 2
    }

    /// Records a failure for `key` now and returns the window that starts now.
    pub fn next(&self, key: &str) -> Duration {
        let now = Instant::now();
        self.record(key, now, |e| !self.expired(e, now))
    }

    /// The first window.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The largest window.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// Records a failure for `key` that happened at `event` (upstream `Next(id, eventTime)`):
    /// the window starts over at `initial` when `event` comes more than `2 × max` after the
    /// last update (the container ran cleanly for that long), otherwise it doubles up to
    /// `max`. Returns the new window.
    pub fn next_since(&self, key: &str, event: Instant) -> Duration {
        self.record(key, Instant::now(), |e| {
            event.saturating_duration_since(e.last_update) <= self.max * 2
        })
    }

    /// Stores the window of `key` as updated at `now`: doubled up to `max` when there is an
    /// entry and `continues` says the failure extends it, `initial` otherwise.
    fn record(&self, key: &str, now: Instant, continues: impl FnOnce(&Entry) -> bool) -> Duration {
        let mut entries = self.lock();
        let backoff = match entries.get(key) {
            Some(e) if continues(e) => (e.backoff * 2).min(self.max),
            _ => self.initial,
        };
        entries.insert(
            key.to_owned(),
            Entry {
                backoff,
                last_update: now,
            },
        );
        backoff
    }

    /// `Some(remaining)` while less than the current window of `key` has passed since
    /// `event` (upstream `IsInBackOffSince`); `None` when there is no entry or it expired
    /// relative to `event`.
    pub fn remaining_since(&self, key: &str, event: Instant) -> Option<Duration> {
        let now = Instant::now();
        let entries = self.lock();
        let e = entries.get(key)?;
        if event.saturating_duration_since(e.last_update) > self.max * 2 {
            return None;
        }
        let elapsed = now.saturating_duration_since(event);
        (elapsed < e.backoff).then(|| e.backoff - elapsed)
    }

    /// `Some(remaining)` while `key` is inside its current window.
    pub fn remaining(&self, key: &str) -> Option<Duration> {
        let now = Instant::now();
        let entries = self.lock();
        let e = entries.get(key)?;
        if self.expired(e, now) {
            return None;
        }
        let elapsed = now.saturating_duration_since(e.last_update);
        (elapsed < e.backoff).then(|| e.backoff - elapsed)
    }

    /// The current window of `key`, if it has one.
    pub fn current(&self, key: &str) -> Option<Duration> {
        self.lock().get(key).map(|e| e.backoff)
    }

    /// Forgets `key`.
    pub fn reset(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Drops entries that have expired (upstream `GC`).
    pub fn gc(&self) {
        let now = Instant::now();
        let max2 = self.max * 2;
        self.lock()
            .retain(|_, e| now.saturating_duration_since(e.last_update) <= max2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn doubles_caps_and_expires() {
        let b = Backoff::new(Duration::from_secs(10), Duration::from_secs(40));
        assert_eq!(b.remaining("k"), None);
        assert_eq!(b.next("k"), Duration::from_secs(10));
        assert_eq!(b.remaining("k"), Some(Duration::from_secs(10)));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(b.remaining("k"), Some(Duration::from_secs(6)));
        assert_eq!(b.next("k"), Duration::from_secs(20));
        assert_eq!(b.next("k"), Duration::from_secs(40));
        assert_eq!(b.next("k"), Duration::from_secs(40));
        tokio::time::advance(Duration::from_secs(41)).await;
        assert_eq!(b.remaining("k"), None);
        // no failure for more than 2 x max: starts over
        tokio::time::advance(Duration::from_secs(40)).await;
        assert_eq!(b.next("k"), Duration::from_secs(10));
        b.reset("k");
        assert_eq!(b.current("k"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn windows_measured_from_the_event() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_millis(1600));
        let exit = Instant::now();
        assert_eq!(b.remaining_since("k", exit), None);
        assert_eq!(b.next_since("k", exit), Duration::from_millis(100));
        // a second exit right after the restart doubles the window, measured from the exit
        tokio::time::advance(Duration::from_millis(150)).await;
        let exit = Instant::now();
        tokio::time::advance(Duration::from_millis(50)).await;
        assert_eq!(
            b.remaining_since("k", exit),
            Some(Duration::from_millis(50))
        );
        tokio::time::advance(Duration::from_millis(50)).await;
        assert_eq!(b.remaining_since("k", exit), None, "100 ms window over");
        assert_eq!(b.next_since("k", exit), Duration::from_millis(200));
        assert_eq!(
            b.remaining_since("k", Instant::now()),
            Some(Duration::from_millis(200))
        );
        for want in [400, 800, 1600, 1600] {
            assert_eq!(
                b.next_since("k", Instant::now()),
                Duration::from_millis(want)
            );
        }
        // the container then ran cleanly for more than 2 x max before exiting: start over
        tokio::time::advance(Duration::from_millis(3300)).await;
        let exit = Instant::now();
        assert_eq!(b.remaining_since("k", exit), None);
        assert_eq!(b.next_since("k", exit), Duration::from_millis(100));
    }
}
