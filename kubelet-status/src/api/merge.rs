//! What the status syncer writes over what the API has (upstream `mergePodStatus` and
//! `isPodStatusByKubeletEqual` in `pkg/kubelet/status/status_manager.go`).

use k8s_openapi::api::core::v1::{PodCondition, PodStatus as ApiPodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubelet_core::status::is_terminal_phase;

use crate::conditions::{
    CONTAINERS_READY, DISRUPTION_TARGET, OWNED_BY_KUBELET, READY, terminal_phase_condition,
};
use crate::generate::truncate_to_second;

/// Upstream `kubetypes.PodConditionByKubelet`.
fn owned_by_kubelet(type_: &str) -> bool {
    OWNED_BY_KUBELET.contains(&type_)
}

/// Upstream `kubetypes.PodConditionSharedByKubelet`.
fn shared_by_kubelet(type_: &str) -> bool {
    type_ == DISRUPTION_TARGET
}

/// The status to write: `new` (the kubelet's) with the conditions of `old` (the API's) that
/// the kubelet does not own, a terminal phase held back while `delay_transitioning_to_terminal`
/// (containers may still run), and `Ready`/`ContainersReady` false in a terminal phase
/// (upstream `mergePodStatus`). A pod already terminal in the API never leaves its phase: the
/// API server (1.27+) rejects that transition, and an older one must not see it either.
pub fn merge_pod_status(
    old: &ApiPodStatus,
    mut new: ApiPodStatus,
    delay_transitioning_to_terminal: bool,
) -> ApiPodStatus {
    let transitioning_to_terminal = !is_terminal_phase(old) && is_terminal_phase(&new);
    let mut conditions: Vec<PodCondition> = old
        .conditions
        .iter()
        .flatten()
        .filter(|c| !owned_by_kubelet(&c.type_))
        .cloned()
        .collect();
    for c in new.conditions.iter().flatten() {
        if owned_by_kubelet(&c.type_) {
            conditions.push(c.clone());
        } else if shared_by_kubelet(&c.type_)
            && transitioning_to_terminal
            && !delay_transitioning_to_terminal
        {
            // Sent once the pod is terminal, with a fresh transition time.
            let mut c = c.clone();
            update_last_transition_time(&mut c, old);
            replace_or_append(&mut conditions, c);
        }
    }
    new.conditions = (!conditions.is_empty()).then_some(conditions);

    if transitioning_to_terminal && delay_transitioning_to_terminal {
        new.phase = old.phase.clone();
        new.reason = old.reason.clone();
        new.message = old.message.clone();
    }
    if is_terminal_phase(old) && old.phase != new.phase {
        tracing::warn!(from = ?old.phase, to = ?new.phase, "not moving a pod out of its terminal phase in the API");
        new.phase = old.phase.clone();
    }
    if is_terminal_phase(&new) {
        let phase = new.phase.clone().unwrap_or_default();
        let ready = |status: &ApiPodStatus, type_: &str| {
            status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == type_ && c.status == "True")
        };
        if ready(&new, READY) || ready(&new, CONTAINERS_READY) {
            for type_ in [CONTAINERS_READY, READY] {
                update_pod_condition(&mut new, terminal_phase_condition(type_, &phase));
            }
        }
    }
    new
}

/// Upstream `isPodStatusByKubeletEqual`: equal apart from conditions the kubelet neither owns
/// nor shares, comparing the kubelet's conditions by status, reason and message.
pub fn is_pod_status_by_kubelet_equal(old: &ApiPodStatus, new: &ApiPodStatus) -> bool {
    for c in new.conditions.iter().flatten() {
        if owned_by_kubelet(&c.type_) || shared_by_kubelet(&c.type_) {
            let same = old.conditions.iter().flatten().any(|o| {
                o.type_ == c.type_
                    && o.status == c.status
                    && o.message == c.message
                    && o.reason == c.reason
            });
            if !same {
                return false;
            }
        }
    }
    let mut old = old.clone();
    old.conditions.clone_from(&new.conditions);
    old == *new
}

fn now() -> Time {
    Time(truncate_to_second(kubelet_core::time::now()))
}

/// Keeps `old`'s transition time when the status did not change, else now (upstream
/// `updateLastTransitionTime`).
fn update_last_transition_time(c: &mut PodCondition, old: &ApiPodStatus) {
    let previous = old.conditions.iter().flatten().find(|o| o.type_ == c.type_);
    c.last_transition_time = match previous {
        Some(o) if o.status == c.status => o.last_transition_time.clone(),
        _ => Some(now()),
    };
}

fn replace_or_append(conditions: &mut Vec<PodCondition>, c: PodCondition) {
    match conditions.iter_mut().find(|o| o.type_ == c.type_) {
        Some(o) => *o = c,
        None => conditions.push(c),
    }
}

/// Upstream `podutil.UpdatePodCondition`: sets the condition, keeping its transition time
/// when its status did not change.
fn update_pod_condition(status: &mut ApiPodStatus, mut c: PodCondition) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    match conditions.iter_mut().find(|o| o.type_ == c.type_) {
        Some(o) => {
            c.last_transition_time = if o.status == c.status {
                o.last_transition_time.clone()
            } else {
                Some(now())
            };
            *o = c;
        }
        None => {
            c.last_transition_time = Some(now());
            conditions.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(type_: &str, status: &str) -> PodCondition {
        PodCondition {
            type_: type_.into(),
            status: status.into(),
            ..Default::default()
        }
    }

    fn status(phase: &str, conditions: &[(&str, &str)]) -> ApiPodStatus {
        ApiPodStatus {
            phase: Some(phase.into()),
            conditions: Some(conditions.iter().map(|(t, s)| condition(t, s)).collect()),
            ..Default::default()
        }
    }

    fn types(s: &ApiPodStatus) -> Vec<(String, String)> {
        let mut v: Vec<_> = s
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect();
        v.sort();
        v
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut v: Vec<_> = list
            .iter()
            .map(|(a, b)| ((*a).into(), (*b).into()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn conditions_of_others_are_kept_and_the_kubelets_replaced() {
        let old = status(
            "Pending",
            &[
                ("Ready", "False"),
                ("example.com/gate", "True"),
                ("PodScheduled", "True"),
            ],
        );
        let new = status("Running", &[("Ready", "True"), ("PodScheduled", "True")]);
        let merged = merge_pod_status(&old, new, false);
        assert_eq!(
            types(&merged),
            pairs(&[
                ("Ready", "True"),
                ("example.com/gate", "True"),
                ("PodScheduled", "True")
            ])
        );
        assert_eq!(merged.phase.as_deref(), Some("Running"));
    }

    #[test]
    fn a_terminal_phase_waits_while_containers_may_run() {
        let old = status("Running", &[("Ready", "True")]);
        let new = status(
            "Succeeded",
            &[("Ready", "False"), ("DisruptionTarget", "True")],
        );
        let delayed = merge_pod_status(&old, new.clone(), true);
        assert_eq!(delayed.phase.as_deref(), Some("Running"));
        assert_eq!(types(&delayed), pairs(&[("Ready", "False")]));
        let sent = merge_pod_status(&old, new, false);
        assert_eq!(sent.phase.as_deref(), Some("Succeeded"));
        assert_eq!(
            types(&sent),
            pairs(&[("Ready", "False"), ("DisruptionTarget", "True")])
        );
    }

    #[test]
    fn a_terminal_pod_is_not_ready_and_never_leaves_its_phase() {
        let old = status("Failed", &[]);
        let merged = merge_pod_status(&old, status("Running", &[("Ready", "True")]), false);
        assert_eq!(merged.phase.as_deref(), Some("Failed"));
        let ready = merged
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == READY)
            .expect("ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("PodFailed"))
        );
    }

    #[test]
    fn equality_ignores_conditions_of_others() {
        let a = status(
            "Running",
            &[("Ready", "True"), ("example.com/gate", "False")],
        );
        let b = status("Running", &[("Ready", "True")]);
        assert!(is_pod_status_by_kubelet_equal(&a, &b));
        let c = status("Running", &[("Ready", "False")]);
        assert!(!is_pod_status_by_kubelet_equal(&a, &c));
        let d = status("Pending", &[("Ready", "True")]);
        assert!(!is_pod_status_by_kubelet_equal(&a, &d));
    }
}
