//! Pod admission (upstream `PodAdmitHandler`, `PodAdmitAttributes` and `PodAdmitResult` in
//! `pkg/kubelet/lifecycle/interfaces.go`; `canAdmitPod` and `rejectPod` in
//! `pkg/kubelet/kubelet.go`): before a new pod reaches a pod worker, every handler of the
//! [`AdmitChain`] sees it with the node's other active pods; the first one that refuses it
//! wins, and the pod is marked `Failed` with that handler's reason and
//! `Pod was rejected: <message>`. A rejected pod is never started.
//!
//! The default chain holds the sysctl check ([`SysctlAdmitHandler`], reason
//! `SysctlForbidden`); the kubelet adds the AppArmor check ([`AppArmorAdmitHandler`], reason
//! `AppArmor`) after its predicates, and a node agent appends its own handlers, e.g. one that
//! refuses pods it cannot run.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use tracing::{info, warn};

use crate::apparmor::Validator;
use crate::pod::PodExt;
use crate::status::StatusManager;
use crate::sysctl::Allowlist;

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

/// Refuses pods with sysctls outside upstream's safe set and the node's
/// `--allowed-unsafe-sysctls`, or namespaced sysctls in a pod sharing that namespace with the
/// host (upstream `sysctl.patternAllowlist` as an admit handler; the rule is
/// [`Allowlist::validate`]).
#[derive(Clone, Debug, Default)]
pub struct SysctlAdmitHandler {
    allowlist: Allowlist,
}

impl SysctlAdmitHandler {
    /// A handler admitting the sysctls of `allowlist`.
    pub fn new(allowlist: Allowlist) -> Self {
        Self { allowlist }
    }
}

impl PodAdmitHandler for SysctlAdmitHandler {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> PodAdmitResult {
        match self.allowlist.validate(attrs.pod) {
            Ok(()) => PodAdmitResult::admit(),
            Err(e) => PodAdmitResult::reject(crate::sysctl::FORBIDDEN_REASON, e.to_string()),
        }
    }
}

/// The reason of a pod rejected by [`AppArmorAdmitHandler`] (upstream's `AppArmor`).
pub const APPARMOR_REASON: &str = "AppArmor";

/// Refuses a pending pod that asks for AppArmor confinement this node cannot give (upstream
/// `lifecycle.NewAppArmorAdmitHandler`, a hard admit handler since the soft ones were
/// removed): reason `AppArmor`, message `Cannot enforce AppArmor: <why>`, e.g.
/// `Cannot enforce AppArmor: AppArmor is not enabled on the host`.
#[derive(Clone, Debug)]
pub struct AppArmorAdmitHandler {
    validator: Validator,
}

impl AppArmorAdmitHandler {
    /// A handler deciding with `validator` ([`Validator::detect`] for this host).
    pub fn new(validator: Validator) -> Self {
        Self { validator }
    }
}

impl PodAdmitHandler for AppArmorAdmitHandler {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> PodAdmitResult {
        // A pod already running or terminated is not checked again (a pod without a status
        // is a new one: Pending).
        let phase = attrs.pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase.is_some_and(|p| !p.is_empty() && p != "Pending") {
            return PodAdmitResult::admit();
        }
        match self.validator.validate(attrs.pod) {
            Ok(()) => PodAdmitResult::admit(),
            Err(e) => {
                PodAdmitResult::reject(APPARMOR_REASON, format!("Cannot enforce AppArmor: {e}"))
            }
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
        Self::empty().with(Arc::new(SysctlAdmitHandler::default()))
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

    /// Puts `handler` in front, asked first.
    pub(crate) fn prepend(&mut self, handler: Arc<dyn PodAdmitHandler>) {
        self.handlers.insert(0, handler);
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
    fn allowed_unsafe_sysctls_are_admitted() {
        let allowlist = Allowlist::new(&["kernel.msg*".to_owned()]).expect("valid");
        let handler = SysctlAdmitHandler::new(allowlist);
        let mut p = pod("web");
        p.spec.as_mut().expect("spec").security_context = Some(PodSecurityContext {
            sysctls: Some(vec![Sysctl {
                name: "kernel.msgmax".into(),
                value: "1".into(),
            }]),
            ..Default::default()
        });
        let attrs = PodAdmitAttributes {
            pod: &p,
            other_pods: &[],
        };
        assert_eq!(handler.admit(&attrs), PodAdmitResult::admit());
        assert!(!SysctlAdmitHandler::default().admit(&attrs).admit);
    }

    #[test]
    fn apparmor_pods_are_refused_where_apparmor_is_off() {
        let mut p = pod("web");
        p.metadata.annotations = Some(
            [(
                "container.apparmor.security.beta.kubernetes.io/app".to_owned(),
                "runtime/default".to_owned(),
            )]
            .into(),
        );
        let admit = |enabled: bool, pod: &Pod| {
            AppArmorAdmitHandler::new(Validator::with_host(enabled)).admit(&PodAdmitAttributes {
                pod,
                other_pods: &[],
            })
        };
        assert_eq!(
            admit(false, &p),
            PodAdmitResult::reject(
                "AppArmor",
                "Cannot enforce AppArmor: AppArmor is not enabled on the host"
            )
        );
        assert_eq!(admit(true, &p), PodAdmitResult::admit());
        assert_eq!(admit(false, &pod("plain")), PodAdmitResult::admit());
        // A pod past Pending is not checked again.
        p.status = Some(ApiPodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        assert_eq!(admit(false, &p), PodAdmitResult::admit());
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
