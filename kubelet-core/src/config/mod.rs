//! Pod configuration: sources of pods and the merge of their updates.
//!
//! Mirrors upstream `pkg/kubelet/config/` (`config.go`, `file.go`, `common.go`) and the update
//! types of `pkg/kubelet/types/pod_update.go`.

pub mod channel;
pub mod file;
pub mod merge;
pub mod static_pod;
pub mod validate;
mod validate_meta;
pub mod validate_resources;

pub use channel::{ChannelSource, ChannelSourceSender};
pub use file::FileSource;
pub use merge::{PodConfig, SourcesReady};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Source name of static pods read from files (upstream `kubetypes.FileSource`).
pub const FILE_SOURCE: &str = "file";
/// Source name of static pods read from a URL (upstream `kubetypes.HTTPSource`).
pub const HTTP_SOURCE: &str = "http";
/// Source name of pods from the API server (upstream `kubetypes.ApiserverSource`).
pub const API_SERVER_SOURCE: &str = "api";

/// Annotation naming the pod's source (upstream `kubetypes.ConfigSourceAnnotationKey`).
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation holding the hash of a static pod (upstream `ConfigHashAnnotationKey`).
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Annotation holding when the pod was first seen (upstream `ConfigFirstSeenAnnotationKey`).
pub const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
/// Annotation marking a mirror pod (upstream `ConfigMirrorAnnotationKey`).
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What an update means (upstream `kubetypes.PodOperation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// The full set of pods of one source; the merger turns it into the others.
    Set,
    /// Pods new to the kubelet.
    Add,
    /// Pods whose spec changed.
    Update,
    /// Pods gone from their source: stop and forget them.
    Remove,
    /// Pods gracefully deleted in the API (deletionTimestamp set).
    Delete,
    /// Pods whose status changed but not their spec.
    Reconcile,
}

/// A batch of pods with one operation from one source (upstream `kubetypes.PodUpdate`).
#[derive(Clone, Debug, PartialEq)]
pub struct PodUpdate {
    /// The pods.
    pub pods: Vec<Pod>,
    /// What happened to them.
    pub op: Operation,
    /// The source they come from, e.g. [`FILE_SOURCE`].
    pub source: String,
}

/// A source of pods, e.g. the manifest directory or the API server.
///
/// A source sends [`Operation::Set`] snapshots of everything it currently provides; the first
/// snapshot marks the source as seen (which gates housekeeping).
#[async_trait]
pub trait PodSource: Send + 'static {
    /// The source name, e.g. [`FILE_SOURCE`].
    fn name(&self) -> &str;

    /// Runs until `token` is cancelled, sending snapshots to `updates`.
    async fn run(self: Box<Self>, updates: mpsc::Sender<PodUpdate>, token: CancellationToken);
}
