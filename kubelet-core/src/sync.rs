//! The two dispatch contracts of the sync loop.
//!
//! * [`SyncHandler`]: what the sync loop calls for config changes, PLEG events, resync ticks
//!   and housekeeping (upstream `SyncHandler` in `pkg/kubelet/kubelet.go`).
//! * [`PodSyncer`]: what a pod worker calls to move one pod through sync → terminating →
//!   terminated (upstream `podSyncer` in `pkg/kubelet/pod_workers.go`).

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;

use crate::runtime::{PodStatus, RunningPod};

/// Errors from syncing one pod. All are retried by the pod worker with backoff.
#[derive(Debug, thiserror::Error)]
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

/// Reacts to the sync loop's inputs (upstream `SyncHandler`).
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
    async fn handle_pod_cleanups(&self) -> std::result::Result<(), String>;
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
