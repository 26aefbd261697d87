//! Mirror pods in the API server (upstream `basicMirrorClient` in
//! `pkg/kubelet/pod/mirror_client.go`): [`KubeMirrorClient`] is core's
//! [`MirrorClient`] over a `kube::Client`.
//!
//! The mirror pod itself (annotation `kubernetes.io/config.mirror`, the Node as controlling
//! owner, which NodeRestriction requires) is built by
//! [`kubelet_core::kubelet::mirror::mirror_pod_of`]; this module only sends it. A create
//! that finds the pod already there succeeds (the next sync compares hashes); a delete is
//! immediate (grace period 0) with the mirror pod's UID as precondition when known, and
//! "not found" or a UID mismatch (409) is "nothing deleted", as upstream.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kubelet_core::kubelet::mirror::{Error, MirrorClient};
use kubelet_core::{PodExt, PodUid};
use tracing::{debug, warn};

/// Creates and deletes mirror pods through the API server.
#[derive(Clone)]
pub struct KubeMirrorClient {
    client: kube::Client,
}

impl std::fmt::Debug for KubeMirrorClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeMirrorClient").finish_non_exhaustive()
    }
}

impl KubeMirrorClient {
    /// A mirror client over `client` (the kubelet's identity must be allowed to create and
    /// delete its own mirror pods: `system:node:<node>`).
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

/// Upstream `ParsePodFullName`: `<name>_<namespace>`, both non-empty.
fn parse_full_name(full_name: &str) -> Option<(&str, &str)> {
    let (name, namespace) = full_name.split_once('_')?;
    (!name.is_empty() && !namespace.is_empty() && !namespace.contains('_'))
        .then_some((name, namespace))
}

fn api_status(e: &kube::Error) -> Option<&kube::core::Status> {
    match e {
        kube::Error::Api(status) => Some(status),
        _ => None,
    }
}

#[async_trait]
impl MirrorClient for KubeMirrorClient {
    async fn create_mirror_pod(&self, mirror_pod: &Pod) -> Result<(), Error> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), mirror_pod.namespace_or_default());
        match api.create(&PostParams::default(), mirror_pod).await {
            Ok(created) => {
                debug!(pod = %mirror_pod.full_name(), uid = %created.uid(), "created mirror pod");
                Ok(())
            }
            Err(e) if api_status(&e).is_some_and(|s| s.is_already_exists()) => Ok(()),
            Err(e) => Err(Error::Api {
                verb: "create",
                pod: mirror_pod.full_name(),
                source: Box::new(e),
            }),
        }
    }

    async fn delete_mirror_pod(&self, full_name: &str, uid: Option<PodUid>) -> Result<bool, Error> {
        let Some((name, namespace)) = parse_full_name(full_name) else {
            warn!(
                pod = full_name,
                "not a pod full name; no mirror pod to delete"
            );
            return Ok(false);
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid.0),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(true),
            Err(e) if api_status(&e).is_some_and(|s| s.is_not_found() || s.is_conflict()) => {
                Ok(false)
            }
            Err(e) => Err(Error::Api {
                verb: "delete",
                pod: full_name.to_owned(),
                source: Box::new(e),
            }),
        }
    }
}

#[cfg(test)]
#[path = "mirror_tests.rs"]
mod tests;
