//! The sync loop (upstream `syncLoop` / `syncLoopIteration` in `pkg/kubelet/kubelet.go`),
//! over any [`SyncHandler`].
//!
//! One task selects over: config updates (ADD/UPDATE/REMOVE/…), PLEG events, probe result
//! changes (liveness failures, readiness and startup transitions), a 1 s tick that
//! syncs pods whose resync or retry is due, and a 2 s housekeeping tick. While the runtime is
//! unhealthy it syncs nothing and backs off from 100 ms to 5 s, as upstream does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::{Operation, PodUpdate};
use crate::pleg;
use crate::pod::PodExt;
use crate::probe;
use crate::sync::SyncHandler;

use super::runtime_state::RuntimeState;

/// Periods of the sync loop.
#[derive(Clone, Debug)]
pub struct Config {
    /// How often due pods are collected (upstream `syncCh` ticker, 1 s).
    pub sync_tick: Duration,
    /// How often housekeeping runs (upstream `housekeepingPeriod`, 2 s).
    pub housekeeping_period: Duration,
    /// The resync interval; `/healthz/syncloop` fails when the loop has not iterated for
    /// max(2 × this, 5 min), as upstream.
    pub resync_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            sync_tick: Duration::from_secs(1),
            housekeeping_period: Duration::from_secs(2),
            resync_interval: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Default)]
struct HealthInner {
    last_iteration: Option<Instant>,
    blocked: Option<String>,
}

/// Liveness of the sync loop for `/healthz/syncloop`. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Health {
    inner: Arc<Mutex<HealthInner>>,
    threshold: Duration,
}

/// Why [`Health::check`] fails (upstream's `syncloop` health check messages).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unhealthy {
    /// Runtime errors keep the loop from syncing pods.
    #[error("sync loop is blocked: {0}")]
    Blocked(String),
    /// The loop has not iterated yet.
    #[error("sync loop has not started")]
    NotStarted,
    /// The last iteration is older than the threshold.
    #[error("sync loop took too long: last iteration {since:?} ago, threshold {threshold:?}")]
    TooSlow {
        /// Time since the last iteration.
        since: Duration,
        /// The staleness threshold.
        threshold: Duration,
    },
}

impl Health {
    /// A health record whose staleness threshold is max(2 × `resync_interval`, 5 min).
    pub fn new(resync_interval: Duration) -> Self {
        Self {
            inner: Arc::default(),
            threshold: (resync_interval * 2).max(Duration::from_secs(300)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HealthInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Ok` while the loop iterates and is not blocked by runtime errors.
    pub fn check(&self) -> Result<(), Unhealthy> {
        let inner = self.lock();
        if let Some(reason) = &inner.blocked {
            return Err(Unhealthy::Blocked(reason.clone()));
        }
        match inner.last_iteration {
            None => Err(Unhealthy::NotStarted),
            Some(t) if t.elapsed() > self.threshold => Err(Unhealthy::TooSlow {
                since: t.elapsed(),
                threshold: self.threshold,
            }),
            Some(_) => Ok(()),
        }
    }

    fn iterated(&self) {
        let mut inner = self.lock();
        inner.last_iteration = Some(Instant::now());
        inner.blocked = None;
    }

    fn block(&self, reason: String) -> bool {
        let mut inner = self.lock();
        let changed = inner.blocked.as_deref() != Some(reason.as_str());
        inner.blocked = Some(reason);
        changed
    }
}

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The event channels the sync loop selects over (upstream `syncLoopIteration`'s channels).
#[derive(Debug)]
pub struct Channels {
    /// Merged pod config updates.
    pub updates: mpsc::Receiver<PodUpdate>,
    /// PLEG events.
    pub pleg_events: mpsc::Receiver<pleg::Event>,
    /// Probe result changes (all three kinds).
    pub probe_updates: probe::UpdateReceiver,
}

/// Runs the sync loop over `handler` until `token` is cancelled (upstream `syncLoop`).
///
/// Each iteration waits for one input and hands it to `handler` as upstream
/// `syncLoopIteration` does (see [`SyncHandler`] for the mapping). A closed channel is no
/// longer selected; the loop keeps ticking until cancelled.
pub async fn run(
    handler: Arc<dyn SyncHandler>,
    channels: Channels,
    runtime_state: RuntimeState,
    health: Health,
    config: Config,
    token: CancellationToken,
) {
    let mut sync_tick = tokio::time::interval(config.sync_tick);
    sync_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut housekeeping = tokio::time::interval(config.housekeeping_period);
    housekeeping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut backoff = MIN_BACKOFF;
    let Channels {
        mut updates,
        mut pleg_events,
        mut probe_updates,
    } = channels;
    let mut config_open = true;
    let mut pleg_open = true;
    let mut probes_open = true;
    info!("starting the sync loop");
    loop {
        let errors = runtime_state.runtime_errors();
        if !errors.is_empty() {
            let reason = errors.join("; ");
            if health.block(reason.clone()) {
                warn!(reason = %reason, "skipping pod synchronization");
            }
            tokio::select! {
                biased;
                _ = token.cancelled() => break,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            continue;
        }
        backoff = MIN_BACKOFF;
        health.iterated();
        tokio::select! {
            biased;
            _ = token.cancelled() => break,
            update = updates.recv(), if config_open => match update {
                Some(update) => dispatch_config(handler.as_ref(), update).await,
                None => {
                    info!("pod config channel closed; no more pod updates");
                    config_open = false;
                }
            },
            event = pleg_events.recv(), if pleg_open => match event {
                Some(event) => handle_pleg_event(handler.as_ref(), &event).await,
                None => pleg_open = false,
            },
            update = probe_updates.recv(), if probes_open => match update {
                Some(update) => handle_probe_update(handler.as_ref(), &update).await,
                None => probes_open = false,
            },
            _ = sync_tick.tick() => {
                let pods = handler.pods_to_sync();
                if !pods.is_empty() {
                    handler.handle_pod_syncs(pods).await;
                }
            }
            _ = housekeeping.tick() => housekeep(handler.as_ref()).await,
        }
    }
    info!("sync loop stopped");
}

/// A config update goes to the handler method of its operation.
async fn dispatch_config(handler: &dyn SyncHandler, update: PodUpdate) {
    let PodUpdate { pods, op, source } = update;
    debug!(?op, %source, count = pods.len(), "pod config update");
    match op {
        Operation::Add => handler.handle_pod_additions(pods).await,
        Operation::Update | Operation::Delete => handler.handle_pod_updates(pods).await,
        Operation::Remove => handler.handle_pod_removes(pods).await,
        Operation::Reconcile => handler.handle_pod_reconcile(pods).await,
        // The merger never forwards SET; treat a stray one as additions of its pods.
        Operation::Set => handler.handle_pod_additions(pods).await,
    }
}

/// Syncs the pod a PLEG event is about, if it is desired (upstream `isSyncPodWorthy`: every
/// event but `ContainerRemoved`).
async fn handle_pleg_event(handler: &dyn SyncHandler, event: &pleg::Event) {
    if event.kind == pleg::EventType::ContainerRemoved {
        return;
    }
    match handler.pod_by_uid(&event.id) {
        Some(pod) => handler.handle_pod_syncs(vec![pod]).await,
        None => debug!(pod = %event.id, kind = ?event.kind, "PLEG event for a pod with no config"),
    }
}

/// Syncs the pod whose probe result changed (upstream `handleProbeSync`): a liveness failure
/// makes the runtime restart the container, a readiness or startup change is reflected in
/// the regenerated status. A liveness success is no reason to sync.
async fn handle_probe_update(handler: &dyn SyncHandler, update: &probe::Update) {
    if update.kind == probe::ProbeKind::Liveness && update.result != probe::ProbeResult::Failure {
        return;
    }
    match handler.pod_by_uid(&update.pod_uid) {
        Some(pod) => {
            debug!(pod = %pod.full_name(), kind = %update.kind, result = ?update.result, container = %update.container_id, "probe result changed");
            handler.handle_pod_syncs(vec![pod]).await
        }
        None => debug!(pod = %update.pod_uid, "probe update for a pod with no config"),
    }
}

/// Housekeeping, once every source has been seen (upstream: skipped until
/// `sourcesReady.AllReady`).
async fn housekeep(handler: &dyn SyncHandler) {
    if !handler.sources_ready() {
        debug!("skipping housekeeping: not every pod source has been seen yet");
        return;
    }
    let start = Instant::now();
    if let Err(e) = handler.handle_pod_cleanups().await {
        warn!(error = %e, "failed cleaning pods");
    }
    if start.elapsed() > Duration::from_secs(1) {
        warn!(elapsed = ?start.elapsed(), "housekeeping took longer than expected");
    }
}

#[cfg(test)]
mod tests;
