//! The sync loop drives any [`SyncHandler`]: each input reaches the handler method upstream's
//! `syncLoopIteration` calls, checked on a [`MockSyncHandler`].

use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::cache::PodCache;
use crate::config::FILE_SOURCE;
use crate::pod::PodUid;
use crate::probe::{ProbeKind, ProbeResult, Update};
use crate::sync::{CleanupError, MockSyncHandler};
use crate::testing::{FakePleg, FakeRuntime, pod};

/// What the mock handler was called with, in order.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, entry: String) {
        self.0.lock().expect("log lock").push(entry);
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().expect("log lock"))
    }
}

fn names(pods: &[Pod]) -> String {
    pods.iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect::<Vec<_>>()
        .join(",")
}

/// Knobs the test turns while the loop runs.
#[derive(Clone, Default)]
struct Script {
    due: Arc<Mutex<Vec<Pod>>>,
    sources_ready: Arc<Mutex<bool>>,
}

fn mock(log: &Log, script: &Script, known: Pod) -> MockSyncHandler {
    let mut h = MockSyncHandler::new();
    let l = log.clone();
    h.expect_handle_pod_additions()
        .returning(move |p| l.push(format!("additions {}", names(&p))));
    let l = log.clone();
    h.expect_handle_pod_updates()
        .returning(move |p| l.push(format!("updates {}", names(&p))));
    let l = log.clone();
    h.expect_handle_pod_removes()
        .returning(move |p| l.push(format!("removes {}", names(&p))));
    let l = log.clone();
    h.expect_handle_pod_reconcile()
        .returning(move |p| l.push(format!("reconcile {}", names(&p))));
    let l = log.clone();
    h.expect_handle_pod_syncs()
        .returning(move |p| l.push(format!("syncs {}", names(&p))));
    let l = log.clone();
    h.expect_handle_pod_cleanups().returning(move || {
        l.push("cleanups".into());
        Err(CleanupError::ListRuntimePods(
            crate::runtime::Error::Unavailable("down".into()),
        ))
    });
    h.expect_pod_by_uid()
        .returning(move |uid| (*uid == known.uid()).then(|| known.clone()));
    let due = script.due.clone();
    h.expect_pods_to_sync()
        .returning(move || std::mem::take(&mut *due.lock().expect("due lock")));
    let ready = script.sources_ready.clone();
    h.expect_sources_ready()
        .returning(move || *ready.lock().expect("ready lock"));
    h
}

struct Inputs {
    updates: mpsc::Sender<PodUpdate>,
    pleg: mpsc::Sender<pleg::Event>,
    probes: probe::UpdateSender,
    token: CancellationToken,
}

async fn start(handler: MockSyncHandler) -> Inputs {
    let runtime = Arc::new(FakeRuntime::new());
    let state = RuntimeState::new(Arc::new(FakePleg::new(runtime.clone(), PodCache::new())));
    state.update(runtime.as_ref()).await;
    let (updates, updates_rx) = mpsc::channel(8);
    let (pleg, pleg_rx) = mpsc::channel(8);
    let (probes, probes_rx) = mpsc::unbounded_channel();
    let token = CancellationToken::new();
    tokio::spawn(run(
        Arc::new(handler),
        Channels {
            updates: updates_rx,
            pleg_events: pleg_rx,
            probe_updates: probes_rx,
        },
        state,
        Health::new(Duration::from_secs(60)),
        Config::default(),
        token.clone(),
    ));
    Inputs {
        updates,
        pleg,
        probes,
        token,
    }
}

/// Lets the loop handle what was sent (less than one sync tick of paused time).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

fn update(op: Operation, pods: Vec<Pod>) -> PodUpdate {
    PodUpdate {
        pods,
        op,
        source: FILE_SOURCE.into(),
    }
}

fn pleg_event(id: PodUid, kind: pleg::EventType) -> pleg::Event {
    pleg::Event {
        id,
        kind,
        container_id: None,
    }
}

fn probe_update(kind: ProbeKind, result: ProbeResult, pod_uid: PodUid) -> Update {
    Update {
        kind,
        container_id: "c1".into(),
        result,
        pod_uid,
    }
}

#[tokio::test(start_paused = true)]
async fn config_updates_reach_the_handler_method_of_their_operation() {
    let (log, script) = (Log::default(), Script::default());
    let inputs = start(mock(&log, &script, pod("known"))).await;
    for (op, name) in [
        (Operation::Add, "a"),
        (Operation::Update, "u"),
        (Operation::Delete, "d"),
        (Operation::Remove, "r"),
        (Operation::Reconcile, "c"),
    ] {
        inputs
            .updates
            .send(update(op, vec![pod(name)]))
            .await
            .expect("loop running");
    }
    settle().await;
    assert_eq!(
        log.take(),
        [
            "additions a",
            "updates u",
            "updates d",
            "removes r",
            "reconcile c"
        ]
    );
    inputs.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn pleg_events_and_probe_changes_sync_the_pod_they_are_about() {
    let (log, script) = (Log::default(), Script::default());
    let known = pod("known");
    let inputs = start(mock(&log, &script, known.clone())).await;
    let send_event = |kind| inputs.pleg.send(pleg_event(known.uid(), kind));
    send_event(pleg::EventType::ContainerDied)
        .await
        .expect("loop running");
    // Not sync-worthy (upstream `isSyncPodWorthy`).
    send_event(pleg::EventType::ContainerRemoved)
        .await
        .expect("loop running");
    // A pod with no config.
    inputs
        .pleg
        .send(pleg_event(
            PodUid("stranger".into()),
            pleg::EventType::ContainerStarted,
        ))
        .await
        .expect("loop running");
    settle().await;
    assert_eq!(log.take(), ["syncs known"]);

    for (kind, result) in [
        (ProbeKind::Liveness, ProbeResult::Success),
        (ProbeKind::Liveness, ProbeResult::Failure),
        (ProbeKind::Readiness, ProbeResult::Success),
        (ProbeKind::Startup, ProbeResult::Failure),
    ] {
        inputs
            .probes
            .send(probe_update(kind, result, known.uid()))
            .expect("loop running");
    }
    settle().await;
    // The liveness success is no reason to sync; the other three are.
    assert_eq!(log.take(), ["syncs known", "syncs known", "syncs known"]);
    inputs.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn the_sync_tick_syncs_due_pods_and_housekeeping_waits_for_the_sources() {
    let (log, script) = (Log::default(), Script::default());
    let inputs = start(mock(&log, &script, pod("known"))).await;
    // Nothing due and sources not ready: ticks and housekeeping pass without a call.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(log.take(), Vec::<String>::new());

    script
        .due
        .lock()
        .expect("due lock")
        .extend([pod("x"), pod("y")]);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(log.take(), ["syncs x,y"]);

    *script.sources_ready.lock().expect("ready lock") = true;
    tokio::time::sleep(Duration::from_millis(4_100)).await;
    // Every 2 s; a failed pass is logged and retried on the next tick.
    assert_eq!(log.take(), ["cleanups", "cleanups"]);

    // The loop outlives a closed config channel and stops when cancelled.
    drop(inputs.updates);
    script.due.lock().expect("due lock").push(pod("z"));
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(log.take().contains(&"syncs z".to_owned()));
    inputs.token.cancel();
    settle().await;
    script.due.lock().expect("due lock").push(pod("late"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(log.take(), Vec::<String>::new());
}
