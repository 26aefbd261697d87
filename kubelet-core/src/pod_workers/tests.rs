use std::sync::Mutex as StdMutex;

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::*;
use crate::sync::Result as SyncResult;
use crate::testing::{FakePleg, FakeRuntime, pod, pod_with};

#[derive(Clone, Debug, PartialEq)]
enum Seen {
    Sync(SyncPodType, String),
    Terminating(Option<i64>),
    TerminatingRuntime,
    Terminated,
}

/// A syncer that records calls, can be told to fail or report terminal, and can block (syncs
/// before they are recorded, terminations after).
struct RecordingSyncer {
    seen: mpsc::UnboundedSender<Seen>,
    terminal: StdMutex<bool>,
    fail: StdMutex<u32>,
    backoff: StdMutex<Option<Duration>>,
    gate: tokio::sync::Semaphore,
    /// Terminations with a grace period above this never finish.
    hang_terminating_above: StdMutex<Option<i64>>,
}

impl RecordingSyncer {
    fn new() -> (Arc<Self>, mpsc::UnboundedReceiver<Seen>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let s = Arc::new(Self {
            seen: tx,
            terminal: StdMutex::new(false),
            fail: StdMutex::new(0),
            backoff: StdMutex::new(None),
            gate: tokio::sync::Semaphore::new(1000),
            hang_terminating_above: StdMutex::new(None),
        });
        (s, rx)
    }
}

#[async_trait]
impl PodSyncer for RecordingSyncer {
    async fn sync_pod(&self, kind: SyncPodType, pod: &Pod, _s: &PodStatus) -> SyncResult<bool> {
        let _permit = self
            .gate
            .acquire()
            .await
            .map_err(|e| crate::sync::Error::Other(e.to_string()))?;
        let image = pod.containers()[0].image.clone().unwrap_or_default();
        let _ = self.seen.send(Seen::Sync(kind, image));
        if let Some(retry_after) = self.backoff.lock().expect("lock").take() {
            return Err(crate::sync::Error::Backoff {
                message: "app: CrashLoopBackOff: back-off".into(),
                retry_after,
            });
        }
        {
            let mut fail = self.fail.lock().expect("lock");
            if *fail > 0 {
                *fail -= 1;
                return Err(crate::sync::Error::Other("scripted failure".into()));
            }
        }
        Ok(*self.terminal.lock().expect("lock"))
    }
    async fn sync_terminating_pod(
        &self,
        _p: &Pod,
        _s: &PodStatus,
        grace: Option<i64>,
    ) -> SyncResult<()> {
        let _ = self.seen.send(Seen::Terminating(grace));
        let _permit = self
            .gate
            .acquire()
            .await
            .map_err(|e| crate::sync::Error::Other(e.to_string()))?;
        let limit = *self.hang_terminating_above.lock().expect("lock");
        if let (Some(limit), Some(grace)) = (limit, grace)
            && grace > limit
        {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
    async fn sync_terminating_runtime_pod(&self, _r: &RunningPod) -> SyncResult<()> {
        let _ = self.seen.send(Seen::TerminatingRuntime);
        Ok(())
    }
    async fn sync_terminated_pod(&self, _p: &Pod, _s: &PodStatus) -> SyncResult<()> {
        let _ = self.seen.send(Seen::Terminated);
        Ok(())
    }
}

fn workers(syncer: Arc<RecordingSyncer>) -> PodWorkers {
    workers_on(syncer, FakeRuntime::new())
}

/// Workers whose status refreshes read `runtime`.
fn workers_on(syncer: Arc<RecordingSyncer>, runtime: FakeRuntime) -> PodWorkers {
    workers_sharing(syncer, &runtime, &PodCache::new())
}

/// Workers over `runtime` whose PLEG writes, and whose workers read, `cache`.
fn workers_sharing(
    syncer: Arc<RecordingSyncer>,
    runtime: &FakeRuntime,
    cache: &PodCache,
) -> PodWorkers {
    let pleg = Arc::new(FakePleg::new(Arc::new(runtime.clone()), cache.clone()));
    PodWorkers::new(
        syncer,
        pleg,
        cache.clone(),
        Config::default(),
        TaskTracker::new(),
        CancellationToken::new(),
    )
}

fn create(p: Pod) -> UpdatePodOptions {
    UpdatePodOptions {
        kind: SyncPodType::Create,
        pod: Some(p),
        running_pod: None,
        grace_period_override: None,
        evict: false,
    }
}

fn kill(p: Pod, grace: Option<i64>) -> UpdatePodOptions {
    UpdatePodOptions {
        kind: SyncPodType::Kill,
        pod: Some(p),
        running_pod: None,
        grace_period_override: grace,
        evict: false,
    }
}

fn with_image(mut p: Pod, image: &str) -> Pod {
    if let Some(spec) = p.spec.as_mut() {
        spec.containers[0].image = Some(image.into());
    }
    p
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("worker did not act in time")
        .expect("channel open")
}

#[tokio::test]
async fn first_sync_is_create_and_latest_update_wins() {
    let (syncer, mut rx) = RecordingSyncer::new();
    // Hold the syncer so several updates queue up behind the first sync.
    let held = syncer.gate.acquire_many(1000).await.expect("gate");
    let w = workers(syncer.clone());
    w.update_pod(create(pod("a")));
    tokio::task::yield_now().await;
    for image in ["v1", "v2", "v3"] {
        w.update_pod(UpdatePodOptions {
            kind: SyncPodType::Update,
            ..create(with_image(pod("a"), image))
        });
    }
    drop(held);
    // The sync in flight keeps the spec it started with; the three updates that arrived
    // meanwhile are coalesced into one sync of the newest spec.
    assert_eq!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Create, "busybox:1.36".into())
    );
    assert_eq!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Update, "v3".into())
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), rx.recv())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn terminal_pod_goes_through_terminating_and_terminated() {
    let (syncer, mut rx) = RecordingSyncer::new();
    *syncer.terminal.lock().expect("lock") = true;
    let w = workers(syncer);
    let p = pod_with("once", "Never", &["app"]);
    w.update_pod(create(p.clone()));
    assert!(matches!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Create, _)
    ));
    assert_eq!(next(&mut rx).await, Seen::Terminating(Some(30)));
    assert_eq!(next(&mut rx).await, Seen::Terminated);
    // The worker finished; a plain sync does not restart it.
    tokio::time::timeout(Duration::from_secs(5), async {
        while w.phase(&p.uid()) != Some(WorkerPhase::Finished) {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("finished");
    w.update_pod(UpdatePodOptions {
        kind: SyncPodType::Sync,
        ..create(p)
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(200), rx.recv())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn grace_period_only_shortens() {
    let (syncer, mut rx) = RecordingSyncer::new();
    let held = syncer.gate.acquire_many(1000).await.expect("gate");
    let w = workers(syncer.clone());
    let p = pod("g");
    w.update_pod(create(p.clone()));
    tokio::task::yield_now().await;
    w.update_pod(kill(p.clone(), Some(20)));
    w.update_pod(kill(p.clone(), Some(50)));
    w.update_pod(kill(p.clone(), Some(5)));
    w.update_pod(kill(p, Some(8)));
    drop(held);
    assert!(matches!(next(&mut rx).await, Seen::Sync(..)));
    assert_eq!(next(&mut rx).await, Seen::Terminating(Some(5)));
    assert_eq!(next(&mut rx).await, Seen::Terminated);
}

#[tokio::test]
async fn shorter_grace_period_restarts_the_termination_in_progress() {
    let (syncer, mut rx) = RecordingSyncer::new();
    *syncer.hang_terminating_above.lock().expect("lock") = Some(10);
    let w = workers(syncer);
    let p = pod("short");
    w.update_pod(create(p.clone()));
    assert!(matches!(next(&mut rx).await, Seen::Sync(..)));
    w.update_pod(kill(p.clone(), Some(30)));
    assert_eq!(next(&mut rx).await, Seen::Terminating(Some(30)));
    // A longer grace period changes nothing: the 30 s termination goes on.
    w.update_pod(kill(p.clone(), Some(60)));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), rx.recv())
            .await
            .is_err()
    );
    w.update_pod(kill(p.clone(), Some(5)));
    assert_eq!(next(&mut rx).await, Seen::Terminating(Some(5)));
    assert_eq!(next(&mut rx).await, Seen::Terminated);
}

#[tokio::test]
async fn deletion_grace_period_is_used_for_a_pod_being_deleted() {
    let (syncer, mut rx) = RecordingSyncer::new();
    let w = workers(syncer);
    let mut p = pod("deleted");
    w.update_pod(create(p.clone()));
    assert!(matches!(next(&mut rx).await, Seen::Sync(..)));
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        crate::time::now(),
    ));
    p.metadata.deletion_grace_period_seconds = Some(7);
    w.update_pod(UpdatePodOptions {
        kind: SyncPodType::Update,
        ..create(p)
    });
    assert_eq!(next(&mut rx).await, Seen::Terminating(Some(7)));
    assert_eq!(next(&mut rx).await, Seen::Terminated);
}

#[tokio::test]
async fn containers_may_run_until_the_worker_has_terminated_the_pod() {
    use crate::status::PodDeletionSafety;
    let (syncer, mut rx) = RecordingSyncer::new();
    let w = workers(syncer);
    let p = pod("safety");
    assert!(
        !w.pod_could_have_running_containers(&p.uid()),
        "unknown pod"
    );
    w.update_pod(create(p.clone()));
    assert!(w.pod_could_have_running_containers(&p.uid()));
    assert!(matches!(next(&mut rx).await, Seen::Sync(..)));
    w.update_pod(UpdatePodOptions {
        kind: SyncPodType::Kill,
        ..create(p.clone())
    });
    assert!(w.pod_could_have_running_containers(&p.uid()), "terminating");
    assert!(matches!(next(&mut rx).await, Seen::Terminating(_)));
    assert_eq!(next(&mut rx).await, Seen::Terminated);
    tokio::time::timeout(Duration::from_secs(5), async {
        while w.pod_could_have_running_containers(&p.uid()) {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("terminated pods have no running containers");
}

#[tokio::test(start_paused = true)]
async fn failed_sync_is_due_after_backoff_and_success_after_resync() {
    let (syncer, mut rx) = RecordingSyncer::new();
    *syncer.fail.lock().expect("lock") = 1;
    let w = workers(syncer);
    let p = pod("b");
    w.update_pod(create(p.clone()));
    assert!(matches!(next(&mut rx).await, Seen::Sync(..)));
    tokio::task::yield_now().await;
    assert!(w.due_pods().is_empty());
    // backoff 10 s jittered to [10, 15)
    tokio::time::advance(Duration::from_millis(9_900)).await;
    assert!(w.due_pods().is_empty());
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(w.due_pods(), vec![p.uid()]);
    w.update_pod(UpdatePodOptions {
        kind: SyncPodType::Sync,
        ..create(p.clone())
    });
    // The pod never synced successfully, so the retry is still its creation.
    assert_eq!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Create, "busybox:1.36".into())
    );
    tokio::task::yield_now().await;
    // resync 60 s jittered to [60, 90)
    tokio::time::advance(Duration::from_secs(59)).await;
    assert!(w.due_pods().is_empty());
    tokio::time::advance(Duration::from_secs(31)).await;
    assert_eq!(w.due_pods(), vec![p.uid()]);
}

#[tokio::test(start_paused = true)]
async fn backoff_is_retried_by_the_worker_when_the_window_ends() {
    let (syncer, mut rx) = RecordingSyncer::new();
    *syncer.backoff.lock().expect("lock") = Some(Duration::from_millis(150));
    let w = workers(syncer);
    let p = pod("c");
    w.update_pod(create(p.clone()));
    assert!(matches!(next(&mut rx).await, Seen::Sync(..)));
    tokio::task::yield_now().await;
    let start = Instant::now();
    // no tick, no event: the worker syncs by itself when the window ends
    assert!(matches!(next(&mut rx).await, Seen::Sync(..)));
    assert_eq!(start.elapsed(), Duration::from_millis(150));
    assert!(w.due_pods().is_empty());
}

#[tokio::test]
async fn runtime_pod_without_config_is_killed_and_forgotten() {
    let (syncer, mut rx) = RecordingSyncer::new();
    let w = workers(syncer);
    let running = RunningPod {
        uid: PodUid::from("orphan"),
        ..Default::default()
    };
    w.update_pod(UpdatePodOptions {
        kind: SyncPodType::Kill,
        pod: None,
        running_pod: Some(running.clone()),
        grace_period_override: Some(1),
        evict: false,
    });
    assert_eq!(next(&mut rx).await, Seen::TerminatingRuntime);
    tokio::time::timeout(Duration::from_secs(5), async {
        while w.phase(&running.uid) != Some(WorkerPhase::Finished) {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("finished");
    let known = w.sync_known_pods(&HashSet::new());
    assert!(known.is_empty());
}

async fn quiet(rx: &mut mpsc::UnboundedReceiver<Seen>) {
    if let Ok(seen) = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
        panic!("unexpected {seen:?}");
    }
}

async fn until_phase(w: &PodWorkers, uid: &PodUid, phase: Option<WorkerPhase>) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while w.phase(uid) != phase {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("phase reached");
}

/// The second run of a UID behaves as a first one: it can be killed and terminates again.
async fn second_run_is_a_whole_run(w: &PodWorkers, rx: &mut mpsc::UnboundedReceiver<Seen>, p: Pod) {
    assert!(matches!(next(rx).await, Seen::Sync(SyncPodType::Create, _)));
    assert_eq!(w.phase(&p.uid()), Some(WorkerPhase::Syncing));
    w.update_pod(kill(p.clone(), Some(3)));
    assert_eq!(next(rx).await, Seen::Terminating(Some(3)));
    assert_eq!(next(rx).await, Seen::Terminated);
    until_phase(w, &p.uid(), Some(WorkerPhase::Finished)).await;
    quiet(rx).await;
}

#[tokio::test(start_paused = true)]
async fn pod_desired_again_after_termination_restarts() {
    let (syncer, mut rx) = RecordingSyncer::new();
    let metrics = KubeletMetrics::default();
    let w = workers(syncer).with_metrics(metrics.clone());
    let p = pod("again");
    w.update_pod(create(p.clone()));
    assert!(matches!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Create, _)
    ));
    w.update_pod(kill(p.clone(), None));
    assert_eq!(next(&mut rx).await, Seen::Terminating(Some(30)));
    assert_eq!(next(&mut rx).await, Seen::Terminated);
    until_phase(&w, &p.uid(), Some(WorkerPhase::Finished)).await;
    assert_eq!(metrics.restarted_pods_total(false), 0);
    w.update_pod(create(p.clone()));
    // Upstream `kubelet_restarted_pods_total{static="false"}`, and
    // `kubelet_containers_per_pod_count` once per create.
    assert_eq!(metrics.restarted_pods_total(false), 1);
    assert_eq!(
        crate::metrics::histogram_count(&metrics.containers_per_pod),
        2
    );
    second_run_is_a_whole_run(&w, &mut rx, p).await;
}

#[tokio::test(start_paused = true)]
async fn pod_desired_again_while_terminating_restarts_once_terminated() {
    let (syncer, mut rx) = RecordingSyncer::new();
    let w = workers(syncer.clone());
    let p = pod("back");
    w.update_pod(create(p.clone()));
    assert!(matches!(next(&mut rx).await, Seen::Sync(..)));
    // The termination blocks until released.
    let held = syncer.gate.acquire_many(1000).await.expect("gate");
    w.update_pod(kill(p.clone(), None));
    assert_eq!(next(&mut rx).await, Seen::Terminating(Some(30)));
    w.update_pod(create(p.clone()));
    // The old run finishes its termination before anything of the new one happens.
    quiet(&mut rx).await;
    assert_eq!(w.phase(&p.uid()), Some(WorkerPhase::Terminating));
    drop(held);
    assert_eq!(next(&mut rx).await, Seen::Terminated);
    second_run_is_a_whole_run(&w, &mut rx, p).await;
}

#[tokio::test(start_paused = true)]
async fn pod_desired_again_then_removed_again_while_terminating_stays_finished() {
    let (syncer, mut rx) = RecordingSyncer::new();
    let w = workers(syncer.clone());
    let p = pod("flap");
    w.update_pod(create(p.clone()));
    assert!(matches!(next(&mut rx).await, Seen::Sync(..)));
    let held = syncer.gate.acquire_many(1000).await.expect("gate");
    w.update_pod(kill(p.clone(), None));
    assert_eq!(next(&mut rx).await, Seen::Terminating(Some(30)));
    w.update_pod(create(p.clone()));
    w.update_pod(kill(p.clone(), None));
    drop(held);
    assert_eq!(next(&mut rx).await, Seen::Terminated);
    until_phase(&w, &p.uid(), Some(WorkerPhase::Finished)).await;
    quiet(&mut rx).await;
}

#[tokio::test(start_paused = true)]
async fn pod_desired_again_after_housekeeping_forgot_it_starts_fresh() {
    let (syncer, mut rx) = RecordingSyncer::new();
    let w = workers(syncer);
    let p = pod("forgotten");
    w.update_pod(create(p.clone()));
    assert!(matches!(next(&mut rx).await, Seen::Sync(..)));
    w.update_pod(kill(p.clone(), None));
    assert_eq!(next(&mut rx).await, Seen::Terminating(Some(30)));
    assert_eq!(next(&mut rx).await, Seen::Terminated);
    until_phase(&w, &p.uid(), Some(WorkerPhase::Finished)).await;
    assert!(w.sync_known_pods(&HashSet::new()).is_empty());
    assert_eq!(w.phase(&p.uid()), None);
    w.update_pod(create(p.clone()));
    second_run_is_a_whole_run(&w, &mut rx, p).await;
}

#[tokio::test(start_paused = true)]
async fn housekeeping_keeps_a_pod_desired_again_while_it_terminates() {
    let (syncer, mut rx) = RecordingSyncer::new();
    let w = workers(syncer.clone());
    let p = pod("kept");
    w.update_pod(create(p.clone()));
    assert!(matches!(next(&mut rx).await, Seen::Sync(..)));
    let held = syncer.gate.acquire_many(1000).await.expect("gate");
    w.update_pod(kill(p.clone(), None));
    assert_eq!(next(&mut rx).await, Seen::Terminating(Some(30)));
    w.update_pod(create(p.clone()));
    let desired = HashSet::from([p.uid()]);
    assert_eq!(
        w.sync_known_pods(&desired).get(&p.uid()),
        Some(&WorkerPhase::Terminating)
    );
    drop(held);
    assert_eq!(next(&mut rx).await, Seen::Terminated);
    second_run_is_a_whole_run(&w, &mut rx, p).await;
}

/// Puts running containers of `p` in the runtime, as a sync of the real syncer does.
async fn run_in(runtime: &FakeRuntime, p: &Pod) {
    use crate::runtime::Runtime;
    runtime
        .sync_pod(
            p,
            &PodStatus::default(),
            Arc::new(crate::testing::FakeRuntimeHelper),
            &crate::backoff::Backoff::crash_loop_default(),
        )
        .await
        .expect("fake sync");
}

#[tokio::test(start_paused = true)]
async fn a_restarted_run_first_removes_what_the_old_run_left_once() {
    use crate::runtime::Runtime;
    let (syncer, mut rx) = RecordingSyncer::new();
    let runtime = FakeRuntime::new();
    let w = workers_on(syncer.clone(), runtime.clone());
    let p = pod("left");
    // Containers already running at the first sync (a kubelet restart) are adopted.
    run_in(&runtime, &p).await;
    w.update_pod(create(p.clone()));
    assert!(matches!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Create, _)
    ));
    w.update_pod(kill(p.clone(), None));
    assert_eq!(next(&mut rx).await, Seen::Terminating(Some(30)));
    let old = runtime.running_pods();
    runtime
        .kill_pod(Some(&p), &old[0], Some(1))
        .await
        .expect("fake kill");
    assert_eq!(next(&mut rx).await, Seen::Terminated);
    until_phase(&w, &p.uid(), Some(WorkerPhase::Finished)).await;

    // The new run's first sync fails after the old run's leftovers went.
    *syncer.fail.lock().expect("lock") = 1;
    w.update_pod(create(p.clone()));
    assert_eq!(next(&mut rx).await, Seen::TerminatingRuntime);
    assert!(matches!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Create, _)
    ));
    // What the new run starts is its own: the retry keeps it.
    run_in(&runtime, &p).await;
    w.update_pod(UpdatePodOptions {
        kind: SyncPodType::Sync,
        ..create(p.clone())
    });
    assert!(matches!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Create, _)
    ));
    quiet(&mut rx).await;
}

#[tokio::test]
async fn each_unit_of_work_is_timed_by_its_operation() {
    let (syncer, mut rx) = RecordingSyncer::new();
    *syncer.terminal.lock().expect("lock") = true;
    let metrics = KubeletMetrics::default();
    let w = workers(syncer).with_metrics(metrics.clone());
    let p = pod_with("once", "Never", &["app"]);
    w.update_pod(create(p.clone()));
    assert!(matches!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Create, _)
    ));
    assert_eq!(next(&mut rx).await, Seen::Terminating(Some(30)));
    assert_eq!(next(&mut rx).await, Seen::Terminated);
    tokio::time::timeout(Duration::from_secs(5), async {
        while w.phase(&p.uid()) != Some(WorkerPhase::Finished) {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the worker finishes");
    let count = |operation| {
        metrics
            .pod_worker_duration
            .get(&[("operation_type", operation)])
            .map_or(0, |h| h.count())
    };
    assert_eq!(count("create"), 1);
    assert_eq!(count("terminated"), 1);
    let all: u64 = ["create", "update", "sync", "kill", "terminated"]
        .into_iter()
        .map(count)
        .sum();
    assert_eq!(all, 3, "create, terminating, terminated");
}

/// How many times the runtime was asked for the pod's status.
fn status_reads(runtime: &FakeRuntime) -> usize {
    runtime
        .calls()
        .iter()
        .filter(|c| matches!(c, crate::testing::Call::GetPodStatus(_)))
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_status_cached_after_the_last_sync_is_used_without_a_relist() {
    let (syncer, mut rx) = RecordingSyncer::new();
    let runtime = FakeRuntime::new();
    let cache = PodCache::new();
    let w = workers_sharing(syncer, &runtime, &cache);
    let p = pod("cached");
    let sync = || UpdatePodOptions {
        kind: SyncPodType::Sync,
        ..create(p.clone())
    };
    w.update_pod(create(p.clone()));
    assert!(matches!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Create, _)
    ));
    assert_eq!(status_reads(&runtime), 1, "the first sync relists");
    // Let the worker record the end of its work, then the PLEG inspects the pod (an event).
    tokio::time::sleep(Duration::from_millis(20)).await;
    cache.set(
        &p.uid(),
        PodStatus {
            uid: p.uid(),
            ..Default::default()
        },
        Instant::now(),
    );
    w.update_pod(sync());
    assert!(matches!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Sync, _)
    ));
    assert_eq!(
        status_reads(&runtime),
        1,
        "the PLEG's status is newer than the last sync"
    );
    // Nothing observed since that sync: an on-demand relist again.
    tokio::time::sleep(Duration::from_millis(20)).await;
    w.update_pod(sync());
    assert!(matches!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Sync, _)
    ));
    assert_eq!(status_reads(&runtime), 2);
}

/// Workers over `runtime` sharing `cache`, with their syncer's receiver.
fn workers_with_cache(
    runtime: &FakeRuntime,
    cache: &PodCache,
) -> (PodWorkers, mpsc::UnboundedReceiver<Seen>) {
    let (syncer, rx) = RecordingSyncer::new();
    (workers_sharing(syncer, runtime, cache), rx)
}

fn status_calls(runtime: &FakeRuntime) -> usize {
    runtime
        .calls()
        .iter()
        .filter(|c| matches!(c, crate::testing::Call::GetPodStatus(_)))
        .count()
}

#[tokio::test]
async fn a_new_pods_first_sync_asks_the_runtime_only_before_the_first_relist() {
    // Upstream: a pod the last relist did not find has nothing in the runtime.
    let runtime = FakeRuntime::new();
    let cache = PodCache::new();
    cache.update_time(Instant::now());
    let (workers, mut rx) = workers_with_cache(&runtime, &cache);
    workers.update_pod(create(pod("new")));
    assert!(matches!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Create, _)
    ));
    assert_eq!(status_calls(&runtime), 0);

    // Before any relist the cache cannot say, so the runtime is asked.
    let runtime = FakeRuntime::new();
    let (workers, mut rx) = workers_with_cache(&runtime, &PodCache::new());
    workers.update_pod(create(pod("early")));
    assert!(matches!(
        next(&mut rx).await,
        Seen::Sync(SyncPodType::Create, _)
    ));
    assert_eq!(status_calls(&runtime), 1);
}
