//! The writer against a scripted API server behind a real `kube::Client`, on a paused clock.

use std::sync::atomic::AtomicUsize;

use http::{Method, StatusCode};
use kubelet_core::events::{container_ref_by_name, node_ref, reasons};
use serde_json::{Value, json};

use super::*;
use crate::cluster::test_api::{self, Journal, status};

const EVENTS: &str = "/api/v1/namespaces/default/events";

fn pod() -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "uid-web"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }))
    .expect("pod")
}

/// A server that stores what it is sent and answers the scripted statuses first.
/// Failures the server answers next, popped from the end.
type Script = Arc<std::sync::Mutex<Vec<(StatusCode, &'static str)>>>;

fn server(failures: Vec<(StatusCode, &'static str)>) -> (kube::Client, Journal, Script) {
    let script = Arc::new(std::sync::Mutex::new(failures));
    let pending = script.clone();
    let version = Arc::new(AtomicUsize::new(0));
    let (client, journal) = test_api::client(move |call| {
        if let Some((code, reason)) = pending.lock().expect("lock").pop() {
            return status(code, reason);
        }
        let rv = version.fetch_add(1, Ordering::SeqCst) + 1;
        let mut body: Value = call.body.clone();
        body["metadata"]["resourceVersion"] = json!(rv.to_string());
        (StatusCode::CREATED, body)
    });
    (client, journal, script)
}

fn spawn(client: kube::Client, settings: Settings) -> (ApiEventRecorder, CancellationToken) {
    let (recorder, writer) = ApiEventRecorder::new(client, "node-1", settings);
    let token = CancellationToken::new();
    tokio::spawn(writer.run(token.clone()));
    (recorder, token)
}

/// Lets the writer run until it waits for the next event (or a timer).
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_event_is_created_as_upstream_makes_it_and_a_repeat_patches_its_count() {
    let (client, journal, _) = server(Vec::new());
    let (recorder, token) = spawn(client, Settings::default());
    let object = container_ref_by_name(&pod(), "app");
    recorder.event(&object, EventType::Normal, reasons::PULLED_IMAGE, "pulled");
    settle().await;
    recorder.event(&object, EventType::Normal, reasons::PULLED_IMAGE, "pulled");
    settle().await;
    let calls = journal.calls();
    assert_eq!(calls.len(), 2, "{:?}", journal.lines());
    assert_eq!(
        (calls[0].method.clone(), calls[0].path.as_str()),
        (Method::POST, EVENTS)
    );
    let created = &calls[0].body;
    assert_eq!(created["reason"], "Pulled");
    assert_eq!(created["type"], "Normal");
    assert_eq!(created["count"], 1);
    assert_eq!(
        created["source"],
        json!({"component": "kubelet", "host": "node-1"})
    );
    assert_eq!(
        created["involvedObject"]["fieldPath"],
        "spec.containers{app}"
    );
    assert_eq!(created["involvedObject"]["uid"], "uid-web");
    let name = created["metadata"]["name"].as_str().expect("name");
    assert!(name.starts_with("web."), "{name}");
    assert_eq!(calls[1].method, Method::PATCH);
    assert_eq!(calls[1].path, format!("{EVENTS}/{name}"));
    assert_eq!(calls[1].body["count"], 2);
    assert_eq!(calls[1].body["message"], "pulled");
    token.cancel();
}

#[tokio::test(start_paused = true)]
async fn node_events_go_to_the_default_namespace() {
    let (client, journal, _) = server(Vec::new());
    let (recorder, token) = spawn(client, Settings::default());
    recorder.event(
        &node_ref("node-1"),
        EventType::Normal,
        reasons::STARTING_KUBELET,
        "Starting kubelet.",
    );
    settle().await;
    let calls = journal.calls();
    assert_eq!(calls[0].path, EVENTS);
    assert_eq!(calls[0].body["involvedObject"]["kind"], "Node");
    assert_eq!(calls[0].body["message"], "Starting kubelet.");
    token.cancel();
}

#[tokio::test(start_paused = true)]
async fn server_errors_are_retried_and_rejections_are_not() {
    // Scripted from the end: two 503s, then success.
    let (client, journal, script) = server(vec![
        (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable"),
        (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable"),
    ]);
    let (recorder, token) = spawn(client, Settings::default());
    let object = container_ref_by_name(&pod(), "app");
    recorder.event(
        &object,
        EventType::Warning,
        reasons::FAILED_TO_PULL_IMAGE,
        "a",
    );
    settle().await;
    assert_eq!(journal.calls().len(), 1);
    tokio::time::sleep(Duration::from_secs(21)).await;
    settle().await;
    assert_eq!(journal.calls().len(), 3, "{:?}", journal.lines());

    // A rejected event is dropped at once: the next one goes out.
    script
        .lock()
        .expect("lock")
        .push((StatusCode::UNPROCESSABLE_ENTITY, "Invalid"));
    recorder.event(
        &object,
        EventType::Warning,
        reasons::FAILED_TO_PULL_IMAGE,
        "b",
    );
    recorder.event(
        &object,
        EventType::Warning,
        reasons::FAILED_TO_PULL_IMAGE,
        "c",
    );
    settle().await;
    let calls = journal.calls();
    assert_eq!(calls.len(), 5, "{:?}", journal.lines());
    assert_eq!(calls[4].body["message"], "c");
    token.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_patch_of_a_deleted_event_creates_it_again() {
    let (client, journal, script) = server(Vec::new());
    let (recorder, token) = spawn(client, Settings::default());
    let object = container_ref_by_name(&pod(), "app");
    recorder.event(&object, EventType::Normal, reasons::KILLING_CONTAINER, "k");
    settle().await;
    script
        .lock()
        .expect("lock")
        .push((StatusCode::NOT_FOUND, "NotFound"));
    recorder.event(&object, EventType::Normal, reasons::KILLING_CONTAINER, "k");
    settle().await;
    let lines = journal.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[1].starts_with("PATCH "));
    assert_eq!(lines[2], format!("POST {EVENTS}"));
    assert_eq!(journal.calls()[2].body["count"], 2);
    token.cancel();
}

#[tokio::test(start_paused = true)]
async fn writes_follow_the_event_qps_and_burst() {
    let (client, journal, _) = server(Vec::new());
    let settings = Settings::default().with_limits(Limits { qps: 1.0, burst: 2 });
    let (recorder, token) = spawn(client, settings);
    let object = container_ref_by_name(&pod(), "app");
    let start = Instant::now();
    for i in 0..4 {
        recorder.event(&object, EventType::Normal, &format!("R{i}"), "m");
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let at: Vec<Duration> = journal.calls().iter().map(|c| c.at - start).collect();
    assert_eq!(at.len(), 4);
    assert!(at[1] < Duration::from_millis(10), "{at:?}");
    assert!(
        at[2] >= Duration::from_secs(1) && at[3] >= Duration::from_secs(2),
        "{at:?}"
    );
    token.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_drops_events_and_counts_them() {
    let (client, journal, _) = server(Vec::new());
    let settings = Settings {
        queue: 2,
        ..Settings::default()
    };
    let (recorder, writer) = ApiEventRecorder::new(client, "node-1", settings);
    let object = container_ref_by_name(&pod(), "app");
    for i in 0..5 {
        recorder.event(&object, EventType::Normal, &format!("R{i}"), "m");
    }
    assert_eq!(recorder.dropped(), 3);
    let token = CancellationToken::new();
    tokio::spawn(writer.run(token.clone()));
    settle().await;
    assert_eq!(journal.calls().len(), 2);
    token.cancel();
}
