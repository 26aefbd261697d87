//! `/metrics` and `/metrics/probes` of the secure port (upstream `pkg/kubelet/server/server.go`
//! `InstallAuthRequiredHandlers`: the legacy registry with the process collector on
//! `/metrics`, the prober's registry alone on `/metrics/probes`), and [`render`], which serves
//! any [`Registry`] in the Prometheus text format the scraper asks for.
//!
//! [`Registries::new`] registers a [`KubeletMetrics`] (see `kubelet_core::metrics`) and
//! Go's process metrics ([`process::ProcessCollector`]); the node builder makes one per node
//! and serves it through [`ServerState::metrics`](super::ServerState::metrics).

pub mod process;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kubelet_core::metrics::prometheus_client::encoding::text;
use kubelet_core::metrics::prometheus_client::registry::Registry;
use kubelet_core::metrics::{COUNTERS_WITHOUT_TOTAL, KubeletMetrics};

/// Content type of the OpenMetrics text format.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the Prometheus text format 0.0.4 (what upstream serves by default).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The registries the secure port serves.
#[derive(Debug)]
pub struct Registries {
    /// `/metrics`: the kubelet's families and the process metrics.
    pub metrics: Registry,
    /// `/metrics/probes`: `prober_probe_total`.
    pub probes: Registry,
}

impl Registries {
    /// The registries of `metrics`, with Go's process metrics on `/metrics`.
    pub fn new(metrics: &KubeletMetrics) -> Self {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        registry.register_collector(Box::new(process::ProcessCollector::default()));
        let mut probes = Registry::default();
        metrics.register_probes(&mut probes);
        Self {
            metrics: registry,
            probes,
        }
    }
}

impl Default for Registries {
    /// The registries of a new [`KubeletMetrics`] (nothing records into it).
    fn default() -> Self {
        Self::new(&KubeletMetrics::default())
    }
}

/// The routes `/metrics` and `/metrics/probes` over `registries`.
pub(crate) fn router(registries: Arc<Registries>) -> Router {
    let probes = registries.clone();
    Router::new()
        .route(
            "/metrics",
            get(move |headers: HeaderMap| async move { render(&registries.metrics, &headers) }),
        )
        .route(
            "/metrics/probes",
            get(move |headers: HeaderMap| async move { render(&probes.probes, &headers) }),
        )
}

/// Serves `registry`: OpenMetrics when the request's `Accept` asks for
/// `application/openmetrics-text`, else the Prometheus text format 0.0.4 as upstream's
/// default.
pub fn render(registry: &Registry, headers: &HeaderMap) -> Response {
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let mut body = String::new();
    if let Err(e) = text::encode(&mut body, registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    if openmetrics {
        ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], body).into_response()
    } else {
        (
            [(header::CONTENT_TYPE, TEXT_CONTENT_TYPE)],
            to_prometheus_text(&body),
        )
            .into_response()
    }
}

/// Rewrites OpenMetrics text as Prometheus text 0.0.4: a counter family takes the name of its
/// samples (`x_total`) in `# HELP` and `# TYPE`, except the counters of
/// [`COUNTERS_WITHOUT_TOTAL`], whose samples lose the suffix instead (upstream's names); and
/// `# UNIT` and `# EOF` go.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    // The sample prefix (`x_total`) of a counter named without the suffix upstream.
    let mut unsuffixed: Option<String> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(prefix) = &unsuffixed
            && let Some(rest) = line.strip_prefix(prefix.as_str())
            && (rest.starts_with('{') || rest.starts_with(' '))
        {
            out.push_str(&prefix[..prefix.len() - "_total".len()]);
            push_line(&mut out, rest);
            continue;
        }
        if line.starts_with('#') {
            unsuffixed = None;
        }
        if let Some(name) = line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.strip_suffix(" counter"))
            .filter(|name| COUNTERS_WITHOUT_TOTAL.contains(name))
        {
            if let Some(h) = help.take() {
                push_line(&mut out, h);
            }
            push_line(&mut out, line);
            unsuffixed = Some(format!("{name}_total"));
            continue;
        }
        if line.starts_with("# HELP ") {
            if let Some(previous) = help.replace(line) {
                push_line(&mut out, previous);
            }
            continue;
        }
        if let Some(name) = line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.strip_suffix(" counter"))
        {
            if let Some(h) = help.take() {
                let text = h
                    .strip_prefix("# HELP ")
                    .and_then(|h| h.strip_prefix(name))
                    .unwrap_or_default();
                out.push_str(&format!("# HELP {name}_total{text}\n"));
            }
            out.push_str(&format!("# TYPE {name}_total counter\n"));
            continue;
        }
        if let Some(h) = help.take() {
            push_line(&mut out, h);
        }
        push_line(&mut out, line);
    }
    if let Some(h) = help {
        push_line(&mut out, h);
    }
    out
}

fn push_line(out: &mut String, line: &str) {
    out.push_str(line);
    out.push('\n');
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
