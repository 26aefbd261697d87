use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::State;
use axum::http::HeaderMap;
use tokio::sync::Notify;

use super::*;

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: nginx\n";
const POD_LIST: &str = r#"{"kind": "PodList", "apiVersion": "v1", "items": [
  {"metadata": {"name": "a"}, "spec": {"containers": [{"name": "app", "image": "nginx"}]}},
  {"metadata": {"name": "b"}, "spec": {"containers": [{"name": "app", "image": "nginx"}]}}]}"#;

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

#[test]
fn one_pod_gets_the_static_defaults_and_the_http_source() {
    let pods = decode(POD.as_bytes(), "http://m/pod", "node-a").expect("valid");
    assert_eq!(names(&pods), vec!["web-node-a"]);
    let annotations = pods[0].metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get(CONFIG_SOURCE_ANNOTATION)
            .map(String::as_str),
        Some("http")
    );
    assert_eq!(
        pods[0].spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("node-a")
    );
    let again = decode(POD.as_bytes(), "http://m/pod", "node-a").expect("valid");
    assert_eq!(pods[0].metadata.uid, again[0].metadata.uid, "stable UID");
}

#[test]
fn a_pod_list_gives_every_pod() {
    let pods = decode(POD_LIST.as_bytes(), "http://m/pods", "node-a").expect("valid");
    assert_eq!(names(&pods), vec!["a-node-a", "b-node-a"]);
}

#[test]
fn neither_a_pod_nor_a_list_names_the_url() {
    let err = decode(b"kind: Service\napiVersion: v1\n", "http://m/x", "node-a").expect_err("bad");
    assert!(matches!(err, Error::Parse { .. }), "{err}");
    assert!(err.to_string().contains("http://m/x"), "{err}");
    let err = decode(
        b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers: []\n",
        "http://m/x",
        "node-a",
    )
    .expect_err("invalid pod");
    assert!(matches!(err, Error::Invalid(_)), "{err}");
}

#[test]
fn only_absolute_http_urls() {
    for url in ["/etc/pods", "ftp://host/pods", "not a url"] {
        assert!(HttpSource::new(url, &[], "n").is_err(), "{url}");
    }
}

/// What the test server answers, and what it saw.
#[derive(Default)]
struct Served {
    status: u16,
    body: String,
    hits: usize,
    header: Option<String>,
}

type Shared = (Arc<Mutex<Served>>, Arc<Notify>);

async fn serve(
    State((served, hit)): State<Shared>,
    headers: HeaderMap,
) -> (http::StatusCode, String) {
    let mut s = served.lock().unwrap_or_else(PoisonError::into_inner);
    s.hits += 1;
    s.header = headers
        .get("x-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    hit.notify_one();
    (
        http::StatusCode::from_u16(s.status).unwrap_or(http::StatusCode::OK),
        s.body.clone(),
    )
}

async fn wait_hits(state: &Shared, n: usize) {
    loop {
        if state.0.lock().unwrap_or_else(PoisonError::into_inner).hits >= n {
            return;
        }
        tokio::time::timeout(Duration::from_secs(30), state.1.notified())
            .await
            .expect("the source reads the URL again");
    }
}

#[tokio::test]
async fn reads_the_url_and_sends_only_changes() {
    let state: Shared = Default::default();
    {
        let mut s = state.0.lock().expect("lock");
        s.status = 404;
    }
    let app = axum::Router::new()
        .route("/pods", axum::routing::get(serve))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });

    let source = HttpSource::new(
        &format!("http://{addr}/pods"),
        &[("X-Token".into(), "secret".into())],
        "node-a",
    )
    .expect("valid")
    .check_frequency(Duration::from_millis(10));
    let (tx, mut rx) = mpsc::channel(8);
    let token = CancellationToken::new();
    tokio::spawn(Box::new(source).run(tx, token.clone()));

    // 404: nothing is sent.
    wait_hits(&state, 2).await;
    assert!(rx.try_recv().is_err());
    assert_eq!(
        state.0.lock().expect("lock").header.as_deref(),
        Some("secret")
    );
    // A pod: one Set, and nothing more while the body stays the same.
    {
        let mut s = state.0.lock().expect("lock");
        s.status = 200;
        s.body = POD.into();
    }
    let update = rx.recv().await.expect("a set");
    assert_eq!(
        (update.op, update.source.as_str()),
        (Operation::Set, "http")
    );
    assert_eq!(names(&update.pods), vec!["web-node-a"]);
    let hits = state.0.lock().expect("lock").hits;
    wait_hits(&state, hits + 2).await;
    assert!(rx.try_recv().is_err(), "an unchanged body sends nothing");
    // A pod list replaces it; an empty body sends an empty Set.
    state.0.lock().expect("lock").body = POD_LIST.into();
    assert_eq!(
        names(&rx.recv().await.expect("a set").pods),
        vec!["a-node-a", "b-node-a"]
    );
    state.0.lock().expect("lock").body = String::new();
    assert!(rx.recv().await.expect("a set").pods.is_empty());
    token.cancel();
}
