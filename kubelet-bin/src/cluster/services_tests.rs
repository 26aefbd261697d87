//! [`ApiServiceLister`]: events in, trimmed Services out, synced after the first list; and
//! the watch against the fake API server.

use std::time::Duration;

use kubelet_core::envvars::service_env_var_map;
use kubelet_core::testing::apiserver::FakeApiServer;
use serde_json::{Value, json};
use tokio_util::task::TaskTracker;

use super::*;

fn service_json(name: &str, namespace: &str, ip: &str, port: i32) -> Value {
    json!({
        "metadata": {"name": name, "namespace": namespace, "labels": {"big": "x".repeat(100)}},
        "spec": {"clusterIP": ip, "selector": {"app": name},
                 "ports": [{"name": "http", "port": port, "protocol": "TCP", "targetPort": 8080}]}
    })
}

fn service(name: &str, namespace: &str, ip: &str, port: i32) -> Service {
    serde_json::from_value(service_json(name, namespace, ip, port)).expect("service")
}

#[test]
fn a_relist_replaces_and_only_the_needed_fields_are_kept() {
    let lister = ApiServiceLister::new();
    assert!(!lister.has_synced());
    lister.apply(Event::Init);
    lister.apply(Event::InitApply(service("a", "ns", "10.0.0.1", 80)));
    assert!(!lister.has_synced(), "synced once the list is complete");
    assert!(lister.list().is_empty());
    lister.apply(Event::InitDone);
    assert!(lister.has_synced());
    let listed = lister.list();
    assert_eq!(listed.len(), 1);
    let a = &listed[0];
    assert_eq!(a.metadata.labels, None, "labels are not kept");
    let spec = a.spec.as_ref().expect("spec");
    assert_eq!(spec.selector, None);
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.0.0.1"));
    let port = &spec.ports.as_ref().expect("ports")[0];
    assert_eq!(
        (port.name.as_deref(), port.port, port.protocol.as_deref()),
        (Some("http"), 80, Some("TCP"))
    );
    assert_eq!(port.target_port, None);

    lister.apply(Event::Apply(service("b", "ns", "10.0.0.2", 81)));
    lister.apply(Event::Apply(service("a", "ns", "10.0.0.9", 80)));
    let mut ips: Vec<String> = lister
        .list()
        .iter()
        .filter_map(|s| s.spec.as_ref()?.cluster_ip.clone())
        .collect();
    ips.sort();
    assert_eq!(ips, ["10.0.0.2", "10.0.0.9"]);
    lister.apply(Event::Delete(service("b", "ns", "10.0.0.2", 81)));
    assert_eq!(lister.list().len(), 1);
    // A relist that misses `a` forgets it, and the lister stays synced.
    lister.apply(Event::Init);
    lister.apply(Event::InitDone);
    assert!(lister.list().is_empty());
    assert!(lister.has_synced());
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting for {what}");
}

#[tokio::test]
async fn the_watch_lists_all_namespaces_and_follows_changes() {
    let fake = FakeApiServer::start().await.expect("fake API server");
    fake.create(
        "v1",
        "services",
        "default",
        service_json("kubernetes", "default", "10.96.0.1", 443),
    )
    .expect("kubernetes");
    fake.create(
        "v1",
        "services",
        "ns1",
        service_json("db", "ns1", "10.96.0.7", 5432),
    )
    .expect("db");
    let lister = ApiServiceLister::new();
    let (tracker, token) = (TaskTracker::new(), CancellationToken::new());
    tracker.spawn(
        lister
            .clone()
            .run(fake.client("kubelet-test").expect("client"), token.clone()),
    );
    eventually("the first list", || lister.has_synced()).await;
    let env = service_env_var_map(&lister.list(), "ns1", true);
    assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
    assert_eq!(env["DB_SERVICE_PORT_HTTP"], "5432");

    fake.create(
        "v1",
        "services",
        "ns1",
        service_json("cache", "ns1", "10.96.0.8", 6379),
    )
    .expect("cache");
    eventually("the new service", || lister.list().len() == 3).await;
    let lists = fake.journal().count("list", "services");
    assert_eq!(lists, 1, "one list, then a watch");
    let entries = fake.journal().entries();
    assert!(
        entries
            .iter()
            .any(|e| e.is("watch", "services") && e.path == "/api/v1/services"),
        "a watch of all namespaces: {entries:#?}"
    );
    token.cancel();
    tracker.close();
    tracker.wait().await;
}
