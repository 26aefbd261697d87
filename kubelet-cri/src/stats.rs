//! CRI stats messages → the core types of
//! [`kubelet_core::kuberuntime::api`] (`ContainerStats`, `PodSandboxStats`,
//! `FilesystemUsage`), as upstream `cri_stats_provider.go` reads them: CRI's `UInt64Value`
//! wrappers become `Option`s, nanosecond timestamps become times.

use k8s_cri::v1 as cri;
use k8s_openapi::jiff::Timestamp;
use kubelet_core::kuberuntime::api;
use kubelet_core::time::from_cri_nanos;

fn value(v: Option<&cri::UInt64Value>) -> Option<u64> {
    v.map(|v| v.value)
}

/// `id`, when `ids` is empty or holds it.
fn wanted_id(id: &str, ids: &[String]) -> Option<String> {
    (ids.is_empty() || ids.iter().any(|wanted| wanted == id)).then(|| id.to_owned())
}

/// When a stats sample was taken: its cpu reading's time, else its memory reading's.
fn sample_time(cpu: Option<i64>, memory: Option<i64>) -> Option<Timestamp> {
    cpu.or(memory).and_then(from_cri_nanos)
}

/// `ListContainerStats` answers → core stats, only those of `ids` unless it is empty.
pub(crate) fn container_stats(
    stats: Vec<cri::ContainerStats>,
    ids: &[String],
) -> Vec<api::ContainerStats> {
    stats
        .into_iter()
        .filter_map(|s| {
            let id = wanted_id(&s.attributes.as_ref()?.id, ids)?;
            let cpu = s.cpu.as_ref();
            let memory = s.memory.as_ref();
            let layer = s.writable_layer.as_ref();
            Some(api::ContainerStats {
                id,
                timestamp: sample_time(cpu.map(|c| c.timestamp), memory.map(|m| m.timestamp)),
                cpu_usage_nanos: cpu.and_then(|c| value(c.usage_core_nano_seconds.as_ref())),
                cpu_usage_nano_cores: cpu.and_then(|c| value(c.usage_nano_cores.as_ref())),
                memory_working_set_bytes: memory.and_then(|m| value(m.working_set_bytes.as_ref())),
                memory_usage_bytes: memory.and_then(|m| value(m.usage_bytes.as_ref())),
                memory_rss_bytes: memory.and_then(|m| value(m.rss_bytes.as_ref())),
                writable_layer_bytes: layer.and_then(|l| value(l.used_bytes.as_ref())),
                writable_layer_inodes: layer.and_then(|l| value(l.inodes_used.as_ref())),
            })
        })
        .collect()
}

fn interface(i: &cri::NetworkInterfaceUsage) -> api::InterfaceUsage {
    api::InterfaceUsage {
        name: i.name.clone(),
        rx_bytes: value(i.rx_bytes.as_ref()),
        rx_errors: value(i.rx_errors.as_ref()),
        tx_bytes: value(i.tx_bytes.as_ref()),
        tx_errors: value(i.tx_errors.as_ref()),
    }
}

/// `ListPodSandboxStats` answers → core stats (the Linux part), only those of `ids` unless
/// it is empty.
pub(crate) fn sandbox_stats(
    stats: Vec<cri::PodSandboxStats>,
    ids: &[String],
) -> Vec<api::PodSandboxStats> {
    stats
        .into_iter()
        .filter_map(|s| {
            let id = wanted_id(&s.attributes.as_ref()?.id, ids)?;
            let linux = s.linux.as_ref();
            let cpu = linux.and_then(|l| l.cpu.as_ref());
            let memory = linux.and_then(|l| l.memory.as_ref());
            Some(api::PodSandboxStats {
                id,
                network: linux
                    .and_then(|l| l.network.as_ref())
                    .map(|n| api::NetworkUsage {
                        timestamp: from_cri_nanos(n.timestamp),
                        default_interface: n.default_interface.as_ref().map(interface),
                        interfaces: n.interfaces.iter().map(interface).collect(),
                    }),
                timestamp: sample_time(cpu.map(|c| c.timestamp), memory.map(|m| m.timestamp)),
                cpu_usage_nanos: cpu.and_then(|c| value(c.usage_core_nano_seconds.as_ref())),
                memory_working_set_bytes: memory.and_then(|m| value(m.working_set_bytes.as_ref())),
                process_count: linux
                    .and_then(|l| l.process.as_ref())
                    .and_then(|p| value(p.process_count.as_ref())),
            })
        })
        .collect()
}

/// `FilesystemUsage` → core.
pub(crate) fn filesystem_usage(u: cri::FilesystemUsage) -> api::FilesystemUsage {
    api::FilesystemUsage {
        mountpoint: u.fs_id.map(|f| f.mountpoint).unwrap_or_default(),
        used_bytes: value(u.used_bytes.as_ref()).unwrap_or(0),
        inodes_used: value(u.inodes_used.as_ref()).unwrap_or(0),
    }
}
