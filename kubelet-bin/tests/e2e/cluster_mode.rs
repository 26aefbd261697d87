//! A node built with [`NodeBuilder::cluster`] on the fake runtime, against a scripted API
//! server behind a real `kube::Client`: the pods bound to the node (listed, then watched)
//! run, only this node's pods are asked for, and the node Lease is created with its owner
//! reference and renewed with PUTs.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::channel::mpsc as fmpsc;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use kubelet::NodeBuilder;
use kubelet::cluster::{ApiClients, ClusterOptions};
use kubelet_core::PodExt;
use kubelet_core::testing::{FakeRuntime, pod};
use serde_json::{Value, json};

const NODE: &str = "node-a";

type Body = Either<
    Full<Bytes>,
    StreamBody<fmpsc::UnboundedReceiver<Result<Frame<Bytes>, std::convert::Infallible>>>,
>;

/// What the scripted server saw and holds.
#[derive(Default)]
struct State {
    requests: Vec<(Method, String)>,
    lease: Option<Value>,
    /// Notified on every Lease write.
    lease_written: Arc<tokio::sync::Notify>,
    watch: Option<fmpsc::UnboundedSender<Result<Frame<Bytes>, std::convert::Infallible>>>,
    /// The node watch, kept open (no events).
    node_watch: Option<fmpsc::UnboundedSender<Result<Frame<Bytes>, std::convert::Infallible>>>,
    /// The service watch, kept open (no events).
    service_watch: Option<fmpsc::UnboundedSender<Result<Frame<Bytes>, std::convert::Infallible>>>,
}

fn bound(name: &str) -> Value {
    let mut p = pod(name);
    p.spec.as_mut().expect("spec").node_name = Some(NODE.into());
    p.metadata.resource_version = Some("6".into());
    serde_json::to_value(p).expect("json")
}

fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Either::Left(Full::new(Bytes::from(value.to_string()))))
        .expect("response")
}

async fn handle(state: Arc<Mutex<State>>, req: Request<kube::client::Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body: Value = body
        .collect()
        .await
        .ok()
        .and_then(|b| serde_json::from_slice(&b.to_bytes()).ok())
        .unwrap_or(Value::Null);
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let mut st = state.lock().unwrap_or_else(PoisonError::into_inner);
    st.requests
        .push((parts.method.clone(), format!("{path}?{query}")));
    let not_found = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404});
    match (parts.method, path.as_str()) {
        (Method::GET, "/api/v1/pods") if query.contains("watch=true") => {
            let (tx, rx) = fmpsc::unbounded();
            st.watch = Some(tx);
            Response::builder()
                .header("content-type", "application/json")
                .body(Either::Right(StreamBody::new(rx)))
                .expect("response")
        }
        (Method::GET, "/api/v1/pods") => json_response(
            StatusCode::OK,
            &json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}, "items": [bound("listed")]}),
        ),
        // No Services (containers start once they have been listed, for their env vars).
        (Method::GET, "/api/v1/services") if query.contains("watch=true") => {
            let (tx, rx) = fmpsc::unbounded();
            st.service_watch = Some(tx);
            Response::builder()
                .header("content-type", "application/json")
                .body(Either::Right(StreamBody::new(rx)))
                .expect("response")
        }
        (Method::GET, "/api/v1/services") => json_response(
            StatusCode::OK,
            &json!({"kind": "ServiceList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}, "items": []}),
        ),
        // The node's own Node (the pod source waits for its first list).
        (Method::GET, "/api/v1/nodes") if query.contains("watch=true") => {
            let (tx, rx) = fmpsc::unbounded();
            st.node_watch = Some(tx);
            Response::builder()
                .header("content-type", "application/json")
                .body(Either::Right(StreamBody::new(rx)))
                .expect("response")
        }
        (Method::GET, "/api/v1/nodes") => json_response(
            StatusCode::OK,
            &json!({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"},
                "items": [{"kind": "Node", "apiVersion": "v1",
                    "metadata": {"name": NODE, "uid": "node-uid", "resourceVersion": "5"},
                    "status": {"allocatable": {"pods": "110", "cpu": "4", "memory": "8Gi"}}}]}),
        ),
        (Method::GET, "/api/v1/nodes/node-a") => json_response(
            StatusCode::OK,
            &json!({"kind": "Node", "apiVersion": "v1", "metadata": {"name": NODE, "uid": "node-uid"}}),
        ),
        (Method::GET, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a") => {
            match &st.lease {
                Some(lease) => json_response(StatusCode::OK, lease),
                None => json_response(StatusCode::NOT_FOUND, &not_found),
            }
        }
        (Method::POST | Method::PUT, p)
            if p.starts_with("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases") =>
        {
            let mut lease = body;
            lease["metadata"]["resourceVersion"] = json!("7");
            st.lease = Some(lease.clone());
            st.lease_written.notify_one();
            json_response(StatusCode::OK, &lease)
        }
        _ => json_response(StatusCode::NOT_FOUND, &not_found),
    }
}

/// Whether the pod `name` is Running in the status manager.
fn running(status: &kubelet_status::LocalStatusManager, name: &str) -> bool {
    status
        .versioned_status(&pod(name).uid())
        .and_then(|s| s.status.phase)
        .as_deref()
        == Some("Running")
}

#[tokio::test]
async fn api_pods_run_and_the_lease_is_kept() {
    let state = Arc::new(Mutex::new(State::default()));
    let service = tower::service_fn({
        let state = state.clone();
        move |req| {
            let state = state.clone();
            async move { Ok::<_, std::convert::Infallible>(handle(state, req).await) }
        }
    });
    let client = kube::Client::new(service, "default");
    let root = tempfile::tempdir().expect("tempdir");
    let mut node = NodeBuilder::with_runtime(Arc::new(FakeRuntime::new()))
        .node_name(NODE)
        .root_dir(root.path())
        .no_probes()
        .cluster(ClusterOptions::with_clients(ApiClients::from_client(
            client,
        )))
        .build()
        .await
        .expect("builds");
    assert_eq!(node.cluster().map(|c| c.node_name()), Some(NODE));
    node.spawn().await;
    let status = node
        .local_status_manager()
        .expect("default status manager")
        .clone();
    let mut changes = status.subscribe();
    // The listed pod runs.
    while !running(&status, "listed") {
        tokio::time::timeout(Duration::from_secs(30), changes.changed())
            .await
            .unwrap_or_else(|_| {
                let st = state.lock().unwrap_or_else(PoisonError::into_inner);
                panic!("not Running within 30 s; requests: {:?}", st.requests)
            })
            .expect("status manager alive");
    }
    // A pod added through the watch runs too.
    let event = json!({"type": "ADDED", "object": bound("watched")}).to_string() + "\n";
    loop {
        let sent = {
            let st = state.lock().unwrap_or_else(PoisonError::into_inner);
            st.watch.as_ref().map(|w| {
                w.unbounded_send(Ok(Frame::data(Bytes::from(event.clone()))))
                    .is_ok()
            })
        };
        if sent == Some(true) {
            break;
        }
        tokio::time::timeout(Duration::from_secs(30), changes.changed())
            .await
            .expect("the watch starts within 30 s")
            .expect("status manager alive");
    }
    while !running(&status, "watched") {
        if tokio::time::timeout(Duration::from_secs(30), changes.changed())
            .await
            .is_err()
        {
            let st = state.lock().unwrap_or_else(PoisonError::into_inner);
            panic!(
                "no status for the watched pod within 30 s; requests: {:?}",
                st.requests
            );
        }
    }
    let lease_written = state
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .lease_written
        .clone();
    tokio::time::timeout(Duration::from_secs(30), lease_written.notified())
        .await
        .expect("a Lease write within 30 s");
    {
        let st = state.lock().unwrap_or_else(PoisonError::into_inner);
        let pod_requests: Vec<&String> = st
            .requests
            .iter()
            .filter(|(_, p)| p.starts_with("/api/v1/pods"))
            .map(|(_, p)| p)
            .collect();
        assert!(!pod_requests.is_empty());
        for p in &pod_requests {
            assert!(p.contains("fieldSelector=spec.nodeName%3Dnode-a"), "{p}");
        }
        assert!(
            pod_requests[0].contains("resourceVersion=0"),
            "the first list is served from the watch cache: {}",
            pod_requests[0]
        );
        assert_eq!(
            pod_requests.len(),
            2,
            "one list, one watch: {pod_requests:?}"
        );
        let lease = st.lease.clone().expect("the lease was created");
        assert_eq!(lease["spec"]["holderIdentity"], NODE);
        assert_eq!(lease["metadata"]["ownerReferences"][0]["uid"], "node-uid");
    }
    assert!(node.stop().await, "every task stops");
}
