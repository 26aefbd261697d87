//! Resource usage of the node, its pods, containers and volumes: the Summary API
//! (`/stats/summary`) and what `/metrics/resource` and `/metrics/cadvisor` are made of.
//!
//! Mirrors upstream `pkg/kubelet/stats` (`provider.go`, `cri_stats_provider.go`,
//! `host_stats_provider.go`) and `pkg/kubelet/server/stats/summary.go`:
//!
//! * [`v1alpha1`]: the Summary API's JSON types.
//! * [`PodStatsProvider`]: the pods' stats (upstream `containerStatsProvider`);
//!   [`cri::CriStatsProvider`] implements it over any
//!   [`RuntimeService`](crate::kuberuntime::RuntimeService): CRI `ListPodSandbox`,
//!   `ListContainers`, `ListContainerStats`, `ListPodSandboxStats` (or the pod's cgroup and
//!   `/proc/<pid>/net/dev` when the runtime does not report sandbox stats), `ImageFsInfo`,
//!   and the pods' volume directories.
//! * [`SummaryProvider`]: the whole summary (upstream `SummaryProvider`);
//!   [`summary::Summarizer`] adds the node (root cgroup, `/proc`, statfs of the root
//!   directory and image filesystem) to a [`PodStatsProvider`]'s pods.
//! * [`system_containers`]: the `kubelet`, `runtime` and `misc` system containers' cgroups.
//! * [`fs_resource_analyzer`]: the pods' volume usage, walked in the background and cached.
//! * [`cadvisor`]: what `/metrics/cadvisor` labels each cgroup with.
//! * [`cpu`]: `usageNanoCores` from two samples, cached as upstream.
//! * [`cgroup`], [`host`]: the readers.

pub mod cadvisor;
pub mod cgroup;
pub mod cpu;
pub mod cri;
pub mod fs_resource_analyzer;
pub mod host;
pub mod summary;
pub mod system_containers;
pub mod v1alpha1;
pub mod volumes;

use async_trait::async_trait;

pub use summary::Summarizer;
pub use v1alpha1::{FsStats, PodStats, Summary};

/// Why stats could not be gathered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The runtime did not answer (retryable: the next request asks again).
    #[error("container runtime: {0}")]
    Runtime(#[from] crate::runtime::Error),
    /// A blocking reader task failed.
    #[error("reading stats: {0}")]
    Task(String),
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Stats of the pods a runtime runs (upstream `containerStatsProvider`).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait PodStatsProvider: Send + Sync + 'static {
    /// Every running pod with its containers, CPU, memory, network, volumes and ephemeral
    /// storage; computes `usageNanoCores` from the previous call's samples (upstream
    /// `ListPodStats`).
    async fn list_pod_stats(&self) -> Result<Vec<PodStats>>;

    /// Every running pod with CPU and memory only; `usageNanoCores` as the last
    /// [`list_pod_stats`](Self::list_pod_stats) computed it (upstream
    /// `ListPodCPUAndMemoryStats`).
    async fn list_pod_cpu_and_memory_stats(&self) -> Result<Vec<PodStats>>;

    /// The filesystem holding images, with the images' usage (upstream `ImageFsStats`);
    /// `None` when the runtime does not say.
    async fn image_fs_stats(&self) -> Result<Option<FsStats>>;

    /// Every container and sandbox of the running pods with its cgroup, image and runtime
    /// ID, as `/metrics/cadvisor` labels them.
    async fn container_infos(&self) -> Result<Vec<cadvisor::ContainerInfo>>;
}

/// The Summary API (upstream `SummaryProvider`).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait SummaryProvider: Send + Sync + 'static {
    /// The whole summary (upstream `Get`).
    async fn get(&self) -> Result<Summary>;

    /// The node's and pods' CPU and memory only (upstream `GetCPUAndMemoryStats`, what
    /// `?only_cpu_and_memory=true` and `/metrics/resource` serve).
    async fn get_cpu_and_memory_stats(&self) -> Result<Summary>;

    /// The root cgroup (`/`, the node) and every container and sandbox, as
    /// `/metrics/cadvisor` reports them.
    async fn container_infos(&self) -> Result<Vec<cadvisor::ContainerInfo>>;
}
