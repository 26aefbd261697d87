//! What to do to bring a pod to its spec: [`compute_pod_actions`], a pure function of the pod
//! and the runtime's [`PodStatus`], plus the crash-loop backoff check done before each start.
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/kuberuntime_manager.go` (`podActions`,
//! `computePodActions`, `doBackOff`), `util/util.go` (`PodSandboxChanged`) and
//! `kuberuntime_container.go` (`findNextInitContainerToRun`, `isInitContainerFailed`) on the
//! classic init-container path: init containers run one at a time, each must exit 0 before
//! the next starts, then the app containers start. Sidecars (restartable init containers),
//! ephemeral containers, probes and in-place resize are not handled yet.

use std::time::Duration;

use crate::reasons::CRASH_LOOP_BACK_OFF;
use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use kubelet_core::backoff::Backoff;
use kubelet_core::container::{hash_container, should_container_be_restarted};
use kubelet_core::pod::PodExt;
use kubelet_core::probe::{ProbeResult, Results};
use kubelet_core::runtime::{
    ContainerState, ContainerStatus, ContainerSyncError, PodStatus, SandboxState,
};

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

/// The steps [`crate::RemoteRuntime`]'s `sync_pod` takes for a pod (upstream `podActions`).
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
    /// Index in `spec.initContainers` of the init container to start next.
    pub next_init_container_to_start: Option<usize>,
    /// Indexes in `spec.containers` of the app containers to start.
    pub containers_to_start: Vec<usize>,
    /// Running containers to stop (when not killing the whole pod).
    pub containers_to_kill: Vec<ContainerToKill>,
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

/// Where the pod's initialization stands (upstream `findNextInitContainerToRun`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitProgress<'a> {
    /// Status of the last failed init container, if one failed.
    pub last_failed: Option<&'a ContainerStatus>,
    /// Index of the init container to run next.
    pub next: Option<usize>,
    /// All init containers succeeded (or an app container already runs).
    pub done: bool,
}

/// Finds the next init container to run.
#[doc(alias = "findNextInitContainerToRun")]
pub fn find_next_init_container_to_run<'a>(pod: &Pod, status: &'a PodStatus) -> InitProgress<'a> {
    let inits = pod.init_containers();
    let finished = InitProgress {
        last_failed: None,
        next: None,
        done: true,
    };
    if inits.is_empty() {
        return finished;
    }
    // An app container that runs means initialization completed in the past, even if the
    // init containers have since been removed.
    if pod.containers().iter().any(|c| {
        status
            .container(&c.name)
            .is_some_and(|s| s.state == ContainerState::Running)
    }) {
        return finished;
    }
    for (i, c) in inits.iter().enumerate().rev() {
        if let Some(s) = status
            .container(&c.name)
            .filter(|s| is_init_container_failed(s))
        {
            return InitProgress {
                last_failed: Some(s),
                next: Some(i),
                done: false,
            };
        }
    }
    for (i, c) in inits.iter().enumerate().rev() {
        let Some(s) = status.container(&c.name) else {
            continue;
        };
        match s.state {
            ContainerState::Running => {
                return InitProgress {
                    last_failed: None,
                    next: None,
                    done: false,
                };
            }
            ContainerState::Exited if i + 1 == inits.len() => return finished,
            ContainerState::Exited => {
                return InitProgress {
                    last_failed: None,
                    next: Some(i + 1),
                    done: false,
                };
            }
            _ => {}
        }
    }
    InitProgress {
        last_failed: None,
        next: Some(0),
        done: false,
    }
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
    let (create, attempt, sandbox_id) = pod_sandbox_changed(pod, status);
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
        if to_start.is_empty() && find_next_init_container_to_run(pod, status).done {
            actions.create_sandbox = false;
            return actions;
        }
        if !pod.init_containers().is_empty() {
            actions.next_init_container_to_start = Some(0);
            return actions;
        }
        actions.containers_to_start = to_start;
        return actions;
    }

    let init = find_next_init_container_to_run(pod, status);
    if !init.done {
        if let Some(next) = init.next {
            if init.last_failed.is_some() && !restarts_on_failure(pod) {
                actions.kill_pod = true;
            } else {
                if let Some(last) = init
                    .last_failed
                    .filter(|s| s.state == ContainerState::Unknown)
                {
                    actions.containers_to_kill.push(ContainerToKill {
                        id: last.id.clone(),
                        name: last.name.clone(),
                        message:
                            "Init container is in \"Unknown\" state, try killing it before restart"
                                .into(),
                        grace_period_seconds: None,
                    });
                }
                actions.next_init_container_to_start = Some(next);
            }
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

/// Formats a duration as Go's `time.Duration.String` does for the values backoff produces
/// (`10s`, `1m20s`, `5m0s`, `1h0m0s`, `1.5s`, `500ms`).
pub fn go_duration(d: Duration) -> String {
    let total = d.as_secs();
    let nanos = d.subsec_nanos();
    if total == 0 {
        return match nanos {
            0 => "0s".into(),
            n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
            n if n % 1_000 == 0 => format!("{}µs", n / 1_000),
            n => format!("{n}ns"),
        };
    }
    let secs = if nanos == 0 {
        format!("{}s", total % 60)
    } else {
        let frac = format!("{nanos:09}");
        format!("{}.{}s", total % 60, frac.trim_end_matches('0'))
    };
    match (total / 3600, (total / 60) % 60) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

/// Checks the restart backoff before starting `container` (upstream `doBackOff`).
///
/// Only a container with an exited instance is subject to backoff. While its key is inside
/// its window the start is refused with a `CrashLoopBackOff` error carrying upstream's
/// message; otherwise the window is advanced ([`Backoff::next`]) and `None` returned.
#[doc(alias = "doBackOff")]
pub fn check_backoff(
    pod: &Pod,
    container: &Container,
    status: &PodStatus,
    backoff: &Backoff,
) -> Option<ContainerSyncError> {
    let exited = status
        .containers
        .iter()
        .any(|c| c.name == container.name && c.state == ContainerState::Exited);
    if !exited {
        return None;
    }
    let key = backoff_key(pod, container);
    if backoff.remaining(&key).is_some() {
        let window = backoff.current(&key).unwrap_or_default();
        return Some(ContainerSyncError {
            container: container.name.clone(),
            reason: CRASH_LOOP_BACK_OFF.into(),
            message: format!(
                "back-off {} restarting failed container={} pod={}({})",
                go_duration(window),
                container.name,
                pod.full_name(),
                pod.uid()
            ),
        });
    }
    backoff.next(&key);
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;
    use kubelet_core::runtime::SandboxStatus;
    use kubelet_core::testing::{pod, pod_with};

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
        use k8s_openapi::api::core::v1::Probe;
        use kubelet_core::probe::{ProbeResult, Results};
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
                next_init_container_to_start: None,
                containers_to_start: vec![0, 1],
                containers_to_kill: vec![],
            }
        );
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
        assert_eq!(a.next_init_container_to_start, Some(0));
        assert!(a.containers_to_start.is_empty());
        // first running: wait
        let st = status(
            Some(ready_sandbox()),
            vec![cs(&p, "init-a", ContainerState::Running, 0)],
        );
        let a = compute_pod_actions(&p, &st);
        assert_eq!(a.next_init_container_to_start, None);
        assert!(a.containers_to_start.is_empty() && !a.kill_pod);
        // first done: second
        let st = status(
            Some(ready_sandbox()),
            vec![cs(&p, "init-a", ContainerState::Exited, 0)],
        );
        assert_eq!(
            compute_pod_actions(&p, &st).next_init_container_to_start,
            Some(1)
        );
        // all done: app containers
        let st = status(
            Some(ready_sandbox()),
            vec![
                cs(&p, "init-a", ContainerState::Exited, 0),
                cs(&p, "init-b", ContainerState::Exited, 0),
            ],
        );
        let a = compute_pod_actions(&p, &st);
        assert_eq!(a.next_init_container_to_start, None);
        assert_eq!(a.containers_to_start, [0]);
        // failed init container is retried (Always) ...
        let st = status(
            Some(ready_sandbox()),
            vec![
                cs(&p, "init-a", ContainerState::Exited, 0),
                cs(&p, "init-b", ContainerState::Exited, 1),
            ],
        );
        assert_eq!(
            compute_pod_actions(&p, &st).next_init_container_to_start,
            Some(1)
        );
        // ... but kills the pod under Never
        let p = with_inits("Never");
        let st = status(
            Some(ready_sandbox()),
            vec![cs(&p, "init-a", ContainerState::Exited, 1)],
        );
        let a = compute_pod_actions(&p, &st);
        assert!(a.kill_pod);
        assert_eq!(a.next_init_container_to_start, None);
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_suppresses_restart() {
        let p = pod("web");
        let c = &p.containers()[0];
        let backoff = Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
        // never exited: no backoff at all, and no window is opened
        assert_eq!(check_backoff(&p, c, &PodStatus::default(), &backoff), None);
        assert_eq!(backoff.current(&backoff_key(&p, c)), None);

        let st = status(
            Some(ready_sandbox()),
            vec![cs(&p, "app", ContainerState::Exited, 1)],
        );
        // first restart is allowed and opens a 10 s window
        assert_eq!(check_backoff(&p, c, &st, &backoff), None);
        let err = check_backoff(&p, c, &st, &backoff).expect("in backoff");
        assert_eq!(err.reason, CRASH_LOOP_BACK_OFF);
        assert_eq!(
            err.message,
            "back-off 10s restarting failed container=app pod=web_default(uid-web)"
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(check_backoff(&p, c, &st, &backoff), None);
        let err = check_backoff(&p, c, &st, &backoff).expect("in backoff");
        assert!(err.message.starts_with("back-off 20s "), "{}", err.message);
        assert_eq!(
            backoff_key(&p, c),
            format!("web_default_uid-web_app_{:x}", hash_container(c))
        );
    }
}
