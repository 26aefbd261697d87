use futures::channel::mpsc as fmpsc;
use kubelet_core::testing::pod;

use super::*;

type Events = fmpsc::UnboundedSender<Result<Event<Pod>, watcher::Error>>;

fn start() -> (Events, mpsc::Receiver<PodUpdate>, CancellationToken) {
    let (events, stream) = fmpsc::unbounded();
    let (tx, rx) = mpsc::channel(16);
    let token = CancellationToken::new();
    tokio::spawn(forward(stream, tx, token.clone()));
    (events, rx, token)
}

fn send(events: &Events, event: Event<Pod>) {
    events.unbounded_send(Ok(event)).expect("forwarding");
}

fn names(update: &PodUpdate) -> Vec<String> {
    assert_eq!(update.op, Operation::Set);
    assert_eq!(update.source, "api");
    update
        .pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

fn gone() -> watcher::Error {
    watcher::Error::WatchError(Box::new(
        kube::core::Status::failure("too old", "Expired").with_code(410),
    ))
}

#[tokio::test]
async fn the_first_set_waits_for_the_complete_list() {
    let (events, mut rx, _token) = start();
    send(&events, Event::Init);
    send(&events, Event::InitApply(pod("a")));
    tokio::task::yield_now().await;
    assert!(
        rx.try_recv().is_err(),
        "nothing before the list is complete"
    );
    send(&events, Event::InitApply(pod("b")));
    send(&events, Event::InitDone);
    assert_eq!(names(&rx.recv().await.expect("set")), vec!["a", "b"]);
}

#[tokio::test]
async fn an_empty_first_list_is_still_sent() {
    let (events, mut rx, _token) = start();
    send(&events, Event::Init);
    send(&events, Event::InitDone);
    assert!(names(&rx.recv().await.expect("set")).is_empty());
}

#[tokio::test]
async fn watch_events_send_the_full_set() {
    let (events, mut rx, _token) = start();
    send(&events, Event::Init);
    send(&events, Event::InitApply(pod("a")));
    send(&events, Event::InitDone);
    rx.recv().await.expect("first set");
    send(&events, Event::Apply(pod("b")));
    assert_eq!(names(&rx.recv().await.expect("set")), vec!["a", "b"]);
    send(&events, Event::Delete(pod("a")));
    assert_eq!(names(&rx.recv().await.expect("set")), vec!["b"]);
}

#[tokio::test]
async fn queued_events_cost_one_set() {
    let (events, stream) = fmpsc::unbounded();
    for e in [
        Event::Init,
        Event::InitApply(pod("a")),
        Event::InitDone,
        Event::Apply(pod("b")),
        Event::Apply(pod("c")),
        Event::Delete(pod("a")),
    ] {
        events.unbounded_send(Ok(e)).expect("queued");
    }
    let (tx, mut rx) = mpsc::channel(16);
    tokio::spawn(forward(stream, tx, CancellationToken::new()));
    assert_eq!(names(&rx.recv().await.expect("set")), vec!["b", "c"]);
    drop(events);
    assert!(rx.recv().await.is_none(), "one set for the whole batch");
}

#[tokio::test]
async fn a_410_relist_keeps_the_pods_until_the_new_list_is_complete() {
    let (events, mut rx, _token) = start();
    send(&events, Event::Init);
    send(&events, Event::InitApply(pod("a")));
    send(&events, Event::InitApply(pod("b")));
    send(&events, Event::InitDone);
    rx.recv().await.expect("first set");
    events.unbounded_send(Err(gone())).expect("forwarding");
    send(&events, Event::Init);
    send(&events, Event::InitApply(pod("a")));
    tokio::task::yield_now().await;
    assert!(rx.try_recv().is_err(), "no partial set during the relist");
    send(&events, Event::InitApply(pod("b")));
    send(&events, Event::InitApply(pod("c")));
    send(&events, Event::InitDone);
    assert_eq!(names(&rx.recv().await.expect("set")), vec!["a", "b", "c"]);
}

#[tokio::test]
async fn an_unchanged_delete_sends_nothing_and_cancel_stops() {
    let (events, mut rx, token) = start();
    send(&events, Event::Init);
    send(&events, Event::InitDone);
    rx.recv().await.expect("first set");
    send(&events, Event::Delete(pod("unknown")));
    tokio::task::yield_now().await;
    assert!(rx.try_recv().is_err());
    token.cancel();
    assert!(rx.recv().await.is_none(), "the source stopped");
}

#[tokio::test]
async fn watches_only_this_nodes_pods() {
    let (client, _) =
        crate::cluster::test_api::client(|_| (http::StatusCode::OK, serde_json::Value::Null));
    let source = ApiPodSource::new(client, "node-a");
    let params = source.watcher_config();
    assert_eq!(
        params.field_selector.as_deref(),
        Some("spec.nodeName=node-a")
    );
    assert_eq!(PodSource::name(&source), "api");
}

#[tokio::test]
async fn pods_are_kept_without_managed_fields() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    let mut managed = pod("a");
    managed.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("kubelet".into()),
        ..ManagedFieldsEntry::default()
    }]);
    let (events, mut rx, _token) = start();
    send(&events, Event::Init);
    send(&events, Event::InitApply(managed.clone()));
    send(&events, Event::InitDone);
    let listed = rx.recv().await.expect("set");
    assert_eq!(listed.pods[0].metadata.managed_fields, None);
    send(&events, Event::Apply(managed));
    let watched = rx.recv().await.expect("set");
    assert_eq!(watched.pods[0].metadata.managed_fields, None);
    assert_eq!(watched.pods[0].metadata.name.as_deref(), Some("a"));
}
