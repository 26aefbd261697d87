//! Pod admission (upstream `canAdmitPod` and `rejectPod` in `pkg/kubelet/kubelet.go`): a
//! pod the node must not run is marked `Failed` with the handler's reason and never started.
//!
//! The handlers here: sysctls ([`crate::sysctl`]).

use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use tracing::warn;

use crate::pod::PodExt;
use crate::status::StatusManager;

/// `Err((reason, message))` when a handler refuses `pod`.
pub(crate) fn can_admit_pod(pod: &Pod) -> Result<(), (&'static str, String)> {
    crate::sysctl::validate(pod).map_err(|e| (crate::sysctl::FORBIDDEN_REASON, e.to_string()))
}

/// Upstream `rejectPod`: phase `Failed`, the reason, and `Pod was rejected: <message>`.
pub(crate) fn reject_pod(status: &dyn StatusManager, pod: &Pod, reason: &str, message: &str) {
    warn!(pod = %pod.full_name(), reason, "pod rejected: {message}");
    status.set_pod_status(
        pod,
        ApiPodStatus {
            phase: Some("Failed".into()),
            reason: Some(reason.to_owned()),
            message: Some(format!("Pod was rejected: {message}")),
            ..Default::default()
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;
    use k8s_openapi::api::core::v1::{PodSecurityContext, Sysctl};

    #[test]
    fn unsafe_sysctls_are_refused() {
        let mut p = pod("web");
        assert_eq!(can_admit_pod(&p), Ok(()));
        p.spec.as_mut().expect("spec").security_context = Some(PodSecurityContext {
            sysctls: Some(vec![Sysctl {
                name: "kernel.msgmax".into(),
                value: "1".into(),
            }]),
            ..Default::default()
        });
        assert_eq!(
            can_admit_pod(&p),
            Err((
                "SysctlForbidden",
                "forbidden sysctl: \"kernel.msgmax\" not allowlisted".to_owned()
            ))
        );
    }
}
