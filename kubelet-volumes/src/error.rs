//! The errors of this crate. The volume manager reports them to the pod workers as
//! [`kubelet_core::volume::Error`]s, whose messages end up in the `FailedMount` waiting
//! message of the pod's containers, so every variant names the path, volume source or object
//! it is about, in upstream's words where upstream has them.

use std::ffi::OsString;
use std::path::PathBuf;

use nix::errno::Errno;

use crate::atomic_writer::PathError;

/// Errors of the mount helpers, hostPath checks, atomic writer, projections and subPaths.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `mount(2)` or `umount(2)` call failed; `action` says which (`mounting tmpfs on`,
    /// `bind-mounting onto`, `unmounting`).
    #[error("{action} {}: {source}", path.display())]
    Mount {
        /// What was being done.
        action: &'static str,
        /// The mount point.
        path: PathBuf,
        /// The system call's error.
        #[source]
        source: Errno,
    },
    /// A filesystem call on `path` failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Removal stopped at an entry of another filesystem (a mount that is still there).
    #[error(
        "refusing to remove {}: it is on another filesystem (still mounted?)",
        path.display()
    )]
    OtherFilesystem {
        /// The entry on the other filesystem.
        path: PathBuf,
    },
    /// A hostPath is not of the volume's `type`; `expected` is e.g. `a directory`.
    #[error("hostPath type check failed: {} is not {expected}", path.display())]
    HostPathType {
        /// The hostPath.
        path: PathBuf,
        /// What it should have been.
        expected: &'static str,
    },
    /// Creating a `DirectoryOrCreate`/`FileOrCreate` hostPath failed; `what` is e.g.
    /// `hostPath directory`.
    #[error("creating {what} {}: {source}", path.display())]
    HostPathCreate {
        /// What was being created.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A hostPath `type` this kubelet does not know.
    #[error("invalid hostPath type {0:?}")]
    HostPathKind(String),
    /// A payload path (a configMap/secret item `path`, a downwardAPI item) is not allowed.
    #[error(transparent)]
    PayloadPath(#[from] PathError),
    /// The object source could not answer for a configMap or secret.
    #[error("couldn't get {kind} {namespace}/{name}: {source}")]
    GetObject {
        /// `configMap` or `secret`.
        kind: ObjectKind,
        /// The pod's namespace.
        namespace: String,
        /// The object's name.
        name: String,
        /// The source's error.
        #[source]
        source: kubelet_core::objects::Error,
    },
    /// A configMap or secret that the volume does not mark `optional` does not exist.
    #[error("couldn't get {kind} {namespace}/{name}: {} {name:?} not found", kind.resource())]
    ObjectNotFound {
        /// `configMap` or `secret`.
        kind: ObjectKind,
        /// The pod's namespace.
        namespace: String,
        /// The object's name.
        name: String,
    },
    /// An item of a configMap or secret volume names a key the object does not have.
    #[error("{kind} {name:?} references non-existent key {key:?}")]
    MissingKey {
        /// `configMap` or `secret`.
        kind: ObjectKind,
        /// The object's name.
        name: String,
        /// The missing key.
        key: String,
    },
    /// The token of a projected service-account token could not be fetched.
    #[error("fetching token for service account {service_account:?}: {source}")]
    Token {
        /// The service account.
        service_account: String,
        /// The source's error.
        #[source]
        source: kubelet_core::objects::Error,
    },
    /// The object source has no token for the service account.
    #[error("service account {0:?} has no token")]
    NoToken(String),
    /// A downwardAPI item with neither `fieldRef` nor `resourceFieldRef`.
    #[error("downwardAPI item {0:?} has neither fieldRef nor resourceFieldRef")]
    EmptyDownwardApiItem(String),
    /// A downwardAPI `fieldRef` failed.
    #[error(transparent)]
    FieldPath(#[from] kubelet_core::fieldpath::Error),
    /// A downwardAPI `resourceFieldRef` failed.
    #[error(transparent)]
    Resource(#[from] kubelet_core::resources::Error),
    /// A projected volume source of a kind this kubelet does not support.
    #[error("unsupported projected volume source")]
    UnsupportedProjectedSource,
    /// A subPath that the API would refuse (empty, absolute or with `..`).
    #[error("subPath {sub_path:?} {problem}")]
    InvalidSubPath {
        /// The subPath.
        sub_path: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The volume of a subPath could not be resolved.
    #[error("volume path {}: {source}", path.display())]
    VolumePath {
        /// The volume's directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The existing part of a subPath could not be resolved.
    #[error("resolving subPath {sub_path:?}: {source}")]
    ResolveSubPath {
        /// The subPath.
        sub_path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A subPath that resolves (through symlinks) outside its volume.
    #[error(
        "subPath {sub_path:?} resolves to {} which is outside the volume {}",
        resolved.display(),
        volume.display()
    )]
    OutsideVolume {
        /// The subPath.
        sub_path: String,
        /// Where it resolves to.
        resolved: PathBuf,
        /// The volume's directory.
        volume: PathBuf,
    },
    /// Opening the volume's root for the safe subPath walk failed.
    #[error("opening volume {}: {source}", path.display())]
    OpenVolume {
        /// The volume's directory.
        path: PathBuf,
        /// The system call's error.
        #[source]
        source: Errno,
    },
    /// One element of the safe subPath walk could not be opened or created; `action` is
    /// e.g. `opening subPath element`.
    #[error("{action} {name:?}: {source}")]
    SubPathElement {
        /// What was being done.
        action: &'static str,
        /// The element.
        name: OsString,
        /// The system call's error.
        #[source]
        source: Errno,
    },
    /// An element of the safe subPath walk turned out to be a symlink.
    #[error("subPath element {0:?} is a symlink that changed while it was opened")]
    SymlinkInSubPath(OsString),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The API objects that volumes project.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    /// A configMap.
    ConfigMap,
    /// A secret.
    Secret,
}

impl ObjectKind {
    /// The resource name as the API server's "not found" message writes it.
    pub fn resource(self) -> &'static str {
        match self {
            Self::ConfigMap => "configmap",
            Self::Secret => "secret",
        }
    }
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ConfigMap => "configMap",
            Self::Secret => "secret",
        })
    }
}

/// The [`Error::Io`] of `path`.
pub(crate) fn io_error(path: &std::path::Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}
