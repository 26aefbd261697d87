//! The API status of a pod from the runtime's view of it (upstream `generateAPIPodStatus` and
//! `convertStatusToAPIStatus` in `pkg/kubelet/kubelet_pods.go`, and
//! `pkg/kubelet/status/generate.go`).

use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus as ApiContainerStatus, HostIP, Pod, PodCondition, PodIP,
    PodStatus as ApiPodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kubelet_core::PodExt;
use kubelet_core::active_deadline;
use kubelet_core::container::ephemeral_container_spec;
use kubelet_core::runtime::PodStatus;
use kubelet_core::status::StatusInputs;

use crate::conditions::{self, DISRUPTION_TARGET, OWNED_BY_KUBELET, POD_SCHEDULED};
use crate::containers::{self, Ctx, waiting, waiting_reason};
use crate::phase::{FAILED, SUCCEEDED, pod_phase};
use crate::probes::{NoProbes, ProbeResults};
use crate::qos::pod_qos;
use crate::reason;

/// Runtime type name used in container IDs (`containerd://<id>`) unless told otherwise.
pub const DEFAULT_RUNTIME_NAME: &str = "containerd";

/// Knobs of status generation that do not come from the pod, the runtime or
/// [`StatusInputs`]. Built with [`Options::new`] and the setters.
#[derive(Clone, Copy)]
pub struct Options<'a> {
    runtime_name: &'a str,
    probes: &'a dyn ProbeResults,
    now: Option<Timestamp>,
}

impl fmt::Debug for Options<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("runtime_name", &self.runtime_name)
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

impl Default for Options<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> Options<'a> {
    /// Runtime name [`DEFAULT_RUNTIME_NAME`], no probes, the wall clock.
    pub fn new() -> Self {
        Self {
            runtime_name: DEFAULT_RUNTIME_NAME,
            probes: &NoProbes,
            now: None,
        }
    }

    /// The runtime type name for container IDs, `<runtime_name>://<id>` (e.g. `cri-o`).
    #[must_use]
    pub fn runtime_name(self, runtime_name: &'a str) -> Self {
        Self {
            runtime_name,
            ..self
        }
    }

    /// Where container readiness and startup come from (default: [`NoProbes`]).
    #[must_use]
    pub fn probes(self, probes: &'a dyn ProbeResults) -> Self {
        Self { probes, ..self }
    }

    /// The time to record for new transitions and the start time (default: the wall clock).
    #[must_use]
    pub fn now(self, now: Timestamp) -> Self {
        Self {
            now: Some(now),
            ..self
        }
    }
}

/// The API status of `pod` from the runtime's view of it, with default [`Options`].
///
/// `old` is the status the kubelet last recorded for the pod (the status manager's); without
/// it, `pod.status` (from the API server) is the basis, as upstream.
#[doc(alias = "generateAPIPodStatus")]
pub fn generate_api_pod_status(
    pod: &Pod,
    runtime: &PodStatus,
    inputs: &StatusInputs<'_>,
    old: Option<&ApiPodStatus>,
) -> ApiPodStatus {
    generate_api_pod_status_with(pod, runtime, inputs, old, &Options::new())
}

/// [`generate_api_pod_status`] with explicit [`Options`].
pub fn generate_api_pod_status_with(
    pod: &Pod,
    runtime: &PodStatus,
    inputs: &StatusInputs<'_>,
    old: Option<&ApiPodStatus>,
    options: &Options<'_>,
) -> ApiPodStatus {
    let now = truncate_to_second(options.now.unwrap_or_else(kubelet_core::time::now));
    let empty = ApiPodStatus::default();
    let api = pod.status.as_ref().unwrap_or(&empty);
    let old = old.unwrap_or(api);
    let mut s = ApiPodStatus::default();

    let pod_ips = sort_pod_ips(&runtime.ips, inputs.host_ips);
    s.pod_ip = pod_ips.first().cloned();
    if !pod_ips.is_empty() {
        s.pod_ips = Some(pod_ips.into_iter().map(|ip| PodIP { ip }).collect());
    }
    s.qos_class = Some(pod_qos(pod).to_owned());

    let ctx = Ctx {
        pod,
        runtime,
        runtime_name: options.runtime_name,
        sync_result: inputs.sync_result,
    };
    let has_init = !pod.init_containers().is_empty();
    let mut app = containers::convert(
        &ctx,
        old.container_statuses.as_deref().unwrap_or_default(),
        pod.containers(),
        has_init,
        false,
    );
    let mut init = containers::convert(
        &ctx,
        old.init_container_statuses.as_deref().unwrap_or_default(),
        pod.init_containers(),
        has_init,
        true,
    );
    // Ephemeral containers: shown, never counted in the phase or the conditions (upstream
    // `convertToAPIContainerStatuses` of `spec.ephemeralContainers`).
    let ephemeral_specs: Vec<Container> = pod
        .ephemeral_containers()
        .iter()
        .map(ephemeral_container_spec)
        .collect();
    let ephemeral = containers::convert(
        &ctx,
        old.ephemeral_container_statuses
            .as_deref()
            .unwrap_or_default(),
        &ephemeral_specs,
        has_init,
        false,
    );
    if let Some((reason, message)) = inputs.pod_condition {
        for status in app.iter_mut().chain(init.iter_mut()) {
            report_pod_condition(status, reason, message);
        }
    }
    containers::apply_probes(pod, &pod.uid(), options.probes, &mut app, &mut init);

    // Phase, never leaving a terminal phase the kubelet or the API server recorded.
    let app_then_init: Vec<ApiContainerStatus> = app.iter().chain(&init).cloned().collect();
    let mut phase = pod_phase(
        pod,
        &app_then_init,
        inputs.terminating,
        containers::has_any_active_regular_container_started(pod, runtime),
    )
    .to_owned();
    if is_terminal(old.phase.as_deref()) {
        // Terminal is final, also between the two terminal phases: a Succeeded pod whose
        // containers later look failed (e.g. removed) stays Succeeded.
        phase = old.phase.clone().unwrap_or_default();
    } else if !is_terminal(Some(&phase)) && is_terminal(api.phase.as_deref()) {
        phase = api.phase.clone().unwrap_or_default();
    }
    if is_terminal(api.phase.as_deref()) && api.phase.as_deref() != Some(phase.as_str()) {
        tracing::warn!(pod = %pod.full_name(), from = ?api.phase, to = %phase, "pod attempted illegal phase transition");
        phase = api.phase.clone().unwrap_or_default();
    }
    // Past `activeDeadlineSeconds` (upstream `ShouldEvict` of the active deadline handler).
    let start_time = old.start_time.clone().unwrap_or(Time(now));
    let deadline_exceeded = !is_terminal(old.phase.as_deref())
        && !is_terminal(api.phase.as_deref())
        && active_deadline::past_active_deadline(pod, Some(start_time.0), now);
    if deadline_exceeded {
        phase = FAILED.to_owned();
    }
    if old.phase.as_deref() == Some(phase.as_str()) {
        s.reason = old
            .reason
            .clone()
            .filter(|r| !r.is_empty())
            .or_else(|| api.reason.clone());
        s.message = old
            .message
            .clone()
            .filter(|m| !m.is_empty())
            .or_else(|| api.message.clone());
    }

    if deadline_exceeded {
        s.reason = Some(active_deadline::REASON.to_owned());
        s.message = Some(active_deadline::MESSAGE.to_owned());
    }

    // Conditions: those owned by others first, then the kubelet's.
    let mut conds: Vec<PodCondition> = Vec::new();
    for c in api
        .conditions
        .iter()
        .flatten()
        .chain(old.conditions.iter().flatten())
    {
        let owned = OWNED_BY_KUBELET.contains(&c.type_.as_str()) || c.type_ == DISRUPTION_TARGET;
        if !owned && !conds.iter().any(|k| k.type_ == c.type_) {
            conds.push(c.clone());
        }
    }
    if let Some(dt) = find_condition(old, DISRUPTION_TARGET) {
        conds.push(dt.clone());
    }
    let first_owned = conds.len();
    let init_then_app: Vec<ApiContainerStatus> = init.iter().chain(&app).cloned().collect();
    conds.push(conditions::ready_to_start_containers(pod, runtime));
    conds.push(conditions::initialized(pod, &init_then_app, &phase));
    let ready = conditions::pod_ready(pod, &conds, &init_then_app, &phase);
    conds.push(ready);
    conds.push(conditions::containers_ready(pod, &init_then_app, &phase));
    conds.push(PodCondition {
        type_: POD_SCHEDULED.to_owned(),
        status: "True".to_owned(),
        ..Default::default()
    });
    for c in &mut conds[first_owned..] {
        c.last_transition_time = Some(match find_condition(old, &c.type_) {
            Some(o) if o.status == c.status && o.last_transition_time.is_some() => {
                o.last_transition_time.clone().unwrap_or(Time(now))
            }
            _ => Time(now),
        });
    }
    s.conditions = Some(conds);

    if let Some(first) = inputs.host_ips.first() {
        s.host_ip = Some(first.clone());
        s.host_ips = Some(
            inputs
                .host_ips
                .iter()
                .take(2)
                .map(|ip| HostIP { ip: ip.clone() })
                .collect(),
        );
        if pod.host_network() {
            if s.pod_ip.is_none() {
                s.pod_ip = Some(first.clone());
                s.pod_ips = Some(vec![PodIP { ip: first.clone() }]);
            }
            if let (Some(second), Some(ips)) = (inputs.host_ips.get(1), s.pod_ips.as_mut())
                && ips.len() == 1
                && family(&ips[0].ip) != family(second)
            {
                ips.push(PodIP { ip: second.clone() });
            }
        }
    }

    s.start_time = Some(start_time);
    s.phase = Some(phase);
    s.container_statuses = Some(app);
    s.init_container_statuses = (!init.is_empty()).then_some(init);
    s.ephemeral_container_statuses = (!ephemeral.is_empty()).then_some(ephemeral);
    s
}

/// Reports a pod-level waiting condition (e.g. volumes not ready) on a container that is
/// waiting for no more specific reason. The reason stays what upstream shows
/// (`ContainerCreating`, or `PodInitializing` for app containers behind init containers):
/// upstream tells the cause only in an event (e.g. `FailedMount`), which this kubelet puts in
/// the waiting message instead, as `<cause>: <message>`.
fn report_pod_condition(status: &mut ApiContainerStatus, cause: &str, message: &str) {
    let reason = match waiting_reason(status) {
        Some(None | Some("")) => reason::CONTAINER_CREATING,
        Some(Some(r)) if r == reason::CONTAINER_CREATING || r == reason::POD_INITIALIZING => r,
        _ => return,
    }
    .to_owned();
    status.state = Some(waiting(Some(&reason), Some(&format!("{cause}: {message}"))));
}

fn find_condition<'a>(status: &'a ApiPodStatus, type_: &str) -> Option<&'a PodCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
}

fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some(SUCCEEDED | FAILED))
}

/// API timestamps have whole seconds (upstream `normalizeStatus`).
pub(crate) fn truncate_to_second(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

#[derive(PartialEq, Eq)]
enum Family {
    V4,
    V6,
    Invalid,
}

fn family(ip: &str) -> Family {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => Family::V4,
        Ok(IpAddr::V6(_)) => Family::V6,
        Err(_) => Family::Invalid,
    }
}

/// At most two pod IPs: the first of the node's primary IP family, then the first of the
/// other family (upstream `sortPodIPs`). IPs are re-formatted canonically; invalid ones are
/// dropped.
fn sort_pod_ips(ips: &[String], node_ips: &[String]) -> Vec<String> {
    let primary_v6 = node_ips.first().is_some_and(|ip| family(ip) == Family::V6);
    let parsed: Vec<IpAddr> = ips.iter().filter_map(|ip| ip.parse().ok()).collect();
    let first_of = |v6: bool| {
        parsed
            .iter()
            .find(|ip| ip.is_ipv6() == v6)
            .map(IpAddr::to_string)
    };
    first_of(primary_v6)
        .into_iter()
        .chain(first_of(!primary_v6))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_deadline_fails_the_pod_for_good() {
        use k8s_openapi::api::core::v1::{Container, PodSpec};
        use k8s_openapi::jiff::SignedDuration;
        use kubelet_core::runtime::{ContainerState, ContainerStatus};

        let pod = Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("d".into()),
                uid: Some("uid-d".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                active_deadline_seconds: Some(30),
                containers: vec![Container {
                    name: "app".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let runtime = PodStatus {
            containers: vec![ContainerStatus {
                id: "c1".into(),
                name: "app".into(),
                state: ContainerState::Running,
                ..Default::default()
            }],
            ..Default::default()
        };
        let start: Timestamp = "2024-01-01T00:00:00Z".parse().expect("time");
        let at = |secs| Options::new().now(start + SignedDuration::from_secs(secs));
        let inputs = StatusInputs::default();
        let first = generate_api_pod_status_with(&pod, &runtime, &inputs, None, &at(0));
        assert_eq!(first.phase.as_deref(), Some("Running"));
        let before = generate_api_pod_status_with(&pod, &runtime, &inputs, Some(&first), &at(29));
        assert_eq!(before.phase.as_deref(), Some("Running"));
        let failed = generate_api_pod_status_with(&pod, &runtime, &inputs, Some(&before), &at(30));
        assert_eq!(failed.phase.as_deref(), Some("Failed"));
        assert_eq!(failed.reason.as_deref(), Some("DeadlineExceeded"));
        assert_eq!(
            failed.message.as_deref(),
            Some("Pod was active on the node longer than the specified deadline")
        );
        // Once the containers are gone it stays Failed with the same reason.
        let later = generate_api_pod_status_with(
            &pod,
            &PodStatus::default(),
            &inputs,
            Some(&failed),
            &at(100),
        );
        assert_eq!(later.phase.as_deref(), Some("Failed"));
        assert_eq!(later.reason.as_deref(), Some("DeadlineExceeded"));
        // A pod that already succeeded stays Succeeded.
        let done = ApiPodStatus {
            phase: Some("Succeeded".into()),
            ..first
        };
        let after = generate_api_pod_status_with(&pod, &runtime, &inputs, Some(&done), &at(60));
        assert_eq!(after.phase.as_deref(), Some("Succeeded"));
        assert_eq!(after.reason, None);
    }

    #[test]
    fn ephemeral_containers_are_shown_and_do_not_change_the_phase() {
        use k8s_openapi::api::core::v1::{EphemeralContainer, PodSpec};
        use kubelet_core::runtime::{ContainerState, ContainerStatus};

        let pod = Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("d".into()),
                uid: Some("uid-d".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    ..Default::default()
                }],
                ephemeral_containers: Some(vec![
                    EphemeralContainer {
                        name: "debugger".into(),
                        image: Some("busybox".into()),
                        ..Default::default()
                    },
                    EphemeralContainer {
                        name: "later".into(),
                        image: Some("busybox:1".into()),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let container = |id: &str, name: &str, state, exit_code| ContainerStatus {
            id: id.into(),
            name: name.into(),
            image: "docker.io/library/busybox:latest".into(),
            state,
            exit_code,
            ..Default::default()
        };
        let runtime = PodStatus {
            containers: vec![
                container("c1", "app", ContainerState::Running, 0),
                container("c2", "debugger", ContainerState::Exited, 1),
            ],
            ..Default::default()
        };
        let inputs = StatusInputs::default();
        let s = generate_api_pod_status_with(&pod, &runtime, &inputs, None, &Options::new());
        assert_eq!(s.phase.as_deref(), Some("Running"));
        let eph = s.ephemeral_container_statuses.expect("ephemeral statuses");
        assert_eq!(eph.len(), 2);
        assert_eq!(eph[0].name, "debugger");
        assert_eq!(eph[0].container_id.as_deref(), Some("containerd://c2"));
        assert_eq!(eph[0].image, "docker.io/library/busybox:latest");
        let terminated = eph[0]
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .expect("terminated");
        assert_eq!(
            (terminated.exit_code, terminated.reason.as_deref()),
            (1, Some("Error"))
        );
        assert_eq!(eph[1].name, "later");
        assert_eq!(eph[1].image, "busybox:1");
        let waiting = eph[1].state.as_ref().and_then(|s| s.waiting.as_ref());
        assert_eq!(
            waiting.and_then(|w| w.reason.as_deref()),
            Some("ContainerCreating")
        );
        // The app's readiness alone decides the pod's.
        let ready = s
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "ContainersReady")
            .expect("ContainersReady");
        assert_eq!(ready.status, "True");
    }

    #[test]
    fn pod_ips_follow_node_family() {
        let ips = vec![
            "fd00::1".to_owned(),
            "10.0.0.2".to_owned(),
            "10.0.0.3".to_owned(),
        ];
        assert_eq!(sort_pod_ips(&ips, &[]), ["10.0.0.2", "fd00::1"]);
        assert_eq!(
            sort_pod_ips(&ips, &["fd00::9".to_owned()]),
            ["fd00::1", "10.0.0.2"]
        );
        assert!(sort_pod_ips(&["bogus".to_owned()], &[]).is_empty());
    }
}
