//! The kubelet's pod handling: [`Kubelet`] implements [`SyncHandler`] over the pod manager and
//! pod workers; [`KubeletPodSyncer`] is the body of a pod sync; [`sync_loop`] drives both
//! (upstream `pkg/kubelet/kubelet.go`, `kubelet_pods.go`).

mod admit;
pub mod env;
mod helper;
pub mod hosts;
mod propagation;
mod reason_cache;
pub mod runtime_state;
pub mod sync_loop;
mod syncer;

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use tracing::{debug, info, warn};

use crate::active_deadline;
use crate::backoff::Backoff;
use crate::cm::PodContainerManager;
use crate::pod::{PodExt, PodUid};
use crate::pod_manager::PodManager;
use crate::pod_workers::{PodWorkers, UpdatePodOptions, WorkerPhase};
use crate::probe::{self, ProbeManager, ProbeResult};
use crate::runtime::Runtime;
use crate::status::StatusManager;
use crate::sync::{SyncHandler, SyncPodType};
use crate::volume::VolumeManager;

pub use helper::KubeletRuntimeHelper;
pub use runtime_state::RuntimeState;
pub use syncer::{KubeletPodSyncer, Managers, ORPHAN_GRACE_PERIOD_SECONDS};

/// Whether every pod source has delivered its first snapshot (gates housekeeping).
pub type SourcesReady = Arc<dyn Fn() -> bool + Send + Sync>;

/// The kubelet's [`SyncHandler`].
#[derive(Clone)]
pub struct Kubelet {
    pod_manager: PodManager,
    workers: PodWorkers,
    runtime: Arc<dyn Runtime>,
    status: Arc<dyn StatusManager>,
    volumes: Arc<dyn VolumeManager>,
    probes: Arc<dyn ProbeManager>,
    cgroups: Arc<dyn PodContainerManager>,
    crash_backoff: Arc<Backoff>,
    sources_ready: SourcesReady,
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet").finish_non_exhaustive()
    }
}

impl Kubelet {
    /// A kubelet over its pod manager, workers and managers.
    pub fn new(
        pod_manager: PodManager,
        workers: PodWorkers,
        managers: &Managers,
        crash_backoff: Arc<Backoff>,
        sources_ready: SourcesReady,
    ) -> Self {
        Self {
            pod_manager,
            workers,
            runtime: managers.runtime.clone(),
            status: managers.status.clone(),
            volumes: managers.volumes.clone(),
            probes: managers.probes.clone(),
            cgroups: managers.cgroups.clone(),
            crash_backoff,
            sources_ready,
        }
    }

    /// The desired pods.
    pub fn pod_manager(&self) -> &PodManager {
        &self.pod_manager
    }

    /// The pod workers.
    pub fn workers(&self) -> &PodWorkers {
        &self.workers
    }

    fn dispatch(&self, kind: SyncPodType, pods: Vec<Pod>) {
        for pod in pods {
            self.workers.update_pod(UpdatePodOptions {
                kind,
                pod: Some(pod),
                running_pod: None,
                grace_period_override: None,
            });
        }
    }

    /// Syncs the pods whose resync or retry time has come (the sync tick).
    pub async fn sync_due_pods(&self) {
        let mut due = self.workers.due_pods();
        for uid in self.pods_past_active_deadline() {
            if !due.contains(&uid) {
                due.push(uid);
            }
        }
        if due.is_empty() {
            return;
        }
        let mut pods = Vec::new();
        for uid in due {
            match self.pod_manager.pod_by_uid(&uid) {
                Some(pod) => pods.push(pod),
                None => self.workers.resync(&uid),
            }
        }
        self.handle_pod_syncs(pods).await;
    }

    /// Running pods that are past their `activeDeadlineSeconds` (upstream
    /// `activeDeadlineHandler.ShouldSync`): their next sync fails them.
    fn pods_past_active_deadline(&self) -> Vec<PodUid> {
        let with_deadline = self
            .pod_manager
            .filter_map(|p| active_deadline::active_deadline_seconds(p).map(|_| p.clone()));
        if with_deadline.is_empty() {
            return Vec::new();
        }
        let now = crate::time::now();
        with_deadline
            .into_iter()
            .filter(|p| self.workers.phase(&p.uid()) == Some(WorkerPhase::Syncing))
            .filter(|p| {
                let start = self
                    .status
                    .pod_status(&p.uid())
                    .and_then(|s| s.start_time)
                    .or_else(|| p.status.as_ref().and_then(|s| s.start_time.clone()))
                    .map(|t| t.0);
                active_deadline::past_active_deadline(p, start, now)
            })
            .map(|p| p.uid())
            .collect()
    }

    /// Syncs the pod a PLEG event is about, if it is desired.
    pub async fn handle_pleg_event(&self, event: &crate::pleg::Event) {
        match self.pod_manager.pod_by_uid(&event.id) {
            Some(pod) => self.handle_pod_syncs(vec![pod]).await,
            None => {
                debug!(pod = %event.id, kind = ?event.kind, "PLEG event for a pod with no config")
            }
        }
    }

    /// Syncs the pod whose probe result changed (upstream `handleProbeSync`): a liveness or
    /// startup failure makes the runtime restart the container, a readiness or startup change
    /// is reflected in the regenerated status.
    pub async fn handle_probe_update(&self, update: &probe::Update) {
        if update.kind == probe::ProbeKind::Liveness && update.result != ProbeResult::Failure {
            return;
        }
        match self.pod_manager.pod_by_uid(&update.pod_uid) {
            Some(pod) => {
                debug!(pod = %pod.full_name(), kind = %update.kind, result = ?update.result, container = %update.container_id, "probe result changed");
                self.handle_pod_syncs(vec![pod]).await
            }
            None => debug!(pod = %update.pod_uid, "probe update for a pod with no config"),
        }
    }
}

impl Kubelet {
    /// Removes the cgroups of pods that are neither desired, nor known to a pod worker, nor
    /// running in the runtime (upstream `cleanupOrphanedPodCgroups`).
    fn cleanup_orphaned_pod_cgroups(&self, keep: &HashSet<PodUid>) {
        let cgroups = match self.cgroups.pod_cgroups() {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "listing pod cgroups");
                return;
            }
        };
        for uid in cgroups.into_iter().filter(|u| !keep.contains(u)) {
            info!(pod = %uid, "removing orphaned pod cgroup");
            if let Err(e) = self.cgroups.destroy(&uid) {
                warn!(pod = %uid, error = %e, "removing orphaned pod cgroup");
            }
        }
    }
}

#[async_trait]
impl SyncHandler for Kubelet {
    async fn handle_pod_additions(&self, mut pods: Vec<Pod>) {
        pods.sort_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
        });
        for pod in pods {
            info!(pod = %pod.full_name(), uid = %pod.uid(), "pod added");
            self.pod_manager.add_pod(pod.clone());
            if let Err((reason, message)) = admit::can_admit_pod(&pod) {
                admit::reject_pod(self.status.as_ref(), &pod, reason, &message);
                continue;
            }
            self.dispatch(SyncPodType::Create, vec![pod]);
        }
    }

    async fn handle_pod_updates(&self, pods: Vec<Pod>) {
        for pod in &pods {
            info!(pod = %pod.full_name(), "pod updated");
            self.pod_manager.add_pod(pod.clone());
        }
        self.dispatch(SyncPodType::Update, pods);
    }

    async fn handle_pod_removes(&self, pods: Vec<Pod>) {
        for pod in &pods {
            info!(pod = %pod.full_name(), uid = %pod.uid(), "pod removed");
            self.pod_manager.remove_pod(pod);
            self.probes.remove_pod(pod);
        }
        self.dispatch(SyncPodType::Kill, pods);
    }

    async fn handle_pod_reconcile(&self, pods: Vec<Pod>) {
        for pod in pods {
            self.pod_manager.add_pod(pod);
        }
    }

    async fn handle_pod_syncs(&self, pods: Vec<Pod>) {
        self.dispatch(SyncPodType::Sync, pods);
    }

    async fn handle_pod_cleanups(&self) -> Result<(), String> {
        if !(self.sources_ready)() {
            debug!("skipping housekeeping: not every pod source has been seen yet");
            return Ok(());
        }
        let desired = self.pod_manager.uids();
        let known = self.workers.sync_known_pods(&desired);
        let mut keep: HashSet<PodUid> = desired.clone();
        keep.extend(known.keys().cloned());
        self.status.remove_orphaned_statuses(&keep);
        self.probes.cleanup_pods(&desired);
        self.crash_backoff.gc();

        let runtime_pods = self
            .runtime
            .get_pods(true)
            .await
            .map_err(|e| e.to_string())?;
        for rp in runtime_pods {
            if desired.contains(&rp.uid) {
                continue;
            }
            if rp.is_empty_or_stopped() {
                // Stopped and wanted by nobody (e.g. left over after a kubelet restart).
                if !keep.contains(&rp.uid)
                    && let Err(e) = self.runtime.remove_pod(&rp).await
                {
                    warn!(pod = %rp.uid, error = %e, "removing stopped runtime pod");
                }
                continue;
            }
            // Its volumes stay until its containers are gone (upstream skips running pods in
            // cleanupOrphanedPodDirs).
            keep.insert(rp.uid.clone());
            let terminating = known
                .get(&rp.uid)
                .is_some_and(|p| *p != WorkerPhase::Finished);
            if !terminating {
                warn!(pod = %rp.uid, name = %rp.name, namespace = %rp.namespace, "killing runtime pod that no source wants");
                self.workers.update_pod(UpdatePodOptions {
                    kind: SyncPodType::Kill,
                    pod: None,
                    running_pod: Some(rp),
                    grace_period_override: Some(ORPHAN_GRACE_PERIOD_SECONDS),
                });
            }
        }
        self.volumes
            .cleanup_orphaned(&keep)
            .await
            .map_err(|e| format!("cleaning up orphaned volumes: {e}"))?;
        self.cleanup_orphaned_pod_cgroups(&keep);
        if let Err(e) = self.cgroups.update_qos_cgroups(&self.pod_manager.pods()) {
            warn!(error = %e, "updating the QoS cgroups");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
