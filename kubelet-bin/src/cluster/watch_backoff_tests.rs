use futures::channel::mpsc as fmpsc;
use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;

use super::*;

type Item = Result<Event<Pod>, watcher::Error>;

fn refused() -> watcher::Error {
    watcher::Error::WatchStartFailed(kube::Error::Service(Box::new(std::io::Error::from(
        std::io::ErrorKind::ConnectionRefused,
    ))))
}

fn gone() -> watcher::Error {
    watcher::Error::WatchError(Box::new(
        kube::core::Status::failure("too old resource version: 204 (205)", "Expired")
            .with_code(410),
    ))
}

fn list_failed() -> watcher::Error {
    watcher::Error::InitialListFailed(kube::Error::Service(Box::new(std::io::Error::from(
        std::io::ErrorKind::ConnectionRefused,
    ))))
}

/// Sends each of `errors` and returns how long the stream waited before handing out each
/// one (the backoff after the one before).
async fn waits(
    tx: &fmpsc::UnboundedSender<Item>,
    events: &mut (impl Stream<Item = Item> + Unpin),
    errors: impl IntoIterator<Item = Item>,
) -> Vec<Duration> {
    let mut waits = Vec::new();
    for item in errors {
        let start = Instant::now();
        tx.unbounded_send(item).expect("stream alive");
        let _ = events.next().await.expect("the item");
        waits.push(start.elapsed());
    }
    waits
}

#[tokio::test(start_paused = true)]
async fn the_relist_after_a_410_does_not_wait_the_outages_backoff() {
    let (tx, rx) = fmpsc::unbounded::<Item>();
    let mut events = Box::pin(reflector_backoff(rx));
    // A long outage: the watch is re-opened and refused ten times (kube's backoff reaches its
    // 30 s cap after six).
    let start = Instant::now();
    for _ in 0..10 {
        tx.unbounded_send(Err(refused())).expect("stream alive");
        let _ = events.next().await.expect("the error");
    }
    // The restarted server answers the re-opened watch with 410 Gone: relist.
    tx.unbounded_send(Err(gone())).expect("stream alive");
    let _ = events.next().await.expect("the 410");
    let outage = start.elapsed();
    assert!(
        outage >= Duration::from_secs(100),
        "the refusals were backed off: {outage:?}"
    );
    let gone_at = Instant::now();
    tx.unbounded_send(Ok(Event::Init)).expect("stream alive");
    let _ = events.next().await.expect("the relist");
    let relist = gone_at.elapsed();
    assert!(
        relist <= Duration::from_millis(1600),
        "the relist after the 410 came {relist:?} after it (its backoff's first step is 0.8–1.6 s)"
    );
}

#[tokio::test(start_paused = true)]
async fn each_kind_of_failure_grows_its_own_backoff_and_an_event_resets_both() {
    let (tx, rx) = fmpsc::unbounded::<Item>();
    let mut events = Box::pin(reflector_backoff(rx));
    // Five failed lists grow the list-and-watch backoff to 12.8–25.6 s; the refused watch
    // after them waits that, the next one the connection backoff's first step.
    let list_failures = (0..5).map(|_| Err(list_failed()));
    let seen = waits(
        &tx,
        &mut events,
        list_failures.chain([Err(refused()), Err(refused())]),
    )
    .await;
    assert!(
        seen[5] >= Duration::from_millis(12_800),
        "after the fifth failed list: {seen:?}"
    );
    assert!(
        seen[6] <= Duration::from_millis(1600),
        "after the first refused watch: {seen:?}"
    );
    // An event resets both: a failed list waits 0.8–1.6 s again.
    let seen = waits(
        &tx,
        &mut events,
        [Ok(Event::Init), Err(list_failed()), Ok(Event::Init)],
    )
    .await;
    assert!(
        seen[2] <= Duration::from_millis(1600),
        "after a failed list that followed an event: {seen:?}"
    );
}

#[test]
fn only_a_watch_that_could_not_start_is_reopened() {
    assert!(reopens_the_watch(&refused()));
    assert!(!reopens_the_watch(&gone()));
    assert!(!reopens_the_watch(&list_failed()));
}
