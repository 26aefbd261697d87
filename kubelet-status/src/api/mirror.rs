//! How the status syncer finds the API object of a static pod: its mirror pod (upstream
//! `podManager.GetMirrorPodByPod`, `pkg/kubelet/pod/pod_manager.go`).

use k8s_openapi::api::core::v1::Pod;

/// Finds the mirror pod of a static pod. The status of a static pod is written to its mirror
/// pod; until the mirror exists, the static pod's status waits.
///
/// Any `Fn(&Pod) -> Option<Pod>` is one, e.g. a closure over the pod manager's mirror index.
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

/// No mirror pods: the statuses of static pods are not written to the API.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMirrorPods;

impl MirrorPodLookup for NoMirrorPods {
    fn mirror_pod_of(&self, _static_pod: &Pod) -> Option<Pod> {
        None
    }
}
