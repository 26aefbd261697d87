//! [`RemoteRuntime`]: the kubelet's [`Runtime`] over CRI v1 on a unix socket.
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/kuberuntime_manager.go`
//! (`kubeGenericRuntimeManager`: `Version`, `Status`, `GetPods`, `GetPodStatus`, `SyncPod`,
//! `KillPod`) over `pkg/kubelet/cri/remote`. The sync steps live in [`crate::actions`] (what
//! to do) and the private `sync`/`kill` modules (doing it).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use kubelet_core::backoff::Backoff;
use kubelet_core::pod::PodUid;
use kubelet_core::runtime::{
    Error, ExecResult, PodStatus, PodSyncResult, Result, RunningPod, Runtime, RuntimeHelper,
    RuntimeStatus, Version,
};

use crate::client::{CriClient, socket_path};
use crate::convert;
use crate::error::{ConnectError, is_not_found};
use crate::labels::pod_uid_selector;

/// Upstream's default `--runtime-request-timeout`.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Settings of a [`RemoteRuntime`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Deadline of each CRI call (upstream `--runtime-request-timeout`, default 2 min).
    /// `StopContainer` gets this plus the grace period; `PullImage` has no deadline.
    pub request_timeout: Duration,
    /// Root of the pod log directories (upstream `--pod-logs-dir`, default `/var/log/pods`).
    pub pod_logs_dir: PathBuf,
    /// The host resolv.conf: the base of every pod's DNS config, all of it for `Default`
    /// pods (upstream `--resolv-conf`, default `/etc/resolv.conf`; empty for none).
    pub resolv_conf: PathBuf,
    /// This node's name.
    pub node_name: String,
    /// Parent cgroup of the pod sandboxes when the runtime helper gives none; `None` lets
    /// the runtime choose.
    pub cgroup_parent: Option<String>,
    /// Where `Localhost` seccomp profiles live (upstream `<root-dir>/seccomp`).
    pub seccomp_profile_root: PathBuf,
    /// The kubelet's root directory (`--root-dir`): termination message files live under
    /// `<root>/pods/<uid>/containers/<name>/`. `None`: no termination message file is mounted.
    pub root_dir: Option<PathBuf>,
    /// Cluster DNS servers and domain (upstream `--cluster-dns`, `--cluster-domain`).
    pub cluster_dns: crate::dns::ClusterDns,
    /// Node IPs, for the localhost nameserver of `Default` pods when `resolv_conf` is empty.
    pub node_ips: Vec<String>,
    /// The machine's memory in bytes, for Burstable `oom_score_adj`; 0 reads
    /// `/proc/meminfo` at connect.
    pub memory_capacity: i64,
    /// CPU limit enforcement (upstream `--cpu-cfs-quota`, `--cpu-cfs-quota-period`).
    pub cfs_quota: crate::resources::CfsQuota,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            node_name: String::new(),
            cgroup_parent: None,
            seccomp_profile_root: PathBuf::from("/var/lib/kubelet/seccomp"),
            root_dir: None,
            cluster_dns: Default::default(),
            node_ips: Vec::new(),
            memory_capacity: 0,
            cfs_quota: Default::default(),
        }
    }
}

impl Options {
    /// Sets [`Options::request_timeout`].
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets [`Options::pod_logs_dir`].
    #[must_use]
    pub fn with_pod_logs_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.pod_logs_dir = dir.into();
        self
    }

    /// Sets [`Options::resolv_conf`].
    #[must_use]
    pub fn with_resolv_conf(mut self, path: impl Into<PathBuf>) -> Self {
        self.resolv_conf = path.into();
        self
    }

    /// Sets [`Options::node_name`].
    #[must_use]
    pub fn with_node_name(mut self, name: impl Into<String>) -> Self {
        self.node_name = name.into();
        self
    }

    /// Sets [`Options::root_dir`].
    #[must_use]
    pub fn with_root_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.root_dir = Some(dir.into());
        self
    }

    /// Sets [`Options::cluster_dns`].
    #[must_use]
    pub fn with_cluster_dns(mut self, dns: crate::dns::ClusterDns) -> Self {
        self.cluster_dns = dns;
        self
    }

    /// Sets [`Options::node_ips`].
    #[must_use]
    pub fn with_node_ips(mut self, ips: Vec<String>) -> Self {
        self.node_ips = ips;
        self
    }

    /// Sets [`Options::memory_capacity`].
    #[must_use]
    pub fn with_memory_capacity(mut self, bytes: i64) -> Self {
        self.memory_capacity = bytes;
        self
    }

    /// Sets [`Options::cfs_quota`].
    #[must_use]
    pub fn with_cfs_quota(mut self, cfs: crate::resources::CfsQuota) -> Self {
        self.cfs_quota = cfs;
        self
    }

    /// Sets [`Options::cgroup_parent`].
    #[must_use]
    pub fn with_cgroup_parent(mut self, cgroup: impl Into<String>) -> Self {
        self.cgroup_parent = Some(cgroup.into());
        self
    }

    /// Sets [`Options::seccomp_profile_root`].
    #[must_use]
    pub fn with_seccomp_profile_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.seccomp_profile_root = dir.into();
        self
    }
}

/// A [`Runtime`] talking CRI v1 to containerd, CRI-O or any CRI runtime over a unix socket
/// (upstream `kubeGenericRuntimeManager`). Cheap to clone; clones share the connection.
///
/// The connection is lazy: a runtime that is down gives [`Error::Unavailable`] on each call,
/// and calls succeed again as soon as the socket accepts connections.
#[doc(alias = "kubeGenericRuntimeManager")]
#[derive(Clone, Debug)]
pub struct RemoteRuntime {
    pub(crate) client: CriClient,
    pub(crate) opts: Arc<Options>,
    /// Liveness and startup results: a failed container is killed and restarted.
    pub(crate) probes: Option<kubelet_core::probe::Results>,
    /// Image pull backoff windows (`ErrImagePull`, then `ImagePullBackOff`).
    pub(crate) image_backoff: Arc<crate::pull_backoff::ImagePullBackoff>,
    /// Containers whose preStop hook has been started by a kill that has not finished.
    pub(crate) pre_stop_started: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl RemoteRuntime {
    /// A runtime for `endpoint` (`unix:///run/containerd/containerd.sock` or a plain path).
    ///
    /// Does not dial: must be called within a Tokio runtime, and only fails on a malformed
    /// endpoint (or outside a runtime).
    pub fn connect(endpoint: &str, mut opts: Options) -> Result<Self, ConnectError> {
        let path = socket_path(endpoint)?;
        if opts.memory_capacity <= 0 {
            opts.memory_capacity = crate::resources::machine_memory_capacity().unwrap_or(0);
        }
        let client = CriClient::connect_lazy(&path, opts.request_timeout)?;
        Ok(Self {
            client,
            opts: Arc::new(opts),
            probes: None,
            image_backoff: Arc::default(),
            pre_stop_started: Arc::default(),
        })
    }

    /// Makes `sync_pod` restart containers whose liveness or startup probe failed (the
    /// probe manager writes these results).
    #[must_use]
    pub fn with_probe_results(mut self, results: kubelet_core::probe::Results) -> Self {
        self.probes = Some(results);
        self
    }

    /// Uses `backoff` for image pulls instead of upstream's 10 s doubling to 300 s.
    #[must_use]
    pub fn with_image_pull_backoff(
        mut self,
        backoff: crate::pull_backoff::ImagePullBackoff,
    ) -> Self {
        self.image_backoff = Arc::new(backoff);
        self
    }

    /// The options this runtime was built with.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Status of one pod's sandboxes and containers (see [`Runtime::get_pod_status`]).
    pub(crate) async fn pod_status(
        &self,
        uid: &PodUid,
        name: &str,
        namespace: &str,
    ) -> Result<PodStatus> {
        let selector = pod_uid_selector(uid);
        let (mut sandboxes, containers) = tokio::try_join!(
            self.client.list_pod_sandbox(None, selector.clone()),
            self.client.list_containers(None, selector),
        )?;
        sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));

        let mut status = PodStatus {
            uid: uid.clone(),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            ..Default::default()
        };
        for (idx, s) in sandboxes.iter().enumerate() {
            if idx > 0 {
                // Older sandboxes only matter for their state and attempt, which the list has.
                status.sandboxes.push(convert::sandbox_status_from_list(s));
                continue;
            }
            match self.client.pod_sandbox_status(&s.id).await {
                Ok(st) => {
                    let st = convert::sandbox_status(&st);
                    if st.state == kubelet_core::runtime::SandboxState::Ready {
                        status.ips = st.ips.clone();
                    }
                    status.sandboxes.push(st);
                }
                // Removed between the list and the status call: as if never listed.
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }

        let statuses = join_all(
            containers
                .iter()
                .map(|c| self.client.container_status(&c.id)),
        )
        .await;
        for st in statuses {
            match st {
                Ok(st) => {
                    let mut converted = convert::container_status(&st);
                    if converted.state == kubelet_core::runtime::ContainerState::Exited
                        && let Some(message) = crate::termination::termination_message(
                            &st,
                            converted.exit_code,
                            &converted.reason,
                        )
                        .await
                    {
                        if !converted.message.is_empty() {
                            converted.message.push_str(": ");
                        }
                        converted.message.push_str(&message);
                    }
                    status.containers.push(converted);
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
        status.containers.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.restart_count.cmp(&a.restart_count))
        });
        Ok(status)
    }
}

#[async_trait]
impl Runtime for RemoteRuntime {
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
        Ok(convert::runtime_status(resp.status.as_ref()))
    }

    async fn get_pods(&self, all: bool) -> Result<Vec<RunningPod>> {
        let (sandbox_state, container_state) = if all {
            (None, None)
        } else {
            (
                Some(cri::PodSandboxState::SandboxReady),
                Some(cri::ContainerState::ContainerRunning),
            )
        };
        let (sandboxes, containers) = tokio::try_join!(
            self.client
                .list_pod_sandbox(sandbox_state, Default::default()),
            self.client
                .list_containers(container_state, Default::default()),
        )?;
        Ok(convert::group_pods(sandboxes, containers))
    }

    async fn get_pod_status(&self, uid: &PodUid, name: &str, namespace: &str) -> Result<PodStatus> {
        self.pod_status(uid, name, namespace).await
    }

    async fn sync_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        helper: Arc<dyn RuntimeHelper>,
        backoff: &Backoff,
    ) -> Result<PodSyncResult> {
        self.sync(pod, status, helper.as_ref(), backoff).await
    }

    async fn kill_pod<'a>(
        &self,
        pod: Option<&'a Pod>,
        running: &RunningPod,
        grace_period_seconds: Option<i64>,
    ) -> Result<()> {
        self.kill(pod, running, grace_period_seconds).await
    }

    async fn delete_container(&self, id: &str) -> Result<()> {
        self.remove_container_and_log(id).await
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

    async fn remove_pod(&self, running: &RunningPod) -> Result<()> {
        self.remove(running).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_defaults_and_setters() {
        let o = Options::default();
        assert_eq!(o.request_timeout, Duration::from_secs(120));
        assert_eq!(o.pod_logs_dir, PathBuf::from("/var/log/pods"));
        assert_eq!(o.resolv_conf, PathBuf::from("/etc/resolv.conf"));
        let o = o
            .with_request_timeout(Duration::from_secs(5))
            .with_node_name("node-1")
            .with_cgroup_parent("/kubepods");
        assert_eq!(o.request_timeout, Duration::from_secs(5));
        assert_eq!(o.node_name, "node-1");
        assert_eq!(o.cgroup_parent.as_deref(), Some("/kubepods"));
    }

    #[test]
    fn connect_rejects_tcp() {
        let err = RemoteRuntime::connect("tcp://localhost:1", Options::default()).expect_err("tcp");
        assert!(matches!(err, ConnectError::UnsupportedEndpoint(_)));
    }

    #[tokio::test]
    async fn connect_is_lazy() {
        let rt = RemoteRuntime::connect("unix:///nonexistent/cri.sock", Options::default())
            .expect("lazy connect");
        assert_eq!(rt.options().pod_logs_dir, PathBuf::from("/var/log/pods"));
        let err = rt.version().await.expect_err("down");
        assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    }
}
