//! Tests of the predicates, after upstream's `predicate_test.go` (`TestGeneralPredicates`,
//! `TestRejectPodAdmissionBasedOnOSSelector`, `TestRejectPodAdmissionBasedOnOSField`) and the
//! scheduler plugins' fit, affinity, ports and toleration cases.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, PodOS, PodSpec, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::kubelet::admit::PodAdmitAttributes;
use crate::kubelet::node::{FixedNode, standalone_node};
use crate::testing::{container_with_resources, pod_of};

fn node(allocatable: &[(&str, &str)]) -> Node {
    let capacity: BTreeMap<String, Quantity> = allocatable
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect();
    let labels = BTreeMap::from([("zone".to_owned(), "a".to_owned())]);
    standalone_node("machine1", capacity, labels)
}

fn requesting(cpu: &str, memory: &str) -> Pod {
    pod_of(
        vec![container_with_resources(
            "c",
            &[("cpu", cpu), ("memory", memory)],
            &[],
        )],
        vec![],
    )
}

fn admit(pod: &Pod, others: &[Pod], node: Node) -> PodAdmitResult {
    let handler = PredicateAdmitHandler::new(Arc::new(FixedNode::new(node)));
    handler.admit(&PodAdmitAttributes {
        pod,
        other_pods: others,
    })
}

fn spec(pod: &mut Pod) -> &mut PodSpec {
    pod.spec.get_or_insert_with(Default::default)
}

#[test]
fn a_pod_without_requests_fits() {
    let n = node(&[("cpu", "10m"), ("memory", "20"), ("pods", "32")]);
    assert_eq!(
        admit(&pod_of(vec![], vec![]), &[], n),
        PodAdmitResult::admit()
    );
}

#[test]
fn not_enough_cpu_is_out_of_cpu_with_upstreams_message() {
    let n = node(&[("cpu", "1"), ("memory", "1Gi"), ("pods", "110")]);
    assert_eq!(
        admit(&requesting("2", "10Mi"), &[], n),
        PodAdmitResult::reject(
            "OutOfcpu",
            "Node didn't have enough resource: cpu, requested: 2000, used: 0, capacity: 1000"
        )
    );
}

#[test]
fn the_other_pods_requests_are_used() {
    let n = node(&[("cpu", "10"), ("memory", "20"), ("pods", "32")]);
    let others = [requesting("5", "19")];
    assert_eq!(
        admit(&requesting("1", "2"), &others, n.clone()),
        PodAdmitResult::reject(
            "OutOfmemory",
            "Node didn't have enough resource: memory, requested: 2, used: 19, capacity: 20"
        )
    );
    assert_eq!(
        admit(&requesting("5", "1"), &others, n),
        PodAdmitResult::admit()
    );
}

#[test]
fn a_full_node_is_out_of_pods_before_anything_else() {
    let n = node(&[("cpu", "1"), ("memory", "1Gi"), ("pods", "1")]);
    let result = admit(&requesting("2", "10Mi"), &[pod_of(vec![], vec![])], n);
    assert_eq!(
        result,
        PodAdmitResult::reject(
            "OutOfpods",
            "Node didn't have enough resource: pods, requested: 1, used: 1, capacity: 1"
        )
    );
}

#[test]
fn ephemeral_storage_and_extended_resources() {
    let n = node(&[
        ("cpu", "1"),
        ("memory", "1Gi"),
        ("pods", "10"),
        ("ephemeral-storage", "1Gi"),
        ("example.com/gpu", "1"),
    ]);
    let storage = pod_of(
        vec![container_with_resources(
            "c",
            &[("ephemeral-storage", "2Gi")],
            &[],
        )],
        vec![],
    );
    assert_eq!(
        admit(&storage, &[], n.clone()).reason,
        "OutOfephemeral-storage"
    );
    let gpus = pod_of(
        vec![container_with_resources(
            "c",
            &[("example.com/gpu", "2")],
            &[],
        )],
        vec![],
    );
    assert_eq!(
        admit(&gpus, &[], n.clone()),
        PodAdmitResult::reject(
            "OutOfexample.com/gpu",
            "Node didn't have enough resource: example.com/gpu, requested: 2, used: 0, capacity: 1"
        )
    );
    // An extended resource the node does not have is not checked (cluster-level).
    let other = pod_of(
        vec![container_with_resources(
            "c",
            &[("example.com/fpga", "3")],
            &[],
        )],
        vec![],
    );
    assert_eq!(admit(&other, &[], n.clone()), PodAdmitResult::admit());
    // Hugepages are always checked.
    let huge = pod_of(
        vec![container_with_resources(
            "c",
            &[("hugepages-2Mi", "4Mi")],
            &[],
        )],
        vec![],
    );
    assert_eq!(admit(&huge, &[], n).reason, "OutOfhugepages-2Mi");
}

#[test]
fn init_containers_count_as_upstreams_pod_requests() {
    let n = node(&[("cpu", "2"), ("memory", "1Gi"), ("pods", "10")]);
    let init = container_with_resources("init", &[("cpu", "3")], &[]);
    let pod = pod_of(
        vec![container_with_resources("c", &[("cpu", "1")], &[])],
        vec![init],
    );
    assert_eq!(admit(&pod, &[], n).reason, "OutOfcpu");
}

#[test]
fn another_node_name_is_refused() {
    let mut pod = pod_of(vec![], vec![]);
    spec(&mut pod).node_name = Some("machine2".into());
    let n = node(&[("pods", "10")]);
    assert_eq!(
        admit(&pod, &[], n.clone()),
        PodAdmitResult::reject(
            "NodeName",
            "Predicate NodeName failed: node(s) didn't match the requested node name"
        )
    );
    spec(&mut pod).node_name = Some("machine1".into());
    assert_eq!(admit(&pod, &[], n), PodAdmitResult::admit());
}

fn with_host_port(port: i32, ip: Option<&str>, protocol: Option<&str>) -> Pod {
    pod_of(
        vec![Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                container_port: 80,
                host_port: Some(port),
                host_ip: ip.map(str::to_owned),
                protocol: protocol.map(str::to_owned),
                ..Default::default()
            }]),
            ..Default::default()
        }],
        vec![],
    )
}

#[test]
fn a_taken_host_port_is_refused() {
    let n = node(&[("pods", "10")]);
    let others = [with_host_port(123, None, None)];
    assert_eq!(
        admit(&with_host_port(123, None, None), &others, n.clone()),
        PodAdmitResult::reject(
            "NodePorts",
            "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
        )
    );
    // 0.0.0.0 conflicts with every IP; other protocols and ports do not conflict.
    assert_eq!(
        admit(
            &with_host_port(123, Some("127.0.0.1"), None),
            &others,
            n.clone()
        )
        .reason,
        "NodePorts"
    );
    assert!(admit(&with_host_port(123, None, Some("UDP")), &others, n.clone()).admit);
    assert!(admit(&with_host_port(124, None, None), &others, n.clone()).admit);
    let on_ip = [with_host_port(8080, Some("10.0.0.1"), None)];
    assert!(
        admit(
            &with_host_port(8080, Some("10.0.0.2"), None),
            &on_ip,
            n.clone()
        )
        .admit
    );
    assert!(!admit(&with_host_port(8080, Some("10.0.0.1"), None), &on_ip, n).admit);
}

/// A pod whose only host port is on an init container, a sidecar when `restart_policy`
/// is `Always`.
fn with_init_host_port(port: i32, restart_policy: Option<&str>) -> Pod {
    let mut init = with_host_port(port, None, None);
    let mut container = spec(&mut init).containers.remove(0);
    container.restart_policy = restart_policy.map(str::to_owned);
    pod_of(vec![], vec![container])
}

#[test]
fn sidecar_host_ports_count_and_plain_init_containers_do_not() {
    let n = node(&[("pods", "10")]);
    // A sidecar's host port is taken for the pod's life: it conflicts both ways.
    let sidecar = [with_init_host_port(9000, Some("Always"))];
    assert_eq!(
        admit(&with_host_port(9000, None, None), &sidecar, n.clone()).reason,
        "NodePorts"
    );
    let app = [with_host_port(9000, None, None)];
    assert_eq!(
        admit(&with_init_host_port(9000, Some("Always")), &app, n.clone()).reason,
        "NodePorts"
    );
    // A run-to-completion init container's port is not counted (upstream GetHostPorts).
    let init = [with_init_host_port(9000, None)];
    assert!(admit(&with_host_port(9000, None, None), &init, n.clone()).admit);
    assert!(admit(&with_init_host_port(9000, None), &app, n).admit);
}

fn with_required_terms(terms: Vec<NodeSelectorTerm>) -> Pod {
    let mut pod = pod_of(vec![], vec![]);
    spec(&mut pod).affinity = Some(Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: terms,
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    pod
}

fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
    }
}

fn expressions(reqs: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(reqs),
        match_fields: None,
    }
}

#[test]
fn node_selector_and_required_affinity() {
    let n = node(&[("pods", "10")]);
    let mut pod = pod_of(vec![], vec![]);
    spec(&mut pod).node_selector = Some(BTreeMap::from([("zone".into(), "b".into())]));
    assert_eq!(
        admit(&pod, &[], n.clone()),
        PodAdmitResult::reject(
            "NodeAffinity",
            "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
        )
    );
    spec(&mut pod).node_selector = Some(BTreeMap::from([("zone".into(), "a".into())]));
    assert!(admit(&pod, &[], n.clone()).admit);

    let fits = |terms| matches_required_node_affinity(&with_required_terms(terms), &n);
    assert!(fits(vec![expressions(vec![requirement(
        "zone",
        "In",
        &["a", "b"]
    )])]));
    assert!(!fits(vec![expressions(vec![requirement(
        "zone",
        "NotIn",
        &["a"]
    )])]));
    assert!(fits(vec![expressions(vec![requirement(
        "rack",
        "NotIn",
        &["r1"]
    )])]));
    assert!(fits(vec![expressions(vec![requirement(
        "zone",
        "Exists",
        &[]
    )])]));
    assert!(fits(vec![expressions(vec![requirement(
        "rack",
        "DoesNotExist",
        &[]
    )])]));
    assert!(!fits(vec![expressions(vec![requirement(
        "zone",
        "Gt",
        &["1"]
    )])]));
    // Terms are ORed, requirements ANDed; an empty term or no term matches nothing.
    assert!(fits(vec![
        expressions(vec![requirement("zone", "In", &["x"])]),
        expressions(vec![
            requirement("zone", "In", &["a"]),
            requirement("rack", "DoesNotExist", &[]),
        ]),
    ]));
    assert!(!fits(vec![expressions(vec![
        requirement("zone", "In", &["a"]),
        requirement("zone", "DoesNotExist", &[]),
    ])]));
    assert!(!fits(vec![NodeSelectorTerm::default()]));
    assert!(!fits(vec![]));
    let by_name = |op, name| NodeSelectorTerm {
        match_expressions: None,
        match_fields: Some(vec![requirement("metadata.name", op, &[name])]),
    };
    assert!(fits(vec![by_name("In", "machine1")]));
    assert!(!fits(vec![by_name("In", "machine2")]));
    assert!(fits(vec![by_name("NotIn", "machine2")]));
}

#[test]
fn numeric_label_comparisons() {
    let mut n = node(&[("pods", "10")]);
    n.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("cores".into(), "8".into());
    let fits = |op, v| {
        matches_required_node_affinity(
            &with_required_terms(vec![expressions(vec![requirement("cores", op, &[v])])]),
            &n,
        )
    };
    assert!(fits("Gt", "4"));
    assert!(!fits("Gt", "8"));
    assert!(fits("Lt", "9"));
    assert!(!fits("Lt", "x"));
}

fn tainted(effect: &str) -> Node {
    let mut n = node(&[("pods", "10")]);
    n.spec.get_or_insert_with(Default::default).taints = Some(vec![Taint {
        key: "dedicated".into(),
        value: Some("db".into()),
        effect: effect.into(),
        time_added: None,
    }]);
    n
}

#[test]
fn untolerated_no_execute_taints_are_refused_except_for_static_pods() {
    let mut pod = pod_of(vec![], vec![]);
    assert_eq!(
        admit(&pod, &[], tainted("NoExecute")),
        PodAdmitResult::reject(
            "TaintToleration",
            "Predicate TaintToleration failed: node(s) had untolerated taint"
        )
    );
    // The kubelet only cares about NoExecute.
    assert!(admit(&pod, &[], tainted("NoSchedule")).admit);
    for toleration in [
        Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("db".into()),
            effect: Some("NoExecute".into()),
            ..Default::default()
        },
        Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        },
    ] {
        spec(&mut pod).tolerations = Some(vec![toleration]);
        assert!(admit(&pod, &[], tainted("NoExecute")).admit);
    }
    spec(&mut pod).tolerations = Some(vec![Toleration {
        key: Some("dedicated".into()),
        value: Some("web".into()),
        ..Default::default()
    }]);
    assert!(!admit(&pod, &[], tainted("NoExecute")).admit);
    pod.metadata.annotations = Some(BTreeMap::from([(
        crate::config::CONFIG_SOURCE_ANNOTATION.to_owned(),
        "file".to_owned(),
    )]));
    assert!(admit(&pod, &[], tainted("NoExecute")).admit);
}

#[test]
fn the_os_label_and_field_must_be_this_os() {
    let n = node(&[("pods", "10")]);
    let mut pod = pod_of(vec![], vec![]);
    pod.metadata.labels = Some(BTreeMap::from([(
        LABEL_OS.to_owned(),
        "windows".to_owned(),
    )]));
    assert_eq!(
        admit(&pod, &[], n.clone()),
        PodAdmitResult::reject(
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
        )
    );
    pod.metadata.labels = Some(BTreeMap::from([(LABEL_OS.to_owned(), "linux".to_owned())]));
    assert!(admit(&pod, &[], n.clone()).admit);
    spec(&mut pod).os = Some(PodOS {
        name: "windows".into(),
    });
    assert_eq!(admit(&pod, &[], n).reason, "PodOSNotSupported");
}

#[test]
fn every_failure_is_reported_in_upstreams_order() {
    let mut pod = with_host_port(80, None, None);
    spec(&mut pod).node_name = Some("other".into());
    spec(&mut pod).node_selector = Some(BTreeMap::from([("zone".into(), "b".into())]));
    let others = [with_host_port(80, None, None)];
    let failures = general_filter(&pod, &others, &node(&[("pods", "1")]));
    let reasons: Vec<String> = failures.iter().map(Failure::reason).collect();
    assert_eq!(
        reasons,
        ["OutOfpods", "NodeAffinity", "NodeName", "NodePorts"]
    );
}
