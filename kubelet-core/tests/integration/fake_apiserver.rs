//! The in-process fake API server driven by the real `kube::Client` and kube-runtime's watcher:
//! one test per semantic a kubelet relies on (see `/work/shared/APISERVER.md`). Waits are
//! event-driven (the journal, the watch stream) under a generous timeout, never a fixed sleep.

// Test code, on the test's own runtime: blocking file calls are fine here.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenReview};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, ServiceAccount};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent,
    WatchParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kubelet_core::testing::apiserver::{FakeApiServer, Fault, RequestFilter, UserInfo};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);
const UA: &str = "kubelet/test";

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(WAIT, f).await.expect("within 10 s")
}

async fn fake() -> FakeApiServer {
    FakeApiServer::start()
        .await
        .expect("fake API server starts")
}

fn pod(name: &str, node: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .expect("valid pod")
}

fn api_code(e: &kube::Error) -> Option<(u16, String)> {
    match e {
        kube::Error::Api(s) => Some((s.code, s.reason.clone())),
        _ => None,
    }
}

fn rv_of(p: &Pod) -> u64 {
    p.metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("numeric resourceVersion")
}

#[tokio::test]
async fn create_and_list_carry_server_fields_and_one_increasing_resource_version() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    let a = pods
        .create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .expect("create a");
    let b = pods
        .create(&PostParams::default(), &pod("b", "n1", json!({})))
        .await
        .expect("create b");
    assert!(rv_of(&b) > rv_of(&a));
    assert!(a.metadata.uid.is_some() && a.metadata.creation_timestamp.is_some());
    assert_eq!(a.metadata.generation, Some(1));
    assert_eq!(a.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
    let list = pods.list(&ListParams::default()).await.expect("list");
    assert_eq!(list.items.len(), 2);
    assert_eq!(list.metadata.resource_version, Some(rv_of(&b).to_string()));
    let raw = fake.journal().entries();
    assert!(raw.iter().all(|e| e.user_agent.as_deref() == Some(UA)));
    let dup = pods
        .create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .expect_err("taken");
    assert_eq!(api_code(&dup), Some((409, "AlreadyExists".into())));
}

#[tokio::test]
async fn list_kind_and_api_version_come_from_the_wire() {
    let fake = fake().await;
    fake.create(
        "v1",
        "configmaps",
        "default",
        json!({"metadata": {"name": "c"}}),
    )
    .expect("create");
    let client = fake.client(UA).expect("client");
    let req = hyper::http::Request::get("/api/v1/namespaces/default/configmaps")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(req).await.expect("list");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        (v["kind"].as_str(), v["apiVersion"].as_str()),
        (Some("ConfigMapList"), Some("v1"))
    );
    assert!(
        v["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
}

#[tokio::test]
async fn field_and_label_selectors_filter_lists() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    for (name, node, app) in [("a", "n1", "web"), ("b", "n2", "web"), ("c", "n1", "db")] {
        pods.create(
            &PostParams::default(),
            &pod(name, node, json!({"app": app})),
        )
        .await
        .expect("create");
    }
    let names = |l: kube::core::ObjectList<Pod>| {
        l.items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect::<Vec<_>>()
    };
    let on_n1 = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .expect("list");
    assert_eq!(names(on_n1), ["a", "c"]);
    let web_on_n1 = ListParams::default()
        .fields("spec.nodeName=n1")
        .labels("app in (web)");
    assert_eq!(names(pods.list(&web_on_n1).await.expect("list")), ["a"]);
    let by_name = pods
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .expect("list");
    assert_eq!(names(by_name), ["b"]);
    let pending = pods
        .list(&ListParams::default().fields("status.phase=Running"))
        .await
        .expect("list");
    assert!(pending.items.is_empty());
}

#[tokio::test]
async fn list_pages_continue_until_the_last() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    for name in ["a", "b", "c"] {
        pods.create(&PostParams::default(), &pod(name, "n1", json!({})))
            .await
            .expect("create");
    }
    let first = pods
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1");
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().expect("a continue token");
    let second = pods
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .expect("page 2");
    assert_eq!(second.items.len(), 1);
    assert!(second.metadata.continue_.is_none());
}

#[tokio::test]
async fn watch_resumes_after_a_resource_version_and_streams_json() {
    let fake = fake().await;
    let client = fake.client(UA).expect("client");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let a = pods
        .create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .expect("a");
    pods.create(&PostParams::default(), &pod("b", "n1", json!({})))
        .await
        .expect("b");
    let rv = a.metadata.resource_version.clone().expect("rv");
    let mut events = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch")
        .boxed();
    match within(events.try_next()).await.expect("event") {
        Some(WatchEvent::Added(p)) => assert_eq!(p.metadata.name.as_deref(), Some("b")),
        other => panic!("expected ADDED b, got {other:?}"),
    }
    let entry = fake.journal().wait_for(|e| e.verb == "watch").await;
    assert_eq!(entry.status, 200);
    let req =
        hyper::http::Request::get("/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1")
            .body(Vec::new())
            .expect("request");
    let resp = client.send(req.map(Into::into)).await.expect("watch");
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
}

#[tokio::test]
async fn watch_from_before_a_restart_is_410_expired() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    let a = pods
        .create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .expect("a");
    pods.create(&PostParams::default(), &pod("b", "n1", json!({})))
        .await
        .expect("b");
    fake.restart();
    let rv = a.metadata.resource_version.expect("rv");
    let mut events = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch")
        .boxed();
    match within(events.try_next()).await.expect("event") {
        Some(WatchEvent::Error(s)) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("expected ERROR 410, got {other:?}"),
    }
}

#[tokio::test]
async fn objects_entering_and_leaving_a_selector_are_added_and_deleted() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    let p = pods
        .create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .expect("a");
    let rv = p.metadata.resource_version.expect("rv");
    let wp = WatchParams::default().labels("app=web");
    let mut events = pods.watch(&wp, &rv).await.expect("watch").boxed();
    let label = |v: serde_json::Value| Patch::Merge(json!({"metadata": {"labels": {"app": v}}}));
    pods.patch("a", &PatchParams::default(), &label(json!("web")))
        .await
        .expect("label");
    pods.patch("a", &PatchParams::default(), &label(json!(null)))
        .await
        .expect("unlabel");
    let kinds: Vec<&str> = within(events.by_ref().take(2).try_collect::<Vec<_>>())
        .await
        .expect("events")
        .iter()
        .map(|e| match e {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Deleted(_) => "DELETED",
            _ => "OTHER",
        })
        .collect();
    assert_eq!(kinds, ["ADDED", "DELETED"]);
}

#[tokio::test]
async fn watches_send_bookmarks_and_end_at_their_timeout() {
    let fake = fake().await;
    fake.set_bookmark_interval(Duration::from_millis(20));
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    let wp = WatchParams::default().timeout(1);
    let mut events = pods.watch(&wp, "0").await.expect("watch").boxed();
    match within(events.try_next()).await.expect("event") {
        Some(WatchEvent::Bookmark(b)) => assert_eq!(b.metadata.resource_version, "0"),
        other => panic!("expected BOOKMARK, got {other:?}"),
    }
    // The stream ends (timeoutSeconds) rather than hanging.
    within(async { while events.try_next().await.expect("events").is_some() {} }).await;
}

#[tokio::test]
async fn stale_put_conflicts_and_the_main_endpoint_keeps_status() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    let created = pods
        .create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .expect("a");
    let status =
        Patch::Merge(json!({"status": {"phase": "Running"}, "spec": {"nodeName": "other"}}));
    let running = pods
        .patch_status("a", &PatchParams::default(), &status)
        .await
        .expect("status");
    assert_eq!(
        running.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("n1")
    );
    let mut stale = created.clone();
    stale.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
    let err = pods
        .replace("a", &PostParams::default(), &stale)
        .await
        .expect_err("stale");
    assert_eq!(api_code(&err).map(|c| c.0), Some(409));
    let mut fresh = running.clone();
    fresh.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
    fresh.status = None;
    let out = pods
        .replace("a", &PostParams::default(), &fresh)
        .await
        .expect("fresh");
    assert_eq!(out.status.and_then(|s| s.phase).as_deref(), Some("Running"));
}

#[tokio::test]
async fn strategic_json_and_merge_patches_apply() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    pods.create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .expect("a");
    let pp = PatchParams::default();
    let conds = |t: &str, s: &str| {
        Patch::Strategic(json!({"status": {"conditions": [{"type": t, "status": s}]}}))
    };
    pods.patch_status("a", &pp, &conds("Ready", "False"))
        .await
        .expect("ready");
    pods.patch_status("a", &pp, &conds("Initialized", "True"))
        .await
        .expect("init");
    let p = pods
        .patch_status("a", &pp, &conds("Ready", "True"))
        .await
        .expect("ready again");
    let got: Vec<(String, String)> = p
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        got,
        [
            ("Ready".into(), "True".into()),
            ("Initialized".into(), "True".into())
        ]
    );
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}]))
    .expect("ops");
    let p = pods
        .patch("a", &pp, &Patch::Json::<()>(ops))
        .await
        .expect("json patch");
    assert_eq!(
        p.metadata
            .annotations
            .and_then(|a| a.get("k").cloned())
            .as_deref(),
        Some("v")
    );
    let failing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/name", "value": "zzz"}]))
    .expect("ops");
    assert!(
        pods.patch("a", &pp, &Patch::Json::<()>(failing))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn delete_preconditions_and_graceful_pod_deletion() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    let p = pods
        .create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .expect("a");
    let wrong = DeleteParams::default().preconditions(Preconditions {
        uid: Some("nope".into()),
        resource_version: None,
    });
    let err = pods.delete("a", &wrong).await.expect_err("wrong uid");
    assert_eq!(api_code(&err).map(|c| c.0), Some(409));
    pods.delete("a", &DeleteParams::default())
        .await
        .expect("graceful");
    let terminating = pods.get("a").await.expect("still there");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    let right = DeleteParams::default()
        .grace_period(0)
        .preconditions(Preconditions {
            uid: p.metadata.uid,
            resource_version: None,
        });
    pods.delete("a", &right).await.expect("final");
    let gone = pods.get("a").await.expect_err("gone");
    assert_eq!(api_code(&gone).map(|c| c.0), Some(404));
    // An unbound pod goes at once.
    pods.create(&PostParams::default(), &pod("u", "", json!({})))
        .await
        .expect("u");
    pods.delete("u", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(pods.get_opt("u").await.expect("get").is_none());
}

#[tokio::test]
async fn finalizers_keep_an_object_until_removed() {
    let fake = fake().await;
    let cms: Api<ConfigMap> = Api::namespaced(fake.client(UA).expect("client"), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c", "finalizers": ["x/y"]}}))
            .expect("cm");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    cms.delete("c", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(
        cms.get("c")
            .await
            .expect("kept")
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let clear = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    cms.patch("c", &PatchParams::default(), &clear)
        .await
        .expect("clear");
    assert!(cms.get_opt("c").await.expect("get").is_none());
}

#[tokio::test]
async fn token_request_token_review_and_subject_access_review() {
    let fake = fake().await;
    let client = fake.client(UA).expect("client");
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "default"}})).expect("sa");
    sas.create(&PostParams::default(), &sa).await.expect("sa");
    let tr: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": ["api"], "expirationSeconds": 600}}))
            .expect("tr");
    let issued: TokenRequest = sas
        .create_subresource("token", "default", &PostParams::default(), &tr)
        .await
        .expect("token");
    let token = issued.status.expect("status").token;
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let review: TokenReview =
        serde_json::from_value(json!({"spec": {"token": token}})).expect("review");
    let out = reviews
        .create(&PostParams::default(), &review)
        .await
        .expect("review");
    let status = out.status.expect("status");
    assert_eq!(status.authenticated, Some(true));
    assert_eq!(
        status.user.and_then(|u| u.username).as_deref(),
        Some("system:serviceaccount:default:default")
    );
    fake.auth().allow("system:nodes", "get", "pods");
    let sars: Api<SubjectAccessReview> = Api::all(client);
    let ask = |verb: &str| -> SubjectAccessReview {
        serde_json::from_value(
            json!({"spec": {"user": "system:node:n1", "groups": ["system:nodes"],
            "resourceAttributes": {"verb": verb, "resource": "pods"}}}),
        )
        .expect("sar")
    };
    let yes = sars
        .create(&PostParams::default(), &ask("get"))
        .await
        .expect("sar");
    let no = sars
        .create(&PostParams::default(), &ask("delete"))
        .await
        .expect("sar");
    assert_eq!(
        (yes.status.map(|s| s.allowed), no.status.map(|s| s.allowed)),
        (Some(true), Some(false))
    );
}

#[tokio::test]
async fn enforcement_and_node_restriction() {
    let fake = fake().await;
    fake.auth().add_token("node-1-token", UserInfo::node("n1"));
    fake.auth().allow("system:nodes", "*", "*");
    fake.auth().enforce(true);
    fake.auth().node_restriction(true);
    let anon: Api<Node> = Api::all(fake.client(UA).expect("client"));
    let err = anon
        .list(&ListParams::default())
        .await
        .expect_err("anonymous");
    assert_eq!(api_code(&err).map(|c| c.0), Some(401));
    let nodes: Api<Node> = Api::all(fake.client_with_token("node-1-token", UA).expect("client"));
    for name in ["n1", "n2"] {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).expect("node");
        let r = nodes.create(&PostParams::default(), &node).await;
        assert_eq!(r.is_ok(), name == "n1", "{name}: {r:?}");
    }
    let entry = fake.journal().wait_for(|e| e.status == 403).await;
    assert_eq!(entry.user.as_deref(), Some("system:node:n1"));
}

#[tokio::test]
async fn injected_statuses_and_conflicts_count_down() {
    let fake = fake().await;
    let mut config = fake.kube_config(None, UA).expect("config");
    config.default_retry = false;
    let pods: Api<Pod> =
        Api::namespaced(kube::Client::try_from(config).expect("client"), "default");
    pods.create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .expect("a");
    fake.faults().inject(
        Fault::TooManyRequests { retry_after: 1 },
        RequestFilter::any().verb("get"),
        Some(1),
    );
    fake.faults().inject(
        Fault::Status(500),
        RequestFilter::any().verb("get"),
        Some(1),
    );
    assert_eq!(
        api_code(&pods.get("a").await.expect_err("429")).map(|c| c.0),
        Some(429)
    );
    assert_eq!(
        api_code(&pods.get("a").await.expect_err("500")).map(|c| c.0),
        Some(500)
    );
    pods.get("a").await.expect("then fine");
    let e = fake
        .journal()
        .entries()
        .into_iter()
        .find(|e| e.status == 429)
        .expect("journaled");
    assert_eq!(e.path, "/api/v1/namespaces/default/pods/a");
    fake.faults().inject(
        Fault::Conflict,
        RequestFilter::any().resource("pods"),
        Some(1),
    );
    let patch = Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}));
    let err = pods
        .patch("a", &PatchParams::default(), &patch)
        .await
        .expect_err("conflict");
    assert_eq!(api_code(&err).map(|c| c.0), Some(409));
    pods.patch("a", &PatchParams::default(), &patch)
        .await
        .expect("then fine");
    assert_eq!(fake.journal().count("patch", "pods"), 2);
}

#[tokio::test]
async fn kube_retries_503_itself_by_default() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    fake.faults().inject(
        Fault::Status(503),
        RequestFilter::any().verb("list"),
        Some(1),
    );
    within(pods.list(&ListParams::default()))
        .await
        .expect("retried");
    assert_eq!(fake.journal().count("list", "pods"), 2);
}

#[tokio::test]
async fn gone_on_list_and_refused_connections() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    fake.faults()
        .inject(Fault::Gone, RequestFilter::any(), Some(1));
    let err = pods.list(&ListParams::default()).await.expect_err("gone");
    assert_eq!(api_code(&err), Some((410, "Expired".into())));
    fake.stop_listening();
    let refused = pods
        .list(&ListParams::default())
        .await
        .expect_err("refused");
    assert!(api_code(&refused).is_none(), "{refused:?}");
    fake.start_listening().await.expect("listen again");
    within(pods.list(&ListParams::default()))
        .await
        .expect("back");
    fake.faults()
        .inject(Fault::Refuse, RequestFilter::any(), Some(1));
    assert!(pods.list(&ListParams::default()).await.is_err());
}

#[tokio::test]
async fn black_holes_and_headers_then_nothing_never_answer() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    fake.faults()
        .inject(Fault::BlackHole, RequestFilter::any().verb("get"), Some(1));
    fake.faults().inject(
        Fault::HeadersThenNothing,
        RequestFilter::any().verb("list"),
        Some(1),
    );
    let get = tokio::spawn({
        let pods = pods.clone();
        async move { pods.get("a").await }
    });
    let list = tokio::spawn({
        let pods = pods.clone();
        async move { pods.list(&ListParams::default()).await }
    });
    within(
        fake.journal()
            .wait_for(|e| e.verb == "get" && e.status == 0),
    )
    .await;
    within(
        fake.journal()
            .wait_for(|e| e.verb == "list" && e.status == 200),
    )
    .await;
    tokio::task::yield_now().await;
    assert!(!get.is_finished() && !list.is_finished());
    get.abort();
    list.abort();
}

#[tokio::test]
async fn watch_faults_close_cut_and_latency() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    for name in ["a", "b", "c"] {
        pods.create(&PostParams::default(), &pod(name, "n1", json!({})))
            .await
            .expect("create");
    }
    fake.faults()
        .inject(Fault::CloseWatchAfter(2), RequestFilter::any(), Some(1));
    let events = pods
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch");
    let got: Vec<_> = within(events.try_collect::<Vec<_>>())
        .await
        .expect("events");
    assert_eq!(got.len(), 2);
    fake.faults()
        .inject(Fault::CutWatchMidLine, RequestFilter::any(), Some(1));
    let events = pods
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch");
    // kube 5 reads a stream cut mid-chunk as a clean end (UnexpectedEof) and drops the half
    // line: the event is lost and the client must resume from its last resourceVersion.
    let results: Vec<_> = within(events.collect::<Vec<_>>()).await;
    assert!(results.is_empty(), "{results:?}");
    let cut = fake
        .journal()
        .entries()
        .into_iter()
        .filter(|e| e.verb == "watch")
        .count();
    assert_eq!(cut, 2);
    fake.faults().inject(
        Fault::Latency(Duration::from_millis(50)),
        RequestFilter::any().verb("get"),
        Some(1),
    );
    pods.get("a").await.expect("slow get");
    let e = fake
        .journal()
        .entries()
        .into_iter()
        .find(|e| e.verb == "get")
        .expect("get");
    assert!(e.latency >= Duration::from_millis(50));
}

#[tokio::test]
async fn kube_runtime_watcher_relists_after_a_restart() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    pods.create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .expect("a");
    let cfg = watcher::Config::default().fields("spec.nodeName=n1");
    let mut objects = watcher(pods.clone(), cfg)
        .default_backoff()
        .applied_objects()
        .boxed();
    let (tx, mut names) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        // Errors (the 410 after the restart) are part of the stream; the watcher goes on.
        while let Some(item) = objects.next().await {
            if let Ok(p) = item {
                let _ = tx.send(p.metadata.name.unwrap_or_default());
            }
        }
    });
    assert_eq!(within(names.recv()).await.as_deref(), Some("a"));
    within(fake.journal().wait_for(|e| e.verb == "watch")).await;
    fake.faults()
        .inject(Fault::Restart, RequestFilter::any().verb("create"), Some(1));
    pods.create(&PostParams::default(), &pod("b", "n1", json!({})))
        .await
        .expect("b");
    while within(names.recv()).await.expect("watcher running") != "b" {}
    driver.abort();
    assert!(
        fake.journal().count("list", "pods") >= 2,
        "relisted after the restart"
    );
}

#[tokio::test]
async fn kubeconfig_file_authenticates_with_its_token() {
    let fake = fake().await;
    fake.auth().add_token(
        "admin-token",
        UserInfo::new("admin").group("system:masters"),
    );
    let path = fake
        .kubeconfig_file(Some("admin-token"))
        .expect("kubeconfig");
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("parse kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    let nodes: Api<Node> = Api::all(kube::Client::try_from(config).expect("client"));
    nodes.list(&ListParams::default()).await.expect("list");
    let e = fake.journal().wait_for(|e| e.verb == "list").await;
    assert_eq!(e.user.as_deref(), Some("admin"));
    drop(fake);
    assert!(!path.exists());
}

/// `pods/ephemeralcontainers` in its 1.25+ shape, as `kubectl debug` 1.32 sends it: a
/// strategic merge patch of the `Pod` that adds one ephemeral container (merge key `name`);
/// only additions are taken, and a watcher of the pod sees the new spec. What upstream's
/// validation forbids is a 422 naming the field.
#[tokio::test]
async fn ephemeral_containers_subresource_adds_debug_containers() {
    let fake = fake().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(UA).expect("client"), "default");
    pods.create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .expect("a");
    let mut events = pods
        .watch(&WatchParams::default().fields("metadata.name=a"), "0")
        .await
        .expect("watch")
        .boxed();
    let debugger = |name: &str| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "spec": {"ephemeralContainers": [{
                "name": name, "image": "busybox", "targetContainerName": "c",
                "stdin": true, "tty": true,
            }]},
        })
    };
    let patched = pods
        .patch_subresource(
            "ephemeralcontainers",
            "a",
            &PatchParams::default(),
            &Patch::Strategic(debugger("debugger-1")),
        )
        .await
        .expect("added");
    let names = |p: &Pod| -> Vec<String> {
        p.spec
            .iter()
            .flat_map(|s| s.ephemeral_containers.iter().flatten())
            .map(|c| c.name.clone())
            .collect()
    };
    assert_eq!(names(&patched), ["debugger-1"]);
    let second = pods
        .patch_subresource(
            "ephemeralcontainers",
            "a",
            &PatchParams::default(),
            &Patch::Strategic(debugger("debugger-2")),
        )
        .await
        .expect("added");
    assert_eq!(names(&second), ["debugger-1", "debugger-2"]);
    // The watcher (a kubelet's pod source) sees each addition.
    let seen = within(async {
        loop {
            match events.try_next().await.expect("event") {
                Some(WatchEvent::Modified(p)) if names(&p).len() == 2 => break p,
                Some(_) => {}
                None => panic!("watch ended"),
            }
        }
    })
    .await;
    assert_eq!(
        seen.spec
            .as_ref()
            .and_then(|s| s.ephemeral_containers.as_ref())
            .map(|c| c[0].target_container_name.clone()),
        Some(Some("c".to_owned()))
    );

    let mut ports = debugger("with-ports");
    ports["spec"]["ephemeralContainers"][0]["ports"] = json!([{"containerPort": 80}]);
    let err = pods
        .patch_subresource(
            "ephemeralcontainers",
            "a",
            &PatchParams::default(),
            &Patch::Strategic(ports),
        )
        .await
        .expect_err("ports");
    assert_eq!(api_code(&err), Some((422, "Invalid".to_owned())));
    assert!(
        err.to_string().contains(
            "spec.ephemeralContainers[2].ports: Forbidden: cannot be set for an Ephemeral Container"
        ),
        "{err}"
    );
    let err = pods
        .patch_subresource(
            "ephemeralcontainers",
            "a",
            &PatchParams::default(),
            &Patch::Strategic(debugger("c")),
        )
        .await
        .expect_err("a container's name");
    assert_eq!(api_code(&err).map(|c| c.0), Some(422));
}
