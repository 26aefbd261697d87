//! Mirror pods: the API server's read-only copies of static pods (upstream
//! `pkg/kubelet/pod/mirror_client.go`, and `tryReconcileMirrorPods` in
//! `pkg/kubelet/kubelet.go`).
//!
//! A static pod's mirror pod is the static pod with the annotation
//! `kubernetes.io/config.mirror` set to the static pod's `kubernetes.io/config.hash`, owned by
//! the Node (the API server's NodeRestriction admission requires that owner reference, with
//! the Node's UID). Each sync of a static pod reconciles its mirror pod: one that is being
//! deleted or whose hash differs is deleted (with its UID as precondition) and created anew;
//! a missing one is created, once the Node has been read from the API. Housekeeping deletes
//! the mirror pods whose static pod is gone.
//!
//! The transport is a [`MirrorClient`]; [`NoMirrorPods`] (standalone mode) does nothing.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use tracing::{debug, info, warn};

use crate::config::{CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION};
use crate::pod::{PodExt, PodUid, is_static_pod};

use super::node::NodeProvider;

/// Any error of an API client.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a mirror pod could not be created or deleted. The kubelet logs it and tries again at
/// the static pod's next sync (or the next housekeeping), so every variant is retryable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The API server refused or failed the request.
    #[error("{verb} mirror pod {pod}: {source}")]
    Api {
        /// `create` or `delete`.
        verb: &'static str,
        /// The pod's full name (`<name>_<namespace>`).
        pod: String,
        /// The client's error.
        #[source]
        source: BoxError,
    },
}

/// Creates and deletes mirror pods in the API server (upstream `pod.MirrorClient`).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait MirrorClient: Send + Sync + 'static {
    /// Creates `mirror_pod` (built by [`mirror_pod_of`]). A mirror pod of that name that
    /// exists already is not an error: the next sync compares it.
    async fn create_mirror_pod(&self, mirror_pod: &Pod) -> Result<(), Error>;

    /// Deletes the mirror pod `<name>_<namespace>` with grace period 0, only if its UID is
    /// `uid` when one is given. `Ok(true)` when it was deleted, `Ok(false)` when it was not
    /// there or had another UID.
    async fn delete_mirror_pod(&self, full_name: &str, uid: Option<PodUid>) -> Result<bool, Error>;
}

/// No API server: mirror pods are neither created nor deleted (upstream's mirror client
/// without an API client).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMirrorPods;

#[async_trait]
impl MirrorClient for NoMirrorPods {
    async fn create_mirror_pod(&self, _mirror_pod: &Pod) -> Result<(), Error> {
        Ok(())
    }

    async fn delete_mirror_pod(
        &self,
        _full_name: &str,
        _uid: Option<PodUid>,
    ) -> Result<bool, Error> {
        Ok(false)
    }
}

/// The hash a static pod's mirror pod must carry: its `kubernetes.io/config.hash` (upstream
/// `getPodHash`).
pub fn static_pod_hash(static_pod: &Pod) -> &str {
    static_pod.annotation(CONFIG_HASH_ANNOTATION).unwrap_or("")
}

/// Upstream `IsMirrorPodOf`: same name and namespace, and the mirror's
/// `kubernetes.io/config.mirror` equals the static pod's hash.
pub fn is_mirror_pod_of(mirror_pod: &Pod, static_pod: &Pod) -> bool {
    mirror_pod.name_or_empty() == static_pod.name_or_empty()
        && mirror_pod.namespace_or_default() == static_pod.namespace_or_default()
        && mirror_pod.annotation(CONFIG_MIRROR_ANNOTATION) == Some(static_pod_hash(static_pod))
}

/// The mirror pod of `static_pod` on node `node_name` with UID `node_uid` (upstream
/// `CreateMirrorPod`'s copy): the static pod with `kubernetes.io/config.mirror` = its hash and
/// the Node as its controlling owner. Server-set fields (UID, resourceVersion, status) are
/// left out.
pub fn mirror_pod_of(static_pod: &Pod, node_name: &str, node_uid: &str) -> Pod {
    let mut mirror = static_pod.clone();
    mirror
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            CONFIG_MIRROR_ANNOTATION.to_owned(),
            static_pod_hash(static_pod).to_owned(),
        );
    mirror.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node_name.to_owned(),
        uid: node_uid.to_owned(),
        controller: Some(true),
        ..Default::default()
    }]);
    mirror.metadata.namespace = Some(static_pod.namespace_or_default().to_owned());
    mirror.metadata.uid = None;
    mirror.metadata.resource_version = None;
    mirror.metadata.creation_timestamp = None;
    mirror.status = None;
    mirror
}

/// The Node as read from the API server: one with a UID and not being deleted. `None` for a
/// node the kubelet made up (standalone), or one without a UID yet.
fn registered_node(node: &Node) -> Option<(&str, &str)> {
    if node.metadata.deletion_timestamp.is_some() {
        info!("no need to create a mirror pod, since the node has been removed from the cluster");
        return None;
    }
    let name = node.metadata.name.as_deref()?;
    let uid = node.metadata.uid.as_deref().filter(|u| !u.is_empty())?;
    Some((name, uid))
}

/// Upstream `tryReconcileMirrorPods`: makes the API's mirror pod of `static_pod` match it.
/// Failures are logged; the next sync tries again.
pub(crate) async fn reconcile(
    client: &dyn MirrorClient,
    nodes: &dyn NodeProvider,
    static_pod: &Pod,
    mirror_pod: Option<&Pod>,
) {
    if !is_static_pod(static_pod) {
        return;
    }
    let full_name = static_pod.full_name();
    let mut deleted = false;
    if let Some(mirror) = mirror_pod
        && (mirror.is_being_deleted() || !is_mirror_pod_of(mirror, static_pod))
    {
        info!(pod = %full_name, uid = %mirror.uid(), "deleting the mirror pod: it is being deleted or does not match its static pod");
        match client
            .delete_mirror_pod(&full_name, Some(mirror.uid()))
            .await
        {
            Ok(ok) => deleted = ok,
            Err(e) => warn!(pod = %full_name, error = %e, "failed deleting mirror pod"),
        }
    }
    if mirror_pod.is_some() && !deleted {
        return;
    }
    let node = nodes.node();
    let Some((node_name, node_uid)) = registered_node(&node) else {
        debug!(pod = %full_name, "not creating a mirror pod: the node is not known to the API server");
        return;
    };
    debug!(pod = %full_name, "creating a mirror pod for static pod");
    if let Err(e) = client
        .create_mirror_pod(&mirror_pod_of(static_pod, node_name, node_uid))
        .await
    {
        warn!(pod = %full_name, error = %e, "failed creating a mirror pod");
    }
}

/// Housekeeping's part (upstream `HandlePodCleanups`): deletes each orphaned mirror pod,
/// except those whose static pod is still terminating (`terminating(full_name)`), whose
/// status still goes to the mirror.
pub(crate) async fn delete_orphans(
    client: &Arc<dyn MirrorClient>,
    orphans: Vec<String>,
    terminating: impl Fn(&str) -> bool,
) {
    for full_name in orphans {
        if terminating(&full_name) {
            continue;
        }
        info!(pod = %full_name, "deleting orphaned mirror pod");
        if let Err(e) = client.delete_mirror_pod(&full_name, None).await {
            warn!(pod = %full_name, error = %e, "failed deleting orphaned mirror pod");
        }
    }
}

#[cfg(test)]
mod tests;
