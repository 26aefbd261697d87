//! Pod identity and small accessors over `v1.Pod`.
//!
//! Mirrors the identity helpers of upstream `pkg/kubelet/container/helpers.go`
//! (`GetPodFullName`) and `k8s.io/apimachinery/pkg/types` (`UID`).

use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod};
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

/// `terminationGracePeriodSeconds` of the pod, with upstream's default of 30 s.
pub fn termination_grace_period_seconds(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30)
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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
