//! The kubelet's HTTP endpoints (upstream `pkg/kubelet/server/server.go`): the localhost
//! healthz port and the read-only port.
//!
//! * healthz port: `/healthz`, `/healthz/ping`, `/healthz/syncloop`.
//! * read-only port: the same health checks, `/pods` (a v1 `PodList` of the pods this kubelet
//!   runs, each with its current status, as the standalone upstream kubelet serves it) and
//!   `/runningpods/` (pods as the runtime lists them).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use kubelet_core::kubelet::sync_loop;
use kubelet_core::pod::PodExt;
use kubelet_core::pod_manager::PodManager;
use kubelet_core::runtime::Runtime;
use kubelet_core::status::StatusManager;

/// A v1 `PodList`.
type PodList = k8s_openapi::List<Pod>;

/// What the handlers read.
#[derive(Clone)]
pub struct ServerState {
    /// Desired pods.
    pub pod_manager: PodManager,
    /// Their statuses.
    pub status: Arc<dyn StatusManager>,
    /// The runtime, for `/runningpods/`.
    pub runtime: Arc<dyn Runtime>,
    /// Sync loop liveness.
    pub syncloop: sync_loop::Health,
}

/// Routes of the healthz port.
pub fn healthz_router(state: ServerState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/healthz/ping", get(|| async { "ok" }))
        .route("/healthz/syncloop", get(healthz_syncloop))
        .with_state(state)
}

/// Routes of the read-only port.
pub fn read_only_router(state: ServerState) -> Router {
    healthz_router(state.clone()).merge(
        Router::new()
            .route("/pods", get(pods))
            .route("/pods/", get(pods))
            .route("/runningpods/", get(running_pods))
            .route("/runningpods", get(running_pods))
            .with_state(state),
    )
}

async fn healthz(State(state): State<ServerState>) -> Response {
    match state.syncloop.check() {
        Ok(()) => "ok".into_response(),
        Err(reason) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("[+]ping ok\n[-]syncloop failed: {reason}\nhealthz check failed\n"),
        )
            .into_response(),
    }
}

async fn healthz_syncloop(State(state): State<ServerState>) -> Response {
    match state.syncloop.check() {
        Ok(()) => "ok".into_response(),
        Err(reason) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {reason}\n"),
        )
            .into_response(),
    }
}

fn json(list: &PodList) -> Response {
    match serde_json::to_vec(list) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn pod_list(items: Vec<Pod>) -> PodList {
    PodList {
        items,
        metadata: ListMeta::default(),
    }
}

async fn pods(State(state): State<ServerState>) -> Response {
    let items = state
        .pod_manager
        .pods()
        .into_iter()
        .map(|mut pod| {
            pod.status = state.status.pod_status(&pod.uid());
            pod
        })
        .collect();
    json(&pod_list(items))
}

async fn running_pods(State(state): State<ServerState>) -> Response {
    match state.runtime.get_pods(false).await {
        Ok(pods) => {
            let items = pods
                .into_iter()
                .map(|rp| Pod {
                    metadata: ObjectMeta {
                        name: Some(rp.name),
                        namespace: Some(rp.namespace),
                        uid: Some(rp.uid.0),
                        ..Default::default()
                    },
                    spec: Some(PodSpec {
                        containers: rp
                            .containers
                            .into_iter()
                            .map(|c| Container {
                                name: c.name,
                                image: Some(c.image),
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    }),
                    status: None,
                })
                .collect();
            json(&pod_list(items))
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("container runtime: {e}\n"),
        )
            .into_response(),
    }
}
