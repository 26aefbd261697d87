//! What the node status reads from the rest of the kubelet, as small traits so that the
//! event recorder, an eviction manager and an image manager plug in (upstream passes the
//! same as functions to the setters: `evictionManager.IsUnderMemoryPressure`,
//! `imageManager.GetImageList`); node events go to the node's `EventRecorder` on the node's
//! reference (upstream `recordNodeStatusEvent`).

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::jiff::Timestamp;
use kubelet_core::events::{EventRecorder, EventType, LogRecorder, node_ref};
use kubelet_core::kubelet::RuntimeState;
use kubelet_core::nodeshutdown::ShutdownState;
use kubelet_core::runtime::Runtime;
use tracing::debug;

use super::machine::MachineInfo;
use super::setters::Snapshot;
use crate::cluster::client::OnHeartbeatFailure;

/// Node pressure as the eviction manager sees it (upstream `IsUnderMemoryPressure`,
/// `IsUnderDiskPressure`, `IsUnderPIDPressure`).
pub trait PressureSource: Send + Sync {
    /// Memory is below its eviction threshold.
    fn memory_pressure(&self) -> bool;
    /// A filesystem is below its eviction threshold.
    fn disk_pressure(&self) -> bool;
    /// Process IDs are below their eviction threshold.
    fn pid_pressure(&self) -> bool;
}

impl PressureSource for kubelet_core::eviction::Pressure {
    fn memory_pressure(&self) -> bool {
        self.is_under_memory_pressure()
    }
    fn disk_pressure(&self) -> bool {
        self.is_under_disk_pressure()
    }
    fn pid_pressure(&self) -> bool {
        self.is_under_pid_pressure()
    }
}

/// An image on the node (upstream `kubecontainer.Image`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    /// Digests, e.g. `docker.io/library/nginx@sha256:…`.
    pub repo_digests: Vec<String>,
    /// Tags, e.g. `docker.io/library/nginx:1.25`.
    pub repo_tags: Vec<String>,
    /// Size in bytes.
    pub size_bytes: i64,
}

/// The node's images, largest first (upstream `imageManager.GetImageList`).
#[async_trait]
pub trait ImageLister: Send + Sync {
    /// The images; an error leaves the status's image list empty for this round.
    async fn list_images(&self) -> Result<Vec<Image>, Box<dyn std::error::Error + Send + Sync>>;
}

/// Everything the node status reads besides its options.
#[derive(Clone)]
pub struct NodeStatusInputs {
    pub(super) runtime: Arc<dyn Runtime>,
    pub(super) runtime_state: RuntimeState,
    pub(super) pressure: Option<Arc<dyn PressureSource>>,
    pub(super) images: Option<Arc<dyn ImageLister>>,
    pub(super) events: Arc<dyn EventRecorder>,
    pub(super) machine: Option<MachineInfo>,
    pub(super) on_repeated_failure: Option<OnHeartbeatFailure>,
    pub(super) shutdown: Option<ShutdownState>,
}

impl std::fmt::Debug for NodeStatusInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeStatusInputs").finish_non_exhaustive()
    }
}

impl NodeStatusInputs {
    /// The runtime (its `version()` is `nodeInfo.containerRuntimeVersion`) and its health
    /// (Ready follows the runtime, network and PLEG errors). No pressure and no images until
    /// set; events are log lines until a recorder is set.
    pub fn new(runtime: Arc<dyn Runtime>, runtime_state: RuntimeState) -> Self {
        Self {
            runtime,
            runtime_state,
            pressure: None,
            images: None,
            events: Arc::new(LogRecorder),
            machine: None,
            on_repeated_failure: None,
            shutdown: None,
        }
    }

    /// Calls `hook` when a status update fails again after a failed one in the same round
    /// (upstream `onRepeatedHeartbeatFailure` in `updateNodeStatus`, e.g.
    /// [`ApiClients::on_heartbeat_failure`](crate::cluster::ApiClients::on_heartbeat_failure)).
    #[must_use]
    pub fn on_repeated_heartbeat_failure(mut self, hook: Option<OnHeartbeatFailure>) -> Self {
        self.on_repeated_failure = hook;
        self
    }

    /// Reports pressure conditions from `source` (without one: never under pressure).
    #[must_use]
    pub fn pressure(mut self, source: Arc<dyn PressureSource>) -> Self {
        self.pressure = Some(source);
        self
    }

    /// Makes the Node `NotReady` with `node is shutting down` while `state` says so (upstream
    /// `shutdownManager.ShutdownStatus`).
    #[must_use]
    pub fn node_shutdown(mut self, state: ShutdownState) -> Self {
        self.shutdown = Some(state);
        self
    }

    /// Reports the images `lister` lists (without one: an empty list).
    #[must_use]
    pub fn images(mut self, lister: Arc<dyn ImageLister>) -> Self {
        self.images = Some(lister);
        self
    }

    /// Records node events (`NodeReady`, `NodeHasSufficientMemory`, …) with `recorder`.
    #[must_use]
    pub fn events(mut self, recorder: Arc<dyn EventRecorder>) -> Self {
        self.events = recorder;
        self
    }

    /// Uses `machine` instead of reading this machine (tests, or a node agent that reports
    /// another machine).
    #[must_use]
    pub fn machine_info(mut self, machine: MachineInfo) -> Self {
        self.machine = Some(machine);
        self
    }

    /// Reads everything the setters need for one round.
    /// The runtime's own image list (upstream's image manager reads the runtime); a runtime
    /// that cannot list images gives none.
    async fn runtime_images(&self) -> Result<Vec<Image>, String> {
        match self.runtime.list_images().await {
            Ok(images) => {
                let mut images: Vec<Image> = images
                    .into_iter()
                    .map(|i| Image {
                        repo_digests: i.repo_digests,
                        repo_tags: i.repo_tags,
                        size_bytes: i64::try_from(i.size).unwrap_or(i64::MAX),
                    })
                    .collect();
                // Largest first, as upstream's `GetImageList` (`ByImageSize`).
                images.sort_by_key(|i| std::cmp::Reverse(i.size_bytes));
                Ok(images)
            }
            Err(kubelet_core::runtime::Error::Unsupported(_)) => Ok(Vec::new()),
            Err(e) => Err(e.to_string()),
        }
    }

    pub(super) async fn snapshot(&self, machine: &MachineInfo, now: Timestamp) -> Snapshot {
        let runtime_version = match self.runtime.version().await {
            Ok(v) => Some(v),
            Err(e) => {
                debug!(error = %e, "runtime version for the node status");
                None
            }
        };
        let images = match &self.images {
            Some(lister) => lister.list_images().await.map_err(|e| e.to_string()),
            None => self.runtime_images().await,
        };
        let pressure = |f: fn(&dyn PressureSource) -> bool| self.pressure.as_deref().is_some_and(f);
        Snapshot {
            now,
            machine: machine.clone(),
            runtime_version,
            images,
            runtime_errors: self.runtime_state.runtime_errors(),
            network_errors: self.runtime_state.network_errors().into_iter().collect(),
            shutdown_errors: self
                .shutdown
                .as_ref()
                .and_then(ShutdownState::status)
                .map(str::to_owned)
                .into_iter()
                .collect(),
            memory_pressure: pressure(|p| p.memory_pressure()),
            disk_pressure: pressure(|p| p.disk_pressure()),
            pid_pressure: pressure(|p| p.pid_pressure()),
            runtime_handlers: self.runtime_state.runtime_handlers(),
        }
    }

    pub(super) fn record(
        &self,
        node_name: &str,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) {
        self.events
            .event(&node_ref(node_name), event_type, reason, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_core::cache::PodCache;
    use kubelet_core::kubelet::RuntimeState;
    use kubelet_core::testing::{FakePleg, FakeRuntime};

    #[tokio::test]
    async fn without_a_lister_the_runtime_lists_the_images() {
        let fake = FakeRuntime::new();
        fake.service().add_image("docker.io/library/busybox:1.36");
        let runtime: Arc<dyn Runtime> = Arc::new(fake);
        let pleg = FakePleg::new(runtime.clone(), PodCache::new());
        let state = RuntimeState::new(Arc::new(pleg));
        let inputs = NodeStatusInputs::new(runtime, state);
        let images = inputs.runtime_images().await.expect("listed");
        assert_eq!(
            images,
            vec![Image {
                repo_digests: Vec::new(),
                repo_tags: vec!["docker.io/library/busybox:1.36".into()],
                size_bytes: 0,
            }]
        );
    }
}
