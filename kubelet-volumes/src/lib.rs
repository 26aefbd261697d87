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
//! Other volume types are refused with a clear `FailedMount` message. The helpers return this
//! crate's [`Error`], which names the path, volume source or object and what is wrong; the
//! manager hands it to the pod workers as a [`kubelet_core::volume::Error`].
//!
//! File modes and owners follow upstream ([`ownership`]): configMap, secret, downwardAPI and
//! projected files get `defaultMode` (0644 unless the pod says otherwise) or the item's
//! `mode`; a projected service-account token is `0600` and owned by the pods' single
//! `runAsUser` when the pod sets one or an `fsGroup` (which widens it to `0640`). Secret,
//! downwardAPI and projected volumes are tmpfs mounts, mounted read-only into containers, and
//! the kubelet's `pods/<uid>` and `pods/<uid>/volumes` directories are `0750`, so no other
//! host user can reach them.
//!
//! An emptyDir's `sizeLimit` is recorded, not enforced: it is exposed as
//! [`MountedVolume::size_limit_bytes`](kubelet_core::volume::MountedVolume::size_limit_bytes)
//! through [`VolumeManager::mounted_volumes`](kubelet_core::volume::VolumeManager::mounted_volumes)
//! for an eviction manager.
//!
//! ```no_run
//! use std::sync::Arc;
//! use kubelet_core::volume::VolumeManager;
//! use kubelet_volumes::DefaultVolumeManager;
//! let vm: Arc<dyn VolumeManager> = Arc::new(DefaultVolumeManager::new("/var/lib/kubelet".into()));
//! ```

// Blocking calls are banned on async workers (clippy.toml, issue 16); unit tests may block.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod atomic_writer;
mod error;
mod host_path;
mod manager;
pub mod mount;
pub mod ownership;
pub mod projection;
pub mod subpath;
pub mod token;
mod volume_dirs;

pub use error::{Error, ObjectKind, Result};
pub use host_path::check_host_path;
pub use manager::DefaultVolumeManager;
