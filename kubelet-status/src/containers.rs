//! Runtime container statuses → API container statuses (upstream
//! `convertToAPIContainerStatuses` in `pkg/kubelet/kubelet_pods.go`, and the readiness half of
//! the prober manager's `UpdatePodStatus`).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus as ApiContainerStatus, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubelet_core::container::should_container_be_restarted;
use kubelet_core::runtime::{ContainerState, ContainerStatus, PodStatus, PodSyncResult};
use kubelet_core::{PodExt, PodUid};

use crate::probes::{ProbeResults, ProbeState};
use crate::reason;

/// What the conversion needs besides the container lists.
pub(crate) struct Ctx<'a> {
    pub pod: &'a Pod,
    pub runtime: &'a PodStatus,
    pub runtime_name: &'a str,
    pub sync_result: Option<&'a PodSyncResult>,
}

pub(crate) use kubelet_core::container::is_restartable_init_container;

pub(crate) fn waiting(reason: Option<&str>, message: Option<&str>) -> ApiState {
    ApiState {
        waiting: Some(ContainerStateWaiting {
            reason: reason.map(str::to_owned),
            message: message.map(str::to_owned),
        }),
        ..Default::default()
    }
}

pub(crate) fn terminated(reason: &str, message: &str, exit_code: i32) -> ApiState {
    ApiState {
        terminated: Some(ContainerStateTerminated {
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            exit_code,
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn is_terminated(s: &ApiContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.terminated.is_some())
}

pub(crate) fn is_running(s: &ApiContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

pub(crate) fn waiting_reason(s: &ApiContainerStatus) -> Option<Option<&str>> {
    s.state
        .as_ref()
        .and_then(|st| st.waiting.as_ref())
        .map(|w| w.reason.as_deref())
}

fn has_last_termination(s: &ApiContainerStatus) -> bool {
    s.last_state
        .as_ref()
        .is_some_and(|st| st.terminated.is_some())
}

fn saturating_i32(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// The API statuses of `containers` (app or init containers of the pod), starting from
/// `previous` (the last statuses the kubelet reported).
pub(crate) fn convert(
    ctx: &Ctx<'_>,
    previous: &[ApiContainerStatus],
    containers: &[Container],
    has_init_containers: bool,
    is_init: bool,
) -> Vec<ApiContainerStatus> {
    let old: HashMap<&str, &ApiContainerStatus> =
        previous.iter().map(|s| (s.name.as_str(), s)).collect();
    let default_reason = if has_init_containers {
        reason::POD_INITIALIZING
    } else {
        reason::CONTAINER_CREATING
    };

    // Every container starts waiting; an old terminated status is kept as it was, otherwise
    // the restart count and last termination carry over.
    let mut statuses: Vec<ApiContainerStatus> = containers
        .iter()
        .map(|c| match old.get(c.name.as_str()) {
            Some(o) if is_terminated(o) => (*o).clone(),
            o => ApiContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                state: Some(waiting(Some(default_reason), None)),
                restart_count: o.map_or(0, |o| o.restart_count),
                last_state: o.and_then(|o| o.last_state.clone()),
                ..Default::default()
            },
        })
        .collect();
    let index: HashMap<&str, usize> = containers
        .iter()
        .enumerate()
        .rev()
        .map(|(i, c)| (c.name.as_str(), i))
        .collect();

    // A container that used to run and is gone from the runtime terminated, even though we
    // do not know how: record that so the pod does not fall back to Pending.
    for (i, c) in containers.iter().enumerate() {
        if ctx.runtime.container(&c.name).is_some() {
            continue;
        }
        let Some(o) = old.get(c.name.as_str()) else {
            continue;
        };
        if is_terminated(o) || !is_running(o) {
            continue;
        }
        let status = &mut statuses[i];
        if waiting_reason(status) != Some(Some(default_reason)) || has_last_termination(status) {
            continue;
        }
        status.last_state = Some(terminated(
            reason::CONTAINER_STATUS_UNKNOWN,
            "The container could not be located when the pod was deleted.  The container used to be Running",
            137,
        ));
        if !ctx.pod.is_being_deleted() {
            status.restart_count = status.restart_count.saturating_add(1);
        }
    }

    // The newest instance of each container gives its state, the one before it the last
    // termination state.
    let mut runtime_statuses: Vec<&ContainerStatus> = ctx.runtime.containers.iter().collect();
    runtime_statuses.sort_by_key(|c| std::cmp::Reverse((c.created_at, c.restart_count)));
    let mut seen: HashMap<&str, u32> = HashMap::new();
    for cs in runtime_statuses {
        let Some(&i) = index.get(cs.name.as_str()) else {
            continue;
        };
        let count = seen.entry(cs.name.as_str()).or_default();
        if *count >= 2 {
            continue;
        }
        let old_status = old.get(cs.name.as_str()).copied();
        let mut status = convert_one(ctx, cs, old_status, &containers[i]);
        if cs.state == ContainerState::Running
            && let Some(started) = old_status.and_then(|o| o.started)
        {
            status.started = Some(started);
        }
        if *count == 0 {
            statuses[i] = status;
        } else {
            statuses[i].last_state = status.state;
        }
        *count += 1;
    }

    // Containers that failed to start are waiting, with the reason of the failure.
    for (i, c) in containers.iter().enumerate() {
        let newest = ctx.runtime.container(&c.name);
        if is_init {
            if newest.is_some_and(|s| s.state == ContainerState::Exited && s.exit_code == 0) {
                continue;
            }
            if newest.is_none()
                && has_any_regular_container_created(ctx.pod, ctx.runtime)
                && !is_restartable_init_container(c)
                && waiting_reason(&statuses[i]).is_some()
            {
                statuses[i].state = Some(ApiState {
                    terminated: Some(ContainerStateTerminated {
                        reason: Some(reason::COMPLETED.to_owned()),
                        message: Some(
                            "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally"
                                .to_owned(),
                        ),
                        exit_code: 0,
                        ..Default::default()
                    }),
                    ..Default::default()
                });
                continue;
            }
        }
        if !should_container_be_restarted(c, ctx.pod, ctx.runtime) {
            continue;
        }
        let Some(err) = ctx
            .sync_result
            .and_then(|r| r.container_errors.iter().find(|e| e.container == c.name))
        else {
            continue;
        };
        let status = &mut statuses[i];
        if is_terminated(status) {
            status.last_state = status.state.clone();
        }
        status.state = Some(waiting(Some(&err.reason), Some(&err.message)));
    }

    if !is_init {
        statuses.sort_by(|a, b| a.name.cmp(&b.name));
    }
    statuses
}

/// One runtime container instance as an API status (upstream `convertContainerStatus`).
fn convert_one(
    ctx: &Ctx<'_>,
    cs: &ContainerStatus,
    old: Option<&ApiContainerStatus>,
    spec: &Container,
) -> ApiContainerStatus {
    let cid = format!("{}://{}", ctx.runtime_name, cs.id);
    let mut status = ApiContainerStatus {
        name: cs.name.clone(),
        restart_count: saturating_i32(cs.restart_count),
        image: if cs.image.is_empty() {
            spec.image.clone().unwrap_or_default()
        } else {
            cs.image.clone()
        },
        image_id: cs.image_ref.clone(),
        container_id: Some(cid.clone()),
        ..Default::default()
    };
    let state = match cs.state {
        ContainerState::Running => ApiState {
            running: Some(ContainerStateRunning {
                started_at: cs.started_at.map(Time),
            }),
            ..Default::default()
        },
        ContainerState::Created => waiting(None, None),
        ContainerState::Exited => {
            let reason = if !cs.reason.is_empty() {
                cs.reason.as_str()
            } else if cs.exit_code == 0 {
                reason::COMPLETED
            } else {
                reason::ERROR
            };
            ApiState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: cs.exit_code,
                    reason: Some(reason.to_owned()),
                    message: (!cs.message.is_empty()).then(|| cs.message.clone()),
                    started_at: cs.started_at.map(Time),
                    finished_at: cs.finished_at.map(Time),
                    container_id: Some(cid),
                    signal: None,
                }),
                ..Default::default()
            }
        }
        ContainerState::Unknown => match old {
            Some(o) if is_running(o) => {
                status.restart_count = o.restart_count.saturating_add(1);
                terminated(
                    reason::CONTAINER_STATUS_UNKNOWN,
                    "The container could not be located when the pod was terminated",
                    137,
                )
            }
            _ => waiting(None, None),
        },
    };
    status.state = Some(state);
    status
}

/// `true` when a regular container of the pod exists in the runtime (upstream
/// `HasAnyRegularContainerCreated`).
fn has_any_regular_container_created(pod: &Pod, runtime: &PodStatus) -> bool {
    pod.containers().iter().any(|c| {
        runtime.container(&c.name).is_some_and(|s| {
            matches!(
                s.state,
                ContainerState::Created | ContainerState::Running | ContainerState::Exited
            )
        })
    })
}

/// `true` when a regular container of the pod has an instance in the runtime (upstream
/// `HasAnyActiveRegularContainerStarted`; every instance counts as active here since the
/// runtime view has no sandbox per container).
pub(crate) fn has_any_active_regular_container_started(pod: &Pod, runtime: &PodStatus) -> bool {
    pod.containers()
        .iter()
        .any(|c| runtime.containers.iter().any(|s| s.name == c.name))
}

/// Sets `started` and `ready` from container states and probe results (upstream
/// `prober.Manager.UpdatePodStatus`).
pub(crate) fn apply_probes(
    pod: &Pod,
    uid: &PodUid,
    probes: &dyn ProbeResults,
    app: &mut [ApiContainerStatus],
    init: &mut [ApiContainerStatus],
) {
    for status in app.iter_mut() {
        set_started_and_ready(uid, probes, status);
    }
    for status in init.iter_mut() {
        let spec = pod.init_containers().iter().find(|c| c.name == status.name);
        if spec.is_some_and(is_restartable_init_container) {
            set_started_and_ready(uid, probes, status);
        } else {
            let running = is_running(status);
            status.started = Some(running);
            status.ready = status
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| t.exit_code == 0);
        }
    }
}

fn set_started_and_ready(uid: &PodUid, probes: &dyn ProbeResults, status: &mut ApiContainerStatus) {
    let running = is_running(status);
    let cid = status.container_id.clone().unwrap_or_default();
    let started = running
        && match probes.startup(uid, &status.name, &cid) {
            ProbeState::NoProbe | ProbeState::Success => true,
            ProbeState::Failure => false,
            // Keep an earlier "started" of this instance (upstream, with
            // ChangeContainerStatusOnKubeletRestart off).
            ProbeState::Pending => status.started == Some(true),
        };
    status.started = Some(started);
    status.ready = started
        && matches!(
            probes.readiness(uid, &status.name, &cid),
            ProbeState::NoProbe | ProbeState::Success
        );
}
