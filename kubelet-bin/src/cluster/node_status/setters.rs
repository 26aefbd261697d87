//! One function per upstream node status setter, applied in upstream's order by
//! [`set_node_status`] (upstream `pkg/kubelet/nodestatus/setters.go` and
//! `defaultNodeStatusFuncs` in `pkg/kubelet/kubelet_node_status.go`): `NodeAddress`,
//! `MachineInfo`, `VersionInfo`, `DaemonEndpoints`, `Images`, `GoRuntime`, the pressure
//! conditions, then `ReadyCondition` (last, as upstream requires).
//!
//! Setters are pure: they read a [`Snapshot`] gathered once per round and return the node
//! events to record.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeDaemonEndpoints, NodeRuntimeHandler,
    NodeRuntimeHandlerFeatures, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kubelet_core::events::{EventType, reasons};
use kubelet_core::runtime::{RuntimeHandler, Version};

use super::NodeStatusOptions;
use super::allocatable;
use super::conditions::{self, Pressure};
use super::inputs::Image;
use super::machine::MachineInfo;
use super::quantity::{Amount, Format};

/// Upstream `MaxNamesPerImageInNodeStatus`.
pub const MAX_NAMES_PER_IMAGE: usize = 5;

/// What one round of setters reads.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The round's time (whole seconds, as the API stores it).
    pub now: Timestamp,
    /// The machine.
    pub machine: MachineInfo,
    /// The runtime's version, `None` when it did not answer.
    pub runtime_version: Option<Version>,
    /// The images, or why they could not be listed.
    pub images: Result<Vec<Image>, String>,
    /// Upstream `runtimeState.runtimeErrors` (runtime down, PLEG unhealthy).
    pub runtime_errors: Vec<String>,
    /// Upstream `runtimeState.networkErrors`.
    pub network_errors: Vec<String>,
    /// Upstream `nodeShutdownManagerErrorsFunc`: `node is shutting down` during a graceful
    /// node shutdown.
    pub shutdown_errors: Vec<String>,
    /// Memory pressure.
    pub memory_pressure: bool,
    /// Disk pressure.
    pub disk_pressure: bool,
    /// PID pressure.
    pub pid_pressure: bool,
    /// The runtime handlers the runtime reported at its last status check.
    pub runtime_handlers: Vec<RuntimeHandler>,
}

/// An event a setter asks to record: type, reason, message.
pub type NodeEvent = (EventType, String, String);

/// Applies every setter to `node` in upstream's order.
pub fn set_node_status(
    node: &mut Node,
    opts: &NodeStatusOptions,
    snap: &Snapshot,
) -> Vec<NodeEvent> {
    let mut events = Vec::new();
    let status = node.status.get_or_insert_with(NodeStatus::default);
    node_address(status, opts);
    if let Some(e) = machine_info(status, opts, &snap.machine) {
        events.push(e);
    }
    version_info(status, opts, snap);
    daemon_endpoints(status, opts);
    images(status, opts, &snap.images);
    go_runtime(status);
    runtime_handlers(status, &snap.runtime_handlers);
    let now = Time(snap.now);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let pressures = [
        (Pressure::Memory, snap.memory_pressure),
        (Pressure::Disk, snap.disk_pressure),
        (Pressure::Pid, snap.pid_pressure),
    ];
    let mut transitions: Vec<_> = pressures
        .into_iter()
        .filter_map(|(kind, under)| conditions::set_pressure(conditions, kind, &now, under))
        .collect();
    let errors = ready_errors(status, snap);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    transitions.extend(conditions::set_ready(conditions, &now, &errors));
    events.extend(transitions.into_iter().map(|(t, reason)| {
        let message = format!("Node {} status is now: {reason}", opts.node_name);
        (t, reason.to_owned(), message)
    }));
    events
}

/// Upstream `NodeAddress` (v1.31, no in-tree cloud provider): one `InternalIP` per node IP —
/// the primary first, two for a dual-stack `--node-ip` — then `Hostname`. With
/// `--cloud-provider=external` the addresses a cloud provider set are kept, and without
/// `--node-ip` none are set until it does.
///
/// Departure: upstream also checks that a given node IP is not loopback, link-local or
/// multicast and is on one of the host's interfaces (`validateNodeIP`); this does not.
pub fn node_address(status: &mut NodeStatus, opts: &NodeStatusOptions) {
    if opts.external_cloud_provider
        && (status.addresses.as_ref().is_some_and(|a| !a.is_empty()) || opts.node_ips.is_empty())
    {
        return;
    }
    let mut addresses: Vec<NodeAddress> = opts
        .node_ips
        .iter()
        .take(2)
        .map(|ip| NodeAddress {
            type_: "InternalIP".to_owned(),
            address: ip.to_string(),
        })
        .collect();
    addresses.push(NodeAddress {
        type_: "Hostname".to_owned(),
        address: opts.hostname.clone(),
    });
    status.addresses = Some(addresses);
}

/// Upstream `RuntimeHandlers`: the runtime's handlers with their features (the field is
/// left out when the runtime reports none, as upstream's empty list is).
pub fn runtime_handlers(status: &mut NodeStatus, handlers: &[RuntimeHandler]) {
    status.runtime_handlers = (!handlers.is_empty()).then(|| {
        handlers
            .iter()
            .map(|h| NodeRuntimeHandler {
                name: Some(h.name.clone()),
                features: Some(NodeRuntimeHandlerFeatures {
                    recursive_read_only_mounts: Some(h.supports_recursive_read_only_mounts),
                    user_namespaces: Some(h.supports_user_namespaces),
                }),
            })
            .collect()
    });
}

/// Upstream `MachineInfo`: capacity (machine + `pods`), allocatable, machine-id,
/// system-uuid and boot-id. Returns `NodeRebooted` when the boot id changed.
pub fn machine_info(
    status: &mut NodeStatus,
    opts: &NodeStatusOptions,
    machine: &MachineInfo,
) -> Option<NodeEvent> {
    let mut capacity = machine.capacity();
    capacity.insert(
        "pods".to_owned(),
        Amount::new(i128::from(opts.max_pods), Format::DecimalSi),
    );
    let reservation = allocatable::reservation(
        &capacity,
        &opts.kube_reserved,
        &opts.system_reserved,
        &opts.eviction_hard,
    );
    let alloc = allocatable::allocatable(&capacity, &reservation);
    let to_list = |m: BTreeMap<String, Amount>| {
        m.into_iter()
            .map(|(k, v)| (k, v.to_quantity()))
            .collect::<BTreeMap<_, _>>()
    };
    // Keep resources others advertise (extended resources), as upstream does.
    let cap_list = status.capacity.get_or_insert_with(BTreeMap::new);
    cap_list.extend(to_list(capacity));
    let alloc_list = status.allocatable.get_or_insert_with(BTreeMap::new);
    alloc_list.extend(to_list(alloc));

    let info = status.node_info.get_or_insert_with(NodeSystemInfo::default);
    info.machine_id.clone_from(&machine.machine_id);
    info.system_uuid.clone_from(&machine.system_uuid);
    let rebooted = !info.boot_id.is_empty() && info.boot_id != machine.boot_id;
    info.boot_id.clone_from(&machine.boot_id);
    rebooted.then(|| {
        (
            EventType::Warning,
            reasons::NODE_REBOOTED.to_owned(),
            format!(
                "Node {} has been rebooted, boot id: {}",
                opts.node_name, machine.boot_id
            ),
        )
    })
}

/// Upstream `VersionInfo`: kernel, OS image, `<runtime>://<version>` (`Unknown` when the
/// runtime does not answer) and the kubelet's version (also `kubeProxyVersion`, as upstream).
pub fn version_info(status: &mut NodeStatus, opts: &NodeStatusOptions, snap: &Snapshot) {
    let info = status.node_info.get_or_insert_with(NodeSystemInfo::default);
    info.kernel_version.clone_from(&snap.machine.kernel_version);
    info.os_image.clone_from(&snap.machine.os_image);
    info.container_runtime_version = match &snap.runtime_version {
        Some(v) => format!("{}://{}", v.runtime_name, v.runtime_version),
        None => match info.container_runtime_version.split_once("://") {
            Some((kind, _)) => format!("{kind}://Unknown"),
            None => "unknown://Unknown".to_owned(),
        },
    };
    info.kubelet_version.clone_from(&opts.kubelet_version);
    info.kube_proxy_version.clone_from(&opts.kubelet_version);
}

/// Upstream `DaemonEndpoints`: the kubelet's port.
pub fn daemon_endpoints(status: &mut NodeStatus, opts: &NodeStatusOptions) {
    status.daemon_endpoints = Some(NodeDaemonEndpoints {
        kubelet_endpoint: Some(DaemonEndpoint {
            port: i32::from(opts.port),
        }),
    });
}

/// Upstream `Images`: at most `max_images` images, each with at most
/// [`MAX_NAMES_PER_IMAGE`] names (digests first); empty when listing failed.
pub fn images(
    status: &mut NodeStatus,
    opts: &NodeStatusOptions,
    images: &Result<Vec<Image>, String>,
) {
    let list = images.as_deref().unwrap_or_default();
    let limit = usize::try_from(opts.max_images).unwrap_or(usize::MAX);
    let out: Vec<ContainerImage> = list
        .iter()
        .take(limit)
        .map(|i| ContainerImage {
            names: Some(
                i.repo_digests
                    .iter()
                    .chain(&i.repo_tags)
                    .take(MAX_NAMES_PER_IMAGE)
                    .cloned()
                    .collect(),
            ),
            size_bytes: Some(i.size_bytes),
        })
        .collect();
    status.images = (!out.is_empty()).then_some(out);
}

/// Upstream `GoRuntime`: `operatingSystem` and `architecture` with Go's names.
pub fn go_runtime(status: &mut NodeStatus) {
    let info = status.node_info.get_or_insert_with(NodeSystemInfo::default);
    std::env::consts::OS.clone_into(&mut info.operating_system);
    go_arch().clone_into(&mut info.architecture);
}

/// This machine's architecture as Go's `GOARCH` names it (the `kubernetes.io/arch` label).
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    }
}

/// Upstream's Ready inputs: runtime, network and node shutdown errors, then missing
/// capacities.
fn ready_errors(status: &NodeStatus, snap: &Snapshot) -> Vec<String> {
    let mut errors: Vec<String> = snap
        .runtime_errors
        .iter()
        .chain(&snap.network_errors)
        .chain(&snap.shutdown_errors)
        .cloned()
        .collect();
    let capacity = status.capacity.as_ref();
    let missing: Vec<&str> = ["cpu", "memory", "pods", "ephemeral-storage"]
        .into_iter()
        .filter(|r| !capacity.is_some_and(|c| c.contains_key(*r)))
        .collect();
    if !missing.is_empty() {
        errors.push(format!(
            "Missing node capacity for resources: {}",
            missing.join(", ")
        ));
    }
    errors
}

#[cfg(test)]
mod tests;
