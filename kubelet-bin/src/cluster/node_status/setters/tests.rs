use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::jiff::Timestamp;
use kubelet_core::runtime::Version;

use super::*;

fn machine() -> MachineInfo {
    MachineInfo {
        num_cores: 4,
        memory_bytes: 16_393_268 * 1024,
        hugepages: BTreeMap::from([(2 << 20, 0)]),
        root_fs_bytes: Some(100 << 30),
        machine_id: "mid".to_owned(),
        system_uuid: "SUUID".to_owned(),
        boot_id: "boot-2".to_owned(),
        kernel_version: "6.1.0".to_owned(),
        os_image: "Debian GNU/Linux 12 (bookworm)".to_owned(),
    }
}

fn snapshot() -> Snapshot {
    Snapshot {
        now: Timestamp::from_second(1_700_000_000).unwrap_or(Timestamp::UNIX_EPOCH),
        machine: machine(),
        runtime_version: Some(Version {
            runtime_name: "containerd".to_owned(),
            runtime_version: "1.6.20".to_owned(),
            runtime_api_version: "v1".to_owned(),
        }),
        images: Ok(Vec::new()),
        runtime_errors: Vec::new(),
        network_errors: Vec::new(),
        memory_pressure: false,
        disk_pressure: false,
        pid_pressure: false,
        runtime_handlers: Vec::new(),
        shutdown_errors: Vec::new(),
    }
}

fn opts() -> NodeStatusOptions {
    let mut o = NodeStatusOptions::new("node-a");
    o.node_ips = vec![
        "10.0.0.5"
            .parse()
            .unwrap_or(std::net::Ipv4Addr::LOCALHOST.into()),
    ];
    o.kube_reserved = "cpu=100m,memory=100Mi".parse().unwrap_or_default();
    o
}

fn printed(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> BTreeMap<String, String> {
    list.into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

#[test]
fn a_full_status_as_upstream_writes_it() {
    let mut node = Node::default();
    let events = set_node_status(&mut node, &opts(), &snapshot());
    let status = node.status.unwrap_or_default();

    let cap = printed(status.capacity.as_ref());
    assert_eq!(cap["cpu"], "4");
    assert_eq!(cap["memory"], "16393268Ki");
    assert_eq!(cap["pods"], "110");
    assert_eq!(cap["ephemeral-storage"], "100Gi");
    assert_eq!(cap["hugepages-2Mi"], "0");
    let alloc = printed(status.allocatable.as_ref());
    assert_eq!(alloc["cpu"], "3900m");
    // 16393268Ki − 100Mi kube-reserved − 100Mi memory.available.
    assert_eq!(alloc["memory"], "16188468Ki");
    assert_eq!(alloc["pods"], "110");

    let info = status.node_info.unwrap_or_default();
    assert_eq!(info.container_runtime_version, "containerd://1.6.20");
    assert_eq!(info.kubelet_version, "v1.36.0");
    assert_eq!(info.machine_id, "mid");
    assert_eq!(info.system_uuid, "SUUID");
    assert_eq!(info.boot_id, "boot-2");
    assert_eq!(info.kernel_version, "6.1.0");
    assert_eq!(info.os_image, "Debian GNU/Linux 12 (bookworm)");
    assert_eq!(info.operating_system, "linux");
    assert_eq!(info.architecture, go_arch());

    let addresses: Vec<_> = status
        .addresses
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    assert_eq!(
        addresses,
        [
            ("InternalIP".to_owned(), "10.0.0.5".to_owned()),
            ("Hostname".to_owned(), "node-a".to_owned())
        ]
    );
    let port = status
        .daemon_endpoints
        .and_then(|d| d.kubelet_endpoint)
        .map(|e| e.port);
    assert_eq!(port, Some(10250));

    let conditions = status.conditions.unwrap_or_default();
    let types: Vec<_> = conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(
        types,
        ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
    );
    assert_eq!(conditions[3].status, "True");
    let reasons: Vec<_> = events.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "NodeHasSufficientMemory",
            "NodeHasNoDiskPressure",
            "NodeHasSufficientPID"
        ]
    );
    assert_eq!(
        events[0].2,
        "Node node-a status is now: NodeHasSufficientMemory"
    );
}

#[test]
fn not_ready_lists_runtime_network_and_capacity_errors() {
    let mut snap = snapshot();
    snap.runtime_errors = vec!["container runtime is down".to_owned()];
    snap.network_errors = vec!["container runtime network not ready: cni".to_owned()];
    snap.machine.root_fs_bytes = None;
    snap.runtime_version = None;
    let mut node = Node::default();
    set_node_status(&mut node, &opts(), &snap);
    let status = node.status.unwrap_or_default();
    let ready = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap_or_default();
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some(
            "container runtime is down,container runtime network not ready: cni,\
             Missing node capacity for resources: ephemeral-storage"
        )
    );
    let info = status.node_info.unwrap_or_default();
    assert_eq!(info.container_runtime_version, "unknown://Unknown");
}

#[test]
fn a_new_boot_id_is_a_reboot_event_and_images_are_truncated() {
    let mut node = Node {
        status: Some(NodeStatus {
            node_info: Some(NodeSystemInfo {
                boot_id: "boot-1".to_owned(),
                container_runtime_version: "containerd://1.6.19".to_owned(),
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }),
        ..Node::default()
    };
    let mut snap = snapshot();
    snap.runtime_version = None;
    snap.images = Ok((0..3)
        .map(|i| Image {
            repo_digests: vec![format!("img{i}@sha256:x")],
            repo_tags: (0..6).map(|t| format!("img{i}:{t}")).collect(),
            size_bytes: 100 - i,
        })
        .collect());
    let mut o = opts();
    o.max_images = 2;
    let events = set_node_status(&mut node, &o, &snap);
    assert_eq!(events[0].0, EventType::Warning);
    assert_eq!(events[0].1, "Rebooted");
    assert_eq!(
        events[0].2,
        "Node node-a has been rebooted, boot id: boot-2"
    );
    let status = node.status.unwrap_or_default();
    let images = status.images.unwrap_or_default();
    assert_eq!(images.len(), 2);
    let names = images[0].names.clone().unwrap_or_default();
    assert_eq!(names.len(), MAX_NAMES_PER_IMAGE);
    assert_eq!(names[0], "img0@sha256:x");
    let info = status.node_info.unwrap_or_default();
    assert_eq!(info.container_runtime_version, "containerd://Unknown");
}

#[test]
fn runtime_handlers_are_reported_with_their_features_and_left_out_when_none() {
    let mut node = Node::default();
    let mut snap = snapshot();
    set_node_status(&mut node, &opts(), &snap);
    assert_eq!(
        node.status
            .as_ref()
            .and_then(|s| s.runtime_handlers.clone()),
        None
    );
    snap.runtime_handlers = vec![
        RuntimeHandler {
            name: String::new(),
            supports_recursive_read_only_mounts: true,
            supports_user_namespaces: false,
        },
        RuntimeHandler {
            name: "kata".to_owned(),
            supports_recursive_read_only_mounts: false,
            supports_user_namespaces: true,
        },
    ];
    set_node_status(&mut node, &opts(), &snap);
    let json =
        serde_json::to_value(node.status.as_ref().map(|s| &s.runtime_handlers)).unwrap_or_default();
    assert_eq!(
        json,
        serde_json::json!([
            {"name": "", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}},
            {"name": "kata", "features": {"recursiveReadOnlyMounts": false, "userNamespaces": true}},
        ])
    );
    snap.runtime_handlers.clear();
    set_node_status(&mut node, &opts(), &snap);
    assert_eq!(
        node.status
            .as_ref()
            .and_then(|s| s.runtime_handlers.clone()),
        None
    );
}

fn ip(s: &str) -> std::net::IpAddr {
    s.parse().unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into())
}

fn addresses(status: &NodeStatus) -> Vec<(String, String)> {
    status
        .addresses
        .iter()
        .flatten()
        .map(|a| (a.type_.clone(), a.address.clone()))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(t, a)| ((*t).to_owned(), (*a).to_owned()))
        .collect()
}

#[test]
fn dual_stack_and_ipv6_node_ips_are_internal_addresses_primary_first() {
    let mut o = opts();
    o.node_ips = vec![ip("fd00::5"), ip("10.0.0.5")];
    let mut status = NodeStatus::default();
    node_address(&mut status, &o);
    assert_eq!(
        addresses(&status),
        pairs(&[
            ("InternalIP", "fd00::5"),
            ("InternalIP", "10.0.0.5"),
            ("Hostname", "node-a")
        ])
    );
    o.node_ips = vec![ip("2001:db8::7")];
    node_address(&mut status, &o);
    assert_eq!(
        addresses(&status),
        pairs(&[("InternalIP", "2001:db8::7"), ("Hostname", "node-a")])
    );
}

#[test]
fn an_external_cloud_provider_owns_the_addresses_once_set() {
    let mut o = opts();
    o.external_cloud_provider = true;
    o.node_ips.clear();
    // No --node-ip: nothing until the provider sets them.
    let mut status = NodeStatus::default();
    node_address(&mut status, &o);
    assert_eq!(status.addresses, None);
    // With --node-ip: those, until the provider sets its own.
    o.node_ips = vec![ip("10.0.0.5")];
    node_address(&mut status, &o);
    assert_eq!(
        addresses(&status),
        pairs(&[("InternalIP", "10.0.0.5"), ("Hostname", "node-a")])
    );
    let provided = pairs(&[
        ("InternalIP", "10.0.0.5"),
        ("ExternalIP", "203.0.113.9"),
        ("Hostname", "node-a.cloud"),
    ]);
    status.addresses = Some(
        provided
            .iter()
            .map(|(t, a)| k8s_openapi::api::core::v1::NodeAddress {
                type_: t.clone(),
                address: a.clone(),
            })
            .collect(),
    );
    node_address(&mut status, &o);
    assert_eq!(addresses(&status), provided);
}

/// Upstream's `nodeShutdownManagerErrorsFunc`: during a graceful node shutdown the Node is
/// `NotReady` with the shutdown manager's error alone as the message.
#[test]
fn a_node_shutting_down_is_not_ready() {
    let mut snap = snapshot();
    snap.shutdown_errors = vec!["node is shutting down".to_owned()];
    let mut node = Node::default();
    set_node_status(&mut node, &opts(), &snap);
    let ready = node
        .status
        .unwrap_or_default()
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap_or_default();
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
    assert_eq!(ready.message.as_deref(), Some("node is shutting down"));
}
