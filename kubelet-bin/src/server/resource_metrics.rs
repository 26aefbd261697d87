//! `/metrics/resource`: what metrics-server reads (upstream
//! `pkg/kubelet/metrics/collectors/resource_metrics.go` over `GetCPUAndMemoryStats`):
//! `node_cpu_usage_seconds_total`, `node_memory_working_set_bytes`,
//! `container_cpu_usage_seconds_total`, `container_memory_working_set_bytes`,
//! `container_start_time_seconds`, `pod_cpu_usage_seconds_total`,
//! `pod_memory_working_set_bytes` (labels `container`, `pod`, `namespace`; each sample
//! stamped with the time it was read), and `scrape_error` / `resource_scrape_error` (1 when
//! the summary failed).

use kubelet_core::stats::SummaryProvider;
use kubelet_core::stats::v1alpha1::{CpuStats, MemoryStats, Summary};

use super::exposition::{Family, Kind, render};

const NANOS_PER_SECOND: f64 = 1e9;

fn millis(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<i64> {
    t.map(|t| t.0.as_millisecond())
}

fn cpu_seconds(cpu: Option<&CpuStats>) -> Option<(f64, Option<i64>)> {
    let cpu = cpu?;
    #[allow(clippy::cast_precision_loss)]
    let seconds = cpu.usage_core_nano_seconds? as f64 / NANOS_PER_SECOND;
    Some((seconds, millis(cpu.time.as_ref())))
}

fn working_set(memory: Option<&MemoryStats>) -> Option<(f64, Option<i64>)> {
    let memory = memory?;
    #[allow(clippy::cast_precision_loss)]
    let bytes = memory.working_set_bytes? as f64;
    Some((bytes, millis(memory.time.as_ref())))
}

/// The families of one summary (upstream `CollectWithStability`).
pub(crate) fn families(summary: Option<&Summary>) -> Vec<Family> {
    let mut node_cpu = Family::new(
        "node_cpu_usage_seconds_total",
        Kind::Counter,
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    );
    let mut node_memory = Family::new(
        "node_memory_working_set_bytes",
        Kind::Gauge,
        "[STABLE] Current working set of the node in bytes",
    );
    let mut container_cpu = Family::new(
        "container_cpu_usage_seconds_total",
        Kind::Counter,
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    );
    let mut container_memory = Family::new(
        "container_memory_working_set_bytes",
        Kind::Gauge,
        "[STABLE] Current working set of the container in bytes",
    );
    let mut container_start = Family::new(
        "container_start_time_seconds",
        Kind::Gauge,
        "[STABLE] Start time of the container since unix epoch in seconds",
    );
    let mut pod_cpu = Family::new(
        "pod_cpu_usage_seconds_total",
        Kind::Counter,
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    );
    let mut pod_memory = Family::new(
        "pod_memory_working_set_bytes",
        Kind::Gauge,
        "[STABLE] Current working set of the pod in bytes",
    );
    let error = if summary.is_some() { 0.0 } else { 1.0 };
    let mut scrape_error = Family::new(
        "scrape_error",
        Kind::Gauge,
        "[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise",
    );
    scrape_error.push(Vec::new(), error, None);
    let mut resource_scrape_error = Family::new(
        "resource_scrape_error",
        Kind::Gauge,
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    );
    resource_scrape_error.push(Vec::new(), error, None);

    if let Some(s) = summary {
        if let Some((v, ts)) = cpu_seconds(s.node.cpu.as_ref()) {
            node_cpu.push(Vec::new(), v, ts);
        }
        if let Some((v, ts)) = working_set(s.node.memory.as_ref()) {
            node_memory.push(Vec::new(), v, ts);
        }
        for pod in &s.pods {
            let (name, namespace) = (&pod.pod_ref.name, &pod.pod_ref.namespace);
            for c in &pod.containers {
                let labels = || {
                    vec![
                        ("container", c.name.clone()),
                        ("pod", name.clone()),
                        ("namespace", namespace.clone()),
                    ]
                };
                if let Some(start) = c.start_time.as_ref().filter(|t| t.0.as_second() > 0) {
                    #[allow(clippy::cast_precision_loss)]
                    let seconds = start.0.as_nanosecond() as f64 / NANOS_PER_SECOND;
                    container_start.push(labels(), seconds, None);
                }
                if let Some((v, ts)) = cpu_seconds(c.cpu.as_ref()) {
                    container_cpu.push(labels(), v, ts);
                }
                if let Some((v, ts)) = working_set(c.memory.as_ref()) {
                    container_memory.push(labels(), v, ts);
                }
            }
            let labels = || vec![("pod", name.clone()), ("namespace", namespace.clone())];
            if let Some((v, ts)) = cpu_seconds(pod.cpu.as_ref()) {
                pod_cpu.push(labels(), v, ts);
            }
            if let Some((v, ts)) = working_set(pod.memory.as_ref()) {
                pod_memory.push(labels(), v, ts);
            }
        }
    }
    vec![
        node_cpu,
        node_memory,
        container_cpu,
        container_memory,
        container_start,
        pod_cpu,
        pod_memory,
        scrape_error,
        resource_scrape_error,
    ]
}

/// The `/metrics/resource` text of `provider`'s CPU-and-memory summary.
pub(crate) async fn scrape(provider: &dyn SummaryProvider) -> String {
    let summary = match provider.get_cpu_and_memory_stats().await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!(error = %e, "Error getting summary for resourceMetric prometheus endpoint");
            None
        }
    };
    render(families(summary.as_ref()))
}
