//! Pod conditions (upstream `pkg/kubelet/status/generate.go`) and their transition times.

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::{PodCondition, PodReadinessGate, PodStatus as ApiPodStatus};
use kubelet_core::runtime::SandboxState;
use kubelet_core::status::StatusInputs;

fn gated_pod(gates: &[&str]) -> k8s_openapi::api::core::v1::Pod {
    let mut p = pod("Always", &["a"], &[]);
    if let Some(spec) = p.spec.as_mut() {
        spec.readiness_gates = Some(
            gates
                .iter()
                .map(|g| PodReadinessGate {
                    condition_type: (*g).into(),
                })
                .collect(),
        );
    }
    p
}

fn with_conditions(conditions: Vec<PodCondition>) -> ApiPodStatus {
    ApiPodStatus {
        phase: Some("Running".into()),
        conditions: Some(conditions),
        ..Default::default()
    }
}

fn gate(type_: &str, status: &str) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        ..Default::default()
    }
}

#[test]
fn kubelet_conditions_in_upstream_order() {
    let p = pod("Always", &["a"], &[]);
    let s = gen_simple(&p, &runtime(vec![running("a", "id-a", 1)]));
    let types: Vec<&str> = s
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(
        types,
        [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled"
        ]
    );
    assert_eq!(cond(&s, "PodScheduled").0, "True");
}

#[test]
fn ready_to_start_containers_needs_a_ready_sandbox_with_network() {
    let p = pod("Always", &["a"], &[]);
    assert_eq!(
        cond(
            &gen_simple(&p, &runtime(vec![])),
            "PodReadyToStartContainers"
        )
        .0,
        "True"
    );
    assert_eq!(
        cond(
            &gen_simple(&p, &empty_runtime()),
            "PodReadyToStartContainers"
        )
        .0,
        "False"
    );

    let mut not_ready = runtime(vec![]);
    not_ready.sandboxes[0].state = SandboxState::NotReady;
    assert_eq!(
        cond(&gen_simple(&p, &not_ready), "PodReadyToStartContainers").0,
        "False"
    );

    let mut no_ip = runtime(vec![]);
    no_ip.sandboxes[0].ips.clear();
    assert_eq!(
        cond(&gen_simple(&p, &no_ip), "PodReadyToStartContainers").0,
        "False"
    );

    let mut two_ready = runtime(vec![]);
    two_ready.sandboxes.push(two_ready.sandboxes[0].clone());
    assert_eq!(
        cond(&gen_simple(&p, &two_ready), "PodReadyToStartContainers").0,
        "False"
    );
}

#[test]
fn ready_to_start_containers_for_host_network_pod_without_ip() {
    let mut p = pod("Always", &["a"], &[]);
    if let Some(spec) = p.spec.as_mut() {
        spec.host_network = Some(true);
    }
    let mut rt = runtime(vec![]);
    rt.sandboxes[0].ips.clear();
    rt.sandboxes[0].host_network = true;
    assert_eq!(
        cond(&gen_simple(&p, &rt), "PodReadyToStartContainers").0,
        "True"
    );
}

#[test]
fn all_running_is_ready() {
    let p = pod("Always", &["a", "b"], &[]);
    let s = gen_simple(
        &p,
        &runtime(vec![running("a", "id-a", 1), running("b", "id-b", 1)]),
    );
    assert_eq!(cond(&s, "ContainersReady"), ("True", None, None));
    assert_eq!(cond(&s, "Ready"), ("True", None, None));
    assert_eq!(cond(&s, "Initialized"), ("True", None, None));
}

#[test]
fn unready_containers_are_listed() {
    let p = pod("Always", &["a", "b"], &[]);
    let s = gen_simple(&p, &empty_runtime());
    let expected = (
        "False",
        Some("ContainersNotReady"),
        Some("containers with unready status: [a b]"),
    );
    assert_eq!(cond(&s, "ContainersReady"), expected);
    assert_eq!(cond(&s, "Ready"), expected);
}

#[test]
fn exited_container_is_not_ready() {
    let p = pod("Always", &["a", "b"], &[]);
    let s = gen_simple(
        &p,
        &runtime(vec![running("a", "id-a", 1), exited("b", "id-b", 1, 1)]),
    );
    assert_eq!(
        cond(&s, "Ready"),
        (
            "False",
            Some("ContainersNotReady"),
            Some("containers with unready status: [b]")
        )
    );
}

#[test]
fn not_initialized_while_init_containers_run() {
    let p = pod("Always", &["app"], &["i1", "i2"]);
    let s = gen_simple(
        &p,
        &runtime(vec![exited("i1", "id-1", 0, 1), running("i2", "id-2", 20)]),
    );
    assert_eq!(
        cond(&s, "Initialized"),
        (
            "False",
            Some("ContainersNotInitialized"),
            Some("containers with incomplete status: [i2]")
        )
    );
    assert!(
        container_status(&s, "i1").ready,
        "succeeded init container is ready"
    );
    assert!(!container_status(&s, "i2").ready);
}

#[test]
fn succeeded_pod_conditions() {
    let p = pod("Never", &["a"], &["i"]);
    let s = gen_simple(
        &p,
        &runtime(vec![exited("i", "id-i", 0, 1), exited("a", "id-a", 0, 20)]),
    );
    assert_eq!(phase(&s), "Succeeded");
    assert_eq!(
        cond(&s, "Initialized"),
        ("True", Some("PodCompleted"), None)
    );
    assert_eq!(
        cond(&s, "ContainersReady"),
        ("False", Some("PodCompleted"), None)
    );
    assert_eq!(cond(&s, "Ready"), ("False", Some("PodCompleted"), None));
}

#[test]
fn failed_pod_conditions() {
    let p = pod("Never", &["a"], &[]);
    let s = gen_simple(&p, &runtime(vec![exited("a", "id-a", 3, 1)]));
    assert_eq!(phase(&s), "Failed");
    assert_eq!(
        cond(&s, "ContainersReady"),
        ("False", Some("PodFailed"), None)
    );
    assert_eq!(cond(&s, "Ready"), ("False", Some("PodFailed"), None));
}

#[test]
fn readiness_gate_without_condition_is_not_ready() {
    let p = gated_pod(&["example.com/lb"]);
    let s = gen_simple(&p, &runtime(vec![running("a", "id-a", 1)]));
    assert_eq!(cond(&s, "ContainersReady").0, "True");
    assert_eq!(
        cond(&s, "Ready"),
        (
            "False",
            Some("ReadinessGatesNotReady"),
            Some(
                "corresponding condition of pod readiness gate \"example.com/lb\" does not exist."
            )
        )
    );
}

#[test]
fn readiness_gate_false_is_not_ready() {
    let p = gated_pod(&["example.com/lb"]);
    let old = with_conditions(vec![gate("example.com/lb", "False")]);
    let s = generate(
        &p,
        &runtime(vec![running("a", "id-a", 1)]),
        &StatusInputs::default(),
        Some(&old),
    );
    assert_eq!(
        cond(&s, "Ready"),
        (
            "False",
            Some("ReadinessGatesNotReady"),
            Some("the status of pod readiness gate \"example.com/lb\" is not \"True\", but False")
        )
    );
    assert_eq!(
        cond(&s, "example.com/lb").0,
        "False",
        "foreign condition carried over"
    );
}

#[test]
fn readiness_gates_all_true_is_ready() {
    let p = gated_pod(&["example.com/lb", "example.com/dns"]);
    let old = with_conditions(vec![
        gate("example.com/lb", "True"),
        gate("example.com/dns", "True"),
    ]);
    let s = generate(
        &p,
        &runtime(vec![running("a", "id-a", 1)]),
        &StatusInputs::default(),
        Some(&old),
    );
    assert_eq!(cond(&s, "Ready"), ("True", None, None));
}

#[test]
fn readiness_gate_condition_from_api_status_counts() {
    let mut p = gated_pod(&["example.com/lb"]);
    p.status = Some(with_conditions(vec![gate("example.com/lb", "True")]));
    let s = gen_simple(&p, &runtime(vec![running("a", "id-a", 1)]));
    assert_eq!(cond(&s, "Ready").0, "True");
}

#[test]
fn transition_time_is_kept_while_status_is_unchanged() {
    let p = pod("Always", &["a"], &[]);
    let old = with_conditions(vec![
        PodCondition {
            last_transition_time: Some(time(5)),
            ..gate("Ready", "True")
        },
        PodCondition {
            last_transition_time: Some(time(5)),
            ..gate("Initialized", "True")
        },
    ]);
    let rt = runtime(vec![running("a", "id-a", 1)]);
    let s = generate(&p, &rt, &StatusInputs::default(), Some(&old));
    assert_eq!(condition(&s, "Ready").last_transition_time, Some(time(5)));
    assert_eq!(
        condition(&s, "Initialized").last_transition_time,
        Some(time(5))
    );
    assert_eq!(
        condition(&s, "ContainersReady").last_transition_time,
        Some(time(NOW)),
        "new condition"
    );

    // The container dies: Ready flips to False, so its transition time moves to now.
    let rt = runtime(vec![exited("a", "id-a", 1, 1)]);
    let s = generate(&p, &rt, &StatusInputs::default(), Some(&old));
    assert_eq!(cond(&s, "Ready").0, "False");
    assert_eq!(condition(&s, "Ready").last_transition_time, Some(time(NOW)));
    assert_eq!(
        condition(&s, "Initialized").last_transition_time,
        Some(time(5))
    );
}
