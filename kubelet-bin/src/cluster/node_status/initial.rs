//! The Node the kubelet registers, and how it adopts one that already exists (upstream
//! `initialNode`, `updateDefaultLabels` and `reconcileCMADAnnotationWithExistingNode` in
//! `pkg/kubelet/kubelet_node_status.go`; label and taint syntax of `--node-labels` and
//! `--register-with-taints`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};

use super::machine::MachineInfo;
use super::setters::{self, go_arch};
use super::{Error, NodeStatusOptions};

/// `kubernetes.io/hostname`.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// `kubernetes.io/os`.
pub const LABEL_OS: &str = "kubernetes.io/os";
/// `kubernetes.io/arch`.
pub const LABEL_ARCH: &str = "kubernetes.io/arch";
/// The deprecated `beta.kubernetes.io/os` upstream still sets.
pub const LABEL_OS_BETA: &str = "beta.kubernetes.io/os";
/// The deprecated `beta.kubernetes.io/arch` upstream still sets.
pub const LABEL_ARCH_BETA: &str = "beta.kubernetes.io/arch";
/// Upstream `cloudproviderapi.TaintExternalCloudProvider`: the Node waits for a cloud
/// controller manager to initialize it.
pub const TAINT_EXTERNAL_CLOUD_PROVIDER: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// Upstream `cloudproviderapi.AnnotationAlphaProvidedIPAddr`: the `--node-ip` given with an
/// external cloud provider, for it to pick the matching addresses.
pub const ANNOTATION_PROVIDED_IP: &str = "alpha.kubernetes.io/provided-node-ip";
/// Upstream `volutil.ControllerManagedAttachAnnotation`.
pub const ANNOTATION_CONTROLLER_ATTACH: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";

/// The labels upstream reconciles on an existing Node (those of them it sets).
const DEFAULT_LABELS: [&str; 5] = [
    LABEL_HOSTNAME,
    LABEL_OS,
    LABEL_ARCH,
    LABEL_OS_BETA,
    LABEL_ARCH_BETA,
];

/// Upstream `initialNode` without status: name, default labels + `--node-labels`,
/// `--register-with-taints` (then the external cloud provider's taint), the
/// controller-managed attach/detach annotation and, with an external cloud provider and a
/// `--node-ip`, the provided-node-ip annotation.
pub fn initial_node(opts: &NodeStatusOptions) -> Node {
    let os = std::env::consts::OS;
    let mut labels: BTreeMap<String, String> = [
        (LABEL_HOSTNAME, opts.hostname.as_str()),
        (LABEL_OS, os),
        (LABEL_ARCH, go_arch()),
        (LABEL_OS_BETA, os),
        (LABEL_ARCH_BETA, go_arch()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    labels.extend(opts.node_labels.clone());
    let mut annotations = BTreeMap::new();
    if opts.controller_attach_detach {
        annotations.insert(ANNOTATION_CONTROLLER_ATTACH.to_owned(), "true".to_owned());
    }
    // Upstream's `NodeAddress` setter, run by `initialNode`.
    if opts.external_cloud_provider && !opts.node_ips.is_empty() {
        let ips: Vec<String> = opts
            .node_ips
            .iter()
            .take(2)
            .map(ToString::to_string)
            .collect();
        annotations.insert(ANNOTATION_PROVIDED_IP.to_owned(), ips.join(","));
    }
    let annotations = (!annotations.is_empty()).then_some(annotations);
    let mut taints = opts.register_with_taints.clone();
    if opts.external_cloud_provider {
        taints.push(Taint {
            key: TAINT_EXTERNAL_CLOUD_PROVIDER.to_owned(),
            value: Some("true".to_owned()),
            effect: "NoSchedule".to_owned(),
            time_added: None,
        });
    }
    Node {
        metadata: ObjectMeta {
            name: Some(opts.node_name.clone()),
            labels: Some(labels),
            annotations,
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            ..NodeSpec::default()
        }),
        status: None,
    }
}

/// The Node the kubelet admits pods against until it has read its own from the API server
/// (upstream `getNodeAnyWay` falls back to `initialNode`, which runs the status setters):
/// [`initial_node`] (labels with `--node-labels`, `--register-with-taints`) with the status
/// setters that need no runtime: addresses, capacity and allocatable (after reservations and
/// hard eviction thresholds, with `pods` = `maxPods`), machine ids and daemon endpoints. It
/// has no UID, so no mirror pod is owned by it.
pub fn fallback_node(opts: &NodeStatusOptions, machine: &MachineInfo) -> Node {
    let mut node = initial_node(opts);
    let status = node.status.get_or_insert_with(NodeStatus::default);
    setters::node_address(status, opts);
    // A fresh node has no boot id to compare, so there is no reboot event to drop.
    let _ = setters::machine_info(status, opts, machine);
    setters::daemon_endpoints(status, opts);
    node
}

/// What adopting `existing` changes, as a JSON merge patch of its metadata; `None` when
/// nothing. Default labels follow `initial` (upstream `updateDefaultLabels`), so do
/// `--node-labels` (added here: upstream applies them only at creation), and the attach/detach
/// annotation is set or removed to match (`reconcileCMADAnnotationWithExistingNode`).
/// Taints are not reconciled, as upstream.
pub fn adopt_patch(initial: &Node, existing: &Node, opts: &NodeStatusOptions) -> Option<Value> {
    let empty = BTreeMap::new();
    let want = initial.metadata.labels.as_ref().unwrap_or(&empty);
    let have = existing.metadata.labels.as_ref().unwrap_or(&empty);
    let mut labels = Map::new();
    for (key, value) in want {
        let managed = DEFAULT_LABELS.contains(&key.as_str()) || opts.node_labels.contains_key(key);
        if managed && have.get(key) != Some(value) {
            labels.insert(key.clone(), json!(value));
        }
    }
    let have_annotation = existing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_CONTROLLER_ATTACH));
    let mut annotations = Map::new();
    match (
        opts.controller_attach_detach,
        have_annotation.map(String::as_str),
    ) {
        (true, Some("true")) | (false, None) => {}
        (true, _) => {
            annotations.insert(ANNOTATION_CONTROLLER_ATTACH.to_owned(), json!("true"));
        }
        (false, Some(_)) => {
            annotations.insert(ANNOTATION_CONTROLLER_ATTACH.to_owned(), Value::Null);
        }
    }
    if labels.is_empty() && annotations.is_empty() {
        return None;
    }
    let mut metadata = Map::new();
    if !labels.is_empty() {
        metadata.insert("labels".to_owned(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".to_owned(), Value::Object(annotations));
    }
    Some(json!({ "metadata": metadata }))
}

/// Parses `--node-labels` (`key=value,key2=value2`).
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, Error> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
            _ => Err(Error::InvalidLabel(pair.to_owned())),
        })
        .collect()
}

/// Parses `--register-with-taints` (`key=value:Effect,key:Effect`).
pub fn parse_taints(s: &str) -> Result<Vec<Taint>, Error> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(parse_taint)
        .collect()
}

fn parse_taint(spec: &str) -> Result<Taint, Error> {
    let invalid = || Error::InvalidTaint(spec.to_owned());
    let (key_value, effect) = spec.rsplit_once(':').ok_or_else(invalid)?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(invalid());
    }
    let (key, value) = match key_value.split_once('=') {
        Some((k, v)) => (k, Some(v.to_owned())),
        None => (key_value, None),
    };
    if key.is_empty() {
        return Err(invalid());
    }
    Ok(Taint {
        key: key.to_owned(),
        value,
        effect: effect.to_owned(),
        time_added: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> NodeStatusOptions {
        let mut o = NodeStatusOptions::new("node-a");
        o.node_labels = parse_labels("role=edge, zone=z1").unwrap_or_default();
        o.register_with_taints = parse_taints("dedicated=edge:NoSchedule").unwrap_or_default();
        o
    }

    #[test]
    fn the_initial_node_has_upstream_labels_taints_and_annotation() {
        let node = initial_node(&opts());
        let labels = node.metadata.labels.unwrap_or_default();
        assert_eq!(labels[LABEL_HOSTNAME], "node-a");
        assert_eq!(labels[LABEL_OS], "linux");
        assert_eq!(labels[LABEL_ARCH], go_arch());
        assert_eq!(labels[LABEL_OS_BETA], "linux");
        assert_eq!(labels["role"], "edge");
        let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
        assert_eq!(taints[0].key, "dedicated");
        assert_eq!(taints[0].value.as_deref(), Some("edge"));
        assert_eq!(taints[0].effect, "NoSchedule");
        let annotations = node.metadata.annotations.unwrap_or_default();
        assert_eq!(annotations[ANNOTATION_CONTROLLER_ATTACH], "true");
    }

    #[test]
    fn an_external_cloud_provider_adds_its_taint_and_the_provided_ip() {
        let mut o = opts();
        o.external_cloud_provider = true;
        let node = initial_node(&o);
        assert_eq!(
            node.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_PROVIDED_IP)),
            None
        );
        let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
        let keys: Vec<_> = taints.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, ["dedicated", TAINT_EXTERNAL_CLOUD_PROVIDER]);
        assert_eq!(taints[1].value.as_deref(), Some("true"));
        assert_eq!(taints[1].effect, "NoSchedule");
        o.node_ips = vec![
            "10.0.0.5"
                .parse()
                .unwrap_or(std::net::Ipv4Addr::LOCALHOST.into()),
            "fd00::5"
                .parse()
                .unwrap_or(std::net::Ipv4Addr::LOCALHOST.into()),
        ];
        let annotations = initial_node(&o).metadata.annotations.unwrap_or_default();
        assert_eq!(annotations[ANNOTATION_PROVIDED_IP], "10.0.0.5,fd00::5");
        // Without the provider: no taint of its own.
        let taints = initial_node(&opts())
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default();
        assert_eq!(taints.len(), 1);
    }

    #[test]
    fn adopting_merges_managed_labels_and_keeps_the_rest() {
        let o = opts();
        let initial = initial_node(&o);
        let mut existing = initial.clone();
        assert_eq!(adopt_patch(&initial, &existing, &o), None);
        let labels = existing.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert(LABEL_HOSTNAME.to_owned(), "old".to_owned());
        labels.remove("role");
        labels.insert("owner".to_owned(), "ops".to_owned());
        existing.metadata.annotations = None;
        let patch = adopt_patch(&initial, &existing, &o);
        assert_eq!(
            patch,
            Some(json!({"metadata": {
                "labels": {LABEL_HOSTNAME: "node-a", "role": "edge"},
                "annotations": {ANNOTATION_CONTROLLER_ATTACH: "true"},
            }}))
        );
    }

    #[test]
    fn the_fallback_node_has_labels_taints_and_allocatable() {
        let mut o = opts();
        o.max_pods = 7;
        o.kube_reserved = "cpu=500m".parse().unwrap_or_default();
        let machine = MachineInfo {
            num_cores: 2,
            memory_bytes: 4 << 30,
            ..MachineInfo::default()
        };
        let node = fallback_node(&o, &machine);
        assert_eq!(node.metadata.name.as_deref(), Some("node-a"));
        assert_eq!(node.metadata.uid, None);
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["role"], "edge");
        assert_eq!(labels[LABEL_HOSTNAME], "node-a");
        let taints = node.spec.clone().and_then(|s| s.taints).unwrap_or_default();
        assert_eq!(taints.len(), 1);
        let status = node.status.unwrap_or_default();
        let capacity = status.capacity.unwrap_or_default();
        let allocatable = status.allocatable.unwrap_or_default();
        assert_eq!(capacity["cpu"].0, "2");
        assert_eq!(allocatable["cpu"].0, "1500m");
        assert_eq!(allocatable["pods"].0, "7");
        assert!(allocatable.contains_key("memory"));
    }

    #[test]
    fn bad_labels_and_taints_are_errors() {
        assert!(parse_labels("novalue").is_err());
        assert!(parse_labels("=v").is_err());
        assert!(parse_taints("k=v").is_err());
        assert!(parse_taints("k=v:Sometimes").is_err());
        assert!(parse_taints(":NoExecute").is_err());
        assert_eq!(
            parse_taints("k:NoExecute").ok().map(|t| t[0].value.clone()),
            Some(None)
        );
    }
}
