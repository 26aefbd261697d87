//! The generic relisting PLEG (upstream `pkg/kubelet/pleg/generic.go`, `GenericPLEG`).
//!
//! Every relist period the PLEG lists all pods of the runtime, compares each container and
//! sandbox with the previous listing, re-inspects the pods that changed into the
//! [`PodCache`], and sends [`Event`]s to the sync loop. It assumes a container is not created,
//! run and removed within one period; the sync loop's periodic resync is the safety net.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use kubelet_core::PodUid;
use kubelet_core::cache::PodCache;
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::pleg::{Event, EventType, HealthError, Pleg};
use kubelet_core::runtime::{self, PodStatus, RunningPod, Runtime, SandboxState};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, trace, warn};

use crate::Error;
use crate::events::{PlegState, compute_events, state_of};

/// Capacity of the event channel, as upstream's `plegChannelCapacity`. When the sync loop
/// falls this far behind, further events of a relist are dropped (the periodic resync
/// catches up).
pub const CHANNEL_CAPACITY: usize = 1000;

/// Timing of a [`GenericPleg`] (upstream `RelistDuration`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Time between relists. Default 1 s.
    pub relist_period: Duration,
    /// The PLEG is unhealthy when the last successful relist is older than this. Must exceed
    /// the period plus the time a relist takes. Default 3 min.
    pub relist_threshold: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            relist_period: Duration::from_secs(1),
            relist_threshold: Duration::from_secs(3 * 60),
        }
    }
}

impl Config {
    /// Sets [`Config::relist_period`].
    #[must_use]
    pub fn relist_period(self, relist_period: Duration) -> Self {
        Self {
            relist_period,
            ..self
        }
    }

    /// Sets [`Config::relist_threshold`].
    #[must_use]
    pub fn relist_threshold(self, relist_threshold: Duration) -> Self {
        Self {
            relist_threshold,
            ..self
        }
    }
}

/// The last two listings of one pod (upstream `podRecord`).
#[derive(Debug, Default)]
struct Record {
    old: Option<RunningPod>,
    current: Option<RunningPod>,
}

/// State owned by the relist (upstream `podRecords` and `podsToReinspect`, under
/// `relistLock`).
#[derive(Debug, Default)]
struct RelistState {
    records: BTreeMap<PodUid, Record>,
    reinspect: HashSet<PodUid>,
}

impl RelistState {
    fn set_current(&mut self, pods: Vec<RunningPod>) {
        for record in self.records.values_mut() {
            record.current = None;
        }
        for pod in pods {
            match self.records.get_mut(&pod.uid) {
                Some(record) => record.current = Some(pod),
                None => {
                    let uid = pod.uid.clone();
                    self.records.entry(uid).or_default().current = Some(pod);
                }
            }
        }
    }

    /// The current listing becomes the baseline; a pod gone from the runtime is forgotten.
    fn update(&mut self, uid: &PodUid) {
        let Some(record) = self.records.get_mut(uid) else {
            return;
        };
        match record.current.take() {
            Some(current) => record.old = Some(current),
            None => {
                self.records.remove(uid);
            }
        }
    }

    /// The pod whose last listing holds a container or sandbox with runtime ID `id`.
    fn pod_of(&self, id: &str) -> Option<&RunningPod> {
        self.records.values().find_map(|r| {
            [r.current.as_ref(), r.old.as_ref()]
                .into_iter()
                .flatten()
                .find(|p| {
                    p.containers.iter().any(|c| c.id == id)
                        || p.sandboxes.iter().any(|s| s.id == id)
                })
        })
    }
}

/// `true` when two listings of a pod hold the same containers and sandboxes in the same
/// order and states, so that [`compute_events`] would find nothing (the common case of a
/// relist, checked without its bookkeeping).
fn unchanged(old: Option<&RunningPod>, new: Option<&RunningPod>) -> bool {
    let (Some(old), Some(new)) = (old, new) else {
        return old.is_none() && new.is_none();
    };
    old.containers.len() == new.containers.len()
        && old.sandboxes.len() == new.sandboxes.len()
        && old
            .containers
            .iter()
            .zip(&new.containers)
            .all(|(a, b)| a.id == b.id && a.state == b.state)
        && old
            .sandboxes
            .iter()
            .zip(&new.sandboxes)
            .all(|(a, b)| a.id == b.id && a.state == b.state)
}

/// What [`GenericPleg::relist_container`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerRelist {
    /// No pod of the last listing has a container or sandbox with this ID: only a full
    /// relist can find it.
    Unknown,
    /// The container's pod was re-inspected; this is the container's (or sandbox's) state
    /// now, [`PlegState::NonExistent`] when it is gone.
    Relisted(PlegState),
}

struct Shared {
    runtime: Arc<dyn Runtime>,
    cache: PodCache,
    config: Config,
    events: mpsc::Sender<Event>,
    relist: tokio::sync::Mutex<RelistState>,
    /// Serializes cache writes of the relist and of [`Pleg::relist_pod`] (upstream
    /// `podCacheMutex`).
    cache_lock: tokio::sync::Mutex<()>,
    last_relist: Mutex<Option<Instant>>,
    relist_now: Notify,
    /// The period the run loop relists with (upstream `Update(relistDuration)`).
    period: watch::Sender<Duration>,
    /// Relists that have started listing, and (watched) relists that have finished.
    started: AtomicU64,
    /// Where relists are recorded (`kubelet_pleg_relist_*`, `kubelet_running_*`).
    metrics: KubeletMetrics,
    finished: watch::Sender<u64>,
}

/// The generic relisting PLEG. Cheap to clone; clones share state.
///
/// Create it with [`GenericPleg::new`], spawn [`GenericPleg::run`] on a clone, and hand the
/// event receiver to the sync loop.
#[doc(alias = "PLEG")]
#[doc(alias = "GenericPLEG")]
#[derive(Clone)]
pub struct GenericPleg {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for GenericPleg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenericPleg")
            .field("config", &self.shared.config)
            .field("last_relist", &self.last_relist())
            .finish_non_exhaustive()
    }
}

impl GenericPleg {
    /// A PLEG over `runtime` that keeps `cache` fresh, and the receiver of its events
    /// (capacity [`CHANNEL_CAPACITY`]).
    pub fn new(
        runtime: Arc<dyn Runtime>,
        cache: PodCache,
        config: Config,
    ) -> (Self, mpsc::Receiver<Event>) {
        Self::with_metrics(runtime, cache, config, KubeletMetrics::default())
    }

    /// As [`new`](Self::new), recording each relist in `metrics`: its duration and the
    /// interval since the previous one (`kubelet_pleg_relist_duration_seconds`,
    /// `kubelet_pleg_relist_interval_seconds`), and the pods and containers it found
    /// (`kubelet_running_pods`, `kubelet_running_containers`), as upstream `Relist`.
    pub fn with_metrics(
        runtime: Arc<dyn Runtime>,
        cache: PodCache,
        config: Config,
        metrics: KubeletMetrics,
    ) -> (Self, mpsc::Receiver<Event>) {
        let (events, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let shared = Shared {
            runtime,
            cache,
            config,
            events,
            relist: tokio::sync::Mutex::new(RelistState::default()),
            cache_lock: tokio::sync::Mutex::new(()),
            last_relist: Mutex::new(None),
            relist_now: Notify::new(),
            period: watch::Sender::new(config.relist_period),
            started: AtomicU64::new(0),
            metrics,
            finished: watch::Sender::new(0),
        };
        (
            Self {
                shared: Arc::new(shared),
            },
            rx,
        )
    }

    /// The configuration the PLEG runs with.
    pub fn config(&self) -> Config {
        self.shared.config
    }

    /// The runtime the PLEG inspects.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.shared.runtime
    }

    /// Relists every [`relist_period`](Self::relist_period) (the first time right away)
    /// until `token` is cancelled. A relist requested with [`relist_now`](Self::relist_now)
    /// runs as soon as the current one finishes and restarts the period; a new period set
    /// with [`set_relist_period`](Self::set_relist_period) starts counting when it is set.
    /// Cancellation interrupts a relist in progress; the PLEG stays usable.
    pub async fn run(self, token: CancellationToken) {
        let mut period = self.shared.period.subscribe();
        let mut interval = tokio::time::interval(*period.borrow_and_update());
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = token.cancelled() => break,
                _ = interval.tick() => {}
                () = self.shared.relist_now.notified() => interval.reset(),
                Ok(()) = period.changed() => {
                    let every = *period.borrow_and_update();
                    interval = tokio::time::interval_at(Instant::now() + every, every);
                    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
                    continue;
                }
            }
            tokio::select! {
                biased;
                () = token.cancelled() => break,
                () = self.relist() => {}
            }
        }
        debug!("pleg stopped");
    }

    /// Asks the running loop for a relist now (for an event-driven PLEG that learned of a
    /// change). Requests made while a relist runs coalesce into one more relist.
    pub fn relist_now(&self) {
        self.shared.relist_now.notify_one();
    }

    /// Asks the running loop for a relist now, as [`relist_now`](Self::relist_now), and
    /// waits until a relist that started after this call has finished (successfully or
    /// not). Many callers share one relist. Cancel safe.
    pub async fn relist_and_wait(&self) {
        let target = self.shared.started.load(Ordering::SeqCst) + 1;
        let mut finished = self.shared.finished.subscribe();
        self.relist_now();
        // The sender lives as long as `self`.
        let _ = finished.wait_for(|n| *n >= target).await;
    }

    /// The period the run loop relists with now.
    pub fn relist_period(&self) -> Duration {
        *self.shared.period.borrow()
    }

    /// Changes the relist period of the running loop (upstream `Update`): an event-driven
    /// PLEG slows the relist down to a safety net while its event stream is healthy, and
    /// speeds it up again when the stream breaks. The health threshold stays
    /// [`Config::relist_threshold`].
    pub fn set_relist_period(&self, period: Duration) {
        self.shared.period.send_if_modified(|p| {
            let changed = *p != period;
            *p = period;
            changed
        });
    }

    /// One relist (upstream `Relist`): lists the runtime's pods, sends the events of what
    /// changed since the last listing, refreshes the cache of those pods and then the cache's
    /// global timestamp. A pod whose inspection fails gets no events this time and is
    /// re-inspected next time.
    ///
    /// Cancel safe: an interrupted relist is redone by the next one.
    pub async fn relist(&self) {
        let shared = &self.shared;
        let mut state = shared.relist.lock().await;
        let seq = shared.started.fetch_add(1, Ordering::SeqCst) + 1;
        // Upstream observes the interval since the last successful relist when a relist
        // starts, and the duration of every relist, failed ones too.
        let started = Instant::now();
        let interval = self
            .last_relist()
            .map(|last| started.saturating_duration_since(last));
        self.relist_locked(&mut state).await;
        shared.metrics.record_relist(started.elapsed(), interval);
        shared.finished.send_modify(|n| *n = (*n).max(seq));
    }

    async fn relist_locked(&self, state: &mut RelistState) {
        let shared = &self.shared;
        trace!("relisting");
        let timestamp = Instant::now();
        let pods = match shared.runtime.get_pods(true).await {
            Ok(pods) => pods,
            Err(e) => {
                error!(error = %e, "pleg: unable to retrieve pods");
                return;
            }
        };
        *shared.lock_last_relist() = Some(timestamp);
        // Upstream sets `kubelet_pleg_last_seen_seconds` to the relist's start.
        shared
            .metrics
            .set_pleg_last_seen(std::time::SystemTime::now() - timestamp.elapsed());
        shared.metrics.set_running(&pods);
        state.set_current(pods);

        let mut needs_reinspection = HashSet::new();
        // Only the pods with events or left to re-inspect need work below.
        let changed: Vec<(PodUid, Vec<Event>)> = state
            .records
            .iter()
            .filter_map(|(uid, record)| {
                let events = if unchanged(record.old.as_ref(), record.current.as_ref()) {
                    Vec::new()
                } else {
                    compute_events(uid, record.old.as_ref(), record.current.as_ref())
                };
                (!events.is_empty() || state.reinspect.contains(uid)).then(|| (uid.clone(), events))
            })
            .collect();
        for (uid, events) in changed {
            let Some(record) = state.records.get(&uid) else {
                continue;
            };
            let current = record.current.clone();
            if let Err(e) = self.update_cache(current.as_ref(), &uid).await {
                debug!(pod = %uid, error = %e, "pleg: ignoring events for pod until it can be inspected");
                needs_reinspection.insert(uid);
                continue;
            }
            state.update(&uid);
            self.send(events);
        }
        // Only after every pod above is in the cache.
        shared.cache.update_time(timestamp);
        state.reinspect = needs_reinspection;
    }

    /// Re-inspects only the pod that holds the container or sandbox `id` in the last listing
    /// and sends the events of what changed since then, as a relist would for that pod; the
    /// pod's record then holds the new state, so the next relist does not repeat them. For
    /// an event-driven PLEG that learned that `id` changed.
    ///
    /// # Errors
    ///
    /// The runtime's, when the inspection fails; the next relist then re-inspects the pod.
    pub async fn relist_container(&self, id: &str) -> runtime::Result<ContainerRelist> {
        let mut state = self.shared.relist.lock().await;
        let Some(pod) = state.pod_of(id) else {
            return Ok(ContainerRelist::Unknown);
        };
        let (uid, name, namespace) = (pod.uid.clone(), pod.name.clone(), pod.namespace.clone());
        let status = match self.inspect(&uid, &name, &namespace).await {
            Ok(status) => status,
            Err(e) => {
                state.reinspect.insert(uid);
                return Err(e);
            }
        };
        let listed = status.to_running_pod();
        let current =
            (!listed.sandboxes.is_empty() || !listed.containers.is_empty()).then_some(listed);
        let now = state_of(current.as_ref(), id);
        let record = state.records.entry(uid.clone()).or_default();
        let events = compute_events(&uid, record.old.as_ref(), current.as_ref());
        let gone = current.is_none();
        record.current = current;
        state.update(&uid);
        state.reinspect.remove(&uid);
        if gone {
            debug!(pod = %uid, "pleg: deleting status of pod gone from the runtime");
            self.shared.cache.delete(&uid);
        }
        self.send(events);
        Ok(ContainerRelist::Relisted(now))
    }

    /// Sends a relist's events to the sync loop, dropping [`EventType::ContainerChanged`]
    /// as upstream does (not reliable, and nothing uses them).
    fn send(&self, events: Vec<Event>) {
        for event in events {
            if event.kind == EventType::ContainerChanged {
                continue;
            }
            match self.shared.events.try_send(event) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    error!("pleg: event channel is full, discarding this relist cycle's event");
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    trace!("pleg: event receiver is gone");
                }
            }
        }
    }

    /// Upstream `updateCache`: a pod gone from the runtime leaves the cache; any other is
    /// inspected and stored with the time the inspection started.
    async fn update_cache(&self, pod: Option<&RunningPod>, uid: &PodUid) -> runtime::Result<()> {
        let Some(pod) = pod else {
            debug!(pod = %uid, "pleg: deleting status of pod gone from the runtime");
            self.shared.cache.delete(uid);
            return Ok(());
        };
        self.inspect(&pod.uid, &pod.name, &pod.namespace)
            .await
            .map(drop)
    }

    /// Inspects a pod and stores its status in the cache; returns the status stored.
    async fn inspect(
        &self,
        uid: &PodUid,
        name: &str,
        namespace: &str,
    ) -> runtime::Result<PodStatus> {
        let shared = &self.shared;
        let _guard = shared.cache_lock.lock().await;
        let timestamp = Instant::now();
        let mut status = shared
            .runtime
            .get_pod_status(uid, name, namespace)
            .await
            .inspect_err(|e| warn!(pod = %uid, error = %e, "pleg: inspecting pod"))?;
        status.ips = self.pod_ips(uid, &status);
        shared.cache.set(uid, status.clone(), timestamp);
        Ok(status)
    }

    /// Keeps the cached pod IPs when the new status has none and no sandbox is ready: a pod
    /// torn down keeps reporting the IP it had (upstream `getPodIPs`).
    fn pod_ips(&self, uid: &PodUid, status: &PodStatus) -> Vec<String> {
        if !status.ips.is_empty()
            || status
                .sandboxes
                .iter()
                .any(|s| s.state == SandboxState::Ready)
        {
            return status.ips.clone();
        }
        self.shared
            .cache
            .get(uid)
            .map(|(old, _)| old.ips.clone())
            .unwrap_or_default()
    }

    /// When the last successful relist started, if any.
    pub fn last_relist(&self) -> Option<Instant> {
        *self.shared.lock_last_relist()
    }
}

impl Shared {
    fn lock_last_relist(&self) -> MutexGuard<'_, Option<Instant>> {
        self.last_relist.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Pleg for GenericPleg {
    /// Inspects the pod now and stores its status with the time the inspection started, so a
    /// pod worker waiting for a status newer than its last action is released (upstream
    /// `UpdateCache`). The next relist still sends events for changes it sees.
    async fn relist_pod(
        &self,
        uid: &PodUid,
        name: &str,
        namespace: &str,
    ) -> Result<(), runtime::Error> {
        self.inspect(uid, name, namespace).await.map(drop)
    }

    /// `Err` is [`Error::NeverRelisted`] or [`Error::Stale`].
    fn healthy(&self) -> Result<(), HealthError> {
        let Some(last) = self.last_relist() else {
            return Err(Error::NeverRelisted.into());
        };
        let elapsed = last.elapsed();
        let threshold = self.shared.config.relist_threshold;
        if elapsed > threshold {
            return Err(Error::Stale { elapsed, threshold }.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::tests::pod;
    use kubelet_core::runtime::ContainerState;

    #[test]
    fn unchanged_only_when_no_events() {
        use ContainerState::{Exited, Running};
        use SandboxState::{NotReady, Ready};
        let base = pod(&[("c1", Running), ("c2", Running)], &[("s1", Ready)]);
        let listings = [
            None,
            Some(base.clone()),
            Some(pod(&[("c1", Running), ("c2", Exited)], &[("s1", Ready)])),
            Some(pod(&[("c1", Running)], &[("s1", Ready)])),
            Some(pod(&[("c1", Running), ("c3", Running)], &[("s1", Ready)])),
            Some(pod(
                &[("c1", Running), ("c2", Running)],
                &[("s1", NotReady)],
            )),
            Some(pod(&[("c1", Running), ("c2", Running)], &[("s2", Ready)])),
            Some(pod(&[("c1", Running), ("c2", Running)], &[])),
        ];
        let uid = PodUid::from("p");
        for old in &listings {
            for new in &listings {
                let (old, new) = (old.as_ref(), new.as_ref());
                let no_events = compute_events(&uid, old, new).is_empty();
                assert_eq!(unchanged(old, new), no_events, "{old:?} -> {new:?}");
            }
        }
    }
}
