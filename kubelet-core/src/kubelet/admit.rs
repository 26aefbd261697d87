//! Pod admission (upstream `PodAdmitHandler`, `PodAdmitAttributes` and `PodAdmitResult` in
//! `pkg/kubelet/lifecycle/interfaces.go`; `canAdmitPod` and `rejectPod` in
//! `pkg/kubelet/kubelet.go`): before a new pod reaches a pod worker, every handler of the
//! [`AdmitChain`] sees it with the node's other active pods; the first one that refuses it
//! wins, and the pod is marked `Failed` with that handler's reason and
//! `Pod was rejected: <message>`. A rejected pod is never started.
//!
//! The default chain holds the sysctl check ([`SysctlAdmitHandler`], reason
//! `SysctlForbidden`); a node agent appends its own handlers, e.g. one that refuses pods it
//! cannot run.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use tracing::{info, warn};

use crate::pod::PodExt;
use crate::status::StatusManager;

/// What an admit handler decides on (upstream `PodAdmitAttributes`).
#[derive(Clone, Copy, Debug)]
pub struct PodAdmitAttributes<'a> {
    /// The pod being admitted.
    pub pod: &'a Pod,
    /// The node's other active pods (upstream `OtherPods`: admitted and not terminated).
    pub other_pods: &'a [Pod],
}

/// An admit handler's decision (upstream `PodAdmitResult`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodAdmitResult {
    /// `true` when the pod may run.
    pub admit: bool,
    /// A brief CamelCase reason when refused, e.g. `SysctlForbidden`; becomes the pod's
    /// `status.reason`.
    pub reason: String,
    /// A human-readable message when refused; the pod's `status.message` is
    /// `Pod was rejected: <message>`.
    pub message: String,
}

impl PodAdmitResult {
    /// The pod may run.
    pub fn admit() -> Self {
        Self {
            admit: true,
            ..Default::default()
        }
    }

    /// The pod may not run, for `reason` (CamelCase) with `message`.
    pub fn reject(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            admit: false,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Decides whether a pod may run on this node (upstream `lifecycle.PodAdmitHandler`).
///
/// ```
/// use kubelet_core::kubelet::admit::{PodAdmitAttributes, PodAdmitHandler, PodAdmitResult};
///
/// /// Refuses pods that ask for the host network.
/// struct NoHostNetwork;
///
/// impl PodAdmitHandler for NoHostNetwork {
///     fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> PodAdmitResult {
///         let host = attrs.pod.spec.as_ref().and_then(|s| s.host_network) == Some(true);
///         if host {
///             PodAdmitResult::reject("HostNetworkUnsupported", "this node has no host network")
///         } else {
///             PodAdmitResult::admit()
///         }
///     }
/// }
/// ```
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
pub trait PodAdmitHandler: Send + Sync + 'static {
    /// The decision for `attrs.pod` (upstream `Admit`).
    fn admit<'a>(&self, attrs: &PodAdmitAttributes<'a>) -> PodAdmitResult;
}

/// Refuses pods with sysctls outside upstream's safe set, or `net.*` sysctls with the host
/// network (upstream `sysctl.patternAllowlist` as an admit handler; the rule is
/// [`crate::sysctl::validate`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct SysctlAdmitHandler;

impl PodAdmitHandler for SysctlAdmitHandler {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> PodAdmitResult {
        match crate::sysctl::validate(attrs.pod) {
            Ok(()) => PodAdmitResult::admit(),
            Err(message) => PodAdmitResult::reject(crate::sysctl::FORBIDDEN_REASON, message),
        }
    }
}

/// The admit handlers of a kubelet, asked in order (upstream `kl.admitHandlers`). Cheap to
/// clone.
#[derive(Clone)]
pub struct AdmitChain {
    handlers: Vec<Arc<dyn PodAdmitHandler>>,
}

impl std::fmt::Debug for AdmitChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmitChain")
            .field("handlers", &self.handlers.len())
            .finish()
    }
}

impl Default for AdmitChain {
    /// The kubelet's default chain: the sysctl check.
    fn default() -> Self {
        Self::empty().with(Arc::new(SysctlAdmitHandler))
    }
}

impl AdmitChain {
    /// A chain that admits every pod.
    pub fn empty() -> Self {
        Self {
            handlers: Vec::new(),
        }
    }

    /// This chain with `handler` asked last.
    pub fn with(mut self, handler: Arc<dyn PodAdmitHandler>) -> Self {
        self.handlers.push(handler);
        self
    }

    /// Appends `handler`, asked last.
    pub fn push(&mut self, handler: Arc<dyn PodAdmitHandler>) {
        self.handlers.push(handler);
    }

    /// The first refusal among the handlers, or an admitting result (upstream
    /// `canAdmitPod`).
    pub fn can_admit_pod(&self, pod: &Pod, other_pods: &[Pod]) -> PodAdmitResult {
        let attrs = PodAdmitAttributes { pod, other_pods };
        for handler in &self.handlers {
            let result = handler.admit(&attrs);
            if !result.admit {
                info!(pod = %pod.full_name(), reason = %result.reason, message = %result.message, "pod admission denied");
                return result;
            }
        }
        PodAdmitResult::admit()
    }
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
        let chain = AdmitChain::default();
        let mut p = pod("web");
        assert_eq!(chain.can_admit_pod(&p, &[]), PodAdmitResult::admit());
        p.spec.as_mut().expect("spec").security_context = Some(PodSecurityContext {
            sysctls: Some(vec![Sysctl {
                name: "kernel.msgmax".into(),
                value: "1".into(),
            }]),
            ..Default::default()
        });
        assert_eq!(
            chain.can_admit_pod(&p, &[]),
            PodAdmitResult::reject(
                "SysctlForbidden",
                "forbidden sysctl: \"kernel.msgmax\" not allowlisted"
            )
        );
    }

    #[test]
    fn the_first_refusal_wins_and_later_handlers_are_not_asked() {
        let others = [pod("other")];
        let mut first = MockPodAdmitHandler::new();
        first
            .expect_admit()
            .withf(|a| a.pod.metadata.name.as_deref() == Some("web") && a.other_pods.len() == 1)
            .times(1)
            .returning(|_| PodAdmitResult::admit());
        let mut second = MockPodAdmitHandler::new();
        second
            .expect_admit()
            .times(1)
            .returning(|_| PodAdmitResult::reject("NoRoom", "node is full"));
        let mut third = MockPodAdmitHandler::new();
        third.expect_admit().never();
        let chain = AdmitChain::empty()
            .with(Arc::new(first))
            .with(Arc::new(second))
            .with(Arc::new(third));
        assert_eq!(
            chain.can_admit_pod(&pod("web"), &others),
            PodAdmitResult::reject("NoRoom", "node is full")
        );
    }
}
