//! Container garbage collection: the policy, what the runtime asks about pods, and the loop
//! that runs it every minute.
//!
//! Mirrors upstream `pkg/kubelet/container/container_gc.go` (`GCPolicy`, `ContainerGC`,
//! `realContainerGC`), the `podStateProvider` of `pkg/kubelet/kuberuntime/kuberuntime_gc.go`
//! and the container half of `Kubelet.StartGarbageCollection` (`pkg/kubelet/kubelet.go`).
//! What is removed is the runtime's business ([`Runtime::garbage_collect`]); the pod engine's
//! rules (dead containers per pod and name, dead sandboxes, pod log directories) are in
//! `kuberuntime::gc`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use tokio_util::sync::CancellationToken;

use crate::events::{EventRecorder, EventType, reasons};
use crate::pod::PodUid;
use crate::runtime::{Result, Runtime};

/// How often dead containers are collected (upstream `ContainerGCPeriod`).
pub const CONTAINER_GC_PERIOD: Duration = Duration::from_secs(60);

/// Which dead containers may be removed (upstream `kubecontainer.GCPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(alias = "GCPolicy")]
pub struct Policy {
    /// Minimum age (since creation) at which a container can be collected; zero for no limit
    /// (upstream `--minimum-container-ttl-duration`, default 0).
    pub min_age: Duration,
    /// Most dead containers any one (pod UID, container name) pair keeps; negative for no
    /// limit (upstream `--maximum-dead-containers-per-container`, default 1).
    pub max_per_pod_container: i32,
    /// Most dead containers in total; negative for no limit (upstream
    /// `--maximum-dead-containers`, default -1).
    pub max_containers: i32,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            min_age: Duration::ZERO,
            max_per_pod_container: 1,
            max_containers: -1,
        }
    }
}

/// What the collector asks the kubelet about a pod (upstream `podStateProvider`, which the
/// pod workers implement).
pub trait PodStateProvider: Send + Sync {
    /// `true` once nothing of the pod is needed any more, not even its logs: it was deleted
    /// (or removed from its source) and its termination is complete; for a pod no worker
    /// knows, once every source has been seen and no source wants it (upstream
    /// `ShouldPodContentBeRemoved`).
    fn should_pod_content_be_removed(&self, uid: &PodUid) -> bool;

    /// `true` once the pod's containers and sandboxes are no longer needed: it is terminated
    /// (deleted or not); for a pod no worker knows, as
    /// [`should_pod_content_be_removed`](Self::should_pod_content_be_removed) (upstream
    /// `ShouldPodRuntimeBeRemoved`).
    fn should_pod_runtime_be_removed(&self, uid: &PodUid) -> bool;
}

/// Whether every pod source has been seen (upstream `SourcesReadyProvider.AllReady`).
pub type AllSourcesReady = Arc<dyn Fn() -> bool + Send + Sync>;

/// The container garbage collector (upstream `realContainerGC`): the runtime's collection
/// under one [`Policy`]. Cheap to clone.
#[derive(Clone)]
pub struct ContainerGc {
    runtime: Arc<dyn Runtime>,
    policy: Policy,
    sources_ready: AllSourcesReady,
    pods: Arc<dyn PodStateProvider>,
}

impl std::fmt::Debug for ContainerGc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerGc")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl ContainerGc {
    /// A collector of `runtime`'s dead containers under `policy`; `pods` says which pods are
    /// gone, `sources_ready` whether every source has been seen (until then no pod counts
    /// as deleted by the container rules, as upstream).
    pub fn new(
        runtime: Arc<dyn Runtime>,
        policy: Policy,
        sources_ready: AllSourcesReady,
        pods: Arc<dyn PodStateProvider>,
    ) -> Self {
        Self {
            runtime,
            policy,
            sources_ready,
            pods,
        }
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// One collection (upstream `GarbageCollect`).
    pub async fn garbage_collect(&self) -> Result<()> {
        self.runtime
            .garbage_collect(
                self.policy,
                (self.sources_ready)(),
                false,
                self.pods.clone(),
            )
            .await
    }

    /// One collection that also removes everything of pods that are terminated but not
    /// deleted (upstream `DeleteAllUnusedContainers`, the eviction manager's node-level
    /// reclaim).
    pub async fn delete_all_unused_containers(&self) -> Result<()> {
        self.runtime
            .garbage_collect(self.policy, (self.sources_ready)(), true, self.pods.clone())
            .await
    }

    /// Collects now and then every `period` until `token` is cancelled (upstream
    /// `StartGarbageCollection`'s container loop): a failure is logged and recorded as a
    /// `ContainerGCFailed` warning on `node`.
    pub async fn run(
        self,
        period: Duration,
        events: Arc<dyn EventRecorder>,
        node: ObjectReference,
        token: CancellationToken,
    ) {
        let mut logged_failure = false;
        loop {
            let collected = tokio::select! {
                biased;
                () = token.cancelled() => return,
                r = self.garbage_collect() => r,
            };
            match collected {
                Err(error) => {
                    tracing::error!(%error, "Container garbage collection failed");
                    events.event(
                        &node,
                        EventType::Warning,
                        reasons::CONTAINER_GC_FAILED,
                        &error.to_string(),
                    );
                    logged_failure = true;
                }
                Ok(()) if logged_failure => {
                    tracing::info!("Container garbage collection succeeded");
                    logged_failure = false;
                }
                Ok(()) => tracing::debug!("Container garbage collection succeeded"),
            }
            tokio::select! {
                biased;
                () = token.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
        }
    }
}

/// The eviction manager's node-level reclaim (upstream's container GC is its `ContainerGC`).
#[async_trait::async_trait]
impl crate::eviction::ContainerGC for ContainerGc {
    async fn delete_all_unused_containers(
        &self,
    ) -> Result<(), crate::eviction::reclaim::ReclaimError> {
        ContainerGc::delete_all_unused_containers(self)
            .await
            .map_err(Into::into)
    }
}

/// A [`ContainerGc`] given once it exists: the eviction manager is built before the kubelet
/// whose pod states the collector reads, so it gets this and the node sets it after the
/// build. Until then (or without container GC) it reclaims nothing.
#[derive(Debug, Default)]
pub struct DeferredContainerGc(std::sync::OnceLock<ContainerGc>);

impl DeferredContainerGc {
    /// Sets the collector (once; later calls are ignored).
    pub fn set(&self, gc: ContainerGc) {
        let _ = self.0.set(gc);
    }
}

#[async_trait::async_trait]
impl crate::eviction::ContainerGC for DeferredContainerGc {
    async fn delete_all_unused_containers(
        &self,
    ) -> Result<(), crate::eviction::reclaim::ReclaimError> {
        match self.0.get() {
            Some(gc) => gc.delete_all_unused_containers().await.map_err(Into::into),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Error, MockRuntime};
    use crate::testing::CollectingRecorder;

    struct NoPods;
    impl PodStateProvider for NoPods {
        fn should_pod_content_be_removed(&self, _: &PodUid) -> bool {
            false
        }
        fn should_pod_runtime_be_removed(&self, _: &PodUid) -> bool {
            false
        }
    }

    #[test]
    fn upstream_defaults() {
        let p = Policy::default();
        assert_eq!(p.min_age, Duration::ZERO);
        assert_eq!(p.max_per_pod_container, 1);
        assert_eq!(p.max_containers, -1);
    }

    #[tokio::test(start_paused = true)]
    async fn runs_at_once_then_every_period_and_records_failures() {
        let mut runtime = MockRuntime::new();
        let mut seq = mockall::Sequence::new();
        runtime
            .expect_garbage_collect()
            .withf(|_, ready, evict_all, _| *ready && !*evict_all)
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_, _, _, _| {
                Err(Error::Runtime {
                    op: "ListContainers",
                    message: "boom".into(),
                })
            });
        runtime
            .expect_garbage_collect()
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_, _, _, _| Ok(()));
        let gc = ContainerGc::new(
            Arc::new(runtime),
            Policy::default(),
            Arc::new(|| true),
            Arc::new(NoPods),
        );
        let events = Arc::new(CollectingRecorder::default());
        let token = CancellationToken::new();
        let task = tokio::spawn(gc.run(
            CONTAINER_GC_PERIOD,
            events.clone(),
            crate::events::node_ref("n"),
            token.clone(),
        ));
        // The first collection runs at once; the second after one period.
        tokio::time::sleep(CONTAINER_GC_PERIOD / 2).await;
        let recorded = events.events();
        assert_eq!(recorded.len(), 1, "{recorded:?}");
        assert_eq!(recorded[0].reason, reasons::CONTAINER_GC_FAILED);
        assert!(recorded[0].message.contains("boom"), "{recorded:?}");
        tokio::time::sleep(CONTAINER_GC_PERIOD).await;
        token.cancel();
        task.await.expect("gc loop");
        assert_eq!(events.events().len(), 1);
    }
}
