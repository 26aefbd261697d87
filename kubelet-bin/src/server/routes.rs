//! The routes of the kubelet's HTTP endpoints (upstream `pkg/kubelet/server/server.go`
//! `InstallAuthNotRequiredHandlers` and `InstallAuthRequiredHandlers`), by port:
//!
//! * healthz port: `/healthz` (every check), `/healthz/ping`, `/healthz/syncloop` and
//!   `/healthz/asyncruntime` (the stall watchdog: no async worker stuck in a blocking call).
//! * read-only port: the same health checks, `/pods` (a v1 `PodList` of the pods this kubelet
//!   runs, each with its current status, as the standalone upstream kubelet serves it) and
//!   `/runningpods/` (pods as the runtime lists them).
//! * secure port: the read-only routes, `/configz`, `/metrics` and `/metrics/probes`
//!   ([`super::metrics`]), `/containerLogs/{ns}/{pod}/{container}` (`logs`), the
//!   streaming routes (`/exec`, `/attach`, `/portForward`, see `streaming`) and the stats
//!   routes (`/stats/summary`, `/metrics/resource`, `/metrics/cadvisor`, see `stats`), all
//!   behind the auth filter.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use kubelet_core::pod::PodExt;

use super::ServerState;

/// A v1 `PodList`.
type PodList = k8s_openapi::List<Pod>;

/// Routes of the healthz port.
pub(crate) fn healthz(state: ServerState) -> Router {
    Router::new()
        .route("/healthz", get(healthz_check))
        .route("/healthz/ping", get(|| async { "ok" }))
        .route("/healthz/syncloop", get(healthz_syncloop))
        .route("/healthz/asyncruntime", get(healthz_asyncruntime))
        .with_state(state)
}

/// Routes of the read-only port.
pub(crate) fn read_only(state: ServerState) -> Router {
    healthz(state.clone()).merge(
        Router::new()
            .route("/pods", get(pods))
            .route("/pods/", get(pods))
            .route("/runningpods/", get(running_pods))
            .route("/runningpods", get(running_pods))
            .with_state(state),
    )
}

/// Routes of the secure port (the auth filter is added by the caller): the read-only ones and
/// `/configz`, which serves `configz` (upstream's `{"kubeletconfig": {...}}`).
pub(crate) fn secure(state: ServerState, configz: Arc<serde_json::Value>) -> Router {
    let metrics = super::metrics::router(state.metrics.clone());
    read_only(state.clone())
        .merge(Router::new().route("/configz", get(move || configz_handler(configz.clone()))))
        .merge(super::logs::router(state.clone()))
        .merge(super::streaming::routes(state.clone()))
        .merge(super::stats::router(state))
        .merge(metrics)
}

async fn configz_handler(configz: Arc<serde_json::Value>) -> Response {
    match serde_json::to_vec(&*configz) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Every check, upstream's `healthz` format: `ok` when all pass, else a `[+]`/`[-]` line per
/// check and a 500.
async fn healthz_check(State(state): State<ServerState>) -> Response {
    let checks = [
        ("ping", Ok(())),
        (
            "syncloop",
            state.syncloop.check().map_err(|e| e.to_string()),
        ),
        (
            "asyncruntime",
            state.stall.check().map_err(|e| e.to_string()),
        ),
    ];
    if checks.iter().all(|(_, result)| result.is_ok()) {
        return "ok".into_response();
    }
    let mut body = String::new();
    for (name, result) in &checks {
        match result {
            Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
            Err(reason) => body.push_str(&format!("[-]{name} failed: {reason}\n")),
        }
    }
    body.push_str("healthz check failed\n");
    (StatusCode::INTERNAL_SERVER_ERROR, body).into_response()
}

/// One check on its own path (upstream `/healthz/<name>`).
fn single_check(result: Result<(), String>) -> Response {
    match result {
        Ok(()) => "ok".into_response(),
        Err(reason) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {reason}\n"),
        )
            .into_response(),
    }
}

async fn healthz_syncloop(State(state): State<ServerState>) -> Response {
    single_check(state.syncloop.check().map_err(|e| e.to_string()))
}

async fn healthz_asyncruntime(State(state): State<ServerState>) -> Response {
    single_check(state.stall.check().map_err(|e| e.to_string()))
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
