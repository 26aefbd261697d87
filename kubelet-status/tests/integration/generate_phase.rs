//! Pod phase (upstream `getPhase` and the terminal-phase rules of `generateAPIPodStatus`).

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::{Container, PodStatus as ApiPodStatus};
use kubelet_core::status::StatusInputs;

#[test]
fn pending_before_any_container_exists() {
    let p = pod("Always", &["app"], &[]);
    assert_eq!(phase(&gen_simple(&p, &empty_runtime())), "Pending");
}

#[test]
fn running_when_all_containers_run() {
    let p = pod("Always", &["a", "b"], &[]);
    let rt = runtime(vec![running("a", "id-a", 1), running("b", "id-b", 1)]);
    assert_eq!(phase(&gen_simple(&p, &rt)), "Running");
}

#[test]
fn pending_while_one_container_is_not_created() {
    let p = pod("Always", &["a", "b"], &[]);
    let rt = runtime(vec![running("a", "id-a", 1)]);
    assert_eq!(phase(&gen_simple(&p, &rt)), "Pending");
}

#[test]
fn restart_always_exited_containers_are_running() {
    let p = pod("Always", &["a"], &[]);
    for code in [0, 1] {
        let rt = runtime(vec![exited("a", "id-a", code, 1)]);
        assert_eq!(phase(&gen_simple(&p, &rt)), "Running", "exit code {code}");
    }
}

#[test]
fn restart_on_failure() {
    let p = pod("OnFailure", &["a", "b"], &[]);
    let ok = runtime(vec![exited("a", "id-a", 0, 1), exited("b", "id-b", 0, 1)]);
    assert_eq!(phase(&gen_simple(&p, &ok)), "Succeeded");
    let failed = runtime(vec![exited("a", "id-a", 0, 1), exited("b", "id-b", 2, 1)]);
    assert_eq!(
        phase(&gen_simple(&p, &failed)),
        "Running",
        "b will be restarted"
    );
}

#[test]
fn restart_never() {
    let p = pod("Never", &["a", "b"], &[]);
    let ok = runtime(vec![exited("a", "id-a", 0, 1), exited("b", "id-b", 0, 1)]);
    assert_eq!(phase(&gen_simple(&p, &ok)), "Succeeded");
    let failed = runtime(vec![exited("a", "id-a", 0, 1), exited("b", "id-b", 1, 1)]);
    assert_eq!(phase(&gen_simple(&p, &failed)), "Failed");
    let one_running = runtime(vec![exited("a", "id-a", 1, 1), running("b", "id-b", 1)]);
    assert_eq!(phase(&gen_simple(&p, &one_running)), "Running");
}

#[test]
fn init_container_running_is_pending() {
    let p = pod("Always", &["app"], &["init"]);
    let rt = runtime(vec![running("init", "id-i", 1)]);
    let s = gen_simple(&p, &rt);
    assert_eq!(phase(&s), "Pending");
    assert_eq!(waiting(&s, "app").0, Some("PodInitializing"));
}

#[test]
fn init_container_not_created_is_pending() {
    let p = pod("Never", &["app"], &["init"]);
    assert_eq!(phase(&gen_simple(&p, &runtime(vec![]))), "Pending");
}

#[test]
fn failed_init_container_with_restart_never_fails_the_pod() {
    let p = pod("Never", &["app"], &["init"]);
    let rt = runtime(vec![exited("init", "id-i", 1, 1)]);
    assert_eq!(phase(&gen_simple(&p, &rt)), "Failed");
}

#[test]
fn failed_init_container_with_restart_always_stays_pending() {
    let p = pod("Always", &["app"], &["init"]);
    let rt = runtime(vec![exited("init", "id-i", 1, 1)]);
    assert_eq!(phase(&gen_simple(&p, &rt)), "Pending");
}

#[test]
fn succeeded_init_then_running_app_is_running() {
    let p = pod("Always", &["app"], &["init"]);
    let rt = runtime(vec![
        exited("init", "id-i", 0, 1),
        running("app", "id-a", 20),
    ]);
    let s = gen_simple(&p, &rt);
    assert_eq!(phase(&s), "Running");
    assert_eq!(cond(&s, "Initialized").0, "True");
}

#[test]
fn second_init_container_pending_after_first_succeeded() {
    let p = pod("Always", &["app"], &["init1", "init2"]);
    let rt = runtime(vec![exited("init1", "id-1", 0, 1)]);
    let s = gen_simple(&p, &rt);
    assert_eq!(phase(&s), "Pending");
    let init = s.init_container_statuses.as_ref().expect("init statuses");
    assert_eq!(
        init.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["init1", "init2"]
    );
}

#[test]
fn sidecar_running_and_app_running_is_running() {
    let mut p = pod("Always", &["app"], &["sidecar"]);
    if let Some(init) = p.spec.as_mut().and_then(|s| s.init_containers.as_mut()) {
        init[0] = Container {
            restart_policy: Some("Always".into()),
            ..init[0].clone()
        };
    }
    let rt = runtime(vec![
        running("sidecar", "id-s", 1),
        running("app", "id-a", 5),
    ]);
    let s = gen_simple(&p, &rt);
    assert_eq!(phase(&s), "Running");
    assert_eq!(cond(&s, "Initialized").0, "True");
    assert_eq!(cond(&s, "ContainersReady").0, "True");
}

#[test]
fn only_sidecars_left_after_the_apps_finished() {
    let mut p = pod("Never", &["app"], &["sidecar"]);
    if let Some(init) = p.spec.as_mut().and_then(|s| s.init_containers.as_mut()) {
        init[0].restart_policy = Some("Always".into());
    }
    // The app finished but the sidecar still runs: Running until the kubelet stops it.
    let rt = runtime(vec![
        running("sidecar", "id-s", 1),
        exited("app", "id-a", 0, 5),
    ]);
    assert_eq!(phase(&gen_simple(&p, &rt)), "Running");
    // Stopped sidecars do not count: the app decides.
    let rt = runtime(vec![
        exited("sidecar", "id-s", 137, 1),
        exited("app", "id-a", 0, 5),
    ]);
    let s = gen_simple(&p, &rt);
    assert_eq!(phase(&s), "Succeeded");
    let rt = runtime(vec![
        exited("sidecar", "id-s", 0, 1),
        exited("app", "id-a", 1, 5),
    ]);
    assert_eq!(phase(&gen_simple(&p, &rt)), "Failed");
}

#[test]
fn terminating_pod_with_restart_always_becomes_terminal() {
    let p = pod("Always", &["a"], &[]);
    let inputs = StatusInputs {
        terminating: true,
        ..Default::default()
    };
    let ok = runtime(vec![exited("a", "id-a", 0, 1)]);
    assert_eq!(phase(&generate(&p, &ok, &inputs, None)), "Succeeded");
    let killed = runtime(vec![exited("a", "id-a", 137, 1)]);
    assert_eq!(phase(&generate(&p, &killed, &inputs, None)), "Failed");
}

#[test]
fn terminal_phase_of_old_status_is_kept() {
    let p = pod("Always", &["a"], &[]);
    let old = ApiPodStatus {
        phase: Some("Failed".into()),
        reason: Some("Evicted".into()),
        message: Some("node pressure".into()),
        ..Default::default()
    };
    let rt = runtime(vec![running("a", "id-a", 1)]);
    let s = generate(&p, &rt, &StatusInputs::default(), Some(&old));
    assert_eq!(phase(&s), "Failed");
    assert_eq!(
        s.reason.as_deref(),
        Some("Evicted"),
        "reason kept with the phase"
    );
    assert_eq!(s.message.as_deref(), Some("node pressure"));
}

#[test]
fn terminal_phase_from_api_is_kept() {
    let mut p = pod("Always", &["a"], &[]);
    p.status = Some(ApiPodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    });
    let rt = runtime(vec![running("a", "id-a", 1)]);
    assert_eq!(phase(&gen_simple(&p, &rt)), "Succeeded");
}

#[test]
fn reason_is_dropped_when_phase_changes() {
    let p = pod("Always", &["a"], &[]);
    let old = ApiPodStatus {
        phase: Some("Pending".into()),
        reason: Some("SomethingPending".into()),
        ..Default::default()
    };
    let rt = runtime(vec![running("a", "id-a", 1)]);
    let s = generate(&p, &rt, &StatusInputs::default(), Some(&old));
    assert_eq!(phase(&s), "Running");
    assert_eq!(s.reason, None);
}
