//! Container statuses and pod-level fields (upstream `convertToAPIContainerStatuses`,
//! `convertStatusToAPIStatus`).

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus as ApiContainerStatus,
    PodStatus as ApiPodStatus,
};
use kubelet_core::PodUid;
use kubelet_core::runtime::{ContainerSyncError, PodSyncResult};
use kubelet_core::status::StatusInputs;
use kubelet_status::generate::{Options, generate_api_pod_status_with};
use kubelet_status::{ProbeResults, ProbeState};

fn sync_error(container: &str, reason: &str, message: &str) -> PodSyncResult {
    PodSyncResult {
        container_errors: vec![ContainerSyncError {
            container: container.into(),
            reason: reason.into(),
            message: message.into(),
        }],
        ..Default::default()
    }
}

fn old_running(name: &str, id: &str, restarts: i32) -> ApiPodStatus {
    ApiPodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![ApiContainerStatus {
            name: name.into(),
            container_id: Some(format!("containerd://{id}")),
            restart_count: restarts,
            ready: true,
            started: Some(true),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(time(2)),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

#[test]
fn never_created_container_is_container_creating() {
    let p = pod("Always", &["app"], &[]);
    let s = gen_simple(&p, &empty_runtime());
    assert_eq!(waiting(&s, "app"), (Some("ContainerCreating"), None));
    let c = container_status(&s, "app");
    assert_eq!(c.image, "registry.example/app:1", "image from the spec");
    assert_eq!(c.container_id, None);
    assert_eq!(c.restart_count, 0);
    assert!(!c.ready);
    assert_eq!(c.started, Some(false));
}

#[test]
fn app_containers_wait_with_pod_initializing_while_init_runs() {
    let p = pod("Always", &["app"], &["init"]);
    let s = gen_simple(&p, &runtime(vec![running("init", "id-i", 1)]));
    assert_eq!(waiting(&s, "app").0, Some("PodInitializing"));
    assert!(
        container_status(&s, "init")
            .state
            .as_ref()
            .is_some_and(|st| st.running.is_some())
    );
}

#[test]
fn running_container_status() {
    let p = pod("Always", &["app"], &[]);
    let mut c = running("app", "abc123", 1);
    c.restart_count = 2;
    let s = gen_simple(&p, &runtime(vec![c]));
    let c = container_status(&s, "app");
    let running = c
        .state
        .as_ref()
        .and_then(|st| st.running.as_ref())
        .expect("running");
    assert_eq!(running.started_at, Some(time(2)));
    assert_eq!(c.container_id.as_deref(), Some("containerd://abc123"));
    assert_eq!(c.image, "registry.example/app:1");
    assert_eq!(c.image_id, "sha256:app");
    assert_eq!(c.restart_count, 2);
    assert!(c.ready, "running without readiness probe is ready");
    assert_eq!(c.started, Some(true));
}

#[test]
fn runtime_name_is_configurable() {
    let p = pod("Always", &["app"], &[]);
    let rt = runtime(vec![running("app", "abc", 1)]);
    let opts = Options::new().runtime_name("cri-o").now(ts(NOW));
    let s = generate_api_pod_status_with(&p, &rt, &StatusInputs::default(), None, &opts);
    assert_eq!(
        container_status(&s, "app").container_id.as_deref(),
        Some("cri-o://abc")
    );
}

#[test]
fn terminated_container_status() {
    let p = pod("Never", &["ok", "bad", "oom"], &[]);
    let mut oom = exited("oom", "id-oom", 137, 1);
    oom.reason = "OOMKilled".into();
    let mut bad = exited("bad", "id-bad", 2, 1);
    bad.message = "boom".into();
    let s = gen_simple(&p, &runtime(vec![exited("ok", "id-ok", 0, 1), bad, oom]));

    let ok = terminated(&s, "ok");
    assert_eq!(ok.exit_code, 0);
    assert_eq!(ok.reason.as_deref(), Some("Completed"));
    assert_eq!(ok.started_at, Some(time(2)));
    assert_eq!(ok.finished_at, Some(time(11)));
    assert_eq!(ok.container_id.as_deref(), Some("containerd://id-ok"));
    assert_eq!(ok.message, None);

    let bad = terminated(&s, "bad");
    assert_eq!(
        (bad.exit_code, bad.reason.as_deref(), bad.message.as_deref()),
        (2, Some("Error"), Some("boom"))
    );

    let oom = terminated(&s, "oom");
    assert_eq!(
        (oom.exit_code, oom.reason.as_deref()),
        (137, Some("OOMKilled"))
    );
    assert!(!container_status(&s, "oom").ready);
    assert_eq!(container_status(&s, "oom").started, Some(false));
}

#[test]
fn last_state_comes_from_the_previous_instance() {
    let p = pod("Always", &["app"], &[]);
    let mut first = exited("app", "id-1", 1, 1);
    first.restart_count = 0;
    let mut second = running("app", "id-2", 30);
    second.restart_count = 1;
    let s = gen_simple(&p, &runtime(vec![first, second]));
    let c = container_status(&s, "app");
    assert_eq!(c.restart_count, 1);
    assert_eq!(c.container_id.as_deref(), Some("containerd://id-2"));
    let last = c
        .last_state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .expect("last terminated");
    assert_eq!(last.exit_code, 1);
    assert_eq!(last.container_id.as_deref(), Some("containerd://id-1"));
}

#[test]
fn sync_errors_become_waiting_reasons() {
    let p = pod("Always", &["app"], &[]);
    let result = sync_error("app", "ErrImagePull", "pull access denied");
    let inputs = StatusInputs {
        sync_result: Some(&result),
        ..Default::default()
    };
    let s = generate(&p, &empty_runtime(), &inputs, None);
    assert_eq!(
        waiting(&s, "app"),
        (Some("ErrImagePull"), Some("pull access denied"))
    );
    assert_eq!(phase(&s), "Pending");

    let result = sync_error(
        "app",
        "CreateContainerConfigError",
        "secret \"x\" not found",
    );
    let inputs = StatusInputs {
        sync_result: Some(&result),
        ..Default::default()
    };
    let s = generate(&p, &empty_runtime(), &inputs, None);
    assert_eq!(waiting(&s, "app").0, Some("CreateContainerConfigError"));
}

#[test]
fn crash_loop_back_off_keeps_the_last_termination() {
    let p = pod("Always", &["app"], &[]);
    let mut dead = exited("app", "id-1", 1, 1);
    dead.restart_count = 3;
    let result = sync_error(
        "app",
        "CrashLoopBackOff",
        "back-off 40s restarting failed container",
    );
    let inputs = StatusInputs {
        sync_result: Some(&result),
        ..Default::default()
    };
    let s = generate(&p, &runtime(vec![dead]), &inputs, None);
    assert_eq!(waiting(&s, "app").0, Some("CrashLoopBackOff"));
    let c = container_status(&s, "app");
    assert_eq!(c.restart_count, 3);
    let last = c
        .last_state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .expect("last terminated");
    assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
    assert_eq!(
        phase(&s),
        "Running",
        "a restarting container keeps the pod running"
    );
}

#[test]
fn sync_error_does_not_override_a_container_that_will_not_restart() {
    let p = pod("Never", &["app"], &[]);
    let result = sync_error("app", "CrashLoopBackOff", "ignored");
    let inputs = StatusInputs {
        sync_result: Some(&result),
        ..Default::default()
    };
    let s = generate(
        &p,
        &runtime(vec![exited("app", "id-1", 1, 1)]),
        &inputs,
        None,
    );
    assert_eq!(terminated(&s, "app").exit_code, 1);
}

#[test]
fn unknown_state_after_running_is_terminated_unknown() {
    let p = pod("Always", &["app"], &[]);
    let old = old_running("app", "id-1", 4);
    let s = generate(
        &p,
        &runtime(vec![unknown("app", "id-1", 1)]),
        &StatusInputs::default(),
        Some(&old),
    );
    let t = terminated(&s, "app");
    assert_eq!(
        (t.exit_code, t.reason.as_deref()),
        (137, Some("ContainerStatusUnknown"))
    );
    assert_eq!(container_status(&s, "app").restart_count, 5);
}

#[test]
fn vanished_running_container_records_an_unknown_termination() {
    let p = pod("Always", &["app"], &[]);
    let old = old_running("app", "id-1", 0);
    let s = generate(&p, &runtime(vec![]), &StatusInputs::default(), Some(&old));
    let c = container_status(&s, "app");
    let last = c
        .last_state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .expect("last terminated");
    assert_eq!(
        (last.exit_code, last.reason.as_deref()),
        (137, Some("ContainerStatusUnknown"))
    );
    assert_eq!(c.restart_count, 1);
    assert_eq!(phase(&s), "Running", "not back to Pending");
}

#[test]
fn pod_condition_is_reported_on_waiting_containers_only() {
    let p = pod("Always", &["a", "b", "c"], &[]);
    let result = sync_error("c", "ErrImagePull", "denied");
    let inputs = StatusInputs {
        sync_result: Some(&result),
        pod_condition: Some(("VolumesNotReady", "unmounted volumes=[data]")),
        ..Default::default()
    };
    let s = generate(&p, &runtime(vec![running("a", "id-a", 1)]), &inputs, None);
    assert!(
        container_status(&s, "a")
            .state
            .as_ref()
            .is_some_and(|st| st.running.is_some())
    );
    assert_eq!(
        waiting(&s, "b"),
        (
            Some("ContainerCreating"),
            Some("VolumesNotReady: unmounted volumes=[data]")
        ),
        "upstream's reason; the cause in the message"
    );
    assert_eq!(
        waiting(&s, "c").0,
        Some("ErrImagePull"),
        "a specific reason wins"
    );
}

#[test]
fn statuses_order_init_by_spec_app_by_name() {
    let p = pod("Always", &["zeta", "alpha"], &["second", "first"]);
    let s = gen_simple(&p, &empty_runtime());
    let names = |l: &Option<Vec<ApiContainerStatus>>| {
        l.iter()
            .flatten()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&s.init_container_statuses), ["second", "first"]);
    // Upstream sorts app container statuses by name (kubetypes.SortedContainerStatuses).
    assert_eq!(names(&s.container_statuses), ["alpha", "zeta"]);
}

struct Probes;

impl ProbeResults for Probes {
    fn startup(&self, _: &PodUid, container: &str, _: &str) -> ProbeState {
        if container == "slow" {
            ProbeState::Pending
        } else {
            ProbeState::NoProbe
        }
    }
    fn readiness(&self, _: &PodUid, container: &str, id: &str) -> ProbeState {
        match (container, id) {
            ("web", "containerd://id-web") => ProbeState::Failure,
            ("api", _) => ProbeState::Success,
            _ => ProbeState::NoProbe,
        }
    }
}

#[test]
fn probe_results_decide_started_and_ready() {
    let p = pod("Always", &["web", "api", "slow"], &[]);
    let rt = runtime(vec![
        running("web", "id-web", 1),
        running("api", "id-api", 1),
        running("slow", "id-s", 1),
    ]);
    let opts = Options::new().probes(&Probes).now(ts(NOW));
    let s = generate_api_pod_status_with(&p, &rt, &StatusInputs::default(), None, &opts);
    let web = container_status(&s, "web");
    assert_eq!((web.started, web.ready), (Some(true), false));
    let api = container_status(&s, "api");
    assert_eq!((api.started, api.ready), (Some(true), true));
    let slow = container_status(&s, "slow");
    assert_eq!((slow.started, slow.ready), (Some(false), false));
    // Listed in spec order.
    assert_eq!(
        cond(&s, "ContainersReady"),
        (
            "False",
            Some("ContainersNotReady"),
            Some("containers with unready status: [web slow]")
        )
    );
}

#[test]
fn ips_qos_and_start_time() {
    let p = pod("Always", &["app"], &[]);
    let hosts = vec!["192.168.1.10".to_owned(), "fd00::10".to_owned()];
    let inputs = StatusInputs {
        host_ips: &hosts,
        ..Default::default()
    };
    let mut rt = runtime(vec![running("app", "id", 1)]);
    rt.ips = vec!["fd00::5".into(), POD_IP.into()];
    let s = generate(&p, &rt, &inputs, None);
    assert_eq!(s.pod_ip.as_deref(), Some(POD_IP), "node family first");
    let pod_ips: Vec<&str> = s.pod_ips.iter().flatten().map(|i| i.ip.as_str()).collect();
    assert_eq!(pod_ips, [POD_IP, "fd00::5"]);
    assert_eq!(s.host_ip.as_deref(), Some("192.168.1.10"));
    let host_ips: Vec<&str> = s.host_ips.iter().flatten().map(|i| i.ip.as_str()).collect();
    assert_eq!(host_ips, ["192.168.1.10", "fd00::10"]);
    assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    assert_eq!(s.start_time, Some(time(NOW)));

    let old = ApiPodStatus {
        start_time: Some(time(3)),
        ..Default::default()
    };
    let s = generate(&p, &rt, &inputs, Some(&old));
    assert_eq!(s.start_time, Some(time(3)), "start time never changes");
}

#[test]
fn host_network_pod_gets_the_host_ip() {
    let mut p = pod("Always", &["app"], &[]);
    if let Some(spec) = p.spec.as_mut() {
        spec.host_network = Some(true);
    }
    let hosts = vec!["192.168.1.10".to_owned()];
    let inputs = StatusInputs {
        host_ips: &hosts,
        ..Default::default()
    };
    let mut rt = runtime(vec![running("app", "id", 1)]);
    rt.ips.clear();
    let s = generate(&p, &rt, &inputs, None);
    assert_eq!(s.pod_ip.as_deref(), Some("192.168.1.10"));
}
