//! Pod status sync to the API server and the final delete of terminated pods (upstream
//! `pkg/kubelet/status/status_manager.go`, the API half: `syncBatch`, `syncPod`,
//! `mergePodStatus`, `canBeDeleted`; and `pkg/util/pod/pod.go` `PatchPodStatus`).
//!
//! [`ApiStatusSyncer`] watches a [`LocalStatusManager`](crate::LocalStatusManager) and
//! PATCHes `pods/<name>/status` with a strategic merge patch that carries the pod's UID as a
//! precondition ([`patch`]). It writes only the conditions the kubelet owns and keeps the
//! others ([`merge`]), never moves a pod out of a terminal phase, writes a static pod's
//! status to its mirror pod ([`MirrorPodLookup`]), and once a pod deleted in the API is
//! terminal and its resources are reclaimed
//! ([`StatusManager::pod_resources_reclaimed`](kubelet_core::status::StatusManager::pod_resources_reclaimed)),
//! DELETEs it with grace period 0 and a UID precondition, once.
//!
//! Wiring, in cluster mode:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use kubelet_core::pod_manager::PodManager;
//! # use kubelet_core::pod_workers::PodWorkers;
//! # use kubelet_status::LocalStatusManager;
//! use kubelet_status::api::ApiStatusSyncer;
//! # fn demo(client: kube::Client, statuses: Arc<LocalStatusManager>, pods: PodManager,
//! #         workers: PodWorkers, tracker: tokio_util::task::TaskTracker,
//! #         token: tokio_util::sync::CancellationToken) {
//! // The pod manager finds mirror pods; the pod workers say whether containers may run.
//! let mirrors = Arc::new(pods.clone());
//! let syncer = ApiStatusSyncer::new(client, statuses, pods, mirrors, Arc::new(workers));
//! tracker.spawn(syncer.run(token));
//! # }
//! ```

mod client;
pub mod merge;
mod mirror;
pub mod patch;
mod syncer;

pub use client::{DEFAULT_REQUEST_TIMEOUT, Error, KubePodStatusApi, PodStatusApi};
pub use mirror::{MirrorPodLookup, NoMirrorPods};
pub use syncer::{ApiStatusSyncer, BatchOutcome, Config};

#[cfg(test)]
mod tests;
