//! The volume manager contract (upstream `pkg/kubelet/volumemanager/volume_manager.go`).
//!
//! The default implementation lives in `kubelet-volumes`; the pod workers only see this trait.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;

use crate::pod::PodUid;

/// Errors from a [`VolumeManager`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// One volume could not be set up; reported as `FailedMount` in the waiting message of the pod's `ContainerCreating` containers. Retried on the
    /// next sync.
    #[error("volume {volume:?}: {reason}")]
    Mount {
        /// The volume's name in `spec.volumes`.
        volume: String,
        /// What went wrong.
        reason: String,
    },
    /// The volumes were not ready in time. Retried on the next sync.
    #[error("timed out waiting for volumes {0:?}")]
    Timeout(Vec<String>),
    /// Filesystem error while setting up or tearing down.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A volume set up for a pod: where it is on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountedVolume {
    /// The volume's directory (or file) on the host.
    pub host_path: PathBuf,
    /// `true` when the plugin requires read-only mounts (e.g. secrets are not; a read-only
    /// hostPath source may be).
    pub read_only: bool,
    /// An emptyDir's `sizeLimit` in bytes (disk or `medium: Memory`), `None` for other
    /// volumes or without a limit. Recorded only: nothing enforces it yet. An eviction
    /// manager reads it through [`VolumeManager::mounted_volumes`] and evicts a pod whose
    /// emptyDir usage exceeds it (upstream `emptyDirLimitEviction`). A Memory emptyDir is
    /// additionally capped by its tmpfs size. After a kubelet restart it is known again once
    /// the pod has been synced.
    pub size_limit_bytes: Option<u64>,
}

/// Sets up and tears down pod volumes.
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait VolumeManager: Send + Sync + 'static {
    /// Sets up every volume of `pod` and returns when they are all ready (upstream
    /// `WaitForAttachAndMount`). Cancel safe: a dropped call is resumed by the next one.
    async fn wait_for_attach_and_mount(&self, pod: &Pod) -> Result<()>;

    /// The volumes set up for the pod, by volume name (upstream `GetMountedVolumesForPod`).
    fn mounted_volumes(&self, uid: &PodUid) -> HashMap<String, MountedVolume>;

    /// Makes `sub_path` of the pod's set-up volume `volume` safe to mount into `container`
    /// (the `index`-th volumeMount) and returns the host path to mount (upstream
    /// `subpath.PrepareSafeSubpath`). The path must stay inside the volume even through
    /// symlinks. The default refuses subPaths. Implementations make their bind mount off
    /// the async workers (issue 16).
    async fn prepare_sub_path(
        &self,
        pod: &Pod,
        container: &str,
        index: usize,
        volume: &str,
        sub_path: &str,
    ) -> Result<PathBuf> {
        let _ = (pod, container, index, sub_path);
        Err(Error::Mount {
            volume: volume.to_owned(),
            reason: "subPath is not supported by this volume manager".into(),
        })
    }

    /// Tears down the volumes of a terminated pod (upstream `WaitForUnmount` + cleanup).
    async fn unmount_pod(&self, uid: &PodUid) -> Result<()>;

    /// Removes volume directories of pods not in `active` (housekeeping).
    async fn cleanup_orphaned(&self, active: &HashSet<PodUid>) -> Result<()>;
}
