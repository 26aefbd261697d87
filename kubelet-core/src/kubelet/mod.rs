//! The kubelet's pod handling: [`Kubelet`] implements [`SyncHandler`] over the pod manager and
//! pod workers, admitting new pods through its [`admit`] chain (with [`predicate`] admission
//! against the [`node`]); [`KubeletPodSyncer`] is the body of a pod sync; [`mirror`] pods
//! reflect static pods in the API; [`sync_loop`] drives any [`SyncHandler`];
//! [`KubeletBuilder`] wires them all into a runnable [`KubeletService`] (upstream
//! `pkg/kubelet/kubelet.go`, `kubelet_pods.go`).

pub mod admit;
pub mod builder;
pub mod env;
mod helper;
pub mod hosts;
pub mod mirror;
pub mod node;
mod pod_state;
pub mod predicate;
mod propagation;
pub mod pull_secrets;
mod reason_cache;
pub mod runtime_state;
pub mod sync_loop;
mod syncer;
mod terminate;

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use tracing::{info, warn};

use crate::active_deadline;
use crate::backoff::Backoff;
use crate::cm::PodContainerManager;
use crate::pod::{PodExt, PodUid, is_mirror_pod};
use crate::pod_manager::PodManager;
use crate::pod_workers::{PodWorkers, UpdatePodOptions, WorkerPhase};
use crate::probe::ProbeManager;
use crate::runtime::Runtime;
use crate::start_path;
use crate::status::StatusManager;
use crate::sync::{CleanupError, SyncHandler, SyncPodType};
use crate::volume::VolumeManager;

pub use admit::{AdmitChain, PodAdmitAttributes, PodAdmitHandler, PodAdmitResult};
pub use builder::{KubeletBuilder, KubeletService};
pub use helper::KubeletRuntimeHelper;
pub use mirror::{MirrorClient, NoMirrorPods};
pub use node::{FixedNode, NodeProvider};
pub use predicate::PredicateAdmitHandler;
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
    admit: AdmitChain,
    mirror: Arc<dyn MirrorClient>,
    events: Arc<dyn crate::events::EventRecorder>,
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
            admit: AdmitChain::default(),
            mirror: Arc::new(NoMirrorPods),
            events: Arc::new(crate::events::NoopRecorder),
        }
    }

    /// This kubelet with `mirror` deleting orphaned mirror pods at housekeeping (default:
    /// [`NoMirrorPods`]).
    pub fn with_mirror_client(mut self, mirror: Arc<dyn MirrorClient>) -> Self {
        self.mirror = mirror;
        self
    }

    /// Records admission rejections with `recorder` (upstream `rejectPod`; default: none).
    #[must_use]
    pub fn with_event_recorder(mut self, recorder: Arc<dyn crate::events::EventRecorder>) -> Self {
        self.events = recorder;
        self
    }

    /// This kubelet with `admit` as its admit handlers (default: [`AdmitChain::default`],
    /// the sysctl check).
    pub fn with_admit_chain(mut self, admit: AdmitChain) -> Self {
        self.admit = admit;
        self
    }

    /// The desired pods.
    pub fn pod_manager(&self) -> &PodManager {
        &self.pod_manager
    }

    /// The pod workers.
    pub fn workers(&self) -> &PodWorkers {
        &self.workers
    }

    /// A mirror pod was added, updated or removed: that is an update of its static pod, if
    /// there is one (upstream `handleMirrorPod`).
    fn handle_mirror_pod(&self, mirror_pod: &Pod) {
        if let Some(pod) = self.pod_manager.pod_by_mirror_pod(mirror_pod) {
            self.dispatch(SyncPodType::Update, vec![pod]);
        }
    }

    fn dispatch(&self, kind: SyncPodType, pods: Vec<Pod>) {
        for pod in pods {
            self.workers.update_pod(UpdatePodOptions {
                kind,
                pod: Some(pod),
                running_pod: None,
                grace_period_override: None,
                evict: false,
            });
        }
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
}

impl Kubelet {
    /// The pods that count as running on the node for admission (upstream
    /// `filterOutInactivePods`): neither in a terminal phase nor being terminated.
    fn filter_out_inactive_pods(&self, pods: Vec<Pod>) -> Vec<Pod> {
        pods.into_iter()
            .filter(|p| {
                let uid = p.uid();
                let terminal = self
                    .status
                    .pod_status(&uid)
                    .is_some_and(|s| crate::status::is_terminal_phase(&s));
                !terminal && !self.workers.is_termination_requested(&uid)
            })
            .collect()
    }

    /// Removes the cgroups of pods that are neither desired, nor known to a pod worker, nor
    /// running in the runtime (upstream `cleanupOrphanedPodCgroups`), then sizes the QoS
    /// cgroups for the pods of the pod manager (upstream `UpdateQOSCgroups`), on the
    /// blocking pool.
    async fn cleanup_pod_cgroups(&self, keep: HashSet<PodUid>) {
        let cgroups = Arc::clone(&self.cgroups);
        let shares = syncer::burstable_cpu_shares_of(&self.pod_manager, None);
        let cleanup = move || {
            cleanup_orphaned_pod_cgroups(cgroups.as_ref(), &keep);
            if let Err(e) = cgroups.update_qos_cgroups(shares) {
                warn!(error = %e, "updating the QoS cgroups");
            }
        };
        if let Err(e) = crate::blocking::unblock(cleanup).await {
            warn!(error = %e, "cleaning up pod cgroups");
        }
    }
}

/// Removes the pod cgroups not in `keep` (upstream `cleanupOrphanedPodCgroups`). Blocks on
/// the cgroup filesystem.
fn cleanup_orphaned_pod_cgroups(cgroups: &dyn PodContainerManager, keep: &HashSet<PodUid>) {
    let found = match cgroups.pod_cgroups() {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "listing pod cgroups");
            return;
        }
    };
    for uid in found.into_iter().filter(|u| !keep.contains(u)) {
        info!(pod = %uid, "removing orphaned pod cgroup");
        if let Err(e) = cgroups.destroy(&uid) {
            warn!(pod = %uid, error = %e, "removing orphaned pod cgroup");
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
        // The pods admitted so far; each admitted pod joins them (upstream takes the pod
        // manager's pods before adding each one, which is the same set).
        let mut active = self.filter_out_inactive_pods(self.pod_manager.pods());
        for pod in pods {
            info!(pod = %pod.full_name(), uid = %pod.uid(), "pod added");
            self.pod_manager.add_pod(pod.clone());
            if is_mirror_pod(&pod) {
                self.handle_mirror_pod(&pod);
                continue;
            }
            if !self.workers.is_termination_requested(&pod.uid()) {
                let result = self.admit.can_admit_pod(&pod, &active);
                if !result.admit {
                    admit::reject_pod(self.status.as_ref(), &pod, &result.reason, &result.message);
                    self.events.event(
                        &crate::events::pod_ref(&pod),
                        crate::events::EventType::Warning,
                        &result.reason,
                        &result.message,
                    );
                    continue;
                }
                active.push(pod.clone());
            }
            crate::start_step!(start_path::ADMITTED, pod = %pod.full_name());
            self.dispatch(SyncPodType::Create, vec![pod]);
        }
    }

    async fn handle_pod_updates(&self, pods: Vec<Pod>) {
        for pod in pods {
            info!(pod = %pod.full_name(), "pod updated");
            self.pod_manager.add_pod(pod.clone());
            if is_mirror_pod(&pod) {
                self.handle_mirror_pod(&pod);
            } else {
                self.dispatch(SyncPodType::Update, vec![pod]);
            }
        }
    }

    async fn handle_pod_removes(&self, pods: Vec<Pod>) {
        for pod in pods {
            info!(pod = %pod.full_name(), uid = %pod.uid(), "pod removed");
            self.pod_manager.remove_pod(&pod);
            if is_mirror_pod(&pod) {
                self.handle_mirror_pod(&pod);
                continue;
            }
            self.probes.remove_pod(&pod);
            self.dispatch(SyncPodType::Kill, vec![pod]);
        }
    }

    async fn handle_pod_reconcile(&self, pods: Vec<Pod>) {
        for pod in pods {
            self.pod_manager.add_pod(pod);
        }
    }

    async fn handle_pod_syncs(&self, pods: Vec<Pod>) {
        self.dispatch(SyncPodType::Sync, pods);
    }

    async fn handle_pod_cleanups(&self) -> Result<(), CleanupError> {
        let desired = self.pod_manager.uids();
        let known = self.workers.sync_known_pods(&desired);
        let mut keep: HashSet<PodUid> = desired.clone();
        keep.extend(known.keys().cloned());
        self.status.remove_orphaned_statuses(&keep);
        self.probes.cleanup_pods(&desired);
        self.crash_backoff.gc();
        mirror::delete_orphans(
            &self.mirror,
            self.pod_manager.orphaned_mirror_pod_names(),
            |name| {
                self.workers
                    .is_pod_for_mirror_pod_terminating_by_full_name(name)
            },
        )
        .await;

        let runtime_pods = self
            .runtime
            .get_pods(true)
            .await
            .map_err(CleanupError::ListRuntimePods)?;
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
                    evict: false,
                });
            }
        }
        self.volumes
            .cleanup_orphaned(&keep)
            .await
            .map_err(CleanupError::OrphanedVolumes)?;
        self.cleanup_pod_cgroups(keep).await;
        Ok(())
    }

    fn pod_by_uid(&self, uid: &PodUid) -> Option<Pod> {
        self.pod_manager.pod_by_uid(uid)
    }

    fn pods_to_sync(&self) -> Vec<Pod> {
        let mut due = self.workers.due_pods();
        for uid in self.pods_past_active_deadline() {
            if !due.contains(&uid) {
                due.push(uid);
            }
        }
        let mut pods = Vec::new();
        for uid in due {
            match self.pod_manager.pod_by_uid(&uid) {
                Some(pod) => pods.push(pod),
                None => self.workers.resync(&uid),
            }
        }
        pods
    }

    fn sources_ready(&self) -> bool {
        (self.sources_ready)()
    }
}

#[cfg(test)]
mod tests;
