//! What the garbage collectors ask about a pod, answered from the pod manager and the pod
//! workers (upstream `podWorkers.ShouldPodContentBeRemoved` and
//! `ShouldPodRuntimeBeRemoved` in `pkg/kubelet/pod_workers.go`).
//!
//! A pod is deleted once no source wants it any more or it carries a deletion timestamp
//! (upstream `IsDeleted`); its runtime may go once its worker has stopped its containers
//! (`Terminated` or `Finished`, upstream `IsTerminated`), its content (logs included) once it
//! is deleted and its worker has finished (upstream `IsTerminationComplete`), or at once when
//! the eviction manager evicted it (upstream `IsEvicted`: the record of an evicted pod stays,
//! `Failed` / `Evicted`, but nothing of it is kept on the node). A pod no worker
//! knows may go entirely once every source has been seen and none wants it (upstream
//! `podsSynced`).

use super::Kubelet;
use crate::container_gc::PodStateProvider;
use crate::pod::{PodExt, PodUid};
use crate::pod_workers::WorkerPhase;

impl Kubelet {
    /// `true` when no source wants the pod, or it is being deleted.
    fn is_pod_deleted(&self, uid: &PodUid) -> bool {
        self.pod_manager
            .pod_by_uid(uid)
            .is_none_or(|pod| pod.is_being_deleted())
    }

    /// A pod no worker knows: gone once every source has been seen and none wants it.
    fn unknown_pod_is_gone(&self, uid: &PodUid) -> bool {
        !self.pod_manager.contains(uid) && (self.sources_ready)()
    }
}

impl PodStateProvider for Kubelet {
    fn should_pod_content_be_removed(&self, uid: &PodUid) -> bool {
        match self.workers.phase(uid) {
            Some(phase) => {
                self.workers.is_evicted(uid)
                    || (phase == WorkerPhase::Finished && self.is_pod_deleted(uid))
            }
            None => self.unknown_pod_is_gone(uid),
        }
    }

    fn should_pod_runtime_be_removed(&self, uid: &PodUid) -> bool {
        match self.workers.phase(uid) {
            Some(phase) => matches!(phase, WorkerPhase::Terminated | WorkerPhase::Finished),
            None => self.unknown_pod_is_gone(uid),
        }
    }
}
