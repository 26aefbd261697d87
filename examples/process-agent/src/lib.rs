//! [`ProcessRuntimeService`]: a [`RuntimeService`] that runs each container as a host
//! process — no image, no sandbox, no isolation. The pod engine of `kubelet-core` drives it
//! and brings init containers, restarts with CrashLoopBackOff, hooks, probes, graceful
//! termination and termination messages; the bookkeeping and the host-process plumbing are
//! `kubelet-core`'s [`ContainerStore`] and its `process` helpers.

use std::time::Duration;

use async_trait::async_trait;
use kubelet_core::kuberuntime::api::{
    Container, ContainerConfig, ContainerFilter, ContainerStatus,
};
use kubelet_core::kuberuntime::store::StopSignal;
use kubelet_core::kuberuntime::{ContainerStore, RuntimeService};
use kubelet_core::runtime::{ExecResult, Result, RuntimeStatus, Version};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Runs containers as host processes, each in its own process group. Mounts are **not
/// applied**: a process sees the host filesystem, so each mount is reported back with
/// `host_path == container_path` (a termination message written at the container's
/// `terminationMessagePath` is read from that host path).
#[derive(Clone, Debug, Default)]
pub struct ProcessRuntimeService {
    store: ContainerStore<u32>,
}

#[async_trait]
impl RuntimeService for ProcessRuntimeService {
    async fn version(&self) -> Result<Version> {
        Ok(Version {
            runtime_name: "process".into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            runtime_api_version: "v1".into(),
        })
    }

    async fn status(&self) -> Result<RuntimeStatus> {
        Ok(RuntimeStatus {
            runtime_ready: true,
            network_ready: true,
            message: String::new(),
            handlers: Vec::new(),
        })
    }

    fn has_sandboxes(&self) -> bool {
        false
    }

    async fn create_container<'a>(
        &self,
        sandbox_id: &str,
        config: &ContainerConfig<'a>,
    ) -> Result<String> {
        Ok(self.store.create_on_host(sandbox_id, config))
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        self.store.start_process(id).await
    }

    /// SIGTERM to the process group, SIGKILL to what is left of it after `timeout_seconds`.
    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()> {
        let signal_group = |&pid: &u32, signal: StopSignal| {
            let group = Pid::from_raw(pid as i32);
            let _ = killpg(group, Signal::try_from(signal.number()).ok());
        };
        self.store.stop(id, timeout_seconds, signal_group).await
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        let _not_found = self.stop_container(id, 0).await; // CRI: removing twice succeeds
        self.store.remove(id);
        Ok(())
    }

    async fn list_containers(&self, filter: &ContainerFilter) -> Result<Vec<Container>> {
        Ok(self.store.list(filter))
    }

    async fn container_status(&self, id: &str) -> Result<ContainerStatus> {
        self.store.status(id)
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
        max_output: usize,
    ) -> Result<ExecResult> {
        self.store.record(id)?.exec(cmd, timeout, max_output).await
    }
}
