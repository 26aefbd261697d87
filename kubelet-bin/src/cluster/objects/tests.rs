//! The watch lifecycle of [`ApiObjectSource`] against the fake API server over HTTP: one
//! list+watch per referenced object whatever the number of pods and reads, updates seen
//! without a request, watches dropped with the last reference, 403 retried.

use std::sync::Arc;
use std::time::Duration;

use kubelet_core::testing::apiserver::{Entry, FakeApiServer, Fault, RequestFilter};
use serde_json::{Value, json};

use super::*;

const NS: &str = "team";

fn pod(name: &str, uid: &str, spec: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "uid": uid},
        "spec": spec,
    }))
    .expect("pod")
}

/// A pod with a configMap volume `cm` and `envFrom` secret `secret`.
fn pod_using(name: &str, uid: &str, cm: &str, secret: &str) -> Pod {
    pod(
        name,
        uid,
        json!({
            "containers": [{"name": "app", "image": "busybox",
                "envFrom": [{"secretRef": {"name": secret}}]}],
            "volumes": [{"name": "conf", "configMap": {"name": cm}}],
        }),
    )
}

fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS}, "data": data})
}

struct Fixture {
    fake: FakeApiServer,
    source: ApiObjectSource,
    token: CancellationToken,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

async fn fixture() -> Fixture {
    let fake = FakeApiServer::start().await.expect("fake API server");
    let client = fake.client("kubelet/test").expect("client");
    let token = CancellationToken::new();
    // Generous: a loaded test machine may take longer than upstream's 1 s for a first list.
    let source = ApiObjectSource::new(client, TaskTracker::new(), token.clone())
        .with_sync_timeout(Duration::from_secs(10));
    Fixture {
        fake,
        source,
        token,
    }
}

fn is_object(e: &Entry, resource: &str, name: &str) -> bool {
    e.resource == resource && e.query.contains(&format!("metadata.name%3D{name}"))
}

/// Requests to `resource` whose field selector names `name`, by verb.
fn requests(fake: &FakeApiServer, resource: &str, name: &str) -> (usize, usize, usize) {
    let entries = fake.journal().entries();
    let count = |verb: &str| {
        entries
            .iter()
            .filter(|e| e.verb == verb && is_object(e, resource, name))
            .count()
    };
    let gets = entries
        .iter()
        .filter(|e| e.verb == "get" && e.resource == resource)
        .count();
    (count("list"), count("watch"), gets)
}

/// Polls `read` until `cond` holds (10 s at most).
async fn eventually<T>(
    what: &str,
    mut read: impl AsyncFnMut() -> T,
    cond: impl Fn(&T) -> bool,
) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let value = read().await;
        if cond(&value) {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn data(cm: &Option<ConfigMap>, key: &str) -> Option<String> {
    cm.as_ref()?.data.as_ref()?.get(key).cloned()
}

#[tokio::test]
async fn one_watch_per_object_and_no_request_per_read() {
    let f = fixture().await;
    f.fake
        .create(
            "v1",
            "configmaps",
            NS,
            config_map("conf", json!({"k": "v1"})),
        )
        .expect("create");
    f.fake
        .create(
            "v1",
            "secrets",
            NS,
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "creds", "namespace": NS}, "data": {"p": "cHc="}}),
        )
        .expect("create");
    let a = pod_using("a", "uid-a", "conf", "creds");
    let b = pod_using("b", "uid-b", "conf", "creds");
    f.source.register_pod(&a);
    f.source.register_pod(&b);
    // A second sync of the same pod changes nothing.
    f.source.register_pod(&a);
    assert_eq!(
        f.source.watched(),
        ["configmaps/team/conf", "secrets/team/creds"]
    );

    let cm = f.source.config_map(NS, "conf").await.expect("read");
    assert_eq!(data(&cm, "k").as_deref(), Some("v1"));
    let secret = f
        .source
        .secret(NS, "creds")
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(
        secret.data.and_then(|d| d.get("p").map(|v| v.0.clone())),
        Some(b"pw".to_vec())
    );
    for _ in 0..20 {
        f.source.config_map(NS, "conf").await.expect("read");
        f.source.secret(NS, "creds").await.expect("read");
    }

    // An edit reaches the cache through the watch.
    f.fake
        .update(
            "v1",
            "configmaps",
            NS,
            config_map("conf", json!({"k": "v2"})),
            false,
        )
        .expect("update");
    eventually(
        "the edit",
        async || f.source.config_map(NS, "conf").await.expect("read"),
        |cm| data(cm, "k").as_deref() == Some("v2"),
    )
    .await;

    let (lists, watches, gets) = requests(&f.fake, "configmaps", "conf");
    println!("configmap conf: {lists} list, {watches} watch, {gets} GET for 2 pods and 23 reads");
    assert_eq!((lists, gets), (1, 0), "one list, no GET");
    assert!(watches >= 1);
    let (lists, _, gets) = requests(&f.fake, "secrets", "creds");
    assert_eq!((lists, gets), (1, 0), "one list, no GET");
    assert!(f.fake.journal().entries().iter().all(|e| e.verb != "get"));

    // The watch lives while any pod references the object.
    f.source.unregister_pod(&a);
    assert_eq!(f.source.watched().len(), 2);
    f.source.unregister_pod(&b);
    assert!(
        f.source.watched().is_empty(),
        "the last pod took the watches"
    );
    let err = f
        .source
        .config_map(NS, "conf")
        .await
        .expect_err("not registered");
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "object source unavailable: object \"team\"/\"conf\" not registered"
    );
}

#[tokio::test]
async fn an_absent_object_is_none_until_created_and_a_dropped_reference_stops_its_watch() {
    let f = fixture().await;
    let p = pod_using("a", "uid-a", "later", "s");
    f.source.register_pod(&p);
    assert_eq!(f.source.config_map(NS, "later").await.expect("read"), None);
    f.fake
        .create(
            "v1",
            "configmaps",
            NS,
            config_map("later", json!({"k": "here"})),
        )
        .expect("create");
    eventually(
        "the new object",
        async || f.source.config_map(NS, "later").await.expect("read"),
        |cm| data(cm, "k").as_deref() == Some("here"),
    )
    .await;

    // A pod update that drops the volume drops that watch only.
    let updated = pod(
        "a",
        "uid-a",
        json!({"containers": [{"name": "app", "image": "busybox",
            "envFrom": [{"secretRef": {"name": "s"}}]}]}),
    );
    f.source.register_pod(&updated);
    assert_eq!(f.source.watched(), ["secrets/team/s"]);
    // Unregistering the old version of the pod finds it by UID.
    f.source.unregister_pod(&p);
    assert!(f.source.watched().is_empty());
}

#[tokio::test]
async fn forbidden_until_the_node_may_read_it_is_retried() {
    let f = fixture().await;
    f.fake
        .create(
            "v1",
            "configmaps",
            NS,
            config_map("conf", json!({"k": "v"})),
        )
        .expect("create");
    // As the node authorizer answers before it has seen the pod bound to the node.
    f.fake.faults().inject(
        Fault::Status(403),
        RequestFilter::any().verb("list").resource("configmaps"),
        Some(1),
    );
    f.source.register_pod(&pod_using("a", "uid-a", "conf", "s"));
    let cm = eventually(
        "a read after the 403",
        async || f.source.config_map(NS, "conf").await.ok().flatten(),
        Option::is_some,
    )
    .await;
    assert_eq!(data(&cm, "k").as_deref(), Some("v"));
    let statuses: Vec<u16> = f
        .fake
        .journal()
        .entries()
        .iter()
        .filter(|e| e.is("list", "configmaps"))
        .map(|e| e.status)
        .collect();
    assert_eq!(statuses, [403, 200]);
}

#[tokio::test]
async fn an_immutable_object_keeps_its_value_without_a_watch() {
    let f = fixture().await;
    let mut cm = config_map("fixed", json!({"k": "v"}));
    cm["immutable"] = json!(true);
    f.fake.create("v1", "configmaps", NS, cm).expect("create");
    f.source
        .register_pod(&pod_using("a", "uid-a", "fixed", "s"));
    for _ in 0..3 {
        let cm = f.source.config_map(NS, "fixed").await.expect("read");
        assert_eq!(data(&cm, "k").as_deref(), Some("v"));
    }
    let (lists, _, gets) = requests(&f.fake, "configmaps", "fixed");
    assert_eq!((lists, gets), (1, 0));
}

#[tokio::test]
async fn registration_passes_through_with_tokens() {
    let f = fixture().await;
    let client = f.fake.client("kubelet/test").expect("client");
    let source = Arc::new(ApiObjectSource::new(
        client,
        TaskTracker::new(),
        f.token.clone(),
    ));
    let wrapped = kubelet_core::objects::WithTokens::new(
        source.clone(),
        Arc::new(kubelet_core::objects::MockTokenSource::new()),
    );
    let p = pod_using("a", "uid-a", "conf", "s");
    wrapped.register_pod(&p);
    assert_eq!(source.watched(), ["configmaps/team/conf", "secrets/team/s"]);
    wrapped.unregister_pod(&p);
    assert!(source.watched().is_empty());
}

#[tokio::test]
async fn a_change_names_the_registered_pods_that_reference_the_object() {
    let f = fixture().await;
    f.fake
        .create(
            "v1",
            "configmaps",
            NS,
            config_map("conf", json!({"k": "v1"})),
        )
        .expect("create");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    f.source.set_change_handler(move |uids| {
        let mut uids = uids.to_vec();
        uids.sort();
        let _ = tx.send(uids);
    });
    f.source.register_pod(&pod_using("a", "uid-a", "conf", "s"));
    f.source.register_pod(&pod_using("b", "uid-b", "conf", "s"));
    f.source
        .register_pod(&pod_using("c", "uid-c", "other", "s"));
    f.source.config_map(NS, "conf").await.expect("first list");
    assert!(rx.try_recv().is_err(), "the first list is no change");
    f.fake
        .update(
            "v1",
            "configmaps",
            NS,
            config_map("conf", json!({"k": "v2"})),
            false,
        )
        .expect("update");
    let uids = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("told of the change")
        .expect("handler alive");
    assert_eq!(uids, ["uid-a", "uid-b"]);
}

#[tokio::test]
async fn a_first_list_that_came_too_late_for_a_read_asks_for_a_sync() {
    let mut f = fixture().await;
    let client = f.fake.client("kubelet/test").expect("client");
    f.source = ApiObjectSource::new(client, TaskTracker::new(), f.token.clone())
        .with_sync_timeout(Duration::from_millis(100));
    f.fake
        .create(
            "v1",
            "configmaps",
            NS,
            config_map("slow", json!({"k": "v"})),
        )
        .expect("create");
    f.fake.faults().inject(
        Fault::Latency(Duration::from_secs(1)),
        RequestFilter::any().verb("list").resource("configmaps"),
        Some(1),
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    f.source.set_change_handler(move |uids| {
        let _ = tx.send(uids.to_vec());
    });
    f.source.register_pod(&pod_using("a", "uid-a", "slow", "s"));
    let err = f.source.config_map(NS, "slow").await.expect_err("gave up");
    assert_eq!(
        err.to_string(),
        "object source unavailable: failed to sync configmap cache: timed out waiting for the condition"
    );
    let uids = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("told when the list came")
        .expect("handler alive");
    assert_eq!(uids, ["uid-a"]);
    let cm = f.source.config_map(NS, "slow").await.expect("read");
    assert_eq!(data(&cm, "k").as_deref(), Some("v"));
}
