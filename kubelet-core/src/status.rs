//! The status manager contract (upstream `pkg/kubelet/status/status_manager.go`).
//!
//! The default implementation (status generation and the versioned local store) lives in
//! `kubelet-status`.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};

use crate::pod::PodUid;
use crate::runtime::{PodStatus, PodSyncResult};

/// Inputs to status generation that do not come from the runtime.
#[derive(Clone, Debug, Default)]
pub struct StatusInputs<'a> {
    /// Result of the last `Runtime::sync_pod` (waiting reasons for containers that failed).
    pub sync_result: Option<&'a PodSyncResult>,
    /// The node's IPs (`status.hostIP(s)`).
    pub host_ips: &'a [String],
    /// A pod-level waiting condition to report (e.g. volumes not ready): `(cause, message)`,
    /// shown as `<cause>: <message>` on containers waiting in `ContainerCreating`.
    pub pod_condition: Option<(&'a str, &'a str)>,
    /// `true` when the pod is being terminated by the kubelet.
    pub terminating: bool,
}

/// Computes, stores and (later) publishes pod statuses.
///
/// Implementations keep one versioned status per pod and never move a pod out of a terminal
/// phase (`Succeeded`/`Failed`).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
pub trait StatusManager: Send + Sync + 'static {
    /// The API status of `pod` from the runtime's view and `inputs` (upstream
    /// `generateAPIPodStatus`). Pure apart from reading the stored previous status.
    fn generate<'a>(
        &self,
        pod: &Pod,
        runtime: &PodStatus,
        inputs: &StatusInputs<'a>,
    ) -> ApiPodStatus;

    /// Stores a new status for `pod` (upstream `SetPodStatus`). A status that would leave a
    /// terminal phase is corrected to keep the terminal phase.
    fn set_pod_status(&self, pod: &Pod, status: ApiPodStatus);

    /// The stored status of the pod, if any.
    fn pod_status(&self, uid: &PodUid) -> Option<ApiPodStatus>;

    /// Marks every non-terminated container of the pod terminated (upstream `TerminatePod`).
    fn terminate_pod(&self, pod: &Pod);

    /// Forgets statuses of pods not in `keep` (upstream `RemoveOrphanedStatuses`).
    fn remove_orphaned_statuses(&self, keep: &HashSet<PodUid>);

    /// Called last when the pod workers have released everything of a terminated pod
    /// (volumes, cgroups): the pod's API object may now be deleted (upstream marks the status
    /// `podIsFinished` at the end of `SyncTerminatedPod` and checks
    /// `PodResourcesAreReclaimed` before the final delete). The default does nothing: a node
    /// without an API server deletes nothing.
    #[doc(alias = "PodResourcesAreReclaimed")]
    fn pod_resources_reclaimed(&self, pod: &Pod) {
        let _ = pod;
    }
}

/// Tells the status syncer whether a pod's containers may still run, so that it neither
/// reports a terminal phase nor deletes the API object too early (upstream
/// `PodDeletionSafetyProvider`; the pod workers implement it).
#[doc(alias = "PodDeletionSafetyProvider")]
#[doc(alias = "ShouldDelayTransitioningPodToTerminal")]
pub trait PodDeletionSafety: Send + Sync + 'static {
    /// `true` while the pod's containers may still be running: its worker has not finished
    /// terminating it (upstream `PodCouldHaveRunningContainers`). An unknown pod has none.
    fn pod_could_have_running_containers(&self, uid: &PodUid) -> bool;
}

impl<F> PodDeletionSafety for F
where
    F: Fn(&PodUid) -> bool + Send + Sync + 'static,
{
    fn pod_could_have_running_containers(&self, uid: &PodUid) -> bool {
        self(uid)
    }
}

/// `true` for `Succeeded` and `Failed`.
pub fn is_terminal_phase(status: &ApiPodStatus) -> bool {
    matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"))
}
