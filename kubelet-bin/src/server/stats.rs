//! The routes over the Summary API:
//!
//! * `/stats/summary` (upstream `pkg/kubelet/server/stats/handler.go` `handleSummary`): JSON,
//!   `?only_cpu_and_memory=true` for the node's and pods' CPU and memory only; GET or POST,
//!   as upstream. A failure is `500 Internal Error: <error>`. Authorized as `nodes/stats`.
//! * `/metrics/resource` ([`super::resource_metrics`]): 200 even when the summary failed,
//!   with `scrape_error 1`, as upstream. Authorized as `nodes/metrics`.
//! * `/metrics/cadvisor` ([`super::cadvisor_metrics`]). Authorized as `nodes/metrics`.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use super::ServerState;

/// The stats routes of the secure port; none without a stats provider.
pub(crate) fn router(state: ServerState) -> Router {
    if state.stats.is_none() {
        return Router::new();
    }
    Router::new()
        .route("/stats/summary", get(summary).post(summary))
        .route("/metrics/resource", get(resource_metrics))
        .route("/metrics/cadvisor", get(cadvisor_metrics))
        .with_state(state)
}

#[derive(Debug, Default, Deserialize)]
struct SummaryQuery {
    only_cpu_and_memory: Option<String>,
}

async fn summary(State(state): State<ServerState>, Query(q): Query<SummaryQuery>) -> Response {
    let Some(stats) = state.stats else {
        return StatusCode::NOT_FOUND.into_response();
    };
    // Upstream: exactly `true` asks for CPU and memory only.
    let result = if q.only_cpu_and_memory.as_deref() == Some("true") {
        stats.get_cpu_and_memory_stats().await
    } else {
        stats.get().await
    };
    match result.map(|s| serde_json::to_vec_pretty(&s)) {
        Ok(Ok(body)) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Ok(Err(e)) => internal_error(&e),
        Err(e) => internal_error(&e),
    }
}

async fn resource_metrics(State(state): State<ServerState>) -> Response {
    let Some(stats) = state.stats else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let body = super::resource_metrics::scrape(stats.as_ref()).await;
    (
        [(header::CONTENT_TYPE, super::metrics::TEXT_CONTENT_TYPE)],
        body,
    )
        .into_response()
}

async fn cadvisor_metrics(State(state): State<ServerState>) -> Response {
    let Some(stats) = state.stats else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match super::cadvisor_metrics::scrape(stats.as_ref()).await {
        Ok(body) => (
            [(header::CONTENT_TYPE, super::metrics::TEXT_CONTENT_TYPE)],
            body,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "HTTP InternalServerError serving /metrics/cadvisor");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Internal Error: {e}"),
            )
                .into_response()
        }
    }
}

/// Upstream `handleError`.
fn internal_error(e: &dyn std::fmt::Display) -> Response {
    tracing::error!(error = %e, "HTTP InternalServerError serving /stats/summary");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("Internal Error: {e}"),
    )
        .into_response()
}
