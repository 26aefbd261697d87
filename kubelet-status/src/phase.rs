//! The pod phase (upstream `getPhase` in `pkg/kubelet/kubelet_pods.go`, with the
//! `ContainerRestartRules` feature gate off, as by default).

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kubelet_core::PodExt;

use crate::containers::is_restartable_init_container;

/// `Pending`.
pub const PENDING: &str = "Pending";
/// `Running`.
pub const RUNNING: &str = "Running";
/// `Succeeded`.
pub const SUCCEEDED: &str = "Succeeded";
/// `Failed`.
pub const FAILED: &str = "Failed";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    Missing,
    Running,
    Terminated(i32),
    /// Waiting, with the exit code of the last termination if there was one.
    Waiting(Option<i32>),
    Unknown,
}

fn seen(statuses: &[ContainerStatus], name: &str) -> Seen {
    let Some(status) = statuses.iter().find(|s| s.name == name) else {
        return Seen::Missing;
    };
    let state = status.state.clone().unwrap_or_default();
    if state.running.is_some() {
        Seen::Running
    } else if let Some(t) = state.terminated {
        Seen::Terminated(t.exit_code)
    } else if state.waiting.is_some() {
        Seen::Waiting(
            status
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(|t| t.exit_code),
        )
    } else {
        Seen::Unknown
    }
}

fn started(statuses: &[ContainerStatus], name: &str) -> bool {
    statuses
        .iter()
        .find(|s| s.name == name)
        .is_some_and(|s| s.started == Some(true))
}

/// The phase of `pod` given the API statuses of all its containers (init and app).
///
/// `pod_is_terminal`: the kubelet is terminating the pod and its containers will not be
/// restarted whatever the restart policy. `pod_has_initialized`: a regular container has
/// started before (so restarting sidecars do not send the pod back to `Pending`).
#[doc(alias = "getPhase")]
pub fn pod_phase(
    pod: &Pod,
    statuses: &[ContainerStatus],
    pod_is_terminal: bool,
    pod_has_initialized: bool,
) -> &'static str {
    let mut pending_regular_init = 0;
    let mut pending_restartable_init = 0;
    let mut failed_initialization = 0;
    for c in pod.init_containers() {
        if is_restartable_init_container(c) {
            continue;
        }
        match seen(statuses, &c.name) {
            Seen::Terminated(code) => {
                if code != 0 {
                    failed_initialization += 1;
                }
            }
            Seen::Waiting(Some(code)) => {
                if code != 0 {
                    failed_initialization += 1;
                }
            }
            Seen::Missing | Seen::Running | Seen::Waiting(None) | Seen::Unknown => {
                pending_regular_init += 1;
            }
        }
    }

    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for c in pod.init_containers() {
        if !is_restartable_init_container(c) {
            continue;
        }
        match seen(statuses, &c.name) {
            Seen::Missing => unknown += 1,
            Seen::Running => {
                if !started(statuses, &c.name) {
                    pending_restartable_init += 1;
                }
                running += 1;
            }
            // Stopped sidecars do not count for the phase.
            Seen::Terminated(_) | Seen::Waiting(Some(_)) => {}
            Seen::Waiting(None) => {
                pending_restartable_init += 1;
                waiting += 1;
            }
            Seen::Unknown => {
                pending_restartable_init += 1;
                unknown += 1;
            }
        }
    }
    for c in pod.containers() {
        match seen(statuses, &c.name) {
            Seen::Missing | Seen::Unknown => unknown += 1,
            Seen::Running => running += 1,
            Seen::Terminated(code) => {
                stopped += 1;
                if code == 0 {
                    succeeded += 1;
                }
            }
            Seen::Waiting(Some(_)) => stopped += 1,
            Seen::Waiting(None) => waiting += 1,
        }
    }

    let restart_policy = pod.restart_policy();
    if failed_initialization > 0 && restart_policy == "Never" {
        return FAILED;
    }
    if pending_regular_init > 0
        || (pending_restartable_init > 0 && !pod_has_initialized)
        || waiting > 0
    {
        return PENDING;
    }
    if running > 0 && unknown == 0 {
        return RUNNING;
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if pod_is_terminal {
            return if stopped == succeeded {
                SUCCEEDED
            } else {
                FAILED
            };
        }
        if restart_policy == "Always" {
            return RUNNING;
        }
        if stopped == succeeded {
            return SUCCEEDED;
        }
        if restart_policy == "Never" {
            return FAILED;
        }
        return RUNNING;
    }
    PENDING
}
