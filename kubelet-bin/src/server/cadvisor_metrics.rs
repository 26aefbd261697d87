//! `/metrics/cadvisor`: the `container_*` series dashboards use most, as the kubelet's
//! embedded cadvisor writes them (upstream `pkg/kubelet/server/server.go`
//! `InstallDefaultHandlers` over `vendor/github.com/google/cadvisor/metrics/prometheus.go`
//! with the kubelet's `containerPrometheusLabelsFunc`): `container_cpu_usage_seconds_total`
//! (`cpu="total"`), `container_memory_working_set_bytes`, `container_memory_usage_bytes`,
//! `container_fs_usage_bytes` (`device`), `container_network_receive_bytes_total` /
//! `container_network_transmit_bytes_total` (`interface`, on the sandbox's row), labelled
//! `container`, `id` (the cgroup), `image`, `name` (the runtime's ID), `namespace`, `pod`;
//! each sample stamped with the time it was read.

use kubelet_core::stats::SummaryProvider;
use kubelet_core::stats::cadvisor::ContainerInfo;

use super::exposition::{Family, Kind, render};

fn millis(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<i64> {
    t.map(|t| t.0.as_millisecond())
}

/// The families of these containers.
#[allow(clippy::cast_precision_loss)]
pub(crate) fn families(infos: &[ContainerInfo]) -> Vec<Family> {
    let mut cpu = Family::new(
        "container_cpu_usage_seconds_total",
        Kind::Counter,
        "Cumulative cpu time consumed in seconds.",
    );
    let mut working_set = Family::new(
        "container_memory_working_set_bytes",
        Kind::Gauge,
        "Current working set in bytes.",
    );
    let mut usage = Family::new(
        "container_memory_usage_bytes",
        Kind::Gauge,
        "Current memory usage in bytes, including all memory regardless of when it was accessed",
    );
    let mut fs = Family::new(
        "container_fs_usage_bytes",
        Kind::Gauge,
        "Number of bytes that are consumed by the container on this filesystem.",
    );
    let mut rx = Family::new(
        "container_network_receive_bytes_total",
        Kind::Counter,
        "Cumulative count of bytes received",
    );
    let mut tx = Family::new(
        "container_network_transmit_bytes_total",
        Kind::Counter,
        "Cumulative count of bytes transmitted",
    );
    for c in infos {
        let labels = |extra: Option<(&'static str, String)>| {
            let mut l = vec![
                ("container", c.container.clone()),
                ("id", c.cgroup.clone()),
                ("image", c.image.clone()),
                ("name", c.name.clone()),
                ("namespace", c.pod.namespace.clone()),
                ("pod", c.pod.name.clone()),
            ];
            l.extend(extra);
            l
        };
        if let Some(s) = &c.cpu
            && let Some(n) = s.usage_core_nano_seconds
        {
            cpu.push(
                labels(Some(("cpu", "total".into()))),
                n as f64 / 1e9,
                millis(s.time.as_ref()),
            );
        }
        if let Some(m) = &c.memory {
            if let Some(ws) = m.working_set_bytes {
                working_set.push(labels(None), ws as f64, millis(m.time.as_ref()));
            }
            if let Some(u) = m.usage_bytes {
                usage.push(labels(None), u as f64, millis(m.time.as_ref()));
            }
        }
        if let Some(r) = &c.rootfs
            && let Some(used) = r.used_bytes
        {
            fs.push(
                labels(Some(("device", c.device.clone()))),
                used as f64,
                millis(r.time.as_ref()),
            );
        }
        if let Some(n) = &c.network {
            // A runtime may report the default interface alone (containerd 1.6).
            let default = std::slice::from_ref(&n.default);
            let interfaces = if n.interfaces.is_empty() && !n.default.name.is_empty() {
                default
            } else {
                n.interfaces.as_slice()
            };
            for i in interfaces {
                let ts = millis(n.time.as_ref());
                if let Some(b) = i.rx_bytes {
                    rx.push(labels(Some(("interface", i.name.clone()))), b as f64, ts);
                }
                if let Some(b) = i.tx_bytes {
                    tx.push(labels(Some(("interface", i.name.clone()))), b as f64, ts);
                }
            }
        }
    }
    vec![cpu, working_set, usage, fs, rx, tx]
}

/// The `/metrics/cadvisor` text.
pub(crate) async fn scrape(provider: &dyn SummaryProvider) -> kubelet_core::stats::Result<String> {
    let infos = provider.container_infos().await?;
    Ok(render(families(&infos)))
}
