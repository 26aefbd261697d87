//! The volume manager of a Rust kubelet: sets up pod volumes before containers start and tears
//! them down after the pod terminates.
//!
//! Mirrors upstream `pkg/kubelet/volumemanager` (the desired/actual state of world kept here
//! as a per-pod map of set-up volumes) and the in-tree plugins `pkg/volume/emptydir` and
//! `pkg/volume/hostpath`. Volumes live where upstream puts them:
//! `<root-dir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>`.
//!
//! Supported: `emptyDir` (disk, or `medium: Memory` as a sized tmpfs), `hostPath` with every
//! `type` check, `configMap`, `secret`, `downwardAPI` and `projected` (configMap, secret,
//! downwardAPI, serviceAccountToken sources) written by an [`atomic_writer`] from a
//! [`kubelet_core::objects::ObjectSource`], and safe `subPath` mounts ([`subpath`]).
//! Other volume types are refused with a clear `FailedMount` reason.
//!
//! ```no_run
//! use std::sync::Arc;
//! use kubelet_core::volume::VolumeManager;
//! use kubelet_volumes::DefaultVolumeManager;
//! let vm: Arc<dyn VolumeManager> = Arc::new(DefaultVolumeManager::new("/var/lib/kubelet".into()));
//! ```

pub mod atomic_writer;
mod host_path;
mod manager;
pub mod mount;
pub mod ownership;
pub mod projection;
pub mod subpath;
pub mod token;

pub use host_path::check_host_path;
pub use manager::DefaultVolumeManager;
