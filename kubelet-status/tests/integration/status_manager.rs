//! `LocalStatusManager` (upstream `pkg/kubelet/status/status_manager.go`).

use crate::common;

use std::collections::HashSet;

use common::*;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus as ApiContainerStatus, PodStatus as ApiPodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubelet_core::PodUid;
use kubelet_core::status::{StatusInputs, StatusManager};
use kubelet_status::LocalStatusManager;

fn running_state() -> Option<ContainerState> {
    Some(ContainerState {
        running: Some(ContainerStateRunning {
            started_at: Some(time(2)),
        }),
        ..Default::default()
    })
}

fn terminated_state(code: i32) -> Option<ContainerState> {
    Some(ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: code,
            reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn waiting_state() -> Option<ContainerState> {
    Some(ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some("ContainerCreating".into()),
            message: None,
        }),
        ..Default::default()
    })
}

fn cs(name: &str, state: Option<ContainerState>) -> ApiContainerStatus {
    ApiContainerStatus {
        name: name.into(),
        state,
        ..Default::default()
    }
}

fn status(phase: &str, containers: Vec<ApiContainerStatus>) -> ApiPodStatus {
    ApiPodStatus {
        phase: Some(phase.into()),
        container_statuses: Some(containers),
        ..Default::default()
    }
}

fn version(m: &LocalStatusManager) -> u64 {
    m.versioned_status(&uid()).map_or(0, |v| v.version)
}

#[test]
fn versions_bump_only_on_change() {
    let m = LocalStatusManager::new();
    let p = pod("Always", &["a"], &[]);
    assert_eq!(version(&m), 0);
    m.set_pod_status(&p, status("Pending", vec![cs("a", waiting_state())]));
    assert_eq!(version(&m), 1);
    m.set_pod_status(&p, status("Pending", vec![cs("a", waiting_state())]));
    assert_eq!(version(&m), 1, "unchanged status keeps the version");
    m.set_pod_status(&p, status("Running", vec![cs("a", running_state())]));
    assert_eq!(version(&m), 2);
    assert_eq!(
        m.pod_status(&uid()).and_then(|s| s.phase).as_deref(),
        Some("Running")
    );
}

#[test]
fn generated_status_round_trips_without_a_new_version() {
    let m = LocalStatusManager::new();
    let p = pod("Always", &["a"], &[]);
    let rt = runtime(vec![running("a", "id-a", 1)]);
    let s = m.generate(&p, &rt, &StatusInputs::default());
    m.set_pod_status(&p, s);
    let stored = m.pod_status(&uid()).expect("stored");
    let again = m.generate(&p, &rt, &StatusInputs::default());
    assert_eq!(
        again.start_time, stored.start_time,
        "start time taken from the stored status"
    );
    m.set_pod_status(&p, again);
    assert_eq!(version(&m), 1);
}

#[test]
fn terminal_phase_is_final() {
    let m = LocalStatusManager::new();
    let p = pod("Always", &["a"], &[]);
    m.set_pod_status(&p, status("Succeeded", vec![cs("a", terminated_state(0))]));
    m.set_pod_status(&p, status("Running", vec![cs("a", running_state())]));
    let s = m.pod_status(&uid()).expect("stored");
    assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    let a = &s.container_statuses.as_ref().expect("statuses")[0];
    assert_eq!(
        a.state,
        terminated_state(0),
        "terminated container state kept"
    );
}

#[test]
fn terminal_phase_forces_ready_false() {
    let m = LocalStatusManager::new();
    let p = pod("Never", &["a"], &[]);
    let rt = runtime(vec![running("a", "id-a", 1)]);
    let mut s = m.generate(&p, &rt, &StatusInputs::default());
    s.phase = Some("Failed".into());
    m.set_pod_status(&p, s);
    let s = m.pod_status(&uid()).expect("stored");
    let ready = s
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("PodFailed"))
    );
}

#[test]
fn sidecar_may_leave_terminated_under_never_but_init_containers_may_not() {
    let m = LocalStatusManager::new();
    let mut p = pod("Never", &["app"], &["side", "init"]);
    if let Some(spec) = p.spec.as_mut()
        && let Some(inits) = spec.init_containers.as_mut()
    {
        inits[0].restart_policy = Some("Always".into());
    }
    let mut s = status("Running", vec![cs("app", running_state())]);
    s.init_container_statuses = Some(vec![
        cs("side", terminated_state(1)),
        cs("init", terminated_state(0)),
    ]);
    m.set_pod_status(&p, s);
    let mut s = status("Running", vec![cs("app", running_state())]);
    s.init_container_statuses = Some(vec![
        cs("side", running_state()),
        cs("init", running_state()),
    ]);
    m.set_pod_status(&p, s);
    let stored = m.pod_status(&uid()).expect("stored");
    let init = stored.init_container_statuses.expect("init");
    assert_eq!(init[0].state, running_state(), "the sidecar restarted");
    assert_eq!(
        init[1].state,
        terminated_state(0),
        "init containers never rerun"
    );
}

#[test]
fn restart_never_container_cannot_leave_terminated() {
    let m = LocalStatusManager::new();
    let p = pod("Never", &["a", "b"], &[]);
    m.set_pod_status(
        &p,
        status(
            "Running",
            vec![cs("a", terminated_state(1)), cs("b", running_state())],
        ),
    );
    m.set_pod_status(
        &p,
        status(
            "Running",
            vec![cs("a", running_state()), cs("b", running_state())],
        ),
    );
    let s = m.pod_status(&uid()).expect("stored");
    let list = s.container_statuses.expect("statuses");
    assert_eq!(list[0].state, terminated_state(1));
}

#[test]
fn restart_always_container_may_leave_terminated() {
    let m = LocalStatusManager::new();
    let p = pod("Always", &["a"], &[]);
    m.set_pod_status(&p, status("Running", vec![cs("a", terminated_state(1))]));
    m.set_pod_status(&p, status("Running", vec![cs("a", running_state())]));
    let s = m.pod_status(&uid()).expect("stored");
    assert_eq!(
        s.container_statuses.expect("statuses")[0].state,
        running_state()
    );
}

#[test]
fn terminate_pod_marks_unfinished_containers_unknown() {
    let m = LocalStatusManager::new();
    let p = pod("Always", &["a", "b"], &[]);
    m.set_pod_status(
        &p,
        status(
            "Running",
            vec![cs("a", running_state()), cs("b", terminated_state(0))],
        ),
    );
    m.terminate_pod(&p);
    let v = m.versioned_status(&uid()).expect("stored");
    assert!(v.pod_is_finished);
    assert_eq!(v.version, 2);
    assert_eq!(v.status.phase.as_deref(), Some("Failed"));
    let list = v.status.container_statuses.expect("statuses");
    let a = list[0]
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("a terminated");
    assert_eq!(
        (a.exit_code, a.reason.as_deref()),
        (137, Some("ContainerStatusUnknown"))
    );
    assert_eq!(
        a.message.as_deref(),
        Some("The container could not be located when the pod was terminated")
    );
    assert_eq!(
        list[1].state,
        terminated_state(0),
        "already terminated: untouched"
    );
}

#[test]
fn terminate_pod_keeps_a_terminal_phase() {
    let m = LocalStatusManager::new();
    let p = pod("Never", &["a"], &[]);
    m.set_pod_status(&p, status("Succeeded", vec![cs("a", terminated_state(0))]));
    m.terminate_pod(&p);
    assert_eq!(
        m.pod_status(&uid()).and_then(|s| s.phase).as_deref(),
        Some("Succeeded")
    );
}

#[test]
fn terminate_pod_before_initialization() {
    let m = LocalStatusManager::new();
    let p = pod("Always", &["app"], &["i1", "i2", "i3"]);
    let mut s = status("Pending", vec![cs("app", waiting_state())]);
    s.init_container_statuses = Some(vec![
        cs("i1", terminated_state(0)),
        cs("i2", running_state()),
        cs("i3", waiting_state()),
    ]);
    m.set_pod_status(&p, s);
    m.terminate_pod(&p);
    let s = m.pod_status(&uid()).expect("stored");
    let init = s.init_container_statuses.expect("init");
    let i2 = init[1]
        .state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .expect("i2 terminated");
    assert_eq!(i2.reason.as_deref(), Some("ContainerStatusUnknown"));
    assert_eq!(
        init[2].state,
        waiting_state(),
        "never attempted: left waiting"
    );
    let app = &s.container_statuses.expect("app")[0];
    assert_eq!(
        app.state,
        waiting_state(),
        "pod never initialized: app left waiting"
    );
    assert_eq!(s.phase.as_deref(), Some("Failed"));
}

#[test]
fn terminate_pod_without_any_status() {
    let m = LocalStatusManager::new();
    let p = pod("Always", &["a"], &[]);
    m.terminate_pod(&p);
    assert_eq!(
        m.pod_status(&uid()).and_then(|s| s.phase).as_deref(),
        Some("Failed")
    );
}

#[test]
fn remove_orphaned_statuses_keeps_listed_pods() {
    let m = LocalStatusManager::new();
    let p = pod("Always", &["a"], &[]);
    m.set_pod_status(&p, status("Pending", vec![]));
    let mut other = pod("Always", &["a"], &[]);
    other.metadata.uid = Some("uid-other".into());
    m.set_pod_status(&other, status("Pending", vec![]));
    m.remove_orphaned_statuses(&HashSet::from([uid()]));
    let all = m.all_statuses();
    assert_eq!(all.keys().cloned().collect::<Vec<_>>(), [uid()]);
    assert!(m.pod_status(&PodUid::from("uid-other")).is_none());
    assert_eq!(all[&uid()].pod_name, "web");
    assert_eq!(all[&uid()].pod_namespace, "default");
}

#[test]
fn transition_times_and_start_time_are_kept() {
    let m = LocalStatusManager::new();
    let p = pod("Always", &["a"], &[]);
    let mut s = status("Running", vec![]);
    s.start_time = Some(time(1));
    s.conditions = Some(vec![k8s_openapi::api::core::v1::PodCondition {
        type_: "Ready".into(),
        status: "True".into(),
        last_transition_time: Some(time(1)),
        ..Default::default()
    }]);
    m.set_pod_status(&p, s.clone());
    let mut later = s.clone();
    later.start_time = Some(time(50));
    later.conditions = Some(vec![k8s_openapi::api::core::v1::PodCondition {
        last_transition_time: Some(time(50)),
        ..later.conditions.clone().unwrap_or_default()[0].clone()
    }]);
    m.set_pod_status(&p, later);
    let stored = m.pod_status(&uid()).expect("stored");
    assert_eq!(stored.start_time, Some(time(1)));
    assert_eq!(
        stored.conditions.expect("conditions")[0].last_transition_time,
        Some(time(1))
    );
    assert_eq!(version(&m), 1, "nothing changed after all");
}

#[test]
fn timestamps_are_normalized_to_seconds() {
    let m = LocalStatusManager::new();
    let p = pod("Always", &["a"], &[]);
    let precise = ts(7)
        .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(250))
        .expect("ts");
    let mut s = status("Running", vec![]);
    s.start_time = Some(Time(precise));
    m.set_pod_status(&p, s);
    assert_eq!(
        m.pod_status(&uid()).and_then(|s| s.start_time),
        Some(time(7))
    );
}

#[tokio::test]
async fn subscribers_see_changes() {
    let m = LocalStatusManager::new();
    let mut rx = m.subscribe();
    assert_eq!(*rx.borrow_and_update(), None);
    let p = pod("Always", &["a"], &[]);
    m.set_pod_status(&p, status("Pending", vec![]));
    rx.changed().await.expect("sender alive");
    let change = rx.borrow_and_update().clone().expect("a change");
    assert_eq!((change.uid, change.version), (uid(), 1));
    m.set_pod_status(&p, status("Pending", vec![]));
    assert!(
        !rx.has_changed().expect("sender alive"),
        "no change, no notification"
    );
}

/// A static pod's manifest taken out and put back with the same content: the same UID runs
/// again (issue 18).
#[test]
fn a_new_run_of_a_terminated_uid_starts_from_nothing() {
    let m = LocalStatusManager::new();
    let p = pod("Always", &["a"], &[]);
    let first = runtime(vec![running("a", "old", 1)]);
    let s = m.generate(&p, &first, &StatusInputs::default());
    m.set_pod_status(&p, s);
    let first_start = m.pod_status(&uid()).and_then(|s| s.start_time);
    // The old run terminates: killed, then finished.
    let killed = runtime(vec![exited("a", "old", 137, 1)]);
    let terminating = StatusInputs {
        terminating: true,
        ..Default::default()
    };
    let s = m.generate(&p, &killed, &terminating);
    m.set_pod_status(&p, s);
    m.terminate_pod(&p);
    let ended = m.versioned_status(&uid()).expect("stored");
    assert_eq!(ended.status.phase.as_deref(), Some("Failed"));
    assert!(ended.pod_is_finished);

    // The new run: nothing created yet, then its container runs.
    let s = m.generate(&p, &empty_runtime(), &StatusInputs::default());
    assert_eq!(phase(&s), "Pending", "not the old run's phase");
    m.set_pod_status(&p, s);
    let fresh = m.versioned_status(&uid()).expect("stored");
    assert_eq!(fresh.status.phase.as_deref(), Some("Pending"));
    assert!(!fresh.pod_is_finished);
    assert_eq!(fresh.version, ended.version + 1, "versions go on");
    assert_eq!(
        fresh.status.container_statuses.expect("statuses")[0].state,
        waiting_state(),
        "no container state of the old run"
    );
    let second = runtime(vec![exited("a", "old", 137, 1), running("a", "new", 5)]);
    let s = m.generate(&p, &second, &StatusInputs::default());
    m.set_pod_status(&p, s);
    let s = m.pod_status(&uid()).expect("stored");
    assert_eq!(phase(&s), "Running");
    assert_eq!(
        container_status(&s, "a").container_id.as_deref(),
        Some("containerd://new")
    );
    assert!(s.start_time.is_some());
    assert!(
        first_start.is_some(),
        "the first run had a start time of its own"
    );
}

#[test]
fn within_a_run_a_terminal_phase_still_sticks_until_the_run_ends() {
    let m = LocalStatusManager::new();
    let p = pod("Always", &["a"], &[]);
    m.set_pod_status(&p, status("Failed", vec![cs("a", terminated_state(1))]));
    m.set_pod_status(&p, status("Running", vec![cs("a", running_state())]));
    assert_eq!(
        m.pod_status(&uid()).and_then(|s| s.phase).as_deref(),
        Some("Failed"),
        "not terminated yet: the same run"
    );
    m.terminate_pod(&p);
    m.terminate_pod(&p);
    let v = m.versioned_status(&uid()).expect("stored");
    assert!(v.pod_is_finished, "terminating twice ends the same run");
    assert_eq!(v.status.phase.as_deref(), Some("Failed"));
}

#[test]
fn container_ids_carry_the_runtime_name_it_was_told() {
    let p = pod("Always", &["app"], &[]);
    let rt = runtime(vec![running("app", "abc", 1)]);
    let inputs = StatusInputs::default();
    let id = |m: &LocalStatusManager| {
        container_status(&m.generate(&p, &rt, &inputs), "app")
            .container_id
            .clone()
    };

    let untold = LocalStatusManager::new();
    assert_eq!(
        id(&untold).as_deref(),
        Some("containerd://abc"),
        "the default"
    );

    let built = LocalStatusManager::new().with_runtime_name("cri-o");
    assert_eq!(id(&built).as_deref(), Some("cri-o://abc"));

    // Told after it was built, as a node does once the runtime answers `version()`.
    untold.set_runtime_name("fake");
    assert_eq!(&*untold.runtime_name(), "fake");
    assert_eq!(id(&untold).as_deref(), Some("fake://abc"));
    untold.set_runtime_name("");
    assert_eq!(
        id(&untold).as_deref(),
        Some("fake://abc"),
        "an empty name is ignored"
    );
}
