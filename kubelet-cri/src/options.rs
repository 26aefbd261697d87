//! [`Options`] and [`connect`]: the pod engine over CRI in one call, with the settings of
//! both halves (upstream's `NewKubeGenericRuntimeManager` over `NewRemoteRuntimeService`).

use std::path::PathBuf;
use std::time::Duration;

use kubelet_core::kuberuntime::{self, ClusterDns, KubeRuntimeManager};
use kubelet_core::metrics::KubeletMetrics;

use crate::RemoteRuntime;
use crate::error::ConnectError;
use crate::resources::CfsQuota;
use crate::service::{CriOptions, CriRuntimeService};

/// Settings of a [`RemoteRuntime`]: the CRI backend's and the engine's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The CRI backend's settings.
    pub cri: CriOptions,
    /// The pod engine's settings.
    pub engine: kuberuntime::Options,
}

impl Options {
    /// Sets [`CriOptions::request_timeout`].
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.cri = self.cri.with_request_timeout(timeout);
        self
    }

    /// Sets [`CriOptions::cgroup_parent`].
    #[must_use]
    pub fn with_cgroup_parent(mut self, cgroup: impl Into<String>) -> Self {
        self.cri = self.cri.with_cgroup_parent(cgroup);
        self
    }

    /// Sets [`CriOptions::seccomp_profile_root`].
    #[must_use]
    pub fn with_seccomp_profile_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cri = self.cri.with_seccomp_profile_root(dir);
        self
    }

    /// Sets [`CriOptions::seccomp_default`].
    #[must_use]
    pub fn with_seccomp_default(mut self, on: bool) -> Self {
        self.cri = self.cri.with_seccomp_default(on);
        self
    }

    /// Sets [`kuberuntime::Options::sysctls`].
    #[must_use]
    pub fn with_sysctls(mut self, allowlist: kubelet_core::sysctl::Allowlist) -> Self {
        self.engine = self.engine.with_sysctls(allowlist);
        self
    }

    /// Sets [`CriOptions::memory_capacity`].
    #[must_use]
    pub fn with_memory_capacity(mut self, bytes: i64) -> Self {
        self.cri = self.cri.with_memory_capacity(bytes);
        self
    }

    /// Sets [`CriOptions::cfs_quota`].
    #[must_use]
    pub fn with_cfs_quota(mut self, cfs: CfsQuota) -> Self {
        self.cri = self.cri.with_cfs_quota(cfs);
        self
    }

    /// Sets [`kuberuntime::Options::pod_logs_dir`].
    #[must_use]
    pub fn with_pod_logs_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.engine = self.engine.with_pod_logs_dir(dir);
        self
    }

    /// Sets [`kuberuntime::Options::container_log_links_dir`].
    #[must_use]
    pub fn with_container_log_links_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.engine = self.engine.with_container_log_links_dir(dir);
        self
    }

    /// Sets [`kuberuntime::Options::resolv_conf`].
    #[must_use]
    pub fn with_resolv_conf(mut self, path: impl Into<PathBuf>) -> Self {
        self.engine = self.engine.with_resolv_conf(path);
        self
    }

    /// Sets [`kuberuntime::Options::node_name`].
    #[must_use]
    pub fn with_node_name(mut self, name: impl Into<String>) -> Self {
        self.engine = self.engine.with_node_name(name);
        self
    }

    /// Sets [`kuberuntime::Options::root_dir`].
    #[must_use]
    pub fn with_root_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.engine = self.engine.with_root_dir(dir);
        self
    }

    /// Sets [`kuberuntime::Options::cluster_dns`].
    #[must_use]
    pub fn with_cluster_dns(mut self, dns: ClusterDns) -> Self {
        self.engine = self.engine.with_cluster_dns(dns);
        self
    }

    /// Sets [`kuberuntime::Options::node_ips`].
    #[must_use]
    pub fn with_node_ips(mut self, ips: Vec<String>) -> Self {
        self.engine = self.engine.with_node_ips(ips);
        self
    }
}

/// The pod engine over CRI at `endpoint` (`unix:///run/containerd/containerd.sock` or a
/// plain path). Add probe results, image pull backoff and an httpGet-capable hook runner
/// with the engine's builder methods.
///
/// Does not dial: must be called within a Tokio runtime, and only fails on a malformed
/// endpoint (or outside a runtime).
pub fn connect(endpoint: &str, opts: Options) -> Result<RemoteRuntime, ConnectError> {
    connect_with_metrics(endpoint, opts, KubeletMetrics::default())
}

/// As [`connect`], recording every CRI call in `metrics` (`kubelet_runtime_operations_*`,
/// see [`CriRuntimeService::with_metrics`]) and the engine's pod and container starts
/// (`kubelet_started_*`, see `KubeRuntimeManager::with_metrics`).
pub fn connect_with_metrics(
    endpoint: &str,
    opts: Options,
    metrics: KubeletMetrics,
) -> Result<RemoteRuntime, ConnectError> {
    let service = CriRuntimeService::connect(endpoint, opts.cri)?.with_metrics(metrics.clone());
    Ok(KubeRuntimeManager::new(service, opts.engine).with_metrics(metrics))
}

#[cfg(test)]
mod tests {
    use kubelet_core::runtime::{Error, Runtime};

    use super::*;

    #[test]
    fn options_defaults_and_setters() {
        let o = Options::default();
        assert_eq!(o.cri.request_timeout, Duration::from_secs(120));
        assert_eq!(o.engine.pod_logs_dir, PathBuf::from("/var/log/pods"));
        assert_eq!(o.engine.resolv_conf, PathBuf::from("/etc/resolv.conf"));
        let o = o
            .with_request_timeout(Duration::from_secs(5))
            .with_node_name("node-1")
            .with_cgroup_parent("/kubepods");
        assert_eq!(o.cri.request_timeout, Duration::from_secs(5));
        assert_eq!(o.engine.node_name, "node-1");
        assert_eq!(o.cri.cgroup_parent.as_deref(), Some("/kubepods"));
    }

    #[test]
    fn connect_rejects_tcp() {
        let err = connect("tcp://localhost:1", Options::default()).expect_err("tcp");
        assert!(matches!(err, ConnectError::UnsupportedEndpoint(_)));
    }

    #[tokio::test]
    async fn connect_is_lazy() {
        let rt = connect("unix:///nonexistent/cri.sock", Options::default()).expect("lazy connect");
        assert_eq!(rt.options().pod_logs_dir, PathBuf::from("/var/log/pods"));
        let err = rt.version().await.expect_err("down");
        assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    }
}
