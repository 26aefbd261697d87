//! Pod cgroups: the `kubepods` hierarchy the kubelet puts pods in, and the cgroup parent it
//! passes to the runtime.
//!
//! Mirrors upstream `pkg/kubelet/cm` (`pod_container_manager_linux.go`,
//! `qos_container_manager_linux.go`, `cgroup_manager_linux.go`, `helpers_linux.go`) for the
//! cgroupfs driver: Guaranteed pods live in `<root>/kubepods/pod<uid>`, Burstable pods in
//! `<root>/kubepods/burstable/pod<uid>`, BestEffort pods in
//! `<root>/kubepods/besteffort/pod<uid>`. [`cgroupfs::Cgroupfs`] implements it on cgroup v1
//! and v2, [`systemd::Systemd`] is the systemd driver (slices through D-Bus, named by
//! [`cgroup_name`]), [`Noop`] is the `--cgroups-per-qos=false` manager, and
//! `FakePodContainerManager` (feature `test-util`) records what the kubelet asked for.

pub mod cgroup_name;
pub mod cgroupfs;
#[cfg(any(test, feature = "test-util"))]
mod fake;
pub mod helpers;
pub mod node_allocatable;
pub mod systemd;

use k8s_openapi::api::core::v1::Pod;

use crate::PodExt;
use crate::pod::PodUid;
use crate::qos::{BEST_EFFORT, BURSTABLE, pod_qos};

#[cfg(any(test, feature = "test-util"))]
pub use fake::FakePodContainerManager;

/// Errors of a [`PodContainerManager`]. All are retryable: the next sync or housekeeping
/// tries again.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A cgroup file or directory could not be read, written, created or removed.
    #[error("cgroup {path}: {op}: {source}")]
    Io {
        /// The path.
        path: std::path::PathBuf,
        /// What was attempted, e.g. `create`, `write cpu.shares`.
        op: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The cgroup layout of the node is not supported (names what was found).
    #[error("unsupported cgroup setup: {0}")]
    Unsupported(String),
    /// A cgroup that must exist does not (upstream `enforceExistingCgroup`: the
    /// `--kube-reserved-cgroup` and `--system-reserved-cgroup` are created by others).
    #[error("{0:?} cgroup does not exist")]
    Missing(String),
    /// A call to systemd over D-Bus failed or its job did not finish `done` (systemd driver).
    #[error("systemd unit {unit}: {op}: {source}")]
    Systemd {
        /// The unit, e.g. `kubepods-burstable.slice`.
        unit: String,
        /// The call, e.g. `StartTransientUnit`.
        op: String,
        /// What D-Bus or systemd answered.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Name of the top-level pods cgroup.
pub const KUBEPODS: &str = "kubepods";

/// The pod cgroup name segment of a pod UID (upstream `GetPodCgroupNameSuffix`).
pub fn pod_cgroup_suffix(uid: &PodUid) -> String {
    format!("pod{uid}")
}

/// Path segments, below the cgroup root, of the QoS cgroup `pod` belongs in: `kubepods`,
/// `kubepods/burstable` or `kubepods/besteffort`.
pub fn qos_cgroup_segments(pod: &Pod) -> Vec<&'static str> {
    match pod_qos(pod) {
        BURSTABLE => vec![KUBEPODS, "burstable"],
        BEST_EFFORT => vec![KUBEPODS, "besteffort"],
        _ => vec![KUBEPODS],
    }
}

/// Joins a cgroup root (`/` or `/custom`) with segments into a cgroupfs name
/// (`/custom/kubepods/burstable`).
pub fn cgroupfs_name(root: &str, segments: &[&str]) -> String {
    let mut name = root.trim_end_matches('/').to_owned();
    for s in segments {
        name.push('/');
        name.push_str(s);
    }
    if name.is_empty() {
        name.push('/');
    }
    name
}

/// Manages the per-pod cgroups (upstream `PodContainerManager` plus the QoS containers).
///
/// Methods other than [`pod_cgroup_parent`](Self::pod_cgroup_parent) touch the cgroup
/// filesystem synchronously (a handful of small file operations each): async code calls
/// them through [`crate::blocking::unblock`], never on an async worker (issue 16).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
pub trait PodContainerManager: Send + Sync {
    /// The cgroup parent to pass to the runtime for `pod`'s sandbox (upstream
    /// `GetPodContainerName`), e.g. `/kubepods/burstable/pod<uid>`. Empty lets the runtime
    /// choose.
    fn pod_cgroup_parent(&self, pod: &Pod) -> String;

    /// Creates the pod's cgroup with the limits of
    /// [`helpers::resource_config_for_pod`] unless it exists (upstream `EnsureExists`).
    fn ensure_exists(&self, pod: &Pod) -> Result<()>;

    /// Removes the cgroup of pod `uid` wherever it is; absent is success (upstream
    /// `Destroy`). Fails while processes still run in it.
    fn destroy(&self, uid: &PodUid) -> Result<()>;

    /// UIDs of every pod cgroup that exists (upstream `GetAllPodsFromCgroups`).
    fn pod_cgroups(&self) -> Result<Vec<PodUid>>;

    /// Whether the pod's cgroup exists (upstream `Exists`).
    fn pod_cgroup_exists(&self, pod: &Pod) -> bool;

    /// Sets the QoS cgroups' cpu shares (upstream `UpdateCgroups`): `burstable` gets
    /// `burstable_cpu_shares`, the shares of all active Burstable pods' cpu requests
    /// ([`helpers::burstable_cpu_shares`]), `besteffort` the minimum. The caller sums the
    /// requests where the pods are, without copying them: a burst of N new pods sizes the
    /// QoS cgroups N times (issue 17).
    fn update_qos_cgroups(&self, burstable_cpu_shares: u64) -> Result<()>;
}

/// The manager with `--cgroups-per-qos=false`: pods go straight into the cgroup root.
#[derive(Clone, Debug, Default)]
pub struct Noop {
    /// The cgroup parent of every pod (`--cgroup-root`; empty lets the runtime choose).
    pub cgroup_root: String,
}

impl PodContainerManager for Noop {
    fn pod_cgroup_parent(&self, _pod: &Pod) -> String {
        self.cgroup_root.clone()
    }
    fn ensure_exists(&self, _pod: &Pod) -> Result<()> {
        Ok(())
    }
    fn destroy(&self, _uid: &PodUid) -> Result<()> {
        Ok(())
    }
    fn pod_cgroups(&self) -> Result<Vec<PodUid>> {
        Ok(Vec::new())
    }
    fn pod_cgroup_exists(&self, _pod: &Pod) -> bool {
        true
    }
    fn update_qos_cgroups(&self, _burstable_cpu_shares: u64) -> Result<()> {
        Ok(())
    }
}

/// The pod's cgroupfs name below `root` (upstream `GetPodContainerName` with the cgroupfs
/// driver).
pub fn pod_cgroupfs_name(root: &str, pod: &Pod) -> String {
    let suffix = pod_cgroup_suffix(&pod.uid());
    let mut segments = qos_cgroup_segments(pod);
    segments.push(&suffix);
    cgroupfs_name(root, &segments)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    #[test]
    fn names() {
        let p = pod("web");
        assert_eq!(
            pod_cgroupfs_name("/", &p),
            "/kubepods/besteffort/poduid-web"
        );
        assert_eq!(
            pod_cgroupfs_name("/custom/", &p),
            "/custom/kubepods/besteffort/poduid-web"
        );
        assert_eq!(cgroupfs_name("/", &[]), "/");
        assert_eq!(
            Noop {
                cgroup_root: "/x".into()
            }
            .pod_cgroup_parent(&p),
            "/x"
        );
    }
}
