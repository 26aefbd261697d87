//! [`RuntimeService`]: the container-level backend the pod engine drives (upstream
//! `internalapi.RuntimeService` and `ImageManagerService` of `k8s.io/cri-api`), in core types.
//!
//! `kubelet-cri` implements it over CRI v1; `testing::FakeRuntimeService` (feature
//! `test-util`) in memory; a custom node agent implements it for its own runtime (processes,
//! WASM, VMs) and gets the whole pod lifecycle from the engine. Only the container calls and
//! the two listings are required: sandboxes, images, exec, streaming, logs and stats have
//! defaults for runtimes that have none of them.

use std::time::Duration;

use async_trait::async_trait;

use super::api::{
    Container, ContainerConfig, ContainerFilter, ContainerStats, ContainerStatus, FilesystemUsage,
    Image, PodSandbox, PodSandboxConfig, PodSandboxFilter, PodSandboxStats, PodSandboxStatus,
    PullImageRequest, StreamRequest,
};
use crate::runtime::{
    Error, ExecResult, ExecSession, NoopExecSession, Result, RuntimeStatus, Version,
};

/// A container runtime at CRI height (upstream `RuntimeService` + `ImageManagerService`).
///
/// Every call is independent and cancel safe. Errors: [`Error::Unavailable`] when the runtime
/// is down (the engine aborts the sync and retries with backoff), [`Error::NotFound`] when the
/// named object does not exist (the engine treats it as already gone where that is what it
/// wanted), [`Error::InvalidSpec`] when a config cannot be turned into a runtime object
/// (reported on the container as `CreateContainerConfigError`), [`Error::Unsupported`] from
/// the defaults.
///
/// # Runtimes without sandboxes
///
/// A runtime that has no pod-level sandbox returns `false` from
/// [`RuntimeService::has_sandboxes`] and keeps the defaults of the sandbox calls: the engine
/// then treats every pod as having one implicit sandbox that is always ready, whose ID is the
/// pod UID and whose IPs are the node's.
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait RuntimeService: Send + Sync + 'static {
    /// The runtime's name and versions; the name prefixes container IDs in pod statuses
    /// (`<name>://<id>`).
    async fn version(&self) -> Result<Version>;

    /// The runtime's readiness conditions.
    async fn status(&self) -> Result<RuntimeStatus>;

    /// `false` for a runtime with no pod sandboxes (see the trait docs).
    fn has_sandboxes(&self) -> bool {
        true
    }

    /// Creates and starts a pod's sandbox; returns its ID.
    async fn run_pod_sandbox<'a>(&self, config: &PodSandboxConfig<'a>) -> Result<String> {
        let _ = config;
        Err(Error::Unsupported("RunPodSandbox"))
    }

    /// Stops a sandbox and releases its network; the default does nothing.
    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        let _ = id;
        Ok(())
    }

    /// Removes a stopped sandbox; the default does nothing.
    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        let _ = id;
        Ok(())
    }

    /// Full status of one sandbox.
    async fn pod_sandbox_status(&self, id: &str) -> Result<PodSandboxStatus> {
        Err(Error::NotFound(format!("pod sandbox {id}")))
    }

    /// Sandboxes matching `filter`; the default lists none.
    async fn list_pod_sandbox(&self, filter: &PodSandboxFilter) -> Result<Vec<PodSandbox>> {
        let _ = filter;
        Ok(Vec::new())
    }

    /// Creates a container in a sandbox (not started); returns its ID.
    async fn create_container<'a>(
        &self,
        sandbox_id: &str,
        config: &ContainerConfig<'a>,
    ) -> Result<String>;

    /// Starts a created container.
    async fn start_container(&self, id: &str) -> Result<()>;

    /// Stops a container: SIGTERM (or the image's stop signal), then SIGKILL after
    /// `timeout_seconds` (0: at once). Stopping a stopped container succeeds.
    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()>;

    /// Removes a stopped container (and its log file, if the runtime owns it).
    async fn remove_container(&self, id: &str) -> Result<()>;

    /// Containers matching `filter`.
    async fn list_containers(&self, filter: &ContainerFilter) -> Result<Vec<Container>>;

    /// Full status of one container.
    async fn container_status(&self, id: &str) -> Result<ContainerStatus>;

    /// Runs `cmd` in a running container and waits at most `timeout` (zero: no timeout),
    /// keeping at most `max_output` bytes of each of stdout and stderr. A command that
    /// outlives the timeout gives `Ok` with [`ExecResult::timed_out`].
    async fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
        max_output: usize,
    ) -> Result<ExecResult> {
        let _ = (container_id, cmd, timeout, max_output);
        Err(Error::Unsupported("ExecSync"))
    }

    /// The URL of the runtime's streaming server for an exec, attach or port-forward session.
    async fn stream_url(&self, request: &StreamRequest) -> Result<String> {
        let _ = request;
        Err(Error::Unsupported("streaming"))
    }

    /// Begins an exec session of `cmd` in container `id` (see
    /// [`Runtime::begin_exec_session`](crate::runtime::Runtime::begin_exec_session)); the
    /// default does nothing.
    async fn begin_exec_session(&self, id: &str, cmd: &[String]) -> Box<dyn ExecSession> {
        let _ = (id, cmd);
        Box::new(NoopExecSession)
    }

    /// Asks the runtime to reopen a container's log file after the kubelet rotated it.
    async fn reopen_container_log(&self, id: &str) -> Result<()> {
        let _ = id;
        Err(Error::Unsupported("ReopenContainerLog"))
    }

    /// Resource usage of the containers (all, when `ids` is empty).
    async fn list_container_stats(&self, ids: &[String]) -> Result<Vec<ContainerStats>> {
        let _ = ids;
        Err(Error::Unsupported("ListContainerStats"))
    }

    /// Resource usage of the sandboxes (all, when `ids` is empty); [`Error::Unsupported`]
    /// from runtimes that do not report it (the stats provider then reads what it can
    /// itself).
    async fn list_pod_sandbox_stats(&self, ids: &[String]) -> Result<Vec<PodSandboxStats>> {
        let _ = ids;
        Err(Error::Unsupported("ListPodSandboxStats"))
    }

    /// An image present on the node, or `None`. The default reports every image present
    /// with its reference as ID (for runtimes that have no images, such as plain processes).
    async fn image_status(&self, image: &str) -> Result<Option<Image>> {
        Ok(Some(Image {
            id: image.to_owned(),
            ..Default::default()
        }))
    }

    /// Pulls an image; returns its reference (what [`ContainerConfig::image_ref`] will be).
    /// The default, for runtimes without images, pulls nothing and returns the reference as
    /// given (so `imagePullPolicy: Always` works on them too).
    async fn pull_image<'a>(&self, request: &PullImageRequest<'a>) -> Result<String> {
        Ok(request.image.to_owned())
    }

    /// Every image on the node.
    async fn list_images(&self) -> Result<Vec<Image>> {
        Err(Error::Unsupported("ListImages"))
    }

    /// Removes an image.
    async fn remove_image(&self, image: &str) -> Result<()> {
        let _ = image;
        Err(Error::Unsupported("RemoveImage"))
    }

    /// Usage of the filesystems that hold images.
    async fn image_fs_info(&self) -> Result<Vec<FilesystemUsage>> {
        Err(Error::Unsupported("ImageFsInfo"))
    }
}
