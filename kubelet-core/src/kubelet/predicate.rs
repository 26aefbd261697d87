//! Predicate admission: does the pod fit this node? (upstream
//! `pkg/kubelet/lifecycle/predicate.go`, with the scheduler's `AdmissionCheck` and its
//! plugins `noderesources` (fit), `nodeaffinity`, `nodename`, `nodeports`, and
//! `tainttoleration` for `NoExecute` taints).
//!
//! [`PredicateAdmitHandler`] checks, in upstream's order, and refuses with the first failure:
//! 1. the pod's `kubernetes.io/os` label and `spec.os.name` against this OS
//!    (`PodOSSelectorNodeLabelDoesNotMatch`, `PodOSNotSupported`);
//! 2. resources: pod count, cpu, memory, ephemeral-storage, then extended resources and
//!    hugepages, the pod's requests (with overhead) against allocatable minus what the other
//!    active pods request (`OutOfpods`, `OutOfcpu`, `OutOfmemory`,
//!    `OutOfephemeral-storage`, `OutOf<resource>`; message `Node didn't have enough
//!    resource: cpu, requested: 2000, used: 0, capacity: 1000`). Extended resources the node
//!    does not have are not checked (they may be cluster-level);
//! 3. required node affinity and `nodeSelector` (`NodeAffinity`), `spec.nodeName`
//!    (`NodeName`), host ports (of containers and sidecars) taken by other pods
//!    (`NodePorts`), with the message
//!    `Predicate <name> failed: <why>`;
//! 4. untolerated `NoExecute` taints (`TaintToleration`), except for static pods.

mod affinity;

use std::collections::BTreeMap;
use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};

use crate::container::is_restartable_init_container;
use crate::pod::is_static_pod;
use crate::pod_resources::{Amounts, milli_value, pod_requests, value};

use super::admit::{PodAdmitAttributes, PodAdmitHandler, PodAdmitResult};
use super::node::{LABEL_OS, NodeProvider, os_name};

pub use affinity::matches_required_node_affinity;

/// Reason when the pod's `kubernetes.io/os` label is not this node's OS.
pub const POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH: &str = "PodOSSelectorNodeLabelDoesNotMatch";
/// Reason when the pod's `spec.os.name` is not this node's OS.
pub const POD_OS_NOT_SUPPORTED: &str = "PodOSNotSupported";
/// Prefix of the reason when a resource is short (`OutOfcpu`, `OutOfnvidia.com/gpu`…).
pub const INSUFFICIENT_RESOURCE_PREFIX: &str = "OutOf";

/// Why a pod does not fit (upstream `PredicateFailureReason`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Not enough of a resource (upstream `InsufficientResourceError`); amounts in the
    /// resource's unit (milli-cores for cpu, bytes for memory, a count for pods).
    InsufficientResource {
        /// The resource, e.g. `cpu`.
        resource: String,
        /// What the pod asks for.
        requested: i64,
        /// What the other pods take.
        used: i64,
        /// The node's allocatable.
        capacity: i64,
    },
    /// A predicate failed (upstream `PredicateFailureError`).
    Predicate {
        /// The plugin, e.g. `NodeAffinity`.
        name: &'static str,
        /// Why, e.g. `node(s) didn't match Pod's node affinity/selector`.
        description: &'static str,
    },
}

impl Failure {
    /// The pod's `status.reason` when this failure rejects it.
    pub fn reason(&self) -> String {
        match self {
            Self::InsufficientResource { resource, .. } => {
                format!("{INSUFFICIENT_RESOURCE_PREFIX}{resource}")
            }
            Self::Predicate { name, .. } => (*name).to_owned(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InsufficientResource {
                resource,
                requested,
                used,
                capacity,
            } => write!(
                f,
                "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
            ),
            Self::Predicate { name, description } => {
                write!(f, "Predicate {name} failed: {description}")
            }
        }
    }
}

const NODE_AFFINITY: Failure = Failure::Predicate {
    name: "NodeAffinity",
    description: "node(s) didn't match Pod's node affinity/selector",
};
const NODE_NAME: Failure = Failure::Predicate {
    name: "NodeName",
    description: "node(s) didn't match the requested node name",
};
const NODE_PORTS: Failure = Failure::Predicate {
    name: "NodePorts",
    description: "node(s) didn't have free ports for the requested pod ports",
};
const TAINT_TOLERATION: Failure = Failure::Predicate {
    name: "TaintToleration",
    description: "node(s) had untolerated taint",
};

/// Refuses pods that do not fit the node of a [`NodeProvider`] (see the [module
/// docs](self)). Part of the kubelet's default admit chain.
#[derive(Clone)]
pub struct PredicateAdmitHandler {
    nodes: Arc<dyn NodeProvider>,
}

impl std::fmt::Debug for PredicateAdmitHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PredicateAdmitHandler")
            .finish_non_exhaustive()
    }
}

impl PredicateAdmitHandler {
    /// A handler that checks pods against `nodes`' current node.
    pub fn new(nodes: Arc<dyn NodeProvider>) -> Self {
        Self { nodes }
    }
}

impl PodAdmitHandler for PredicateAdmitHandler {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> PodAdmitResult {
        let pod = attrs.pod;
        if pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_OS))
            .is_some_and(|os| os != os_name())
        {
            return PodAdmitResult::reject(
                POD_OS_SELECTOR_NODE_LABEL_DOES_NOT_MATCH,
                "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
            );
        }
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.os.as_ref())
            .is_some_and(|os| os.name != os_name())
        {
            return PodAdmitResult::reject(
                POD_OS_NOT_SUPPORTED,
                "Failed to admit pod as the OS field doesn't match node OS",
            );
        }
        let node = self.nodes.node();
        match general_filter(pod, attrs.other_pods, &node).first() {
            None => PodAdmitResult::admit(),
            Some(failure) => PodAdmitResult::reject(failure.reason(), failure.to_string()),
        }
    }
}

/// Every reason `pod` does not fit `node` next to `other_pods`, in upstream's order
/// (upstream `generalFilter`); empty when it fits.
pub fn general_filter(pod: &Pod, other_pods: &[Pod], node: &Node) -> Vec<Failure> {
    let mut failures = fits_request(pod, other_pods, node);
    if !matches_required_node_affinity(pod, node) {
        failures.push(NODE_AFFINITY);
    }
    let wanted = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    if wanted.is_some_and(|n| !n.is_empty() && Some(n) != node.metadata.name.as_deref()) {
        failures.push(NODE_NAME);
    }
    if !host_ports_fit(pod, other_pods) {
        failures.push(NODE_PORTS);
    }
    if !is_static_pod(pod) && untolerated_no_execute_taint(pod, node).is_some() {
        failures.push(TAINT_TOLERATION);
    }
    failures
}

/// A resource's amount in its unit: milli-cores for cpu, otherwise `Value()`.
fn amount(resource: &str, nanos: i128) -> i64 {
    if resource == "cpu" {
        milli_value(nanos)
    } else {
        value(nanos)
    }
}

/// Upstream `IsScalarResourceName`: extended resources, hugepages, attachable volumes and
/// other `kubernetes.io/`-prefixed resources; `is_extended` says which are extended.
fn scalar_kind(resource: &str) -> Option<bool> {
    let native = !resource.contains('/') || resource.contains("kubernetes.io/");
    if !native && !resource.starts_with("requests.") {
        return Some(true);
    }
    (resource.starts_with("hugepages-")
        || resource.starts_with("attachable-volumes-")
        || resource.contains("kubernetes.io/"))
    .then_some(false)
}

/// Upstream `noderesources.Fits` (`fitsRequest`).
fn fits_request(pod: &Pod, other_pods: &[Pod], node: &Node) -> Vec<Failure> {
    let empty = BTreeMap::new();
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .unwrap_or(&empty);
    let allocatable_of = |r: &str| {
        allocatable
            .get(r)
            .and_then(|q| crate::qos::parse_quantity(&q.0))
            .map_or(0, |n| amount(r, n))
    };
    let mut used = Amounts::new();
    for other in other_pods {
        for (r, n) in pod_requests(other, true) {
            *used.entry(r).or_default() += n;
        }
    }
    let used_of = |r: &str| used.get(r).map_or(0, |n| amount(r, *n));
    let mut failures = Vec::new();
    let allowed_pods = allocatable_of("pods");
    let pod_count = i64::try_from(other_pods.len()).unwrap_or(i64::MAX);
    if pod_count.saturating_add(1) > allowed_pods {
        failures.push(Failure::InsufficientResource {
            resource: "pods".into(),
            requested: 1,
            used: pod_count,
            capacity: allowed_pods,
        });
    }
    let requests = pod_requests(pod, true);
    let mut check = |resource: &str, requested: i64| {
        if requested > 0 && requested > allocatable_of(resource) - used_of(resource) {
            failures.push(Failure::InsufficientResource {
                resource: resource.to_owned(),
                requested,
                used: used_of(resource),
                capacity: allocatable_of(resource),
            });
        }
    };
    for resource in ["cpu", "memory", "ephemeral-storage"] {
        check(
            resource,
            requests.get(resource).map_or(0, |n| amount(resource, *n)),
        );
    }
    for (resource, nanos) in &requests {
        match scalar_kind(resource) {
            // An extended resource the node does not have may be a cluster-level one
            // (upstream `removeMissingExtendedResources`).
            Some(true) if !allocatable.contains_key(resource) => {}
            Some(_) => check(resource, value(*nanos)),
            None => {}
        }
    }
    failures
}

/// `(hostIP, protocol, hostPort)` of every port with a host port of the pod's containers
/// and sidecars (init containers with `restartPolicy: Always`, which run as long as the
/// pod; upstream `schedutil.GetHostPorts`); the IP defaults to `0.0.0.0` and the protocol
/// to `TCP` (upstream `HostPortInfo`).
fn host_ports(pod: &Pod) -> Vec<(String, String, i32)> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| is_restartable_init_container(c));
    sidecars
        .chain(spec.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| {
            let ip = p.host_ip.as_deref().filter(|ip| !ip.is_empty());
            let protocol = p.protocol.as_deref().filter(|pr| !pr.is_empty());
            (
                ip.unwrap_or("0.0.0.0").to_owned(),
                protocol.unwrap_or("TCP").to_owned(),
                p.host_port.unwrap_or_default(),
            )
        })
        .collect()
}

/// Upstream `nodeports.Fits`: no host port of the pod is taken by another pod, where
/// `0.0.0.0` conflicts with every IP of the same protocol and port.
fn host_ports_fit(pod: &Pod, other_pods: &[Pod]) -> bool {
    let wanted = host_ports(pod);
    if wanted.is_empty() {
        return true;
    }
    let used: HashSet<(String, String, i32)> = other_pods.iter().flat_map(host_ports).collect();
    wanted.iter().all(|(ip, protocol, port)| {
        !used.iter().any(|(uip, uprotocol, uport)| {
            uprotocol == protocol
                && uport == port
                && (ip == "0.0.0.0" || uip == "0.0.0.0" || uip == ip)
        })
    })
}

/// `true` when one of `tolerations` tolerates `taint` (upstream
/// `TolerationsTolerateTaint`).
pub fn tolerations_tolerate_taint(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// Upstream `ToleratesTaint`.
fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "Exists" => true,
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// The first `NoExecute` taint of the node that the pod does not tolerate (upstream
/// `FindMatchingUntoleratedTaint` with the kubelet's `NoExecute` filter).
pub fn untolerated_no_execute_taint<'a>(pod: &Pod, node: &'a Node) -> Option<&'a Taint> {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[]);
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

#[cfg(test)]
mod tests;
