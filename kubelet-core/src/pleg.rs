//! The pod lifecycle event generator contract (upstream `pkg/kubelet/pleg/pleg.go`).
//!
//! Implementations (the generic relisting PLEG, the containerd-events PLEG) live in
//! `kubelet-pleg`; they send [`Event`]s to the sync loop and keep the [`crate::cache::PodCache`]
//! fresh.

use async_trait::async_trait;

use crate::pod::PodUid;

/// What changed (upstream `PodLifeCycleEventType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// A container started running.
    ContainerStarted,
    /// A container exited.
    ContainerDied,
    /// A container was removed.
    ContainerRemoved,
    /// Something about the pod changed that is not one of the above (e.g. sandbox state).
    PodSync,
    /// A container changed state in another way (e.g. created, unknown).
    ContainerChanged,
}

/// One lifecycle event for one pod (upstream `PodLifecycleEvent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The pod.
    pub id: PodUid,
    /// What happened.
    pub kind: EventType,
    /// The container ID the event is about, if any.
    pub container_id: Option<String>,
}

/// Why a PLEG is unhealthy: the implementation's own error, whose message is the reason the
/// runtime state reports (upstream `Healthy` returns a Go `error`).
pub type HealthError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A PLEG, as the pod workers and the sync loop use it.
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait Pleg: Send + Sync + 'static {
    /// Re-inspects one pod now and writes its status to the pod cache with a fresh timestamp
    /// (upstream's on-demand per-pod relist). Errors leave the cache as it was.
    async fn relist_pod(
        &self,
        uid: &PodUid,
        name: &str,
        namespace: &str,
    ) -> Result<(), crate::runtime::Error>;

    /// `Err` when the PLEG has not relisted within its threshold (upstream `Healthy`).
    fn healthy(&self) -> Result<(), HealthError>;
}
