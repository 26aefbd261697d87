//! Node registration and node status: the kubelet creates (or adopts) its `Node` and keeps
//! its status current (upstream `pkg/kubelet/kubelet_node_status.go`,
//! `pkg/kubelet/nodestatus/setters.go`, `pkg/kubelet/cm/node_container_manager_linux.go`).
//!
//! | module | upstream |
//! |---|---|
//! | [`machine`] | cadvisor `MachineInfo`/`VersionInfo`, `CapacityFromMachineInfo` |
//! | [`quantity`] | apimachinery `resource.Quantity` formatting |
//! | [`allocatable`] | `GetNodeAllocatableReservation`, `hardEvictionReservation` |
//! | [`initial`] | `initialNode`, `updateDefaultLabels`, `reconcileCMADAnnotationWithExistingNode` |
//! | [`setters`] | `nodestatus.NodeAddress`, `MachineInfo`, `VersionInfo`, `DaemonEndpoints`, `Images`, `GoRuntime` |
//! | [`conditions`] | `ReadyCondition`, `MemoryPressureCondition`, `DiskPressureCondition`, `PIDPressureCondition` |
//! | [`diff`] | `nodeStatusHasChanged` |
//! | [`patch`] | `nodeutil.PatchNodeStatus` (`preparePatchBytesforNodeStatus`) |
//! | [`sync`] | `registerWithAPIServer`, `syncNodeStatus`, `tryUpdateNodeStatus`, `fastStatusUpdateOnce` |
//!
//! Wiring (what the cluster mode does):
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use kubelet::cluster::node_status::{self, NodeStatusInputs, NodeStatusOptions};
//! # fn demo(client: kube::Client, runtime: Arc<dyn kubelet_core::runtime::Runtime>,
//! #         state: kubelet_core::kubelet::RuntimeState) {
//! let tracker = tokio_util::task::TaskTracker::new();
//! let token = tokio_util::sync::CancellationToken::new();
//! let mut opts = NodeStatusOptions::new("node-a");
//! opts.node_ips = vec!["10.0.0.5".parse().expect("an IP")];
//! let handle = node_status::spawn(client, opts, NodeStatusInputs::new(runtime, state), &tracker, token);
//! # let _ = handle;
//! # }
//! ```

pub mod allocatable;
pub mod conditions;
pub mod diff;
pub mod initial;
mod inputs;
pub mod machine;
pub mod patch;
pub mod quantity;
pub mod setters;
pub mod sync;
#[cfg(test)]
mod test_api;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;

pub use allocatable::{EvictionHard, Reserved};
pub use inputs::{Image, ImageLister, NodeStatusInputs, PressureSource};
pub use sync::{NodeStatusHandle, spawn};

/// Why node registration or a node status option failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed (retryable: the sync loop retries it with backoff).
    #[error("node API request failed: {0}")]
    Api(#[from] kube::Error),
    /// The API server has no Node of this name in a quorum read (it was deleted; it is
    /// registered again).
    #[error("node {0:?} not found")]
    NodeNotFound(String),
    /// The API server's cache (a `resourceVersion=0` read) has no Node of this name; it may
    /// just not have seen the create yet, so a quorum read follows at once.
    #[error("node {0:?} not in the API server's cache")]
    NotInCache(String),
    /// A `--kube-reserved`/`--system-reserved` entry is not `name=quantity`.
    #[error("invalid reserved resource {0:?}: want name=quantity")]
    InvalidReservation(String),
    /// An `--eviction-hard` entry is not `<signal><<quantity or percentage>`.
    #[error("invalid eviction threshold {0:?}")]
    InvalidEvictionThreshold(String),
    /// A `--node-labels` entry is not `key=value`.
    #[error("invalid node label {0:?}: want key=value")]
    InvalidLabel(String),
    /// A `--register-with-taints` entry is not `key[=value]:Effect`.
    #[error("invalid taint {0:?}: want key[=value]:NoSchedule|PreferNoSchedule|NoExecute")]
    InvalidTaint(String),
    /// Building the patch failed (not retryable).
    #[error("serializing the node: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// Upstream `nodeStatusUpdateFrequency` default.
pub const DEFAULT_UPDATE_FREQUENCY: Duration = Duration::from_secs(10);
/// Upstream `nodeStatusReportFrequency` default.
pub const DEFAULT_REPORT_FREQUENCY: Duration = Duration::from_secs(300);

/// How the node registers and reports (upstream `KubeletConfiguration` fields in brackets).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct NodeStatusOptions {
    /// The Node's name.
    pub node_name: String,
    /// The `kubernetes.io/hostname` label and the `Hostname` address (default: the node name).
    pub hostname: String,
    /// Extra labels (`--node-labels`).
    pub node_labels: BTreeMap<String, String>,
    /// Whether to create the Node (`registerNode`, default true).
    pub register_node: bool,
    /// Taints of a newly created Node (`registerWithTaints`).
    pub register_with_taints: Vec<Taint>,
    /// The `pods` capacity (`maxPods`, default 110).
    pub max_pods: u32,
    /// `kubeReserved`.
    pub kube_reserved: Reserved,
    /// `systemReserved`.
    pub system_reserved: Reserved,
    /// `evictionHard` (default upstream's four thresholds).
    pub eviction_hard: EvictionHard,
    /// How often the status is computed (`nodeStatusUpdateFrequency`, 10 s).
    pub update_frequency: Duration,
    /// How often an unchanged status is still written (`nodeStatusReportFrequency`, 5 m).
    pub report_frequency: Duration,
    /// The node's IPs; the first is the `InternalIP` address (`--node-ip` or detected).
    pub node_ips: Vec<IpAddr>,
    /// The kubelet's port for `daemonEndpoints` (`port`, 10250).
    pub port: u16,
    /// The kubelet's root directory (its filesystem is the ephemeral-storage capacity).
    pub root_dir: PathBuf,
    /// `nodeInfo.kubeletVersion`.
    pub kubelet_version: String,
    /// Sets the `volumes.kubernetes.io/controller-managed-attach-detach` annotation
    /// (`enableControllerAttachDetach`, default true).
    pub controller_attach_detach: bool,
    /// At most this many images in the status (`nodeStatusMaxImages`, 50; -1: all).
    pub max_images: i32,
    /// `--cloud-provider=external`: the Node registers with the
    /// `node.cloudprovider.kubernetes.io/uninitialized` taint and the
    /// `alpha.kubernetes.io/provided-node-ip` annotation (with `node_ips`), and its addresses
    /// are the cloud provider's once it set them (until then `node_ips`, or none).
    pub external_cloud_provider: bool,
}

impl NodeStatusOptions {
    /// Upstream's defaults for the node `node_name`.
    pub fn new(node_name: impl Into<String>) -> Self {
        let node_name = node_name.into();
        Self {
            hostname: node_name.clone(),
            node_name,
            node_labels: BTreeMap::new(),
            register_node: true,
            register_with_taints: Vec::new(),
            max_pods: 110,
            kube_reserved: Reserved::default(),
            system_reserved: Reserved::default(),
            eviction_hard: EvictionHard::default(),
            update_frequency: DEFAULT_UPDATE_FREQUENCY,
            report_frequency: DEFAULT_REPORT_FREQUENCY,
            node_ips: Vec::new(),
            port: 10250,
            root_dir: PathBuf::from("/var/lib/kubelet"),
            kubelet_version: kubelet_core::version::GIT_VERSION.to_owned(),
            controller_attach_detach: true,
            max_images: 50,
            external_cloud_provider: false,
        }
    }
}
