//! RuntimeClass: a pod's `spec.runtimeClassName` turned into the CRI runtime handler its
//! sandbox runs with (mirrors upstream `pkg/kubelet/runtimeclass/runtimeclass_manager.go`
//! and the lookup in `createPodSandbox` of `pkg/kubelet/kuberuntime/kuberuntime_sandbox.go`).
//!
//! The RuntimeClass objects (`node.k8s.io/v1`) come from a [`RuntimeClassSource`]: in cluster
//! mode a watch of `runtimeclasses` (upstream's informer); upstream builds no manager without
//! an API client, and then every pod runs with the runtime's default handler whatever its
//! `runtimeClassName` says — a standalone node does the same (no source, no lookup).
//!
//! The class's `overhead.podFixed` is not read here: the API server's RuntimeClass admission
//! copies it into the pod's `spec.overhead`, which admission and the pod cgroup count
//! ([`crate::pod_resources`]), as upstream.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use k8s_openapi::api::core::v1::Pod;

/// Why a pod's RuntimeClass could not be resolved (upstream's lister errors).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The RuntimeClass does not exist (or the watch has not listed it yet); retried at the
    /// pod's next sync. The message is upstream's `NotFound` API error.
    #[error("runtimeclass.node.k8s.io {0:?} not found")]
    NotFound(String),
}

/// Where RuntimeClass objects come from: a cache, never a request per lookup.
pub trait RuntimeClassSource: Send + Sync + std::fmt::Debug + 'static {
    /// The `handler` of RuntimeClass `name`, `None` when no such RuntimeClass is known.
    fn handler(&self, name: &str) -> Option<String>;
}

/// The runtime handler of `pod` (upstream `LookupRuntimeHandler`): empty for no
/// `runtimeClassName` (the runtime's default) or without a `source`; otherwise the class's
/// `handler`, or [`Error::NotFound`].
pub fn runtime_handler(
    source: Option<&dyn RuntimeClassSource>,
    pod: &Pod,
) -> Result<String, Error> {
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.runtime_class_name.as_deref())
        .unwrap_or_default();
    let Some(source) = source.filter(|_| !name.is_empty()) else {
        return Ok(String::new());
    };
    source
        .handler(name)
        .ok_or_else(|| Error::NotFound(name.to_owned()))
}

/// RuntimeClasses held in memory (name → handler): what tests and embedders without an API
/// server use. Cloning shares the classes.
#[derive(Clone, Debug, Default)]
pub struct InMemoryRuntimeClasses {
    classes: Arc<RwLock<HashMap<String, String>>>,
}

impl InMemoryRuntimeClasses {
    /// No classes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces the class `name` with `handler`.
    pub fn insert(&self, name: impl Into<String>, handler: impl Into<String>) {
        self.classes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.into(), handler.into());
    }

    /// Removes the class `name`.
    pub fn remove(&self, name: &str) {
        self.classes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}

impl RuntimeClassSource for InMemoryRuntimeClasses {
    fn handler(&self, name: &str) -> Option<String> {
        self.classes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(class: Option<&str>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                runtime_class_name: class.map(str::to_owned),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn no_class_or_no_source_is_the_default_handler() {
        let classes = InMemoryRuntimeClasses::new();
        classes.insert("kata", "kata-qemu");
        assert_eq!(
            runtime_handler(Some(&classes), &pod(None)),
            Ok(String::new())
        );
        assert_eq!(
            runtime_handler(Some(&classes), &pod(Some(""))),
            Ok(String::new())
        );
        // Upstream builds no manager without an API client: the name is not looked up.
        assert_eq!(runtime_handler(None, &pod(Some("kata"))), Ok(String::new()));
    }

    #[test]
    fn a_class_resolves_to_its_handler_and_a_missing_one_is_upstreams_not_found() {
        let classes = InMemoryRuntimeClasses::new();
        classes.insert("kata", "kata-qemu");
        assert_eq!(
            runtime_handler(Some(&classes), &pod(Some("kata"))),
            Ok("kata-qemu".to_owned())
        );
        let err = runtime_handler(Some(&classes), &pod(Some("gvisor"))).expect_err("no such class");
        assert_eq!(
            err.to_string(),
            r#"runtimeclass.node.k8s.io "gvisor" not found"#
        );
        classes.remove("kata");
        assert!(runtime_handler(Some(&classes), &pod(Some("kata"))).is_err());
    }
}
