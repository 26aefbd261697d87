//! The kubelet-owned pod conditions (upstream `pkg/kubelet/status/generate.go`).

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};
use kubelet_core::PodExt;
use kubelet_core::runtime::PodStatus;

use crate::containers::{is_restartable_init_container, is_running, is_terminated};
use crate::phase::{FAILED, SUCCEEDED};
use crate::reason;

/// `PodScheduled`.
pub const POD_SCHEDULED: &str = "PodScheduled";
/// `PodReadyToStartContainers`.
pub const POD_READY_TO_START_CONTAINERS: &str = "PodReadyToStartContainers";
/// `Initialized`.
pub const INITIALIZED: &str = "Initialized";
/// `Ready`.
pub const READY: &str = "Ready";
/// `ContainersReady`.
pub const CONTAINERS_READY: &str = "ContainersReady";
/// `DisruptionTarget` (set by eviction, carried over by the kubelet).
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// Condition types the kubelet owns (upstream `kubetypes.PodConditionByKubelet`): statuses of
/// these are always generated, never copied from the API.
pub const OWNED_BY_KUBELET: [&str; 7] = [
    POD_SCHEDULED,
    READY,
    INITIALIZED,
    CONTAINERS_READY,
    POD_READY_TO_START_CONTAINERS,
    "PodResizePending",
    "PodResizeInProgress",
];

/// `True` or `False`.
fn truth(b: bool) -> String {
    if b { "True" } else { "False" }.to_owned()
}

fn condition(
    type_: &str,
    status: bool,
    reason: Option<&str>,
    message: Option<String>,
) -> PodCondition {
    PodCondition {
        type_: type_.to_owned(),
        status: truth(status),
        reason: reason.map(str::to_owned),
        message,
        ..Default::default()
    }
}

/// Go's `fmt.Sprintf("%s", []string{...})`: `[a b]`.
fn go_list(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

fn find<'a>(statuses: &'a [ContainerStatus], name: &str) -> Option<&'a ContainerStatus> {
    statuses.iter().find(|s| s.name == name)
}

/// `PodReadyToStartContainers`: `True` when the pod has exactly one ready sandbox with its
/// network set up, i.e. no new sandbox is needed (upstream `PodSandboxChanged` is false).
pub fn ready_to_start_containers(pod: &Pod, runtime: &PodStatus) -> PodCondition {
    condition(
        POD_READY_TO_START_CONTAINERS,
        !kubelet_core::kuberuntime::actions::pod_sandbox_changed(pod, runtime).0,
        None,
        None,
    )
}

/// `Initialized`: every regular init container succeeded and every sidecar started
/// (upstream `GeneratePodInitializedCondition`).
pub fn initialized(pod: &Pod, statuses: &[ContainerStatus], phase: &str) -> PodCondition {
    let mut unknown = Vec::new();
    let mut incomplete = Vec::new();
    for c in pod.init_containers() {
        let Some(status) = find(statuses, &c.name) else {
            unknown.push(c.name.as_str());
            continue;
        };
        let done = if is_restartable_init_container(c) {
            status.started == Some(true)
        } else {
            status.ready
        };
        if !done {
            incomplete.push(c.name.as_str());
        }
    }
    if phase == SUCCEEDED && unknown.is_empty() {
        return condition(INITIALIZED, true, Some(reason::POD_COMPLETED), None);
    }
    if has_any_regular_container_started(pod, statuses) {
        return condition(INITIALIZED, true, None, None);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!(
            "containers with unknown status: {}",
            go_list(&unknown)
        ));
    }
    if !incomplete.is_empty() {
        messages.push(format!(
            "containers with incomplete status: {}",
            go_list(&incomplete)
        ));
    }
    if messages.is_empty() {
        condition(INITIALIZED, true, None, None)
    } else {
        condition(
            INITIALIZED,
            false,
            Some(reason::CONTAINERS_NOT_INITIALIZED),
            Some(messages.join(", ")),
        )
    }
}

/// Upstream `HasAnyRegularContainerStarted`: a regular container is running or terminated.
fn has_any_regular_container_started(pod: &Pod, statuses: &[ContainerStatus]) -> bool {
    pod.containers()
        .iter()
        .any(|c| find(statuses, &c.name).is_some_and(|s| is_running(s) || is_terminated(s)))
}

/// `ContainersReady`: every app container and sidecar is ready (upstream
/// `GenerateContainersReadyCondition`).
pub fn containers_ready(pod: &Pod, statuses: &[ContainerStatus], phase: &str) -> PodCondition {
    let mut unknown = Vec::new();
    let mut unready = Vec::new();
    let sidecars = pod
        .init_containers()
        .iter()
        .filter(|c| is_restartable_init_container(c));
    for c in sidecars.chain(pod.containers()) {
        match find(statuses, &c.name) {
            Some(s) if !s.ready => unready.push(c.name.as_str()),
            Some(_) => {}
            None => unknown.push(c.name.as_str()),
        }
    }
    if (phase == SUCCEEDED && unknown.is_empty()) || phase == FAILED {
        return terminal_phase_condition(CONTAINERS_READY, phase);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!(
            "containers with unknown status: {}",
            go_list(&unknown)
        ));
    }
    if !unready.is_empty() {
        messages.push(format!(
            "containers with unready status: {}",
            go_list(&unready)
        ));
    }
    if messages.is_empty() {
        condition(CONTAINERS_READY, true, None, None)
    } else {
        condition(
            CONTAINERS_READY,
            false,
            Some(reason::CONTAINERS_NOT_READY),
            Some(messages.join(", ")),
        )
    }
}

/// `Ready`: `ContainersReady` and every readiness gate's condition `True` in `conditions`
/// (upstream `GeneratePodReadyCondition`).
pub fn pod_ready(
    pod: &Pod,
    conditions: &[PodCondition],
    statuses: &[ContainerStatus],
    phase: &str,
) -> PodCondition {
    let containers = containers_ready(pod, statuses, phase);
    if containers.status != "True" {
        return PodCondition {
            type_: READY.to_owned(),
            ..containers
        };
    }
    let gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_deref())
        .unwrap_or_default();
    let mut messages = Vec::new();
    for gate in gates {
        match conditions.iter().find(|c| c.type_ == gate.condition_type) {
            None => messages.push(format!(
                "corresponding condition of pod readiness gate {:?} does not exist.",
                gate.condition_type
            )),
            Some(c) if c.status != "True" => messages.push(format!(
                "the status of pod readiness gate {:?} is not \"True\", but {}",
                gate.condition_type, c.status
            )),
            Some(_) => {}
        }
    }
    if messages.is_empty() {
        condition(READY, true, None, None)
    } else {
        condition(
            READY,
            false,
            Some(reason::READINESS_GATES_NOT_READY),
            Some(messages.join(", ")),
        )
    }
}

/// `Ready`/`ContainersReady` of a pod in a terminal phase: `False` with reason `PodCompleted`
/// or `PodFailed`.
pub(crate) fn terminal_phase_condition(type_: &str, phase: &str) -> PodCondition {
    let reason = match phase {
        FAILED => Some(reason::POD_FAILED),
        SUCCEEDED => Some(reason::POD_COMPLETED),
        _ => None,
    };
    condition(type_, false, reason, None)
}
