//! How the status syncer finds the API object of a static pod: its mirror pod (upstream
//! `podManager.GetMirrorPodByPod`, `pkg/kubelet/pod/pod_manager.go`).

use k8s_openapi::api::core::v1::Pod;

/// Finds the mirror pod of a static pod. The status of a static pod is written to its mirror
/// pod; until the mirror exists, the static pod's status waits.
///
/// The [`PodManager`](kubelet_core::pod_manager::PodManager) is one (its mirror pods come
/// from the API watch); so is any `Fn(&Pod) -> Option<Pod>`.
pub trait MirrorPodLookup: Send + Sync + 'static {
    /// The mirror pod of `static_pod`, as last seen from the API, if there is one.
    #[doc(alias = "GetMirrorPodByPod")]
    fn mirror_pod_of(&self, static_pod: &Pod) -> Option<Pod>;
}

impl<F> MirrorPodLookup for F
where
    F: Fn(&Pod) -> Option<Pod> + Send + Sync + 'static,
{
    fn mirror_pod_of(&self, static_pod: &Pod) -> Option<Pod> {
        self(static_pod)
    }
}

/// The pod manager's mirror pods, as the API watch delivers them.
impl MirrorPodLookup for kubelet_core::pod_manager::PodManager {
    fn mirror_pod_of(&self, static_pod: &Pod) -> Option<Pod> {
        self.mirror_pod_by_pod(static_pod)
    }
}

/// No mirror pods: the statuses of static pods are not written to the API.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMirrorPods;

impl MirrorPodLookup for NoMirrorPods {
    fn mirror_pod_of(&self, _static_pod: &Pod) -> Option<Pod> {
        None
    }
}
