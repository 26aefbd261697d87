//! What `/metrics/cadvisor` reports per cgroup, as the kubelet's embedded cadvisor labels it
//! (upstream `pkg/kubelet/server/server.go` `containerPrometheusLabelsFunc` over cadvisor's
//! `ContainerInfo`): the container's name in its pod (empty for the sandbox and the root
//! cgroup), its pod, its cgroup (`id`), image, runtime ID (`name`) and the device of its
//! writable layer, beside the same readings as the Summary API.

use super::v1alpha1::{CpuStats, FsStats, MemoryStats, NetworkStats, PodReference};

/// One cgroup's labels and readings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerInfo {
    /// The container's name in the pod spec; empty for a sandbox or the root cgroup.
    pub container: String,
    /// Its pod (empty for the root cgroup).
    pub pod: PodReference,
    /// The cgroup path (cadvisor's container name, the `id` label): `/` for the node.
    pub cgroup: String,
    /// The image as the runtime reports it.
    pub image: String,
    /// The runtime's ID (the `name` label).
    pub name: String,
    /// The block device of the writable layer's filesystem.
    pub device: String,
    /// CPU.
    pub cpu: Option<CpuStats>,
    /// Memory.
    pub memory: Option<MemoryStats>,
    /// The writable layer.
    pub rootfs: Option<FsStats>,
    /// Network counters (the sandbox's and the node's).
    pub network: Option<NetworkStats>,
}
