//! `/stats/summary` (upstream `pkg/kubelet/server/stats/handler.go` `handleSummary`): the
//! Summary API as JSON, `?only_cpu_and_memory=true` for the node's and pods' CPU and memory
//! only (what metrics-server asks for); GET or POST, as upstream. A failure is
//! `500 Internal Error: <error>`. Authorized as `nodes/stats` (see [`super::authz`]).

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

/// Upstream `handleError`.
fn internal_error(e: &dyn std::fmt::Display) -> Response {
    tracing::error!(error = %e, "HTTP InternalServerError serving /stats/summary");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("Internal Error: {e}"),
    )
        .into_response()
}
