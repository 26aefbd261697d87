//! Paused-time tests of the manager and workers: thresholds, periods, initial delays, jitter,
//! startup gating and stopping.

use std::time::Duration;

use kubelet_core::probe::{Update, UpdateReceiver};
use kubelet_core::runtime::{ContainerStatus, ExecResult, PodStatus};
use kubelet_core::testing::{Call, FakeRuntime};
use serde_json::json;
use tokio::time::{Instant, sleep_until};

use super::*;

const UID: &str = "uid-1";
const CID: &str = "c1";

struct Fixture {
    runtime: FakeRuntime,
    cache: PodCache,
    manager: Manager,
    updates: UpdateReceiver,
}

fn pod(container: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": UID},
        "spec": {"containers": [container]},
    }))
    .expect("pod")
}

fn exec(cmd: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut p = json!({"exec": {"command": [cmd]}});
    for (k, v) in extra.as_object().expect("object") {
        p[k] = v.clone();
    }
    p
}

fn exit(code: i32) -> ExecResult {
    ExecResult {
        exit_code: code,
        ..Default::default()
    }
}

fn running(cache: &PodCache, id: &str) {
    let status = PodStatus {
        uid: PodUid::from(UID),
        name: "web".into(),
        namespace: "default".into(),
        ips: vec!["10.0.0.2".into()],
        containers: vec![ContainerStatus {
            id: id.into(),
            name: "app".into(),
            state: kubelet_core::runtime::ContainerState::Running,
            started_at: Some(kubelet_core::time::now()),
            ..Default::default()
        }],
        ..Default::default()
    };
    cache.set(&PodUid::from(UID), status, Instant::now());
}

/// A manager whose start is more than `age` in the past (no jitter for shorter periods).
async fn fixture(age: Duration) -> Fixture {
    let runtime = FakeRuntime::new();
    let cache = PodCache::new();
    running(&cache, CID);
    let (results, updates) = Results::new();
    let manager = Manager::new(
        Arc::new(runtime.clone()),
        cache.clone(),
        results,
        CancellationToken::new(),
    );
    tokio::time::sleep(age).await;
    Fixture {
        runtime,
        cache,
        manager,
        updates,
    }
}

fn execs(rt: &FakeRuntime, cmd: &str) -> usize {
    rt.calls()
        .iter()
        .filter(|c| matches!(c, Call::ExecSync(_, command) if command.first().map(String::as_str) == Some(cmd)))
        .count()
}

fn drain(rx: &mut UpdateReceiver) -> Vec<(ProbeKind, ProbeResult)> {
    let mut out = Vec::new();
    while let Ok(Update { kind, result, .. }) = rx.try_recv() {
        out.push((kind, result));
    }
    out
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[tokio::test(start_paused = true)]
async fn liveness_fails_after_failure_threshold_periods() {
    let mut f = fixture(secs(60.0)).await;
    f.runtime.set_exec_result(CID, exit(1));
    let t0 = Instant::now();
    f.manager.add_pod(&pod(json!({"name": "app", "livenessProbe": exec("live", json!({"periodSeconds": 10, "failureThreshold": 3}))})));
    sleep_until(t0 + secs(0.5)).await;
    // No jitter for an old manager: the first probe runs at once.
    assert_eq!(execs(&f.runtime, "live"), 1);
    assert_eq!(
        drain(&mut f.updates),
        [(ProbeKind::Liveness, ProbeResult::Success)]
    );
    sleep_until(t0 + secs(19.5)).await;
    assert_eq!(execs(&f.runtime, "live"), 2);
    assert!(drain(&mut f.updates).is_empty());
    sleep_until(t0 + secs(20.5)).await;
    assert_eq!(execs(&f.runtime, "live"), 3);
    assert_eq!(
        drain(&mut f.updates),
        [(ProbeKind::Liveness, ProbeResult::Failure)]
    );
    // On hold until a new instance: no more probes of this one.
    sleep_until(t0 + secs(60.5)).await;
    assert_eq!(execs(&f.runtime, "live"), 3);
    // A new instance starts over from Success.
    running(&f.cache, "c2");
    f.runtime.set_exec_result("c2", exit(0));
    sleep_until(t0 + secs(70.5)).await;
    assert_eq!(execs(&f.runtime, "live"), 4);
    assert_eq!(
        drain(&mut f.updates),
        [(ProbeKind::Liveness, ProbeResult::Success)]
    );
    assert_eq!(f.manager.inner.results.liveness.get(CID), None);
}

#[tokio::test(start_paused = true)]
async fn readiness_success_and_failure_thresholds() {
    let mut f = fixture(secs(60.0)).await;
    f.runtime.set_exec_result(CID, exit(0));
    let t0 = Instant::now();
    let p = pod(
        json!({"name": "app", "readinessProbe": exec("ready", json!({"periodSeconds": 5, "successThreshold": 2, "failureThreshold": 2}))}),
    );
    let uid = PodUid::from(UID);
    f.manager.add_pod(&p);
    sleep_until(t0 + secs(0.5)).await;
    // Readiness starts as a failure; one success is not enough.
    assert_eq!(
        drain(&mut f.updates),
        [(ProbeKind::Readiness, ProbeResult::Failure)]
    );
    assert_eq!(
        f.manager.readiness(&uid, "app", "containerd://c1"),
        ProbeState::Failure
    );
    sleep_until(t0 + secs(6.0)).await;
    assert_eq!(
        drain(&mut f.updates),
        [(ProbeKind::Readiness, ProbeResult::Success)]
    );
    assert_eq!(
        f.manager.readiness(&uid, "app", "containerd://c1"),
        ProbeState::Success
    );
    f.runtime.set_exec_result(CID, exit(1));
    sleep_until(t0 + secs(11.0)).await;
    assert!(drain(&mut f.updates).is_empty());
    sleep_until(t0 + secs(16.0)).await;
    assert_eq!(
        drain(&mut f.updates),
        [(ProbeKind::Readiness, ProbeResult::Failure)]
    );
    // Readiness failures do not put the worker on hold.
    f.runtime.set_exec_result(CID, exit(0));
    sleep_until(t0 + secs(26.0)).await;
    assert_eq!(
        drain(&mut f.updates),
        [(ProbeKind::Readiness, ProbeResult::Success)]
    );
    // The first run, the one the not-ready query at 0.5 s triggered, and five periodic runs on
    // the period restarted from it (0.5 s + k × 5 s).
    assert_eq!(execs(&f.runtime, "ready"), 7);
    // Containers without the probe.
    assert_eq!(
        f.manager.readiness(&uid, "other", "containerd://x"),
        ProbeState::NoProbe
    );
    assert_eq!(
        f.manager.startup(&uid, "app", "containerd://c1"),
        ProbeState::NoProbe
    );
}

#[tokio::test(start_paused = true)]
async fn initial_delay_counts_from_container_start() {
    let f = fixture(secs(60.0)).await;
    let t0 = Instant::now();
    f.manager.add_pod(&pod(json!({"name": "app", "livenessProbe": exec("live", json!({"periodSeconds": 5, "initialDelaySeconds": 7}))})));
    sleep_until(t0 + secs(9.5)).await;
    assert_eq!(execs(&f.runtime, "live"), 0);
    sleep_until(t0 + secs(10.5)).await;
    assert_eq!(execs(&f.runtime, "live"), 1);
    sleep_until(t0 + secs(15.5)).await;
    assert_eq!(execs(&f.runtime, "live"), 2);
}

#[tokio::test(start_paused = true)]
async fn first_run_is_jittered_within_one_period_after_a_start() {
    // 20 pods' workers created right after the manager: first runs spread over [0, 10 s).
    let f = fixture(Duration::ZERO).await;
    let t0 = Instant::now();
    for i in 0..20 {
        let mut p = pod(
            json!({"name": "app", "livenessProbe": exec("live", json!({"periodSeconds": 10}))}),
        );
        p.metadata.uid = Some(format!("uid-{i}"));
        let mut st = (*f.cache.get(&PodUid::from(UID)).expect("status").0).clone();
        st.uid = PodUid::from(format!("uid-{i}"));
        f.cache.set(&st.uid.clone(), st, Instant::now());
        f.manager.add_pod(&p);
    }
    let mut seen = Vec::new();
    let mut last = 0;
    while Instant::now() < t0 + secs(10.0) {
        tokio::time::sleep(secs(0.1)).await;
        let n = execs(&f.runtime, "live");
        if n > last {
            seen.push(Instant::now() - t0);
            last = n;
        }
    }
    assert_eq!(last, 20, "every worker ran once within the first period");
    assert!(seen.len() > 5, "first runs are spread out: {seen:?}");
    // Then each runs once per period.
    tokio::time::sleep(secs(10.0)).await;
    assert_eq!(execs(&f.runtime, "live"), 40);
}

#[tokio::test(start_paused = true)]
async fn startup_gates_liveness_until_it_succeeds() {
    let mut f = fixture(secs(60.0)).await;
    f.runtime.set_exec_result(CID, exit(1));
    let t0 = Instant::now();
    let uid = PodUid::from(UID);
    f.manager.add_pod(&pod(json!({
        "name": "app",
        "startupProbe": exec("start", json!({"periodSeconds": 1, "failureThreshold": 30})),
        "livenessProbe": exec("live", json!({"periodSeconds": 1, "failureThreshold": 1})),
        "readinessProbe": exec("ready", json!({"periodSeconds": 1})),
    })));
    sleep_until(t0 + secs(4.5)).await;
    assert_eq!(execs(&f.runtime, "start"), 5);
    assert_eq!(
        (execs(&f.runtime, "live"), execs(&f.runtime, "ready")),
        (0, 0)
    );
    assert_eq!(
        f.manager.startup(&uid, "app", "containerd://c1"),
        ProbeState::Pending
    );
    f.runtime.set_exec_result(CID, exit(0));
    sleep_until(t0 + secs(5.5)).await;
    assert_eq!(
        f.manager.startup(&uid, "app", "containerd://c1"),
        ProbeState::Success
    );
    assert!(drain(&mut f.updates).contains(&(ProbeKind::Startup, ProbeResult::Success)));
    sleep_until(t0 + secs(8.5)).await;
    // The startup probe stops once it succeeded; the others run every period.
    assert_eq!(execs(&f.runtime, "start"), 6);
    assert!(
        execs(&f.runtime, "live") >= 3,
        "{}",
        execs(&f.runtime, "live")
    );
    assert!(execs(&f.runtime, "ready") >= 3);
}

#[tokio::test(start_paused = true)]
async fn startup_failure_is_reported_after_threshold() {
    let mut f = fixture(secs(60.0)).await;
    f.runtime.set_exec_result(CID, exit(1));
    let t0 = Instant::now();
    f.manager.add_pod(&pod(json!({"name": "app", "startupProbe": exec("start", json!({"periodSeconds": 2, "failureThreshold": 3}))})));
    sleep_until(t0 + secs(3.5)).await;
    assert_eq!(
        drain(&mut f.updates),
        [(ProbeKind::Startup, ProbeResult::Unknown)]
    );
    sleep_until(t0 + secs(4.5)).await;
    assert_eq!(
        drain(&mut f.updates),
        [(ProbeKind::Startup, ProbeResult::Failure)]
    );
}

#[tokio::test(start_paused = true)]
async fn stop_liveness_keeps_readiness_and_remove_stops_all() {
    let f = fixture(secs(60.0)).await;
    let p = pod(json!({
        "name": "app",
        "livenessProbe": exec("live", json!({"periodSeconds": 1})),
        "readinessProbe": exec("ready", json!({"periodSeconds": 1})),
    }));
    f.manager.add_pod(&p);
    f.manager.add_pod(&p);
    assert_eq!(f.manager.worker_count(), 2);
    tokio::time::sleep(secs(2.5)).await;
    f.manager.stop_liveness_and_startup(&p);
    assert_eq!(f.manager.worker_count(), 1);
    let (live, ready) = (execs(&f.runtime, "live"), execs(&f.runtime, "ready"));
    tokio::time::sleep(secs(3.0)).await;
    assert_eq!(execs(&f.runtime, "live"), live);
    assert_eq!(execs(&f.runtime, "ready"), ready + 3);
    f.manager.cleanup_pods(&HashSet::from([PodUid::from(UID)]));
    assert_eq!(f.manager.worker_count(), 1);
    f.manager.remove_pod(&p);
    assert_eq!(f.manager.worker_count(), 0);
    tokio::time::sleep(secs(3.0)).await;
    assert_eq!(execs(&f.runtime, "ready"), ready + 3);
    assert_eq!(f.manager.inner.results.readiness.get(CID), None);
}

/// Issue 17: the runtime cache shows a container between CreateContainer and StartContainer;
/// a liveness Failure set then made the runtime kill the container as soon as it ran.
#[tokio::test(start_paused = true)]
async fn a_created_container_waits_for_its_start_without_failing() {
    let mut f = fixture(secs(60.0)).await;
    let set_state = |state| {
        let mut st = (*f.cache.get(&PodUid::from(UID)).expect("status").0).clone();
        st.containers[0].state = state;
        f.cache.set(&PodUid::from(UID), st, Instant::now());
    };
    set_state(kubelet_core::runtime::ContainerState::Created);
    let t0 = Instant::now();
    f.manager.add_pod(&pod(
        json!({"name": "app", "livenessProbe": exec("live", json!({"periodSeconds": 1}))}),
    ));
    sleep_until(t0 + secs(2.5)).await;
    assert_eq!(execs(&f.runtime, "live"), 0);
    assert_eq!(
        drain(&mut f.updates),
        [(ProbeKind::Liveness, ProbeResult::Success)]
    );
    assert_eq!(
        f.manager.inner.results.liveness.get(CID),
        Some(ProbeResult::Success)
    );
    set_state(kubelet_core::runtime::ContainerState::Running);
    sleep_until(t0 + secs(3.5)).await;
    assert_eq!(execs(&f.runtime, "live"), 1);
    assert!(drain(&mut f.updates).is_empty());
}

#[tokio::test(start_paused = true)]
async fn exited_container_fails_and_never_policy_stops_the_worker() {
    let mut f = fixture(secs(60.0)).await;
    let mut st = (*f.cache.get(&PodUid::from(UID)).expect("status").0).clone();
    st.containers[0].state = kubelet_core::runtime::ContainerState::Exited;
    f.cache.set(&PodUid::from(UID), st, Instant::now());
    let mut p =
        pod(json!({"name": "app", "readinessProbe": exec("ready", json!({"periodSeconds": 1}))}));
    p.spec.as_mut().expect("spec").restart_policy = Some("Never".into());
    f.manager.add_pod(&p);
    tokio::time::sleep(secs(1.5)).await;
    assert_eq!(
        drain(&mut f.updates),
        [(ProbeKind::Readiness, ProbeResult::Failure)]
    );
    assert_eq!(f.manager.worker_count(), 0);
    assert_eq!(execs(&f.runtime, "ready"), 0);
}

#[tokio::test(start_paused = true)]
async fn readiness_runs_at_once_when_status_asks_after_startup() {
    let mut f = fixture(secs(60.0)).await;
    f.runtime.set_exec_result(CID, exit(1));
    let t0 = Instant::now();
    let uid = PodUid::from(UID);
    f.manager.add_pod(&pod(json!({
        "name": "app",
        "startupProbe": exec("start", json!({"periodSeconds": 1, "failureThreshold": 10})),
        "readinessProbe": exec("ready", json!({"periodSeconds": 10})),
    })));
    sleep_until(t0 + secs(2.5)).await;
    f.runtime.set_exec_result(CID, exit(0));
    sleep_until(t0 + secs(3.2)).await;
    assert_eq!(
        drain(&mut f.updates),
        [
            (ProbeKind::Startup, ProbeResult::Unknown),
            (ProbeKind::Readiness, ProbeResult::Failure),
            (ProbeKind::Startup, ProbeResult::Success),
        ]
    );
    assert_eq!(execs(&f.runtime, "ready"), 0);
    // Status generation of the now started container (the sync loop's reaction to the
    // startup update) finds it not ready: its readiness probe runs now, not at t0 + 10 s.
    assert_eq!(
        f.manager.readiness(&uid, "app", "containerd://c1"),
        ProbeState::Failure
    );
    sleep_until(t0 + secs(3.3)).await;
    assert_eq!(execs(&f.runtime, "ready"), 1);
    assert_eq!(
        drain(&mut f.updates),
        [(ProbeKind::Readiness, ProbeResult::Success)]
    );
    // A ready container triggers nothing; the period restarts from the manual run (upstream
    // `probeTicker.Reset`): the next run is at 3.2 s + 10 s, not at the worker's 10 s tick.
    assert_eq!(
        f.manager.readiness(&uid, "app", "containerd://c1"),
        ProbeState::Success
    );
    sleep_until(t0 + secs(12.5)).await;
    assert_eq!(execs(&f.runtime, "ready"), 1);
    sleep_until(t0 + secs(13.5)).await;
    assert_eq!(execs(&f.runtime, "ready"), 2);
    // Containers without a readiness worker: nothing to trigger.
    assert_eq!(
        f.manager.readiness(&uid, "other", "containerd://x"),
        ProbeState::NoProbe
    );
}

#[tokio::test(start_paused = true)]
async fn every_failed_probe_is_an_unhealthy_event_on_the_container() {
    let runtime = FakeRuntime::new();
    let cache = PodCache::new();
    running(&cache, CID);
    let (results, _updates) = Results::new();
    let recorder = kubelet_core::testing::CollectingRecorder::default();
    let manager = Manager::new(
        Arc::new(runtime.clone()),
        cache,
        results,
        CancellationToken::new(),
    )
    .with_event_recorder(Arc::new(recorder.clone()));
    tokio::time::sleep(secs(60.0)).await;
    runtime.set_exec_result(
        CID,
        ExecResult {
            exit_code: 1,
            stdout: b"not ok".to_vec(),
            ..Default::default()
        },
    );
    let t0 = Instant::now();
    manager.add_pod(&pod(json!({"name": "app", "readinessProbe": exec("ready", json!({"periodSeconds": 10, "failureThreshold": 3}))})));
    sleep_until(t0 + secs(20.5)).await;
    let events = recorder.for_field("spec.containers{app}");
    assert_eq!(events.len(), 3, "{events:?}");
    for (reason, message) in &events {
        assert_eq!(reason, "Unhealthy");
        assert!(
            message.starts_with("Readiness probe failed: ") && message.ends_with("not ok"),
            "{message}"
        );
    }
    let event = &recorder.events()[0];
    assert_eq!(event.event_type, kubelet_core::events::EventType::Warning);
    assert_eq!(event.object.uid.as_deref(), Some(UID));
}

/// Upstream's `prober_probe_total`: every probe that ran, by result, before thresholds; the
/// series go when the worker stops.
#[tokio::test(start_paused = true)]
async fn probe_results_are_counted() {
    let runtime = FakeRuntime::new();
    let cache = PodCache::new();
    running(&cache, CID);
    let (results, _updates) = Results::new();
    let metrics = KubeletMetrics::default();
    let manager = Manager::new(
        Arc::new(runtime.clone()),
        cache.clone(),
        results,
        CancellationToken::new(),
    )
    .with_metrics(metrics.clone());
    tokio::time::sleep(secs(60.0)).await;
    runtime.set_exec_result(CID, exit(0));
    let t0 = Instant::now();
    let p = pod(
        json!({"name": "app", "readinessProbe": exec("ready", json!({"periodSeconds": 5, "failureThreshold": 3}))}),
    );
    manager.add_pod(&p);
    let labels = |result| kubelet_core::metrics::ProbeLabels {
        probe_type: "Readiness",
        result,
        container: "app".into(),
        pod: "web".into(),
        namespace: "default".into(),
        pod_uid: UID.into(),
    };
    sleep_until(t0 + secs(0.5)).await;
    let mut registry = kubelet_core::metrics::prometheus_client::registry::Registry::default();
    metrics.register_probes(&mut registry);
    let mut text = String::new();
    kubelet_core::metrics::prometheus_client::encoding::text::encode(&mut text, &registry)
        .expect("encode");
    assert_eq!(metrics.probe_total(&labels("successful")), 1, "{text}");
    // Upstream's `prober_probe_duration_seconds`: successful probes, no result or UID label.
    let duration_labels = kubelet_core::metrics::ProbeDurationLabels::from(&labels("successful"));
    assert_eq!(metrics.probe_duration_count(&duration_labels), 1);
    text.clear();
    kubelet_core::metrics::prometheus_client::encoding::text::encode(&mut text, &registry)
        .expect("encode");
    assert!(
        text.contains(r#"prober_probe_duration_seconds_count{probe_type="Readiness",container="app",pod="web",namespace="default"} 1"#),
        "{text}"
    );
    runtime.set_exec_result(CID, exit(1));
    sleep_until(t0 + secs(5.5)).await;
    // Counted although one failure is below the failure threshold; failures are not timed.
    assert_eq!(metrics.probe_total(&labels("failed")), 1);
    assert_eq!(metrics.probe_total(&labels("successful")), 1);
    assert_eq!(metrics.probe_duration_count(&duration_labels), 1);
    manager.remove_pod(&p);
    sleep_until(t0 + secs(6.0)).await;
    assert_eq!(metrics.probe_total(&labels("successful")), 0);
    assert_eq!(metrics.probe_total(&labels("failed")), 0);
    assert_eq!(metrics.probe_duration_count(&duration_labels), 0);
}
