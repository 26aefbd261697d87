//! What to do to bring a pod to its spec: [`compute_pod_actions`], a pure function of the pod
//! and the runtime's [`PodStatus`], plus the crash-loop backoff check done before each start.
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/kuberuntime_manager.go` (`podActions`,
//! `computePodActions`, `doBackOff`), `util/util.go` (`PodSandboxChanged`) and
//! `kuberuntime_container.go` (`computeInitContainerActions`, `isInitContainerFailed`): init
//! containers run one at a time, each must exit 0 before the next starts; sidecars
//! (restartable init containers) start in order, gate the next one on their startup probe,
//! and are restarted whenever they exit; then the app containers start. Ephemeral containers
//! start once, in a running sandbox, even before initialization completed, and are never
//! restarted. In-place resize is not handled.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use k8s_openapi::api::core::v1::{Container, Pod, Probe};

use super::reasons::CRASH_LOOP_BACK_OFF;
use crate::backoff::Backoff;
use crate::container::{
    hash_container, is_restartable_init_container, should_container_be_restarted,
};
use crate::pod::PodExt;
use crate::probe::{ProbeResult, Results};
use crate::runtime::{
    ContainerState, ContainerStatus, ContainerSyncError, PodStatus, SandboxState,
};
use crate::time::go_duration;

/// A running container that must be stopped, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerToKill {
    /// Runtime ID.
    pub id: String,
    /// Container name.
    pub name: String,
    /// Why it is killed (for logs and events).
    pub message: String,
    /// Grace period to use instead of the pod's (a failed probe's
    /// `terminationGracePeriodSeconds`).
    pub grace_period_seconds: Option<i64>,
}

/// The steps [`super::KubeRuntimeManager`]'s `sync_pod` takes for a pod (upstream `podActions`).
#[doc(alias = "podActions")]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Stop every running container and the sandbox first.
    pub kill_pod: bool,
    /// Create a new sandbox (after killing the pod); init containers are then started again
    /// from the first one.
    pub create_sandbox: bool,
    /// The existing sandbox to start containers in (when not creating one).
    pub sandbox_id: Option<String>,
    /// Attempt number of the sandbox to create.
    pub attempt: u32,
    /// Indexes in `spec.initContainers` of the init containers to start, in spec order: the
    /// next regular init container and sidecars that must be (re)started.
    pub init_containers_to_start: Vec<usize>,
    /// Indexes in `spec.containers` of the app containers to start.
    pub containers_to_start: Vec<usize>,
    /// Running containers to stop (when not killing the whole pod).
    pub containers_to_kill: Vec<ContainerToKill>,
    /// Indexes in `spec.ephemeralContainers` of the ephemeral containers to start: those
    /// the runtime has never seen (upstream `EphemeralContainersToStart`).
    pub ephemeral_containers_to_start: Vec<usize>,
}

/// Whether the pod needs a new sandbox (upstream `PodSandboxChanged`): returns
/// `(changed, attempt, existing sandbox id)`. A new sandbox is needed when there is none,
/// when more than one is ready, when the newest is not ready, when its network namespace mode
/// no longer matches `hostNetwork`, or when a pod-network sandbox has no IP.
#[doc(alias = "PodSandboxChanged")]
pub fn pod_sandbox_changed(pod: &Pod, status: &PodStatus) -> (bool, u32, Option<String>) {
    let Some(newest) = status.sandboxes.first() else {
        return (true, 0, None);
    };
    let ready = status
        .sandboxes
        .iter()
        .filter(|s| s.state == SandboxState::Ready)
        .count();
    let max_attempt = status
        .sandboxes
        .iter()
        .map(|s| s.attempt)
        .max()
        .unwrap_or(0);
    let id = Some(newest.id.clone());
    if ready > 1 || newest.state != SandboxState::Ready {
        return (true, max_attempt + 1, id);
    }
    if newest.host_network != pod.host_network() {
        return (true, max_attempt + 1, None);
    }
    if !pod.host_network() && newest.ips.is_empty() {
        return (true, max_attempt + 1, id);
    }
    (false, max_attempt, id)
}

/// `true` when an init container instance counts as failed (upstream `isInitContainerFailed`).
pub fn is_init_container_failed(s: &ContainerStatus) -> bool {
    s.reason == "OOMKilled"
        || (s.state == ContainerState::Exited && s.exit_code != 0)
        || s.state == ContainerState::Unknown
}

/// `true` when a regular container exists in the runtime, which means initialization
/// completed (upstream `hasAnyRegularContainerCreated`).
pub fn has_any_regular_container_created(pod: &Pod, status: &PodStatus) -> bool {
    pod.containers().iter().any(|c| {
        status.container(&c.name).is_some_and(|s| {
            matches!(
                s.state,
                ContainerState::Created | ContainerState::Running | ContainerState::Exited
            )
        })
    })
}

fn unknown_kill(s: &ContainerStatus) -> ContainerToKill {
    ContainerToKill {
        id: s.id.clone(),
        name: s.name.clone(),
        message: "Init container is in \"Unknown\" state, try killing it before restart".into(),
        grace_period_seconds: None,
    }
}

/// Sets the init-container part of `actions` (upstream `computeInitContainerActions`, the
/// sidecar-aware path): starts the first init container not yet started, starts the next one
/// once the previous exited 0 (or, for a sidecar, once it runs and its startup probe, if any,
/// succeeded), restarts sidecars that exited or failed their startup or liveness probe, and
/// kills the pod when a regular init container failed under `restartPolicy: Never`.
///
/// Returns `true` when the pod has initialized, so the app containers may be handled.
#[doc(alias = "computeInitContainerActions")]
pub fn compute_init_container_actions(
    pod: &Pod,
    status: &PodStatus,
    probes: Option<&Results>,
    actions: &mut PodActions,
) -> bool {
    let inits = pod.init_containers();
    if inits.is_empty() {
        return true;
    }
    // A created or running app container means initialization completed in the past, even
    // if the init containers have since been removed (exited ones do not count: they may
    // belong to a previous sandbox).
    let mut initialized = pod.containers().iter().any(|c| {
        status
            .container(&c.name)
            .is_some_and(|s| matches!(s.state, ContainerState::Created | ContainerState::Running))
    });
    let mut previously_initialized = initialized;
    let restart_on_failure = restarts_on_failure(pod);
    let mut to_start: Vec<usize> = Vec::new();

    // Newest to oldest: completed init containers may have been removed, so the last one
    // seen decides what comes next.
    for (i, c) in inits.iter().enumerate().rev() {
        let sidecar = is_restartable_init_container(c);
        let Some(s) = status.container(&c.name) else {
            if previously_initialized && sidecar {
                to_start.push(i);
            }
            continue;
        };
        if previously_initialized && !sidecar {
            continue;
        }
        match s.state {
            ContainerState::Created => to_start.push(i),
            ContainerState::Running if sidecar => {
                if c.startup_probe.is_some() {
                    match probes.map(|p| p.startup.get(&s.id)) {
                        // No probe manager: nothing can gate the start.
                        None | Some(Some(ProbeResult::Success)) => {}
                        Some(Some(ProbeResult::Failure)) => {
                            actions.containers_to_kill.push(ContainerToKill {
                                id: s.id.clone(),
                                name: c.name.clone(),
                                message: format!("Init container {} failed startup probe", c.name),
                                grace_period_seconds: c
                                    .startup_probe
                                    .as_ref()
                                    .and_then(|p| p.termination_grace_period_seconds),
                            });
                            to_start.push(i);
                            previously_initialized = true;
                            continue;
                        }
                        // Not probed yet (or still unknown): wait for it.
                        Some(_) => {
                            previously_initialized = true;
                            continue;
                        }
                    }
                }
                if i + 1 == inits.len() {
                    initialized = true;
                } else if !previously_initialized {
                    to_start.push(i + 1);
                }
                if s.hash != hash_container(c) {
                    actions.containers_to_kill.push(ContainerToKill {
                        id: s.id.clone(),
                        name: c.name.clone(),
                        message: format!("Init container {} definition changed", c.name),
                        grace_period_seconds: None,
                    });
                    to_start.push(i);
                } else if probes.is_some_and(|p| {
                    c.liveness_probe.is_some()
                        && p.liveness.get(&s.id) == Some(ProbeResult::Failure)
                }) {
                    actions.containers_to_kill.push(ContainerToKill {
                        id: s.id.clone(),
                        name: c.name.clone(),
                        message: format!("Init container {} failed liveness probe", c.name),
                        grace_period_seconds: c
                            .liveness_probe
                            .as_ref()
                            .and_then(|p| p.termination_grace_period_seconds),
                    });
                    to_start.push(i);
                }
            }
            // A regular init container still running: wait for it to finish.
            ContainerState::Running => {}
            ContainerState::Exited if sidecar => to_start.push(i),
            ContainerState::Exited => {
                if is_init_container_failed(s) {
                    if !restart_on_failure {
                        actions.kill_pod = true;
                        actions.init_containers_to_start.clear();
                        return false;
                    }
                    to_start.push(i);
                } else if i + 1 == inits.len() {
                    initialized = true;
                } else {
                    to_start.push(i + 1);
                }
            }
            ContainerState::Unknown => {
                if !sidecar && !restart_on_failure {
                    actions.kill_pod = true;
                    actions.init_containers_to_start.clear();
                    return false;
                }
                actions.containers_to_kill.push(unknown_kill(s));
                to_start.push(i);
            }
        }
        previously_initialized = true;
    }
    if !previously_initialized {
        to_start.push(0);
    }
    to_start.reverse();
    actions.init_containers_to_start = to_start;
    initialized
}

fn restarts_on_failure(pod: &Pod) -> bool {
    pod.restart_policy() != "Never"
}

fn container_succeeded(c: &Container, status: &PodStatus) -> bool {
    status
        .container(&c.name)
        .is_some_and(|s| s.state == ContainerState::Exited && s.exit_code == 0)
}

/// Computes what to do for `pod` given the runtime's view of it (upstream `computePodActions`
/// on the classic init-container path).
///
/// * No usable sandbox: kill everything and create a new sandbox, then start the first init
///   container or every app container (except those that succeeded under `OnFailure`); with
///   `restartPolicy: Never` a pod that already ran is not given a new sandbox.
/// * Initialization in progress: start the next init container, or kill the pod when one
///   failed under `Never`.
/// * Otherwise, per app container: start it when absent or exited and
///   [`should_container_be_restarted`] says so; kill and restart it when running with a spec
///   hash different from [`hash_container`]. Running containers that are not in the spec are
///   killed. When nothing is left running and nothing will start, the pod is killed.
#[doc(alias = "computePodActions")]
pub fn compute_pod_actions(pod: &Pod, status: &PodStatus) -> PodActions {
    compute_pod_actions_with_probes(pod, status, None)
}

/// [`compute_pod_actions`] that also kills running containers whose liveness or startup probe
/// failed, restarting them unless `restartPolicy` is `Never` (upstream: "Container … failed
/// liveness probe, will be restarted"), with the probe's `terminationGracePeriodSeconds`.
pub fn compute_pod_actions_with_probes(
    pod: &Pod,
    status: &PodStatus,
    probes: Option<&Results>,
) -> PodActions {
    compute_pod_actions_for(pod, status, probes, true)
}

/// [`compute_pod_actions_with_probes`] for a runtime with or without sandboxes: without
/// (`has_sandboxes == false`), the pod's one implicit sandbox never changes.
pub(super) fn compute_pod_actions_for(
    pod: &Pod,
    status: &PodStatus,
    probes: Option<&Results>,
    has_sandboxes: bool,
) -> PodActions {
    let (create, attempt, sandbox_id) = if has_sandboxes {
        pod_sandbox_changed(pod, status)
    } else {
        (false, 0, Some(status.uid.as_str().to_owned()))
    };
    let mut actions = PodActions {
        kill_pod: create,
        create_sandbox: create,
        sandbox_id,
        attempt,
        ..Default::default()
    };

    if create {
        if !restarts_on_failure(pod) && attempt != 0 && !status.containers.is_empty() {
            // Everything already ran once and must not run again: just make sure it is dead.
            actions.create_sandbox = false;
            return actions;
        }
        let to_start: Vec<usize> = pod
            .containers()
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                !(pod.restart_policy() == "OnFailure" && container_succeeded(c, status))
            })
            .map(|(i, _)| i)
            .collect();
        if to_start.is_empty() && has_any_regular_container_created(pod, status) {
            actions.create_sandbox = false;
            return actions;
        }
        if !pod.init_containers().is_empty() {
            actions.init_containers_to_start = vec![0];
            return actions;
        }
        actions.containers_to_start = to_start;
        return actions;
    }

    // Ephemeral containers may be started even if initialization is not yet complete; they
    // are never restarted.
    actions.ephemeral_containers_to_start = pod
        .ephemeral_containers()
        .iter()
        .enumerate()
        .filter(|(_, c)| status.container(&c.name).is_none())
        .map(|(i, _)| i)
        .collect();

    let initialized = compute_init_container_actions(pod, status, probes, &mut actions);
    if actions.kill_pod || !initialized {
        if actions.kill_pod {
            actions.ephemeral_containers_to_start.clear();
        }
        return actions;
    }

    let mut keep = 0;
    for (idx, c) in pod.containers().iter().enumerate() {
        let cs = status.container(&c.name);
        match cs {
            Some(s) if s.state == ContainerState::Running => {
                if s.hash != hash_container(c) {
                    actions.containers_to_start.push(idx);
                    actions.containers_to_kill.push(ContainerToKill {
                        id: s.id.clone(),
                        name: c.name.clone(),
                        message: format!(
                            "Container {} definition changed, will be restarted",
                            c.name
                        ),
                        grace_period_seconds: None,
                    });
                } else if let Some((probe, what)) = failed_probe(c, &s.id, probes) {
                    let mut message = format!("Container {} failed {what} probe", c.name);
                    if restarts_on_failure(pod) {
                        message.push_str(", will be restarted");
                        actions.containers_to_start.push(idx);
                    }
                    actions.containers_to_kill.push(ContainerToKill {
                        id: s.id.clone(),
                        name: c.name.clone(),
                        message,
                        grace_period_seconds: probe
                            .and_then(|p| p.termination_grace_period_seconds),
                    });
                } else {
                    keep += 1;
                }
            }
            _ => {
                if should_container_be_restarted(c, pod, status) {
                    actions.containers_to_start.push(idx);
                    if let Some(s) = cs.filter(|s| s.state == ContainerState::Unknown) {
                        actions.containers_to_kill.push(ContainerToKill {
                            id: s.id.clone(),
                            name: c.name.clone(),
                            message:
                                "Container is in \"Unknown\" state, try killing it before restart"
                                    .into(),
                            grace_period_seconds: None,
                        });
                    }
                }
            }
        }
    }

    let in_spec = |name: &str| {
        pod.containers()
            .iter()
            .chain(pod.init_containers())
            .any(|c| c.name == name)
            || pod.ephemeral_containers().iter().any(|c| c.name == name)
    };
    for s in &status.containers {
        if s.state == ContainerState::Running && !in_spec(&s.name) {
            actions.containers_to_kill.push(ContainerToKill {
                id: s.id.clone(),
                name: s.name.clone(),
                message: format!("Container {} is not in the pod spec", s.name),
                grace_period_seconds: None,
            });
        }
    }

    if keep == 0 && actions.containers_to_start.is_empty() {
        actions.kill_pod = true;
        // Sidecars and ephemeral containers alone do not keep a pod alive.
        actions.init_containers_to_start.clear();
        actions.ephemeral_containers_to_start.clear();
    }
    actions
}

/// The failed liveness or startup probe of a running container instance, if any.
fn failed_probe<'a>(
    c: &'a Container,
    id: &str,
    probes: Option<&Results>,
) -> Option<(Option<&'a Probe>, &'static str)> {
    let probes = probes?;
    if probes.liveness.get(id) == Some(ProbeResult::Failure) {
        return Some((c.liveness_probe.as_ref(), "liveness"));
    }
    if probes.startup.get(id) == Some(ProbeResult::Failure) {
        return Some((c.startup_probe.as_ref(), "startup"));
    }
    None
}

/// The crash-loop backoff key of a container (upstream `GetStableKey`):
/// `<pod name>_<namespace>_<uid>_<container>_<hash hex>`.
#[doc(alias = "GetStableKey")]
pub fn backoff_key(pod: &Pod, container: &Container) -> String {
    format!(
        "{}_{}_{}_{}_{:x}",
        pod.name_or_empty(),
        pod.namespace_or_default(),
        pod.uid(),
        container.name,
        hash_container(container)
    )
}

/// A start refused because the container is inside its restart backoff window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InBackoff {
    /// The `CrashLoopBackOff` error to report on the container.
    pub error: ContainerSyncError,
    /// How long until the window ends (upstream `BackoffError`'s expiration).
    pub retry_after: Duration,
}

/// Checks the restart backoff before starting `container` (upstream `doBackOff`).
///
/// Only a container with an exited instance is subject to backoff. The window is measured
/// from the newest exited instance's `finished_at` (`now` is the wall clock to compare it
/// with), as upstream's `IsInBackOffSince`. While inside it the start is refused with a
/// `CrashLoopBackOff` error carrying upstream's message; otherwise the window is advanced
/// ([`Backoff::next_since`]: doubled, or reset after `2 × max` of clean running) and
/// `None` returned.
#[doc(alias = "doBackOff")]
pub fn check_backoff(
    pod: &Pod,
    container: &Container,
    status: &PodStatus,
    backoff: &Backoff,
    now: Timestamp,
) -> Option<InBackoff> {
    let exited = status
        .containers
        .iter()
        .filter(|c| c.name == container.name && c.state == ContainerState::Exited)
        .max_by_key(|c| (c.created_at, c.restart_count))?;
    let key = backoff_key(pod, container);
    // The exit as a tokio instant; unknown or older than the monotonic clock: long ago.
    let event = exited
        .finished_at
        .map(|f| Duration::try_from(now.duration_since(f)).unwrap_or(Duration::ZERO))
        .and_then(|since| Instant::now().checked_sub(since));
    let Some(event) = event else {
        backoff.next(&key);
        return None;
    };
    if let Some(retry_after) = backoff.remaining_since(&key, event) {
        let window = backoff.current(&key).unwrap_or_default();
        return Some(InBackoff {
            error: ContainerSyncError {
                container: container.name.clone(),
                reason: CRASH_LOOP_BACK_OFF.into(),
                message: format!(
                    "back-off {} restarting failed container={} pod={}({})",
                    go_duration(window),
                    container.name,
                    pod.full_name(),
                    pod.uid()
                ),
            },
            retry_after,
        });
    }
    backoff.next_since(&key, event);
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::SandboxStatus;
    use crate::testing::{pod, pod_with};
    use k8s_openapi::api::core::v1::Container;

    fn ready_sandbox() -> SandboxStatus {
        SandboxStatus {
            id: "sb".into(),
            state: SandboxState::Ready,
            attempt: 0,
            ips: vec!["10.0.0.2".into()],
            ..Default::default()
        }
    }

    fn cs(pod: &Pod, name: &str, state: ContainerState, exit_code: i32) -> ContainerStatus {
        let spec = pod
            .containers()
            .iter()
            .chain(pod.init_containers())
            .find(|c| c.name == name)
            .cloned()
            .unwrap_or_else(|| Container {
                name: name.into(),
                ..Default::default()
            });
        ContainerStatus {
            id: format!("id-{name}"),
            name: name.into(),
            state,
            exit_code,
            hash: hash_container(&spec),
            ..Default::default()
        }
    }

    fn status(sandbox: Option<SandboxStatus>, containers: Vec<ContainerStatus>) -> PodStatus {
        PodStatus {
            sandboxes: sandbox.into_iter().collect(),
            containers,
            ..Default::default()
        }
    }

    #[test]
    fn failed_liveness_or_startup_kills_and_restarts() {
        use crate::probe::{ProbeResult, Results};
        use k8s_openapi::api::core::v1::Probe;
        for (policy, restart) in [("Always", true), ("OnFailure", true), ("Never", false)] {
            let mut p = pod_with("web", policy, &["app", "side"]);
            let spec = p.spec.as_mut().expect("spec");
            spec.containers[0].liveness_probe = Some(Probe {
                termination_grace_period_seconds: Some(3),
                ..Default::default()
            });
            let st = status(
                Some(ready_sandbox()),
                vec![
                    cs(&p, "app", ContainerState::Running, 0),
                    cs(&p, "side", ContainerState::Running, 0),
                ],
            );
            let (results, _rx) = Results::new();
            let uid = p.uid();
            let healthy = compute_pod_actions_with_probes(&p, &st, Some(&results));
            assert!(healthy.containers_to_kill.is_empty());
            results.liveness.set("id-app", ProbeResult::Failure, &uid);
            results.startup.set("id-side", ProbeResult::Failure, &uid);
            let a = compute_pod_actions_with_probes(&p, &st, Some(&results));
            let suffix = if restart { ", will be restarted" } else { "" };
            assert_eq!(
                a.containers_to_kill,
                vec![
                    ContainerToKill {
                        id: "id-app".into(),
                        name: "app".into(),
                        message: format!("Container app failed liveness probe{suffix}"),
                        grace_period_seconds: Some(3),
                    },
                    ContainerToKill {
                        id: "id-side".into(),
                        name: "side".into(),
                        message: format!("Container side failed startup probe{suffix}"),
                        grace_period_seconds: None,
                    },
                ],
                "{policy}"
            );
            assert_eq!(
                a.containers_to_start,
                if restart { vec![0, 1] } else { vec![] }
            );
            assert_eq!(a.kill_pod, !restart, "{policy}");
        }
    }

    #[test]
    fn new_pod_creates_sandbox_and_starts_all() {
        let p = pod_with("web", "Always", &["a", "b"]);
        let a = compute_pod_actions(&p, &PodStatus::default());
        assert_eq!(
            a,
            PodActions {
                kill_pod: true,
                create_sandbox: true,
                sandbox_id: None,
                attempt: 0,
                init_containers_to_start: vec![],
                containers_to_start: vec![0, 1],
                containers_to_kill: vec![],
                ephemeral_containers_to_start: vec![],
            }
        );
    }

    fn with_debugger(p: &mut Pod, inits: &[&str]) {
        use k8s_openapi::api::core::v1::EphemeralContainer;
        let spec = p.spec.as_mut().expect("spec");
        spec.init_containers = Some(
            inits
                .iter()
                .map(|n| Container {
                    name: (*n).into(),
                    image: Some("busybox".into()),
                    ..Default::default()
                })
                .collect(),
        );
        spec.ephemeral_containers = Some(vec![EphemeralContainer {
            name: "debugger".into(),
            image: Some("busybox".into()),
            target_container_name: Some("app".into()),
            ..Default::default()
        }]);
    }

    #[test]
    fn ephemeral_containers_start_once_and_are_never_killed() {
        let mut p = pod("web");
        with_debugger(&mut p, &[]);
        // Not with a new sandbox: the debugger only joins a running pod.
        let fresh = compute_pod_actions(&p, &PodStatus::default());
        assert!(fresh.create_sandbox);
        assert!(fresh.ephemeral_containers_to_start.is_empty());

        let app = cs(&p, "app", ContainerState::Running, 0);
        let a = compute_pod_actions(&p, &status(Some(ready_sandbox()), vec![app.clone()]));
        assert_eq!(a.ephemeral_containers_to_start, vec![0]);
        assert!(!a.kill_pod);

        // Running: kept (it is in the spec); exited, even failed under Always: not restarted.
        for (state, code) in [(ContainerState::Running, 0), (ContainerState::Exited, 1)] {
            let debugger = cs(&p, "debugger", state, code);
            let a = compute_pod_actions(
                &p,
                &status(Some(ready_sandbox()), vec![app.clone(), debugger]),
            );
            assert_eq!(
                a,
                PodActions {
                    sandbox_id: Some("sb".into()),
                    ..Default::default()
                },
                "{state:?}"
            );
        }
    }

    #[test]
    fn ephemeral_containers_start_during_initialization_but_do_not_keep_the_pod() {
        let mut p = pod("web");
        with_debugger(&mut p, &["init"]);
        let init = cs(&p, "init", ContainerState::Running, 0);
        let a = compute_pod_actions(&p, &status(Some(ready_sandbox()), vec![init]));
        assert_eq!(a.ephemeral_containers_to_start, vec![0]);
        assert!(a.init_containers_to_start.is_empty());

        // An app that completed under Never: the pod is done, the debugger is not started.
        let mut p = pod_with("web", "Never", &["app"]);
        with_debugger(&mut p, &[]);
        let app = cs(&p, "app", ContainerState::Exited, 0);
        let a = compute_pod_actions(&p, &status(Some(ready_sandbox()), vec![app]));
        assert!(a.kill_pod);
        assert!(a.ephemeral_containers_to_start.is_empty());
    }

    #[test]
    fn running_pod_is_a_no_op() {
        let p = pod("web");
        let st = status(
            Some(ready_sandbox()),
            vec![cs(&p, "app", ContainerState::Running, 0)],
        );
        let a = compute_pod_actions(&p, &st);
        assert_eq!(
            a,
            PodActions {
                sandbox_id: Some("sb".into()),
                ..Default::default()
            }
        );
    }

    #[test]
    fn spec_hash_change_kills_and_restarts() {
        let p = pod("web");
        let mut running = cs(&p, "app", ContainerState::Running, 0);
        running.hash ^= 1;
        let a = compute_pod_actions(&p, &status(Some(ready_sandbox()), vec![running]));
        assert!(!a.kill_pod);
        assert_eq!(a.containers_to_start, [0]);
        assert_eq!(a.containers_to_kill.len(), 1);
        assert_eq!(a.containers_to_kill[0].id, "id-app");
        assert_eq!(
            a.containers_to_kill[0].message,
            "Container app definition changed, will be restarted"
        );
    }

    #[test]
    fn exited_containers_follow_restart_policy() {
        for (policy, code, restart) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 2, true),
            ("Never", 0, false),
            ("Never", 1, false),
        ] {
            let p = pod_with("web", policy, &["app"]);
            let st = status(
                Some(ready_sandbox()),
                vec![cs(&p, "app", ContainerState::Exited, code)],
            );
            let a = compute_pod_actions(&p, &st);
            assert_eq!(
                a.containers_to_start.is_empty(),
                !restart,
                "{policy} exit {code}"
            );
            // nothing left running and nothing to start: stop the sandbox
            assert_eq!(a.kill_pod, !restart, "{policy} exit {code}");
            assert!(!a.create_sandbox);
        }
    }

    #[test]
    fn sandbox_not_ready_recreates_everything() {
        let p = pod_with("web", "Always", &["a", "b"]);
        let mut sb = ready_sandbox();
        sb.state = SandboxState::NotReady;
        sb.attempt = 2;
        let st = status(
            Some(sb),
            vec![
                cs(&p, "a", ContainerState::Running, 0),
                cs(&p, "b", ContainerState::Exited, 0),
            ],
        );
        let a = compute_pod_actions(&p, &st);
        assert!(a.kill_pod && a.create_sandbox);
        assert_eq!(a.attempt, 3);
        assert_eq!(a.sandbox_id.as_deref(), Some("sb"));
        assert_eq!(a.containers_to_start, [0, 1]);
    }

    #[test]
    fn sandbox_changes_detected() {
        let mut p = pod("web");
        // no IP on a pod-network sandbox
        let mut sb = ready_sandbox();
        sb.ips.clear();
        assert!(pod_sandbox_changed(&p, &status(Some(sb), vec![])).0);
        // hostNetwork flipped
        if let Some(s) = p.spec.as_mut() {
            s.host_network = Some(true);
        }
        let (changed, attempt, id) =
            pod_sandbox_changed(&p, &status(Some(ready_sandbox()), vec![]));
        assert!(changed);
        assert_eq!((attempt, id), (1, None));
        // two ready sandboxes
        let p = pod("web");
        let st = PodStatus {
            sandboxes: vec![
                ready_sandbox(),
                SandboxStatus {
                    id: "old".into(),
                    ..ready_sandbox()
                },
            ],
            ..Default::default()
        };
        assert!(pod_sandbox_changed(&p, &st).0);
    }

    #[test]
    fn never_pod_that_ran_gets_no_new_sandbox() {
        let p = pod_with("job", "Never", &["app"]);
        let mut sb = ready_sandbox();
        sb.state = SandboxState::NotReady;
        let st = status(Some(sb), vec![cs(&p, "app", ContainerState::Exited, 0)]);
        let a = compute_pod_actions(&p, &st);
        assert!(a.kill_pod);
        assert!(!a.create_sandbox);
        assert!(a.containers_to_start.is_empty());
    }

    #[test]
    fn containers_not_in_spec_are_killed() {
        let p = pod("web");
        let st = status(
            Some(ready_sandbox()),
            vec![
                cs(&p, "app", ContainerState::Running, 0),
                cs(&p, "stray", ContainerState::Running, 0),
            ],
        );
        let a = compute_pod_actions(&p, &st);
        assert!(!a.kill_pod);
        assert_eq!(a.containers_to_kill.len(), 1);
        assert_eq!(a.containers_to_kill[0].name, "stray");
    }

    fn with_inits(policy: &str) -> Pod {
        let mut p = pod_with("web", policy, &["app"]);
        let inits: Vec<Container> = ["init-a", "init-b"]
            .iter()
            .map(|n| Container {
                name: (*n).into(),
                image: Some("busybox:1.36".into()),
                ..Default::default()
            })
            .collect();
        if let Some(s) = p.spec.as_mut() {
            s.init_containers = Some(inits);
        }
        p
    }

    #[test]
    fn init_containers_run_in_order() {
        let p = with_inits("Always");
        // new pod: sandbox, then the first init container only
        let a = compute_pod_actions(&p, &PodStatus::default());
        assert!(a.create_sandbox);
        assert_eq!(a.init_containers_to_start, [0]);
        assert!(a.containers_to_start.is_empty());
        // first running: wait
        let st = status(
            Some(ready_sandbox()),
            vec![cs(&p, "init-a", ContainerState::Running, 0)],
        );
        let a = compute_pod_actions(&p, &st);
        assert!(a.init_containers_to_start.is_empty());
        assert!(a.containers_to_start.is_empty() && !a.kill_pod);
        // first done: second
        let st = status(
            Some(ready_sandbox()),
            vec![cs(&p, "init-a", ContainerState::Exited, 0)],
        );
        assert_eq!(compute_pod_actions(&p, &st).init_containers_to_start, [1]);
        // all done: app containers
        let st = status(
            Some(ready_sandbox()),
            vec![
                cs(&p, "init-a", ContainerState::Exited, 0),
                cs(&p, "init-b", ContainerState::Exited, 0),
            ],
        );
        let a = compute_pod_actions(&p, &st);
        assert!(a.init_containers_to_start.is_empty());
        assert_eq!(a.containers_to_start, [0]);
        // failed init container is retried (Always) ...
        let st = status(
            Some(ready_sandbox()),
            vec![
                cs(&p, "init-a", ContainerState::Exited, 0),
                cs(&p, "init-b", ContainerState::Exited, 1),
            ],
        );
        assert_eq!(compute_pod_actions(&p, &st).init_containers_to_start, [1]);
        // ... but kills the pod under Never
        let p = with_inits("Never");
        let st = status(
            Some(ready_sandbox()),
            vec![cs(&p, "init-a", ContainerState::Exited, 1)],
        );
        let a = compute_pod_actions(&p, &st);
        assert!(a.kill_pod);
        assert!(a.init_containers_to_start.is_empty());
    }

    fn with_sidecar(policy: &str, startup_probe: bool) -> Pod {
        let mut p = pod_with("web", policy, &["app"]);
        let side = Container {
            name: "side".into(),
            image: Some("busybox:1.36".into()),
            restart_policy: Some("Always".into()),
            startup_probe: startup_probe.then(Probe::default),
            ..Default::default()
        };
        let init = Container {
            name: "init".into(),
            image: Some("busybox:1.36".into()),
            ..Default::default()
        };
        if let Some(s) = p.spec.as_mut() {
            s.init_containers = Some(vec![side, init]);
        }
        p
    }

    #[test]
    fn sidecar_starts_next_init_container_without_exiting() {
        let p = with_sidecar("Always", false);
        let a = compute_pod_actions(&p, &PodStatus::default());
        assert_eq!(a.init_containers_to_start, [0]);
        // the sidecar runs: the next init container starts, the sidecar keeps running
        let st = status(
            Some(ready_sandbox()),
            vec![cs(&p, "side", ContainerState::Running, 0)],
        );
        let a = compute_pod_actions(&p, &st);
        assert_eq!(a.init_containers_to_start, [1]);
        assert!(a.containers_to_start.is_empty() && a.containers_to_kill.is_empty());
        // both done: the app starts, nothing restarts
        let st = status(
            Some(ready_sandbox()),
            vec![
                cs(&p, "side", ContainerState::Running, 0),
                cs(&p, "init", ContainerState::Exited, 0),
            ],
        );
        let a = compute_pod_actions(&p, &st);
        assert!(a.init_containers_to_start.is_empty());
        assert_eq!(a.containers_to_start, [0]);
    }

    #[test]
    fn exited_sidecar_restarts_while_app_runs_even_under_never() {
        for policy in ["Always", "Never"] {
            let p = with_sidecar(policy, false);
            // the regular init container was removed since: the running app proves
            // initialization happened
            let st = status(
                Some(ready_sandbox()),
                vec![
                    cs(&p, "side", ContainerState::Exited, 1),
                    cs(&p, "app", ContainerState::Running, 0),
                ],
            );
            let a = compute_pod_actions(&p, &st);
            assert_eq!(a.init_containers_to_start, [0], "{policy}");
            assert!(!a.kill_pod && a.containers_to_start.is_empty(), "{policy}");
            // a removed sidecar is started again too
            let st = status(
                Some(ready_sandbox()),
                vec![cs(&p, "app", ContainerState::Running, 0)],
            );
            assert_eq!(compute_pod_actions(&p, &st).init_containers_to_start, [0]);
        }
    }

    #[test]
    fn sidecars_alone_do_not_keep_the_pod() {
        let p = with_sidecar("Never", false);
        let st = status(
            Some(ready_sandbox()),
            vec![
                cs(&p, "side", ContainerState::Exited, 1),
                cs(&p, "init", ContainerState::Exited, 0),
                cs(&p, "app", ContainerState::Exited, 0),
            ],
        );
        let a = compute_pod_actions(&p, &st);
        assert!(a.kill_pod);
        assert!(a.init_containers_to_start.is_empty());
    }

    #[test]
    fn sidecar_startup_probe_gates_the_next_init_container() {
        use crate::probe::{ProbeResult, Results};
        let p = with_sidecar("Always", true);
        let st = status(
            Some(ready_sandbox()),
            vec![cs(&p, "side", ContainerState::Running, 0)],
        );
        let (results, _rx) = Results::new();
        let uid = p.uid();
        // not probed yet: wait
        let a = compute_pod_actions_with_probes(&p, &st, Some(&results));
        assert!(a.init_containers_to_start.is_empty() && a.containers_to_kill.is_empty());
        results.startup.set("id-side", ProbeResult::Success, &uid);
        let a = compute_pod_actions_with_probes(&p, &st, Some(&results));
        assert_eq!(a.init_containers_to_start, [1]);
        // a failed startup probe restarts the sidecar
        results.startup.set("id-side", ProbeResult::Failure, &uid);
        let a = compute_pod_actions_with_probes(&p, &st, Some(&results));
        assert_eq!(a.init_containers_to_start, [0]);
        assert_eq!(
            a.containers_to_kill[0].message,
            "Init container side failed startup probe"
        );
    }

    #[test]
    fn regular_init_failure_under_never_kills_even_with_sidecars() {
        let p = with_sidecar("Never", false);
        let st = status(
            Some(ready_sandbox()),
            vec![
                cs(&p, "side", ContainerState::Running, 0),
                cs(&p, "init", ContainerState::Exited, 2),
            ],
        );
        let a = compute_pod_actions(&p, &st);
        assert!(a.kill_pod);
        assert!(a.init_containers_to_start.is_empty());
        let p = with_sidecar("OnFailure", false);
        assert_eq!(compute_pod_actions(&p, &st).init_containers_to_start, [1]);
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_suppresses_restart() {
        let p = pod("web");
        let c = &p.containers()[0];
        let backoff = Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
        let t0 = Timestamp::from_second(1_700_000_000).expect("time");
        let at = |secs: i64| Timestamp::from_second(1_700_000_000 + secs).expect("time");
        // never exited: no backoff at all, and no window is opened
        assert_eq!(
            check_backoff(&p, c, &PodStatus::default(), &backoff, t0),
            None
        );
        assert_eq!(backoff.current(&backoff_key(&p, c)), None);

        let mut exited = cs(&p, "app", ContainerState::Exited, 1);
        exited.finished_at = Some(t0);
        let st = status(Some(ready_sandbox()), vec![exited]);
        // first restart is allowed and opens a 10 s window from the exit
        assert_eq!(check_backoff(&p, c, &st, &backoff, t0), None);
        tokio::time::advance(Duration::from_secs(4)).await;
        let refused = check_backoff(&p, c, &st, &backoff, at(4)).expect("in backoff");
        assert_eq!(refused.error.reason, CRASH_LOOP_BACK_OFF);
        assert_eq!(
            refused.error.message,
            "back-off 10s restarting failed container=app pod=web_default(uid-web)"
        );
        assert_eq!(refused.retry_after, Duration::from_secs(6));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(check_backoff(&p, c, &st, &backoff, at(10)), None);
        let refused = check_backoff(&p, c, &st, &backoff, at(10)).expect("in backoff");
        assert!(
            refused.error.message.starts_with("back-off 20s "),
            "{}",
            refused.error.message
        );
        assert_eq!(refused.retry_after, Duration::from_secs(10));
        assert_eq!(
            backoff_key(&p, c),
            format!("web_default_uid-web_app_{:x}", hash_container(c))
        );
    }
}
