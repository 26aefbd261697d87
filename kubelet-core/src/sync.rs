//! The two dispatch contracts of the sync loop.
//!
//! * [`SyncHandler`]: what the sync loop calls for config changes, PLEG events, resync ticks
//!   and housekeeping (upstream `SyncHandler` in `pkg/kubelet/kubelet.go`).
//! * [`PodSyncer`]: what a pod worker calls to move one pod through sync → terminating →
//!   terminated (upstream `podSyncer` in `pkg/kubelet/pod_workers.go`).

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;

use crate::pod::PodUid;
use crate::runtime::{PodStatus, RunningPod};

/// Errors from syncing one pod. All are retried by the pod worker with backoff.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The runtime failed.
    #[error(transparent)]
    Runtime(#[from] crate::runtime::Error),
    /// The volumes could not be set up.
    #[error(transparent)]
    Volume(#[from] crate::volume::Error),
    /// Something else kept the pod from syncing (message names it).
    #[error("{0}")]
    Other(String),
    /// Only backoff windows (CrashLoopBackOff, ImagePullBackOff) kept containers from
    /// starting; the pod should be synced again after `retry_after` (upstream
    /// `BackoffError`).
    #[error("{message}")]
    Backoff {
        /// The containers and their backoff messages.
        message: String,
        /// Time until the earliest window ends.
        retry_after: std::time::Duration,
    },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a pod is being synced (upstream `kubetypes.SyncPodType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncPodType {
    /// A periodic or event-driven resync.
    Sync,
    /// The pod's spec changed.
    Update,
    /// The pod is new.
    Create,
    /// The pod must be killed.
    Kill,
}

impl SyncPodType {
    /// Upstream's name (`SyncPodType.String`), the `operation_type` of
    /// `kubelet_pod_worker_duration_seconds`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sync => "sync",
            Self::Update => "update",
            Self::Create => "create",
            Self::Kill => "kill",
        }
    }
}

/// Why housekeeping failed (upstream `HandlePodCleanups`' error). The sync loop logs it and
/// tries again on the next housekeeping tick.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CleanupError {
    /// The runtime's pods could not be listed.
    #[error("listing the runtime's pods: {0}")]
    ListRuntimePods(#[source] crate::runtime::Error),
    /// The volumes of pods that are gone could not be removed.
    #[error("cleaning up orphaned volumes: {0}")]
    OrphanedVolumes(#[source] crate::volume::Error),
}

/// Reacts to the sync loop's inputs (upstream `SyncHandler`), plus the three reads upstream's
/// `syncLoopIteration` makes of the kubelet itself: pod lookup, due pods and sources
/// readiness.
///
/// How the loop maps its inputs onto it (upstream `syncLoopIteration`):
/// * config `ADD` → [`handle_pod_additions`](Self::handle_pod_additions), `UPDATE` and
///   `DELETE` → [`handle_pod_updates`](Self::handle_pod_updates), `REMOVE` →
///   [`handle_pod_removes`](Self::handle_pod_removes), `RECONCILE` →
///   [`handle_pod_reconcile`](Self::handle_pod_reconcile);
/// * a PLEG event other than `ContainerRemoved`, a liveness failure, or any readiness or
///   startup change → [`handle_pod_syncs`](Self::handle_pod_syncs) with the pod of
///   [`pod_by_uid`](Self::pod_by_uid), when it has one;
/// * the sync tick → [`handle_pod_syncs`](Self::handle_pod_syncs) with
///   [`pods_to_sync`](Self::pods_to_sync), when there are any;
/// * the housekeeping tick → [`handle_pod_cleanups`](Self::handle_pod_cleanups) once
///   [`sources_ready`](Self::sources_ready).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait SyncHandler: Send + Sync + 'static {
    /// New pods from a source (upstream `HandlePodAdditions`).
    async fn handle_pod_additions(&self, pods: Vec<Pod>);
    /// Changed pods (upstream `HandlePodUpdates`).
    async fn handle_pod_updates(&self, pods: Vec<Pod>);
    /// Pods gone from their source (upstream `HandlePodRemoves`).
    async fn handle_pod_removes(&self, pods: Vec<Pod>);
    /// Pods whose status-only fields changed (upstream `HandlePodReconcile`).
    async fn handle_pod_reconcile(&self, pods: Vec<Pod>);
    /// Pods due for a resync or touched by a PLEG event (upstream `HandlePodSyncs`).
    async fn handle_pod_syncs(&self, pods: Vec<Pod>);
    /// Housekeeping: kill unwanted runtime pods, remove orphaned state (upstream
    /// `HandlePodCleanups`).
    async fn handle_pod_cleanups(&self) -> std::result::Result<(), CleanupError>;
    /// The desired pod with this UID (upstream `podManager.GetPodByUID`).
    fn pod_by_uid(&self, uid: &PodUid) -> Option<Pod>;
    /// The pods whose resync or retry time has come, or that must be synced for another
    /// reason such as their active deadline (upstream `getPodsToSync`).
    fn pods_to_sync(&self) -> Vec<Pod>;
    /// `true` once every pod source has delivered its first snapshot, which gates
    /// housekeeping (upstream `sourcesReady.AllReady`).
    fn sources_ready(&self) -> bool;
}

/// Drives one pod's lifecycle for its pod worker (upstream `podSyncer`).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait PodSyncer: Send + Sync + 'static {
    /// Makes the runtime match the pod spec and records the status. Returns `true` when the
    /// pod has reached a terminal phase and should be terminated (upstream `SyncPod`).
    async fn sync_pod(&self, kind: SyncPodType, pod: &Pod, status: &PodStatus) -> Result<bool>;

    /// Stops the pod's containers with the grace period (upstream `SyncTerminatingPod`).
    async fn sync_terminating_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        grace_period_seconds: Option<i64>,
    ) -> Result<()>;

    /// Stops a runtime pod that has no config (upstream `SyncTerminatingRuntimePod`).
    async fn sync_terminating_runtime_pod(&self, running: &RunningPod) -> Result<()>;

    /// Releases the pod's resources once its containers are stopped (upstream
    /// `SyncTerminatedPod`).
    async fn sync_terminated_pod(&self, pod: &Pod, status: &PodStatus) -> Result<()>;
}
