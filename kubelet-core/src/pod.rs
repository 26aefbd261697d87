//! Pod identity and small accessors over `v1.Pod`.
//!
//! Mirrors the identity helpers of upstream `pkg/kubelet/container/helpers.go`
//! (`GetPodFullName`) and `k8s.io/apimachinery/pkg/types` (`UID`).

use std::fmt;

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// A pod's UID, as in `metadata.uid` (upstream `types.UID`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PodUid(pub String);

impl PodUid {
    /// The UID as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PodUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for PodUid {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

impl From<String> for PodUid {
    fn from(s: String) -> Self {
        Self(s)
    }
}

/// Read-only accessors that every subsystem needs on a `v1.Pod`.
///
/// Missing fields read as empty strings; callers that need a valid pod validate it at the
/// source (see [`crate::config::validate`]).
pub trait PodExt {
    /// `metadata.uid`.
    fn uid(&self) -> PodUid;
    /// `metadata.name`.
    fn name_or_empty(&self) -> &str;
    /// `metadata.namespace`, or `default`.
    fn namespace_or_default(&self) -> &str;
    /// `<name>_<namespace>`, upstream's `GetPodFullName`.
    fn full_name(&self) -> String;
    /// `metadata.annotations[key]`.
    fn annotation(&self, key: &str) -> Option<&str>;
    /// The pod's app containers (`spec.containers`).
    fn containers(&self) -> &[Container];
    /// The pod's init containers (`spec.initContainers`).
    fn init_containers(&self) -> &[Container];
    /// The pod's ephemeral containers (`spec.ephemeralContainers`).
    fn ephemeral_containers(&self) -> &[EphemeralContainer];
    /// `spec.restartPolicy`, defaulting to `Always`.
    fn restart_policy(&self) -> &str;
    /// `spec.hostNetwork`.
    fn host_network(&self) -> bool;
    /// `true` when `metadata.deletionTimestamp` is set.
    fn is_being_deleted(&self) -> bool;
}

impl PodExt for Pod {
    fn uid(&self) -> PodUid {
        PodUid(self.metadata.uid.clone().unwrap_or_default())
    }

    fn name_or_empty(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    fn namespace_or_default(&self) -> &str {
        match self.metadata.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => ns,
            _ => "default",
        }
    }

    fn full_name(&self) -> String {
        format!("{}_{}", self.name_or_empty(), self.namespace_or_default())
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    fn containers(&self) -> &[Container] {
        self.spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or(&[])
    }

    fn init_containers(&self) -> &[Container] {
        self.spec
            .as_ref()
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or(&[])
    }

    fn ephemeral_containers(&self) -> &[EphemeralContainer] {
        self.spec
            .as_ref()
            .and_then(|s| s.ephemeral_containers.as_deref())
            .unwrap_or(&[])
    }

    fn restart_policy(&self) -> &str {
        self.spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .unwrap_or("Always")
    }

    fn host_network(&self) -> bool {
        self.spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false)
    }

    fn is_being_deleted(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
}

/// `true` for a static pod: one from a source other than the API server (a file or a URL),
/// which the kubelet runs and the API only mirrors (upstream `kubetypes.IsStaticPod`).
pub fn is_static_pod(pod: &Pod) -> bool {
    pod.annotation(crate::config::CONFIG_SOURCE_ANNOTATION)
        .is_some_and(|source| source != crate::config::API_SERVER_SOURCE)
}

/// `true` for a mirror pod: the API's copy of a static pod, marked with
/// `kubernetes.io/config.mirror` (upstream `kubetypes.IsMirrorPod`). The kubelet never runs it.
pub fn is_mirror_pod(pod: &Pod) -> bool {
    pod.annotation(crate::config::CONFIG_MIRROR_ANNOTATION)
        .is_some()
}

/// Drops what the kubelet never reads from an API object it keeps: `metadata.managedFields`,
/// server-side apply's record of who set which field. For a pod whose status the kubelet
/// writes it is often larger than the rest of the object, and every cached copy carries it
/// (the strip of client-go informers' `TransformStripManagedFields`).
pub fn strip_managed_fields(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
}

/// Grace period when neither the pod nor a caller says anything (the API default of
/// `terminationGracePeriodSeconds`).
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;

/// Upstream `minimumGracePeriodInSeconds`: the shortest window `StopContainer` is given, to
/// avoid needless SIGKILLs (applied after the preStop hook's time is taken off).
pub const MINIMUM_GRACE_PERIOD_SECONDS: i64 = 2;

/// `terminationGracePeriodSeconds` of the pod, with upstream's default of 30 s.
pub fn termination_grace_period_seconds(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)
}

/// The grace period one container's termination starts with (upstream `killContainer` with
/// `setTerminationGracePeriod`): an override (a failed probe's, or the pod worker's) wins;
/// otherwise the pod's `deletionGracePeriodSeconds`, else its
/// `terminationGracePeriodSeconds`, else 30 s. Never negative. The preStop hook's time is
/// taken off this, and [`MINIMUM_GRACE_PERIOD_SECONDS`] applied last, when stopping.
#[doc(alias = "setTerminationGracePeriod")]
pub fn container_grace_period_seconds(pod: Option<&Pod>, override_seconds: Option<i64>) -> i64 {
    if let Some(o) = override_seconds {
        return o.max(0);
    }
    let grace = match pod {
        Some(p) => p
            .metadata
            .deletion_grace_period_seconds
            .unwrap_or_else(|| termination_grace_period_seconds(p)),
        None => DEFAULT_GRACE_PERIOD_SECONDS,
    };
    grace.max(0)
}

/// The grace period to kill the pod with when nothing overrides it (upstream
/// `calculateEffectiveGracePeriod`): `deletionGracePeriodSeconds` when the pod is being
/// deleted with one, else [`termination_grace_period_seconds`].
pub fn kill_grace_period_seconds(pod: &Pod) -> i64 {
    match pod.metadata.deletion_grace_period_seconds {
        Some(g) if pod.metadata.deletion_timestamp.is_some() => g,
        _ => termination_grace_period_seconds(pod),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_grace_periods_follow_kill_container() {
        let mut p = crate::testing::pod("web");
        assert_eq!(container_grace_period_seconds(Some(&p), None), 30);
        if let Some(s) = p.spec.as_mut() {
            s.termination_grace_period_seconds = Some(10);
        }
        assert_eq!(container_grace_period_seconds(Some(&p), None), 10);
        p.metadata.deletion_grace_period_seconds = Some(0);
        assert_eq!(container_grace_period_seconds(Some(&p), None), 0);
        assert_eq!(container_grace_period_seconds(Some(&p), Some(0)), 0);
        assert_eq!(container_grace_period_seconds(Some(&p), Some(1)), 1);
        assert_eq!(container_grace_period_seconds(Some(&p), Some(-3)), 0);
        assert_eq!(container_grace_period_seconds(None, None), 30);
    }
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn static_and_mirror_pods_are_told_by_their_annotations() {
        let mut p = crate::testing::pod("web");
        assert!(!is_static_pod(&p) && !is_mirror_pod(&p));
        let annotations = p.metadata.annotations.get_or_insert_with(Default::default);
        annotations.insert(crate::config::CONFIG_SOURCE_ANNOTATION.into(), "api".into());
        assert!(!is_static_pod(&p));
        let annotations = p.metadata.annotations.get_or_insert_with(Default::default);
        annotations.insert(
            crate::config::CONFIG_SOURCE_ANNOTATION.into(),
            "file".into(),
        );
        annotations.insert(
            crate::config::CONFIG_MIRROR_ANNOTATION.into(),
            "hash".into(),
        );
        assert!(is_static_pod(&p) && is_mirror_pod(&p));
    }

    #[test]
    fn full_name_defaults_namespace() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(pod.full_name(), "web_default");
        assert_eq!(pod.restart_policy(), "Always");
        assert_eq!(termination_grace_period_seconds(&pod), 30);
    }
}
