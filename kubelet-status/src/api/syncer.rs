//! The API status syncer: writes the status manager's statuses to the API server and deletes
//! pods whose termination is complete (upstream `manager.Start`, `syncBatch`, `syncPod`,
//! `needsUpdate`, `needsReconcile` and `canBeDeleted` in
//! `pkg/kubelet/status/status_manager.go`).
//!
//! * A status change is written at once (upstream `podStatusChannel`); changes that arrive
//!   while a batch is being written are coalesced into the next batch, so a pod start costs
//!   one or two PATCHes (`Pending`, then `Running`).
//! * Every 10 s (`syncPeriod`) all statuses are checked: a version not yet written, a pod
//!   ready for deletion, or an API status that differs from the kubelet's
//!   ([`is_pod_status_by_kubelet_equal`]) is written again.
//! * A pod whose write failed is retried after a backoff of 1 s doubling to 5 s, and not
//!   before: its further changes wait for the retry rather than hammering a failing server.
//!   Other pods are not held back by it (a pod the server refuses, e.g. with 403, does not
//!   delay the statuses of the rest).
//! * Upstream GETs the pod before each PATCH. Here the base of the patch is the newest copy
//!   the kubelet already has (the pod manager's, fed by the API watch, or the answer to the
//!   last PATCH), so a write costs one request; the pod is read from the API only when there
//!   is no copy or the last write conflicted.
//! * A status field the API server drops (a server older than the kubelet, e.g. `hostIPs`
//!   on 1.20) is learned from the PATCH answer and no longer written, so it cannot make the
//!   kubelet write the same status forever.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use kubelet_core::pod::{is_mirror_pod, is_static_pod, strip_managed_fields};
use kubelet_core::pod_manager::PodManager;
use kubelet_core::status::{PodDeletionSafety, is_terminal_phase};
use kubelet_core::{PodExt, PodUid};
use serde_json::Value;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, trace, warn};

use super::client::{Error, KubePodStatusApi, PodStatusApi};
use super::merge::{is_pod_status_by_kubelet_equal, merge_pod_status};
use super::mirror::MirrorPodLookup;
use super::patch::status_patch;
use crate::manager::{LocalStatusManager, VersionedStatus};

/// Status fields every API server since 1.20 keeps: never learned as dropped.
const KNOWN_FIELDS: [&str; 13] = [
    "phase",
    "conditions",
    "message",
    "reason",
    "nominatedNodeName",
    "hostIP",
    "podIP",
    "podIPs",
    "startTime",
    "initContainerStatuses",
    "containerStatuses",
    "qosClass",
    "ephemeralContainerStatuses",
];

/// Timing of the syncer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// How often every status is checked against the API (upstream `syncPeriod`, 10 s).
    pub resync_interval: Duration,
    /// The first wait after a pod's write failed (1 s).
    pub initial_backoff: Duration,
    /// The longest wait after a pod's writes failed again and again (5 s).
    pub max_backoff: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            resync_interval: Duration::from_secs(10),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// What one batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Pods whose status was synced (written, found up to date, or found gone).
    pub synced: usize,
    /// Pods whose sync failed; they are retried after their backoff.
    pub failed: usize,
    /// Pods left out because their backoff has not ended.
    pub backing_off: usize,
    /// When the earliest backoff ends.
    pub next_retry: Option<Instant>,
}

/// A pod's backoff after failed writes.
#[derive(Clone, Copy, Debug)]
struct Retry {
    /// Not before this.
    at: Instant,
    /// The wait after the next failure.
    next: Duration,
}

/// The pod the status of a local pod is written to.
struct Target {
    /// The API object's UID: the mirror pod's for a static pod.
    api_uid: PodUid,
    namespace: String,
    name: String,
    /// The API object as the kubelet last saw it, if it has a copy.
    pod: Option<Pod>,
}

/// The syncer's memory of the API (upstream `apiStatusVersions`), owned by its task.
#[derive(Debug, Default)]
struct State {
    /// The version of the local status last written, by API UID.
    api_versions: HashMap<PodUid, u64>,
    /// The pod as the API answered the last PATCH, by API UID: its metadata and status (see
    /// [`written_copy`]).
    api_pods: HashMap<PodUid, Pod>,
    /// API UIDs whose copy must be read again before the next write (the last one conflicted).
    stale: HashSet<PodUid>,
    /// Local UIDs whose API object was deleted.
    deleted: HashSet<PodUid>,
    /// Status fields the API server drops.
    dropped_fields: BTreeSet<String>,
    /// Pods backing off after failed writes, by API UID.
    retries: HashMap<PodUid, Retry>,
}

/// Writes pod statuses to the API server and deletes terminated pods (the API half of
/// upstream's status manager).
///
/// ```no_run
/// # use std::sync::Arc;
/// # use kubelet_core::pod_manager::PodManager;
/// # use kubelet_core::pod_workers::PodWorkers;
/// # use kubelet_status::LocalStatusManager;
/// # use kubelet_status::api::{ApiStatusSyncer, NoMirrorPods};
/// # fn demo(client: kube::Client, statuses: Arc<LocalStatusManager>, pods: PodManager,
/// #         workers: PodWorkers, tracker: tokio_util::task::TaskTracker,
/// #         token: tokio_util::sync::CancellationToken) {
/// let syncer = ApiStatusSyncer::new(client, statuses, pods, Arc::new(NoMirrorPods), Arc::new(workers));
/// tracker.spawn(syncer.run(token));
/// # }
/// ```
pub struct ApiStatusSyncer {
    api: Arc<dyn PodStatusApi>,
    statuses: Arc<LocalStatusManager>,
    pod_manager: PodManager,
    mirrors: Arc<dyn MirrorPodLookup>,
    safety: Arc<dyn PodDeletionSafety>,
    config: Config,
    state: State,
}

impl std::fmt::Debug for ApiStatusSyncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiStatusSyncer")
            .field("config", &self.config)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl ApiStatusSyncer {
    /// A syncer writing through `client` the statuses of `statuses`, for the pods of
    /// `pod_manager`; `mirrors` finds the mirror pods of static pods, `safety` (the pod
    /// workers) says whether a pod's containers may still run.
    pub fn new(
        client: kube::Client,
        statuses: Arc<LocalStatusManager>,
        pod_manager: PodManager,
        mirrors: Arc<dyn MirrorPodLookup>,
        safety: Arc<dyn PodDeletionSafety>,
    ) -> Self {
        Self::with_api(
            Arc::new(KubePodStatusApi::new(client)),
            statuses,
            pod_manager,
            mirrors,
            safety,
        )
    }

    /// As [`new`](Self::new), over any [`PodStatusApi`] (a fake in tests).
    pub fn with_api(
        api: Arc<dyn PodStatusApi>,
        statuses: Arc<LocalStatusManager>,
        pod_manager: PodManager,
        mirrors: Arc<dyn MirrorPodLookup>,
        safety: Arc<dyn PodDeletionSafety>,
    ) -> Self {
        Self {
            api,
            statuses,
            pod_manager,
            mirrors,
            safety,
            config: Config::default(),
            state: State::default(),
        }
    }

    /// This syncer with other timing.
    #[must_use]
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Syncs until `token` is cancelled: every status change at once, everything every
    /// [`Config::resync_interval`], failures after a backoff. Cancel safe: a write cut short
    /// is done again by the next syncer.
    pub async fn run(mut self, token: CancellationToken) {
        info!("starting to sync pod status with the API server");
        let mut changes = self.statuses.subscribe();
        let period = self.config.resync_interval;
        let mut resync = tokio::time::interval_at(Instant::now() + period, period);
        resync.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut all = false;
        loop {
            changes.mark_unchanged();
            let outcome = tokio::select! {
                biased;
                _ = token.cancelled() => return,
                outcome = self.sync_batch(all) => outcome,
            };
            let retry_at = outcome.next_retry;
            all = tokio::select! {
                biased;
                _ = token.cancelled() => return,
                _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => false,
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    false
                }
                _ = resync.tick() => true,
            };
        }
    }

    /// Writes what needs writing (upstream `syncBatch`): with `all`, every status that is
    /// new, deletable or differs from the API; otherwise only new versions.
    pub async fn sync_batch(&mut self, all: bool) -> BatchOutcome {
        let statuses = self.statuses.all_statuses();
        let now = Instant::now();
        let mut outcome = BatchOutcome::default();
        let mut work = Vec::new();
        let mut live = HashSet::new();
        for (uid, status) in &statuses {
            if self.state.deleted.contains(uid) {
                continue;
            }
            let Some(target) = self.target(uid, status) else {
                trace!(pod = %uid, "static pod has no mirror pod yet; skipping");
                continue;
            };
            live.insert(target.api_uid.clone());
            if let Some(retry) = self.state.retries.get(&target.api_uid)
                && retry.at > now
            {
                outcome.backing_off += 1;
                continue;
            }
            let written = self.state.api_versions.get(&target.api_uid).copied();
            let due = if !all {
                written.is_none_or(|v| v < status.version)
            } else if self.needs_update(written, status, target.pod.as_ref()) {
                true
            } else if self.needs_reconcile(&target, status) {
                debug!(pod = %format!("{}/{}", target.namespace, target.name), "pod status differs from the API; reconciling");
                self.state.api_versions.remove(&target.api_uid);
                true
            } else {
                false
            };
            if due {
                work.push((uid.clone(), status.clone(), target));
            }
        }
        if all {
            self.state.api_versions.retain(|uid, _| live.contains(uid));
            self.state.api_pods.retain(|uid, _| live.contains(uid));
            self.state.stale.retain(|uid| live.contains(uid));
            self.state.deleted.retain(|uid| statuses.contains_key(uid));
            self.state.retries.retain(|uid, _| live.contains(uid));
        }
        for (uid, status, target) in work {
            let pod = format!("{}/{}", target.namespace, target.name);
            let api_uid = target.api_uid.clone();
            match self.sync_pod(&uid, &status, target).await {
                Ok(()) => {
                    self.state.retries.remove(&api_uid);
                    outcome.synced += 1;
                }
                Err(e) => {
                    let wait = self
                        .state
                        .retries
                        .get(&api_uid)
                        .map_or(self.config.initial_backoff, |r| r.next);
                    warn!(%pod, error = %e, retry_in = ?wait, "failed to update status for pod");
                    let next = (wait * 2).min(self.config.max_backoff);
                    self.state.retries.insert(
                        api_uid,
                        Retry {
                            at: Instant::now() + wait,
                            next,
                        },
                    );
                    outcome.failed += 1;
                }
            }
        }
        outcome.next_retry = self.state.retries.values().map(|r| r.at).min();
        outcome
    }

    /// Where the status of the local pod `uid` goes; `None` for a static pod without a
    /// mirror pod.
    fn target(&self, uid: &PodUid, status: &VersionedStatus) -> Option<Target> {
        let Some(pod) = self.pod_manager.pod_by_uid(uid) else {
            return Some(Target {
                api_uid: uid.clone(),
                namespace: status.pod_namespace.clone(),
                name: status.pod_name.clone(),
                pod: None,
            });
        };
        let pod = if is_static_pod(&pod) {
            self.mirrors.mirror_pod_of(&pod)?
        } else {
            pod
        };
        Some(Target {
            api_uid: pod.uid(),
            namespace: pod.namespace_or_default().to_owned(),
            name: pod.name_or_empty().to_owned(),
            pod: Some(pod),
        })
    }

    /// Upstream `needsUpdate`.
    fn needs_update(
        &self,
        written: Option<u64>,
        status: &VersionedStatus,
        pod: Option<&Pod>,
    ) -> bool {
        written.is_none_or(|v| v < status.version) || pod.is_some_and(|p| can_be_deleted(p, status))
    }

    /// Upstream `needsReconcile`: the API's status (as the kubelet last saw it) is not the
    /// kubelet's.
    fn needs_reconcile(&self, target: &Target, status: &VersionedStatus) -> bool {
        let Some(pod) = target.pod.clone() else {
            return false;
        };
        let api = self.freshest(&target.api_uid, pod);
        let api_status = api.status.unwrap_or_default();
        !is_pod_status_by_kubelet_equal(&api_status, &self.strip_dropped(status.status.clone()))
    }

    /// The newer of the kubelet's copy of the API object and the answer to its last write.
    fn freshest(&self, api_uid: &PodUid, pod: Pod) -> Pod {
        let version = |p: &Pod| {
            p.metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        };
        match self.state.api_pods.get(api_uid) {
            Some(written) if written.uid() == pod.uid() && version(written) > version(&pod) => {
                written.clone()
            }
            _ => pod,
        }
    }

    /// Upstream `syncPod`.
    async fn sync_pod(
        &mut self,
        uid: &PodUid,
        status: &VersionedStatus,
        target: Target,
    ) -> Result<(), Error> {
        let Target {
            api_uid,
            namespace,
            name,
            pod,
        } = target;
        let base = match pod {
            Some(p) if !self.state.stale.contains(&api_uid) => self.freshest(&api_uid, p),
            _ => match self.api.get_pod(&namespace, &name).await? {
                Some(p) => p,
                None => {
                    debug!(pod = %format!("{namespace}/{name}"), "pod does not exist on the server");
                    self.state.api_versions.insert(api_uid, status.version);
                    return Ok(());
                }
            },
        };
        self.state.stale.remove(&api_uid);
        if base.uid() != api_uid {
            debug!(pod = %format!("{namespace}/{name}"), old_uid = %api_uid, uid = %base.uid(), "pod was deleted and then recreated; skipping status update");
            self.state.api_versions.insert(api_uid, status.version);
            return Ok(());
        }
        let old = base.status.clone().unwrap_or_default();
        let merged = merge_pod_status(
            &old,
            self.strip_dropped(status.status.clone()),
            self.safety.pod_could_have_running_containers(uid),
        );
        let pod = match status_patch(api_uid.as_str(), &old, &merged).map_err(Error::Encode)? {
            None => {
                trace!(pod = %format!("{namespace}/{name}"), version = status.version, "status for pod is up to date");
                base
            }
            Some(patch) => match self.api.patch_pod_status(&namespace, &name, &patch).await {
                Ok(patched) => {
                    debug!(pod = %format!("{namespace}/{name}"), version = status.version, %patch, "status for pod updated");
                    self.learn_dropped_fields(&patch, &patched);
                    self.state
                        .api_pods
                        .insert(api_uid.clone(), written_copy(&patched));
                    patched
                }
                Err(Error::NotFound { .. }) => {
                    self.state.api_versions.insert(api_uid, status.version);
                    return Ok(());
                }
                Err(e) => {
                    if matches!(e, Error::Conflict { .. }) {
                        self.state.stale.insert(api_uid);
                    }
                    return Err(e);
                }
            },
        };
        self.state
            .api_versions
            .insert(api_uid.clone(), status.version);
        if can_be_deleted(&pod, status) {
            match self
                .api
                .delete_pod(&namespace, &name, api_uid.as_str())
                .await
            {
                Ok(()) | Err(Error::NotFound { .. } | Error::Conflict { .. }) => {
                    info!(pod = %format!("{namespace}/{name}"), uid = %api_uid, "pod fully terminated and removed from the API");
                    self.state.deleted.insert(uid.clone());
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Notes the fields of `patch` that the server did not keep in `patched`.
    fn learn_dropped_fields(&mut self, patch: &Value, patched: &Pod) {
        let Some(Value::Object(sent)) = patch.get("status") else {
            return;
        };
        let kept = serde_json::to_value(&patched.status).unwrap_or(Value::Null);
        for (field, value) in sent {
            let empty = match value {
                Value::Null => true,
                Value::Array(a) => a.is_empty(),
                Value::Object(o) => o.is_empty(),
                Value::String(s) => s.is_empty(),
                _ => false,
            };
            if empty || KNOWN_FIELDS.contains(&field.as_str()) || kept.get(field).is_some() {
                continue;
            }
            if self.state.dropped_fields.insert(field.clone()) {
                info!(%field, "the API server drops this pod status field; no longer writing it");
            }
        }
    }

    /// `status` without the fields the server drops.
    fn strip_dropped(&self, status: ApiPodStatus) -> ApiPodStatus {
        if self.state.dropped_fields.is_empty() {
            return status;
        }
        let Ok(Value::Object(mut map)) = serde_json::to_value(&status) else {
            return status;
        };
        map.retain(|field, _| !self.state.dropped_fields.contains(field));
        serde_json::from_value(Value::Object(map)).unwrap_or(status)
    }
}

/// What the syncer keeps of a pod the API answered a write with: what [`ApiStatusSyncer`]
/// reads from it (UID, resourceVersion, deletion timestamp, annotations, status), without the
/// spec and `managedFields`, which one cached copy per pod would otherwise hold.
pub(super) fn written_copy(pod: &Pod) -> Pod {
    let mut metadata = pod.metadata.clone();
    strip_managed_fields(&mut metadata);
    Pod {
        metadata,
        spec: None,
        status: pod.status.clone(),
    }
}

/// Upstream `canBeDeleted`: a pod being deleted in the API, terminal there, whose resources
/// the kubelet has released. Mirror pods are not deleted this way.
fn can_be_deleted(pod: &Pod, status: &VersionedStatus) -> bool {
    if pod.metadata.deletion_timestamp.is_none() || is_mirror_pod(pod) {
        return false;
    }
    let terminal = pod.status.as_ref().is_some_and(is_terminal_phase);
    terminal && status.pod_resources_reclaimed
}
