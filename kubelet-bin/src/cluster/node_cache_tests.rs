//! [`ApiNodeProvider`]: events in, the latest Node out; and the watch at the wire.

use std::time::Duration;

use http::StatusCode;
use serde_json::json;

use super::*;
use crate::cluster::test_api::client;

fn node(uid: &str, zone: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": "n1", "uid": uid, "labels": {"zone": zone}, "resourceVersion": "5"}
    }))
    .expect("node")
}

fn fallback() -> Node {
    serde_json::from_value(json!({"metadata": {"name": "n1"}})).expect("node")
}

#[test]
fn the_node_is_kept_without_managed_fields() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    let mut managed = node("u1", "a");
    managed.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
    let p = ApiNodeProvider::new(fallback());
    p.apply(Event::Apply(managed));
    assert_eq!(p.node().metadata.uid.as_deref(), Some("u1"));
    assert_eq!(p.node().metadata.managed_fields, None);
}

#[test]
fn the_latest_node_wins_and_the_fallback_fills_the_gaps() {
    let p = ApiNodeProvider::new(fallback());
    assert_eq!(p.node().metadata.uid, None);
    assert!(!p.has_node());
    p.apply(Event::Init);
    p.apply(Event::InitApply(node("u1", "a")));
    assert!(!p.has_node(), "a relist counts once it is done");
    p.apply(Event::InitDone);
    assert_eq!(p.node().metadata.uid.as_deref(), Some("u1"));
    p.apply(Event::Apply(node("u1", "b")));
    assert_eq!(
        p.node().metadata.labels.as_ref().expect("labels")["zone"],
        "b"
    );
    p.apply(Event::Delete(node("u1", "b")));
    assert_eq!(p.node().metadata.uid, None);
    // A relist that finds no Node forgets the old one.
    p.apply(Event::Apply(node("u1", "b")));
    p.apply(Event::Init);
    p.apply(Event::InitDone);
    assert!(!p.has_node());
}

#[tokio::test]
async fn the_watch_reads_the_node() {
    // Every request (the list, then the watches) gets the list: the watch does not parse and
    // is retried with backoff, which is all this test needs.
    let (c, journal) = client(|_| {
        (
            StatusCode::OK,
            json!({
                "kind": "NodeList", "apiVersion": "v1",
                "metadata": {"resourceVersion": "5"},
                "items": [node("u1", "a")]
            }),
        )
    });
    let (tracker, token) = (TaskTracker::new(), CancellationToken::new());
    let p = ApiNodeProvider::spawn(c, "n1", fallback(), &tracker, token.clone());
    for _ in 0..200 {
        if p.has_node() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(p.node().metadata.uid.as_deref(), Some("u1"));
    assert_eq!(journal.calls()[0].path, "/api/v1/nodes");
    token.cancel();
    tracker.close();
    tracker.wait().await;
}
