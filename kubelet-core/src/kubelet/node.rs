//! The node object the kubelet admits pods against and owns mirror pods by (upstream
//! `getNodeAnyWay` and `initialNode` in `pkg/kubelet/kubelet_getters.go` and
//! `kubelet_node_status.go`).
//!
//! A [`NodeProvider`] gives the current `v1.Node`: in cluster mode the one last read from the
//! API server (labels, taints and allocatable as the cluster sees them), in standalone mode a
//! [`FixedNode`] made by [`standalone_node`] from the machine's capacity, so that resource
//! fit and the other predicates of [`super::predicate`] work without an API server too.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::resources::NodeAllocatable;

/// Upstream's default `maxPods`.
pub const DEFAULT_MAX_PODS: u32 = 110;

/// Label with the node's hostname (upstream `v1.LabelHostname`).
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// Label with the node's operating system (upstream `v1.LabelOSStable`).
pub const LABEL_OS: &str = "kubernetes.io/os";
/// Label with the node's architecture (upstream `v1.LabelArchStable`).
pub const LABEL_ARCH: &str = "kubernetes.io/arch";

/// The current Node object (upstream `getNodeAnyWay`).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
pub trait NodeProvider: Send + Sync + 'static {
    /// The node as last known: read from the API server when it has been, otherwise the node
    /// the kubelet would register (which has no UID).
    fn node(&self) -> Arc<Node>;
}

/// A node that never changes (standalone mode, tests).
#[derive(Clone, Debug)]
pub struct FixedNode(Arc<Node>);

impl FixedNode {
    /// Always `node`.
    pub fn new(node: Node) -> Self {
        Self(Arc::new(node))
    }
}

impl NodeProvider for FixedNode {
    fn node(&self) -> Arc<Node> {
        self.0.clone()
    }
}

/// Upstream `runtime.GOOS` in Kubernetes' spelling.
pub fn os_name() -> &'static str {
    std::env::consts::OS
}

/// Upstream `runtime.GOARCH` in Kubernetes' spelling (`amd64`, `arm64`, …).
pub fn arch_name() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// The labels upstream's `initialNode` gives every node: `kubernetes.io/hostname`,
/// `kubernetes.io/os` and `kubernetes.io/arch`.
pub fn default_labels(hostname: &str) -> BTreeMap<String, String> {
    [
        (LABEL_HOSTNAME, hostname),
        (LABEL_OS, os_name()),
        (LABEL_ARCH, arch_name()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// `cpu`, `memory`, `pods` (and `ephemeral-storage` when known) of `machine` as node
/// capacity.
pub fn machine_capacity(machine: &NodeAllocatable, max_pods: u32) -> BTreeMap<String, Quantity> {
    let mut capacity = BTreeMap::from([
        (
            "cpu".to_owned(),
            Quantity(format!("{}m", machine.cpu_millis)),
        ),
        (
            "memory".to_owned(),
            Quantity(machine.memory_bytes.to_string()),
        ),
        ("pods".to_owned(), Quantity(max_pods.to_string())),
    ]);
    if let Some(bytes) = machine.ephemeral_storage_bytes {
        capacity.insert("ephemeral-storage".to_owned(), Quantity(bytes.to_string()));
    }
    capacity
}

/// A node named `name` with `labels`, whose capacity and allocatable are `capacity` (no
/// reservations), without taints or UID: what a standalone kubelet admits pods against.
pub fn standalone_node(
    name: &str,
    capacity: BTreeMap<String, Quantity>,
    labels: BTreeMap<String, String>,
) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            allocatable: Some(capacity.clone()),
            capacity: Some(capacity),
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standalone_node_offers_the_machine() {
        let machine = NodeAllocatable {
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: None,
        };
        let node = standalone_node(
            "n1",
            machine_capacity(&machine, DEFAULT_MAX_PODS),
            default_labels("n1"),
        );
        let status = node.status.as_ref().expect("status");
        let allocatable = status.allocatable.as_ref().expect("allocatable");
        assert_eq!(allocatable["cpu"].0, "4000m");
        assert_eq!(allocatable["memory"].0, (8_i64 << 30).to_string());
        assert_eq!(allocatable["pods"].0, "110");
        assert!(!allocatable.contains_key("ephemeral-storage"));
        assert_eq!(status.capacity, status.allocatable);
        let labels = node.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels[LABEL_OS], "linux");
        assert_eq!(labels[LABEL_HOSTNAME], "n1");
        assert_eq!(FixedNode::new(node.clone()).node().as_ref(), &node);
    }
}
