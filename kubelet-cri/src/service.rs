//! [`CriRuntimeService`]: the pod engine's [`RuntimeService`] over CRI v1 on a unix socket.
//!
//! Mirrors upstream `pkg/kubelet/cri/remote` (`remoteRuntimeService`, `remoteImageService`)
//! with the CRI config builders of `pkg/kubelet/kuberuntime` that depend on CRI
//! (`generatePodSandboxConfig`, `generateContainerConfig`, their Linux halves): the engine
//! (`kubelet_core::kuberuntime::KubeRuntimeManager`) decides, this turns its requests into
//! CRI calls and CRI answers into [`api`] types.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_cri::v1 as cri;
use kubelet_core::PodExt;
use kubelet_core::kuberuntime::{RuntimeService, api};
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::runtime::{
    ContainerState, Error, ExecResult, Result, RuntimeStatus, SandboxState, Version,
};

use crate::client::{CriClient, socket_path};
use crate::container::generate_container_config;
use crate::convert;
use crate::error::ConnectError;
use crate::exec_reaper::ExecReaper;
use crate::resources::CfsQuota;
use crate::sandbox::{check_user_namespaces, generate_pod_sandbox_config};

/// Upstream's default `--runtime-request-timeout`.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Settings of a [`CriRuntimeService`]: what only a CRI backend needs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CriOptions {
    /// Deadline of each CRI call (upstream `--runtime-request-timeout`, default 2 min).
    /// `StopContainer` gets this plus the grace period; `PullImage` has no deadline.
    pub request_timeout: Duration,
    /// Parent cgroup of the pod sandboxes when the runtime helper gives none; `None` lets
    /// the runtime choose.
    pub cgroup_parent: Option<String>,
    /// Where `Localhost` seccomp profiles live (upstream `<root-dir>/seccomp`).
    pub seccomp_profile_root: PathBuf,
    /// Upstream `seccompDefault`: a container without a seccomp profile gets the runtime's
    /// default instead of unconfined (default false).
    pub seccomp_default: bool,
    /// The machine's memory in bytes, for Burstable `oom_score_adj`; 0 reads
    /// `/proc/meminfo` at connect.
    pub memory_capacity: i64,
    /// CPU limit enforcement (upstream `--cpu-cfs-quota`, `--cpu-cfs-quota-period`).
    pub cfs_quota: CfsQuota,
}

impl Default for CriOptions {
    fn default() -> Self {
        Self {
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            cgroup_parent: None,
            seccomp_profile_root: PathBuf::from("/var/lib/kubelet/seccomp"),
            seccomp_default: false,
            memory_capacity: 0,
            cfs_quota: CfsQuota::default(),
        }
    }
}

impl CriOptions {
    /// Sets [`CriOptions::request_timeout`].
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets [`CriOptions::cgroup_parent`].
    #[must_use]
    pub fn with_cgroup_parent(mut self, cgroup: impl Into<String>) -> Self {
        self.cgroup_parent = Some(cgroup.into());
        self
    }

    /// Sets [`CriOptions::seccomp_profile_root`].
    #[must_use]
    pub fn with_seccomp_profile_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.seccomp_profile_root = dir.into();
        self
    }

    /// Sets [`CriOptions::seccomp_default`].
    #[must_use]
    pub fn with_seccomp_default(mut self, on: bool) -> Self {
        self.seccomp_default = on;
        self
    }

    /// Sets [`CriOptions::memory_capacity`].
    #[must_use]
    pub fn with_memory_capacity(mut self, bytes: i64) -> Self {
        self.memory_capacity = bytes;
        self
    }

    /// Sets [`CriOptions::cfs_quota`].
    #[must_use]
    pub fn with_cfs_quota(mut self, cfs: CfsQuota) -> Self {
        self.cfs_quota = cfs;
        self
    }
}

/// A container runtime over CRI v1 (containerd, CRI-O, ...) as the pod engine's backend.
/// Cheap to clone; clones share the connection.
///
/// The connection is lazy: a runtime that is down gives [`Error::Unavailable`] on each call,
/// and calls succeed again as soon as the socket accepts connections.
#[derive(Clone, Debug)]
pub struct CriRuntimeService {
    client: CriClient,
    opts: Arc<CriOptions>,
    exec_reaper: Arc<ExecReaper>,
}

impl CriRuntimeService {
    /// A backend for `endpoint` (`unix:///run/containerd/containerd.sock` or a plain path).
    ///
    /// Does not dial: must be called within a Tokio runtime, and only fails on a malformed
    /// endpoint (or outside a runtime).
    pub fn connect(endpoint: &str, mut opts: CriOptions) -> Result<Self, ConnectError> {
        let path = socket_path(endpoint)?;
        if opts.memory_capacity <= 0 {
            opts.memory_capacity = crate::resources::machine_memory_capacity().unwrap_or(0);
        }
        let client = CriClient::connect_lazy(&path, opts.request_timeout)?;
        Ok(Self {
            client,
            opts: Arc::new(opts),
            exec_reaper: Arc::default(),
        })
    }

    /// Records every CRI call in `metrics`: `kubelet_runtime_operations_total`,
    /// `_duration_seconds` and `_errors_total` by upstream's `operation_type`
    /// (`run_podsandbox`, `list_containers`…), as upstream's instrumented runtime service.
    #[must_use]
    pub fn with_metrics(mut self, metrics: KubeletMetrics) -> Self {
        self.client = self.client.with_metrics(metrics);
        self
    }

    /// The options this backend was built with.
    pub fn options(&self) -> &CriOptions {
        &self.opts
    }

    fn sandbox_config(&self, config: &api::PodSandboxConfig<'_>) -> cri::PodSandboxConfig {
        generate_pod_sandbox_config(config, &self.opts)
    }
}

/// The cgroup parent the sandbox of `config` gets: the engine's, else the backend's default.
fn cri_config_cgroup_parent(config: &api::ContainerConfig<'_>, opts: &CriOptions) -> String {
    if config.sandbox.cgroup_parent.is_empty() {
        opts.cgroup_parent.clone().unwrap_or_default()
    } else {
        config.sandbox.cgroup_parent.clone()
    }
}

fn sandbox_state(state: SandboxState) -> cri::PodSandboxState {
    match state {
        SandboxState::Ready => cri::PodSandboxState::SandboxReady,
        SandboxState::NotReady => cri::PodSandboxState::SandboxNotready,
    }
}

fn container_state(state: ContainerState) -> cri::ContainerState {
    match state {
        ContainerState::Created => cri::ContainerState::ContainerCreated,
        ContainerState::Running => cri::ContainerState::ContainerRunning,
        ContainerState::Exited => cri::ContainerState::ContainerExited,
        ContainerState::Unknown => cri::ContainerState::ContainerUnknown,
    }
}

fn auth_config(a: &api::AuthConfig) -> cri::AuthConfig {
    cri::AuthConfig {
        username: a.username.clone(),
        password: a.password.clone(),
        auth: a.auth.clone(),
        server_address: a.server_address.clone(),
        identity_token: a.identity_token.clone(),
        registry_token: a.registry_token.clone(),
    }
}

#[async_trait]
impl RuntimeService for CriRuntimeService {
    async fn version(&self) -> Result<Version> {
        Ok(convert::version(&self.client.version().await?))
    }

    async fn status(&self) -> Result<RuntimeStatus> {
        let resp = self.client.status().await?;
        if resp.status.is_none() {
            return Err(Error::Runtime {
                op: "Status",
                message: "runtime status is nil".into(),
            });
        }
        Ok(convert::runtime_status_with_handlers(
            resp.status.as_ref(),
            &resp.runtime_handlers,
        ))
    }

    async fn run_pod_sandbox<'a>(&self, config: &api::PodSandboxConfig<'a>) -> Result<String> {
        if config.pod.spec.as_ref().and_then(|s| s.host_users) == Some(false) {
            let status = self.client.status().await?;
            check_user_namespaces(config.pod, &status, &config.runtime_handler)
                .map_err(Error::from)?;
        }
        if !config.runtime_handler.is_empty() {
            tracing::debug!(pod = %config.pod.full_name(), runtime_handler = %config.runtime_handler, "running pod with runtime handler");
        }
        self.client
            .run_pod_sandbox(self.sandbox_config(config), &config.runtime_handler)
            .await
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        self.client.stop_pod_sandbox(id).await
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        self.client.remove_pod_sandbox(id).await
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus> {
        Ok(convert::pod_sandbox_status(
            self.client.pod_sandbox_status(id).await?,
        ))
    }

    async fn list_pod_sandbox(
        &self,
        filter: &api::PodSandboxFilter,
    ) -> Result<Vec<api::PodSandbox>> {
        let items = self
            .client
            .list_pod_sandbox(
                filter.state.map(sandbox_state),
                filter.label_selector.clone(),
            )
            .await?;
        Ok(items.into_iter().map(convert::pod_sandbox).collect())
    }

    async fn create_container<'a>(
        &self,
        sandbox_id: &str,
        config: &api::ContainerConfig<'a>,
    ) -> Result<String> {
        let cri_config = generate_container_config(config, &self.opts)?;
        let res = cri_config.linux.as_ref().and_then(|l| l.resources.as_ref());
        let cgroup_parent = cri_config_cgroup_parent(config, &self.opts);
        tracing::info!(
            pod = %config.pod.full_name(),
            container = %config.container.name,
            restart_count = config.attempt,
            cpu_shares = ?res.map(|r| r.cpu_shares),
            cpu_quota = ?res.map(|r| r.cpu_quota),
            memory_limit = ?res.map(|r| r.memory_limit_in_bytes),
            oom_score_adj = ?res.map(|r| r.oom_score_adj),
            cgroup_parent = %cgroup_parent,
            "creating container"
        );
        self.client
            .create_container(sandbox_id, cri_config, self.sandbox_config(config.sandbox))
            .await
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        self.client.start_container(id).await
    }

    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()> {
        self.client.stop_container(id, timeout_seconds).await
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        self.client.remove_container(id).await
    }

    async fn list_containers(&self, filter: &api::ContainerFilter) -> Result<Vec<api::Container>> {
        let items = self
            .client
            .list_containers(
                filter.state.map(container_state),
                filter.label_selector.clone(),
            )
            .await?;
        Ok(items.into_iter().map(convert::container).collect())
    }

    async fn container_status(&self, id: &str) -> Result<api::ContainerStatus> {
        Ok(convert::container_status(
            self.client.container_status(id).await?,
        ))
    }

    async fn reopen_container_log(&self, id: &str) -> Result<()> {
        self.client.reopen_container_log(id).await
    }

    async fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
        max_output: usize,
    ) -> Result<ExecResult> {
        Ok(
            match self.client.exec_sync(container_id, cmd, timeout).await? {
                None => ExecResult {
                    exit_code: -1,
                    timed_out: true,
                    ..Default::default()
                },
                Some(mut r) => {
                    r.stdout.truncate(max_output);
                    r.stderr.truncate(max_output);
                    ExecResult {
                        exit_code: r.exit_code,
                        stdout: r.stdout,
                        stderr: r.stderr,
                        timed_out: false,
                    }
                }
            },
        )
    }

    async fn stream_url(&self, request: &api::StreamRequest) -> Result<String> {
        self.client.stream_url(request).await
    }

    /// The session notes the container's processes now and kills what is left of the exec
    /// when it ends (`exec_reaper`: containerd 1.6 keeps an exec that ignores its stdin).
    async fn begin_exec_session(
        &self,
        id: &str,
        cmd: &[String],
    ) -> Box<dyn kubelet_core::runtime::ExecSession> {
        self.exec_reaper.begin(&self.client, id, cmd).await
    }

    async fn list_container_stats(&self, ids: &[String]) -> Result<Vec<api::ContainerStats>> {
        let stats = self.client.list_container_stats().await?;
        Ok(crate::stats::container_stats(stats, ids))
    }

    async fn list_pod_sandbox_stats(&self, ids: &[String]) -> Result<Vec<api::PodSandboxStats>> {
        let stats = self.client.list_pod_sandbox_stats().await?;
        Ok(crate::stats::sandbox_stats(stats, ids))
    }

    async fn image_fs_info(&self) -> Result<Vec<api::FilesystemUsage>> {
        let usage = self.client.image_fs_info().await?;
        Ok(usage
            .into_iter()
            .map(crate::stats::filesystem_usage)
            .collect())
    }

    async fn list_images(&self) -> Result<Vec<api::Image>> {
        let images = self.client.list_images().await?;
        Ok(images.into_iter().map(convert::image).collect())
    }

    async fn remove_image(&self, image: &str) -> Result<()> {
        let spec = cri::ImageSpec {
            image: image.to_owned(),
            ..Default::default()
        };
        self.client.remove_image(spec).await
    }

    async fn image_status(&self, image: &str) -> Result<Option<api::Image>> {
        let spec = cri::ImageSpec {
            image: image.to_owned(),
            ..Default::default()
        };
        Ok(self.client.image_status(spec).await?.map(convert::image))
    }

    async fn pull_image<'a>(&self, request: &api::PullImageRequest<'a>) -> Result<String> {
        let spec = cri::ImageSpec {
            image: request.image.to_owned(),
            annotations: request.sandbox.annotations.clone(),
            ..Default::default()
        };
        self.client
            .pull_image(
                spec,
                request.auth.map(auth_config),
                self.sandbox_config(request.sandbox),
            )
            .await
    }
}
