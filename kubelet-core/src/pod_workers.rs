//! Pod workers: one task per pod UID driving sync → terminating → terminated
//! (upstream `pkg/kubelet/pod_workers.go`).
//!
//! * The latest update wins: updates that arrive while a worker is busy are coalesced, and the
//!   worker always acts on the newest spec.
//! * Once a pod is terminating it never syncs again under the same UID, except when its
//!   config asks for it again (a static pod re-added with the same content: upstream's
//!   `restartRequested`). Then the old run first terminates completely, and the new run
//!   starts as a new pod does: its first sync removes what the old run left in the runtime
//!   (exited containers, stopped sandboxes, logs), so the new containers start at restart
//!   count 0 outside any crash-loop backoff of the old ones. Upstream leaves those to
//!   container GC, and a new run that starts before GC counts on from them.
//! * A termination grace period can only be shortened by a later kill (or a shorter
//!   `deletionGracePeriodSeconds`); a shorter one cancels the termination in progress, which
//!   then starts again with it.
//! * After a successful sync the pod is due again after `resync_interval` (jittered); after an
//!   error after `backoff_period` (jittered). Due pods are collected by the sync loop's tick
//!   through [`PodWorkers::due_pods`]. A sync that failed only because of backoff windows
//!   ([`crate::sync::Error::Backoff`]: CrashLoopBackOff, ImagePullBackOff) is retried by the
//!   worker itself when the earliest window ends (upstream `MinBackoffExpiration`, capped at
//!   `resync_interval`), not on the next tick, so short windows are kept precisely.
//! * Each unit of work is timed in `kubelet_pod_worker_duration_seconds` by its
//!   `operation_type` (`create`, `update`, `sync`, `kill`, `terminated`), see
//!   [`PodWorkers::with_metrics`]. Upstream times from the dispatch of the update; here it is
//!   the time from the worker taking the work to its completion.
//! * Before each sync the worker needs the pod's runtime status observed after its last unit
//!   of work ended (upstream `podCache.GetNewerThan(uid, lastSyncTime)`). When the cache holds
//!   one (the PLEG inspected the pod for an event since, as on a container exit), it is used
//!   as is; otherwise the worker asks the PLEG for an on-demand relist of its pod instead of
//!   waiting for a relist tick. Either way it never acts on runtime state older than its own
//!   last actions.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use rand::Rng;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::cache::PodCache;
use crate::collections::shrink_when_sparse;
use crate::metrics::KubeletMetrics;
use crate::pleg::Pleg;
use crate::pod::{PodExt, PodUid, is_static_pod, kill_grace_period_seconds};
use crate::runtime::{PodStatus, RunningPod};
use crate::sync::{PodSyncer, SyncPodType};

/// Timing of pod workers.
#[derive(Clone, Debug)]
pub struct Config {
    /// Resync period after a successful sync (upstream `syncFrequency`, 1 m).
    pub resync_interval: Duration,
    /// Retry period after a failed sync (upstream `backOffPeriod`, 10 s).
    pub backoff_period: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            resync_interval: Duration::from_secs(60),
            backoff_period: Duration::from_secs(10),
        }
    }
}

/// Upstream's `wait.Jitter(d, 0.5)`: a duration in `[d, 1.5 d)`.
pub fn jitter(d: Duration) -> Duration {
    d.mul_f64(1.0 + rand::rng().random::<f64>() * 0.5)
}

/// One request to a pod worker (upstream `UpdatePodOptions`).
#[derive(Clone, Debug)]
pub struct UpdatePodOptions {
    /// Why the pod is updated.
    pub kind: SyncPodType,
    /// The pod from config; `None` for a runtime pod nobody wants.
    pub pod: Option<Pod>,
    /// The runtime pod, for pods without config.
    pub running_pod: Option<RunningPod>,
    /// Overrides the grace period of a kill; may only shorten one in progress.
    pub grace_period_override: Option<i64>,
    /// A kill by the eviction manager (upstream `KillPodOptions.Evict`): the pod's content
    /// (dead containers, logs) may go at once, though its record stays.
    pub evict: bool,
}

/// Where a pod is in its lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerPhase {
    /// Running `sync_pod`.
    Syncing,
    /// Stopping containers.
    Terminating,
    /// Containers stopped; releasing resources.
    Terminated,
    /// Everything released; the worker has exited.
    Finished,
}

#[derive(Debug)]
struct PodState {
    phase: WorkerPhase,
    pod: Option<Pod>,
    running_pod: Option<RunningPod>,
    pending: Option<SyncPodType>,
    grace: Option<i64>,
    synced_once: bool,
    restart_requested: bool,
    /// This run restarts a terminated UID: its first sync removes the old run's leftovers.
    clean_start: bool,
    task_running: bool,
    notify: Arc<Notify>,
    /// When a backoff window of the pod ends: the worker syncs again then.
    retry_at: Option<Instant>,
    /// The termination in progress and the grace period it was started with: cancelled
    /// when a shorter grace period arrives, so that it restarts with that one.
    in_flight: Option<(CancellationToken, Option<i64>)>,
    /// When the last unit of work of this run ended (upstream `lastSyncTime`): a cached
    /// status observed after it may be used without an on-demand relist.
    last_synced: Option<Instant>,
    /// The termination was an eviction (upstream `podSyncStatus.evicted`).
    evicted: bool,
}

impl PodState {
    fn new() -> Self {
        Self {
            phase: WorkerPhase::Syncing,
            pod: None,
            running_pod: None,
            pending: None,
            grace: None,
            synced_once: false,
            restart_requested: false,
            clean_start: false,
            task_running: false,
            notify: Arc::new(Notify::new()),
            retry_at: None,
            in_flight: None,
            last_synced: None,
            evicted: false,
        }
    }

    /// Starts a new run of the UID: the pod is desired again after its previous run
    /// terminated (upstream `restartRequested`, acted on once the termination finished). All
    /// of the old run's state goes, except the worker task's wake-up handle and whether that
    /// task runs: a task that is still looping must see the new run's work.
    fn start_new_run(&mut self, pod: Option<Pod>) {
        let notify = self.notify.clone();
        let task_running = self.task_running;
        *self = Self::new();
        self.notify = notify;
        self.task_running = task_running;
        self.pod = pod;
        self.clean_start = true;
        self.pending = Some(SyncPodType::Create);
        self.notify.notify_one();
    }

    fn shorten_grace(&mut self, grace: i64) {
        self.grace = Some(self.grace.map_or(grace, |g| g.min(grace)));
        if let Some((token, started_with)) = &self.in_flight
            && started_with.is_none_or(|g| grace < g)
        {
            debug!(
                grace,
                "grace period shortened; restarting the termination in progress"
            );
            token.cancel();
        }
    }
}

struct Inner {
    /// Boxed: see [`crate::collections`].
    pods: Mutex<HashMap<PodUid, Box<PodState>>>,
    queue: Mutex<HashMap<PodUid, Instant>>,
    syncer: Arc<dyn PodSyncer>,
    pleg: Arc<dyn Pleg>,
    cache: PodCache,
    config: Config,
    tracker: TaskTracker,
    token: CancellationToken,
    metrics: KubeletMetrics,
}

/// The set of pod workers. Cheap to clone.
#[derive(Clone)]
pub struct PodWorkers {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PodWorkers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodWorkers").finish_non_exhaustive()
    }
}

/// Why a unit of work failed, and when to retry it.
struct Failure {
    message: String,
    retry_after: Option<Duration>,
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Self {
            message,
            retry_after: None,
        }
    }
}

impl From<crate::sync::Error> for Failure {
    fn from(e: crate::sync::Error) -> Self {
        let retry_after = match &e {
            crate::sync::Error::Backoff { retry_after, .. } => Some(*retry_after),
            _ => None,
        };
        Self {
            message: e.to_string(),
            retry_after,
        }
    }
}

struct Work {
    phase: WorkerPhase,
    clean_start: bool,
    kind: SyncPodType,
    pod: Option<Pod>,
    running_pod: Option<RunningPod>,
    grace: Option<i64>,
    /// [`PodState::last_synced`] when the work was taken.
    last_synced: Option<Instant>,
}

impl PodWorkers {
    /// Pod workers that call `syncer`, refresh pods through `pleg` and read `cache`. Worker
    /// tasks are spawned on `tracker` and stop when `token` is cancelled.
    pub fn new(
        syncer: Arc<dyn PodSyncer>,
        pleg: Arc<dyn Pleg>,
        cache: PodCache,
        config: Config,
        tracker: TaskTracker,
        token: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                pods: Mutex::new(HashMap::new()),
                queue: Mutex::new(HashMap::new()),
                syncer,
                pleg,
                cache,
                config,
                tracker,
                token,
                metrics: KubeletMetrics::default(),
            }),
        }
    }

    /// Times each unit of work in `metrics` (`kubelet_pod_worker_duration_seconds`, see the
    /// [module docs](self)). Call before the first update.
    #[must_use]
    pub fn with_metrics(mut self, metrics: KubeletMetrics) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.metrics = metrics,
            None => warn!("pod workers already shared: metrics ignored"),
        }
        self
    }

    fn pods(&self) -> std::sync::MutexGuard<'_, HashMap<PodUid, Box<PodState>>> {
        self.inner.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, HashMap<PodUid, Instant>> {
        self.inner.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands an update to the pod's worker, starting the worker if needed (upstream
    /// `UpdatePod`). Never blocks on the worker.
    pub fn update_pod(&self, opts: UpdatePodOptions) {
        let uid = match (&opts.pod, &opts.running_pod) {
            (Some(p), _) => p.uid(),
            (None, Some(r)) => r.uid.clone(),
            (None, None) => return,
        };
        if let (SyncPodType::Create, Some(pod)) = (opts.kind, &opts.pod) {
            // Upstream `dispatchWork` notes the number of containers of each new pod.
            self.inner.metrics.record_new_pod(pod.containers().len());
        }
        let mut pods = self.pods();
        let state = pods
            .entry(uid.clone())
            .or_insert_with(|| Box::new(PodState::new()));

        if state.phase == WorkerPhase::Finished {
            if let (SyncPodType::Create, Some(pod)) = (opts.kind, &opts.pod) {
                info!(pod = %uid, "pod is desired again after it terminated; restarting it");
                self.inner.metrics.record_pod_restarted(is_static_pod(pod));
                state.start_new_run(None);
            } else {
                return;
            }
        } else if state.phase != WorkerPhase::Syncing && opts.kind == SyncPodType::Create {
            // The same UID again while the old run terminates (a static pod whose manifest
            // came back): the termination finishes first, then the pod starts afresh.
            debug!(pod = %uid, "pod is desired again while terminating; restarting it once terminated");
            state.restart_requested = true;
            state.pod = opts.pod;
            return;
        }

        let being_deleted = opts.pod.as_ref().is_some_and(PodExt::is_being_deleted);
        if opts.kind == SyncPodType::Kill
            || being_deleted
            || (opts.pod.is_none() && state.pod.is_none())
        {
            if state.phase == WorkerPhase::Syncing {
                state.phase = WorkerPhase::Terminating;
                state.evicted = opts.kind == SyncPodType::Kill && opts.evict;
                debug!(pod = %uid, evicted = state.evicted, "pod is terminating");
            }
            state.restart_requested = false;
            let grace = opts
                .grace_period_override
                .or_else(|| opts.pod.as_ref().map(kill_grace_period_seconds))
                .or_else(|| state.pod.as_ref().map(kill_grace_period_seconds));
            if let Some(g) = grace {
                state.shorten_grace(g);
            }
        }
        if let Some(pod) = opts.pod {
            state.pod = Some(pod);
        }
        if opts.running_pod.is_some() {
            state.running_pod = opts.running_pod;
        }
        // Latest wins, but a Create is never downgraded before the first sync.
        state.pending = Some(match (state.pending, opts.kind) {
            (Some(SyncPodType::Create), SyncPodType::Sync | SyncPodType::Update) => {
                SyncPodType::Create
            }
            (_, kind) => kind,
        });
        state.notify.notify_one();
        if !state.task_running {
            state.task_running = true;
            let notify = state.notify.clone();
            drop(pods);
            let this = self.clone();
            self.inner
                .tracker
                .spawn(async move { this.run_worker(uid, notify).await });
        }
    }

    /// Re-triggers a sync of a pod the sync loop found due but that has no config (e.g. a
    /// terminating runtime pod whose last attempt failed).
    pub fn resync(&self, uid: &PodUid) {
        let mut pods = self.pods();
        if let Some(state) = pods.get_mut(uid) {
            if state.pending.is_none() {
                state.pending = Some(SyncPodType::Sync);
            }
            state.notify.notify_one();
        }
    }

    /// Pods whose resync or retry time has come (upstream `getPodsToSync` work-queue part).
    pub fn due_pods(&self) -> Vec<PodUid> {
        let now = Instant::now();
        let mut queue = self.queue();
        let due: Vec<PodUid> = queue
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in &due {
            queue.remove(uid);
        }
        due
    }

    fn enqueue(&self, uid: &PodUid, delay: Duration) {
        self.queue().insert(uid.clone(), Instant::now() + delay);
    }

    /// The phase of a pod's worker, if it has one.
    pub fn phase(&self, uid: &PodUid) -> Option<WorkerPhase> {
        self.pods().get(uid).map(|s| s.phase)
    }

    /// `true` when the pod's worker terminates or terminated it for the eviction manager
    /// (upstream `IsEvicted`).
    pub fn is_evicted(&self, uid: &PodUid) -> bool {
        self.pods().get(uid).is_some_and(|s| s.evicted)
    }

    /// `true` once termination of the pod has been requested.
    pub fn is_termination_requested(&self, uid: &PodUid) -> bool {
        self.phase(uid).is_some_and(|p| p != WorkerPhase::Syncing)
    }

    /// `true` while a worker terminates a static pod named `full_name`
    /// (`<name>_<namespace>`): its mirror pod must stay until then (upstream
    /// `IsPodForMirrorPodTerminatingByFullName`).
    pub fn is_pod_for_mirror_pod_terminating_by_full_name(&self, full_name: &str) -> bool {
        self.pods().values().any(|s| {
            matches!(s.phase, WorkerPhase::Terminating | WorkerPhase::Terminated)
                && s.pod
                    .as_ref()
                    .is_some_and(|p| crate::pod::is_static_pod(p) && p.full_name() == full_name)
        })
    }

    /// UIDs of every pod that has a worker record.
    pub fn known_pods(&self) -> HashSet<PodUid> {
        self.pods().keys().cloned().collect()
    }

    /// Forgets finished workers of pods that are not desired (upstream `SyncKnownPods`) and
    /// returns the phase of every remaining worker.
    pub fn sync_known_pods(&self, desired: &HashSet<PodUid>) -> HashMap<PodUid, WorkerPhase> {
        let mut pods = self.pods();
        pods.retain(|uid, s| {
            desired.contains(uid) || s.phase != WorkerPhase::Finished || s.task_running
        });
        let known: HashMap<PodUid, WorkerPhase> =
            pods.iter().map(|(u, s)| (u.clone(), s.phase)).collect();
        shrink_when_sparse(&mut pods);
        drop(pods);
        let mut queue = self.queue();
        queue.retain(|uid, _| known.contains_key(uid));
        shrink_when_sparse(&mut queue);
        known
    }

    fn take_work(&self, uid: &PodUid) -> Option<Work> {
        let mut pods = self.pods();
        let state = pods.get_mut(uid)?;
        let kind = state.pending.take()?;
        state.retry_at = None;
        let kind = if state.synced_once {
            kind
        } else {
            SyncPodType::Create
        };
        Some(Work {
            phase: state.phase,
            clean_start: state.clean_start,
            kind,
            pod: state.pod.clone(),
            running_pod: state.running_pod.clone(),
            grace: state.grace,
            last_synced: state.last_synced,
        })
    }

    /// The pod's runtime status observed after `newer_than`: from the cache when it holds
    /// one, else from an on-demand relist (`None`: always relist).
    async fn fresh_status(
        &self,
        uid: &PodUid,
        work: &Work,
        newer_than: Option<Instant>,
    ) -> Result<Arc<PodStatus>, String> {
        if let Some(t) = newer_than
            && let Some((status, at)) = self.inner.cache.get(uid)
            && at > t
        {
            return Ok(status);
        }
        let (name, namespace) = match (&work.pod, &work.running_pod) {
            (Some(p), _) => (
                p.name_or_empty().to_owned(),
                p.namespace_or_default().to_owned(),
            ),
            (None, Some(r)) => (r.name.clone(), r.namespace.clone()),
            (None, None) => (String::new(), String::new()),
        };
        self.inner
            .pleg
            .relist_pod(uid, &name, &namespace)
            .await
            .map_err(|e| e.to_string())?;
        Ok(self
            .inner
            .cache
            .get(uid)
            .map(|(s, _)| s)
            .unwrap_or_else(|| {
                Arc::new(PodStatus {
                    uid: uid.clone(),
                    name,
                    namespace,
                    ..Default::default()
                })
            }))
    }

    async fn run_worker(self, uid: PodUid, notify: Arc<Notify>) {
        loop {
            let retry_at = self.pods().get(&uid).and_then(|s| s.retry_at);
            tokio::select! {
                biased;
                _ = self.inner.token.cancelled() => break,
                _ = notify.notified() => {}
                _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {
                    if let Some(state) = self.pods().get_mut(&uid) {
                        state.retry_at = None;
                        state.pending.get_or_insert(SyncPodType::Sync);
                    }
                }
            }
            let Some(work) = self.take_work(&uid) else {
                continue;
            };
            let started = Instant::now();
            let outcome = match self.register_termination(&uid, &work) {
                Some(cancel) => {
                    let outcome = tokio::select! {
                        biased;
                        _ = cancel.cancelled() => None,
                        outcome = self.process(&uid, &work) => Some(outcome),
                    };
                    self.unregister_termination(&uid);
                    match outcome {
                        Some(outcome) => outcome,
                        None => {
                            // Preempted by a shorter grace period (or shutdown): run again,
                            // on a status newer than what the preempted work did.
                            if let Some(state) = self.pods().get_mut(&uid) {
                                state.last_synced = Some(Instant::now());
                            }
                            self.retry_now(&uid);
                            continue;
                        }
                    }
                }
                None => self.process(&uid, &work).await,
            };
            let operation = match work.phase {
                WorkerPhase::Terminated => "terminated",
                _ => work.kind.as_str(),
            };
            self.inner
                .metrics
                .record_pod_worker(operation, started.elapsed());
            if self.complete(&uid, &work, outcome) {
                break;
            }
        }
    }

    /// For the termination of a pod with config, a token that a shorter grace period
    /// cancels (upstream cancels the pod's sync context for the same reason).
    fn register_termination(&self, uid: &PodUid, work: &Work) -> Option<CancellationToken> {
        if work.phase != WorkerPhase::Terminating || work.pod.is_none() {
            return None;
        }
        let token = self.inner.token.child_token();
        let mut pods = self.pods();
        let state = pods.get_mut(uid)?;
        state.in_flight = Some((token.clone(), work.grace));
        Some(token)
    }

    fn unregister_termination(&self, uid: &PodUid) {
        if let Some(state) = self.pods().get_mut(uid) {
            state.in_flight = None;
        }
    }

    fn retry_now(&self, uid: &PodUid) {
        if let Some(state) = self.pods().get_mut(uid) {
            state.pending.get_or_insert(SyncPodType::Sync);
            state.notify.notify_one();
        }
    }

    async fn process(&self, uid: &PodUid, work: &Work) -> Result<Option<WorkerPhase>, Failure> {
        let mut status = match (work.last_synced, self.inner.cache.never_seen(uid)) {
            (None, Some(nothing)) => nothing,
            (last_synced, _) => self.fresh_status(uid, work, last_synced).await?,
        };
        let syncer = &self.inner.syncer;
        match (work.phase, &work.pod) {
            (WorkerPhase::Syncing, Some(pod)) => {
                if work.clean_start {
                    status = self.remove_previous_run(uid, work, &status).await?;
                }
                let terminal = syncer.sync_pod(work.kind, pod, &status).await?;
                Ok(terminal.then_some(WorkerPhase::Terminating))
            }
            (WorkerPhase::Terminating, Some(pod)) => {
                syncer
                    .sync_terminating_pod(pod, &status, work.grace)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Some(WorkerPhase::Terminated))
            }
            (WorkerPhase::Terminating, None) => {
                let running = work.running_pod.clone().unwrap_or_else(|| RunningPod {
                    uid: uid.clone(),
                    ..Default::default()
                });
                syncer
                    .sync_terminating_runtime_pod(&running)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Some(WorkerPhase::Finished))
            }
            (WorkerPhase::Terminated, Some(pod)) => {
                syncer
                    .sync_terminated_pod(pod, &status)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Some(WorkerPhase::Finished))
            }
            (_, _) => Ok(Some(WorkerPhase::Finished)),
        }
    }

    /// Removes what the previous run of a restarted UID left in the runtime, as for a runtime
    /// pod nobody wants (it is not this run's), and returns the pod's status afterwards. Done
    /// once per run: a later failure of the first sync must not remove the new run's work.
    async fn remove_previous_run(
        &self,
        uid: &PodUid,
        work: &Work,
        status: &PodStatus,
    ) -> Result<Arc<PodStatus>, Failure> {
        let leftovers = status.to_running_pod();
        if !leftovers.containers.is_empty() || !leftovers.sandboxes.is_empty() {
            info!(pod = %uid, containers = leftovers.containers.len(), sandboxes = leftovers.sandboxes.len(), "removing what the pod's previous run left before it runs again");
            self.inner
                .syncer
                .sync_terminating_runtime_pod(&leftovers)
                .await
                .map_err(|e| e.to_string())?;
        }
        if let Some(state) = self.pods().get_mut(uid) {
            state.clean_start = false;
        }
        // What the kill just did may be newer than any cached status.
        Ok(self.fresh_status(uid, work, None).await?)
    }

    /// Records the outcome of one unit of work. Returns `true` when the worker should exit.
    fn complete(
        &self,
        uid: &PodUid,
        work: &Work,
        outcome: Result<Option<WorkerPhase>, Failure>,
    ) -> bool {
        let mut pods = self.pods();
        let Some(state) = pods.get_mut(uid) else {
            return true;
        };
        // Upstream sets `lastSyncTime` after every sync, failed or not.
        state.last_synced = Some(Instant::now());
        match outcome {
            Err(Failure {
                message,
                retry_after: Some(after),
            }) => {
                debug!(pod = %uid, reason = %message, ?after, "pod is in backoff, will sync when it ends");
                let after = after.min(self.inner.config.resync_interval);
                state.retry_at = Some(Instant::now() + after);
                drop(pods);
                self.enqueue(uid, jitter(self.inner.config.resync_interval));
                false
            }
            Err(Failure { message, .. }) => {
                warn!(pod = %uid, phase = ?work.phase, error = %message, "error syncing pod, will retry");
                drop(pods);
                self.enqueue(uid, jitter(self.inner.config.backoff_period));
                false
            }
            Ok(next) => {
                if work.phase == WorkerPhase::Syncing {
                    state.synced_once = true;
                }
                match next {
                    None => {
                        drop(pods);
                        self.enqueue(uid, jitter(self.inner.config.resync_interval));
                        false
                    }
                    Some(WorkerPhase::Finished) if state.restart_requested => {
                        info!(pod = %uid, "pod terminated and is desired again; restarting it");
                        let pod = state.pod.take();
                        self.inner
                            .metrics
                            .record_pod_restarted(pod.as_ref().is_some_and(is_static_pod));
                        state.start_new_run(pod);
                        false
                    }
                    Some(WorkerPhase::Finished) => {
                        state.phase = WorkerPhase::Finished;
                        state.task_running = false;
                        true
                    }
                    Some(next) => {
                        // Only move forward: a kill may already have moved the pod on.
                        if phase_rank(next) > phase_rank(state.phase) {
                            state.phase = next;
                        }
                        if next == WorkerPhase::Terminating {
                            let grace = state.pod.as_ref().map(kill_grace_period_seconds);
                            if let Some(g) = grace {
                                state.shorten_grace(g);
                            }
                        }
                        state.pending.get_or_insert(SyncPodType::Sync);
                        state.notify.notify_one();
                        false
                    }
                }
            }
        }
    }
}

impl crate::status::PodDeletionSafety for PodWorkers {
    /// Upstream `podWorkers.CouldHaveRunningContainers`: a pod whose worker has not finished
    /// terminating it may still have running containers.
    fn pod_could_have_running_containers(&self, uid: &PodUid) -> bool {
        matches!(
            self.phase(uid),
            Some(WorkerPhase::Syncing | WorkerPhase::Terminating)
        )
    }
}

fn phase_rank(p: WorkerPhase) -> u8 {
    match p {
        WorkerPhase::Syncing => 0,
        WorkerPhase::Terminating => 1,
        WorkerPhase::Terminated => 2,
        WorkerPhase::Finished => 3,
    }
}

#[cfg(test)]
mod tests;
