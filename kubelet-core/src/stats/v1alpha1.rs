//! The Summary API's types, as `/stats/summary` serves them (upstream
//! `staging/src/k8s.io/kubelet/pkg/apis/stats/v1alpha1/types.go`): the same JSON field names,
//! the same `omitempty` fields left out when unset, times as `metav1.Time` (RFC 3339).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

/// A top-level container of [`NodeStats::system_containers`]: the kubelet.
pub const SYSTEM_CONTAINER_KUBELET: &str = "kubelet";
/// A top-level container of [`NodeStats::system_containers`]: the container runtime.
pub const SYSTEM_CONTAINER_RUNTIME: &str = "runtime";
/// A top-level container of [`NodeStats::system_containers`]: everything else on the node.
pub const SYSTEM_CONTAINER_MISC: &str = "misc";
/// A top-level container of [`NodeStats::system_containers`]: all pods (`kubepods`).
pub const SYSTEM_CONTAINER_PODS: &str = "pods";

/// A summary of the node and its pods (upstream `Summary`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The node.
    pub node: NodeStats,
    /// The pods on the node.
    pub pods: Vec<PodStats>,
}

/// The node's stats (upstream `NodeStats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    /// The node's name.
    pub node_name: String,
    /// The kubelet's, the runtime's and the pods' cgroups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    /// When the node started (boot time).
    pub start_time: Option<Time>,
    /// CPU of the whole node (the root cgroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory of the whole node (the root cgroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The node's network interfaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// The filesystem of the kubelet's root directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    /// The runtime's filesystems.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    /// Process ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
}

/// Process id limits of the node (upstream `RlimitStats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RlimitStats {
    /// When read.
    pub time: Option<Time>,
    /// `kernel.pid_max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxpid: Option<i64>,
    /// Processes (threads) running now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub curproc: Option<i64>,
}

/// The runtime's filesystems (upstream `RuntimeStats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    /// The filesystem holding images (its used bytes are the images').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
    /// The filesystem holding writable layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_fs: Option<FsStats>,
}

/// One pod's stats (upstream `PodStats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    /// Which pod.
    pub pod_ref: PodReference,
    /// When the pod (its sandbox) was created.
    pub start_time: Option<Time>,
    /// Its containers.
    pub containers: Vec<ContainerStats>,
    /// CPU of the pod's cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory of the pod's cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The pod's network namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// Its volumes that report usage (emptyDir, configMap, secret, projected, downwardAPI).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume: Vec<VolumeStats>,
    /// Local ephemeral storage: writable layers, logs and disk-backed local volumes.
    #[serde(
        default,
        rename = "ephemeral-storage",
        skip_serializing_if = "Option::is_none"
    )]
    pub ephemeral_storage: Option<FsStats>,
    /// Processes in the pod.
    #[serde(
        default,
        rename = "process_stats",
        skip_serializing_if = "Option::is_none"
    )]
    pub process_stats: Option<ProcessStats>,
}

/// One container's stats (upstream `ContainerStats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    /// The container's name in the pod spec (or a system container's name).
    pub name: String,
    /// When the container was created.
    pub start_time: Option<Time>,
    /// CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// The writable layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    /// The container's log files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
}

/// Which pod (upstream `PodReference`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PodReference {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// UID.
    pub uid: String,
}

/// One network interface's counters (upstream `InterfaceStats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    /// The interface's name.
    pub name: String,
    /// Bytes received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    /// Receive errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    /// Bytes transmitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    /// Transmit errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

/// Network counters: the default interface inline, all of them in `interfaces` (upstream
/// `NetworkStats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkStats {
    /// When read.
    pub time: Option<Time>,
    /// The default interface (`eth0`).
    #[serde(flatten)]
    pub default: InterfaceStats,
    /// Every interface.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

/// CPU usage (upstream `CPUStats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    /// When read.
    pub time: Option<Time>,
    /// Cores in use, in billionths, averaged since the previous sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    /// Cumulative CPU time in nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

/// Memory usage (upstream `MemoryStats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// When read.
    pub time: Option<Time>,
    /// Limit (or node capacity) minus the working set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// All memory in use, cache included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    /// Usage minus inactive file cache: what the OOM killer and eviction look at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// Anonymous memory and swap cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// Page faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    /// Major page faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

/// One volume's usage (upstream `VolumeStats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VolumeStats {
    /// Usage.
    #[serde(flatten)]
    pub fs: FsStats,
    /// The volume's name in the pod spec.
    pub name: String,
}

/// Filesystem usage (upstream `FsStats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    /// When read.
    pub time: Option<Time>,
    /// Bytes available to non-root users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// Size of the filesystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// Bytes used (by the object these stats are about, not the whole filesystem).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Free inodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    /// All inodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    /// Inodes used (by the object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

/// Processes of a pod (upstream `ProcessStats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessStats {
    /// How many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_are_upstreams() {
        let pod = PodStats {
            pod_ref: PodReference {
                name: "p".into(),
                namespace: "ns".into(),
                uid: "u".into(),
            },
            ephemeral_storage: Some(FsStats {
                used_bytes: Some(1),
                ..Default::default()
            }),
            network: Some(NetworkStats {
                default: InterfaceStats {
                    name: "eth0".into(),
                    rx_bytes: Some(2),
                    ..Default::default()
                },
                ..Default::default()
            }),
            volume: vec![VolumeStats {
                name: "v".into(),
                fs: FsStats {
                    inodes_used: Some(3),
                    ..Default::default()
                },
            }],
            process_stats: Some(ProcessStats {
                process_count: Some(4),
            }),
            ..Default::default()
        };
        let json = serde_json::to_value(&pod).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({
                "podRef": {"name": "p", "namespace": "ns", "uid": "u"},
                "startTime": null,
                "containers": [],
                "network": {"time": null, "name": "eth0", "rxBytes": 2},
                "volume": [{"time": null, "inodesUsed": 3, "name": "v"}],
                "ephemeral-storage": {"time": null, "usedBytes": 1},
                "process_stats": {"process_count": 4},
            })
        );
        let back: PodStats = serde_json::from_value(json).unwrap_or_default();
        assert_eq!(back, pod);
    }
}
