//! The blocking file system side of the volume manager (upstream
//! `pkg/volume/emptydir/empty_dir.go` `SetUpAt`, `pkg/volume/util/volumehelper`
//! `SetVolumeOwnership`, `pkg/kubelet/kubelet_pods.go` `makePodDataDirs` and
//! `pkg/kubelet/volumemanager/reconciler/reconstruct.go`): pod and volume directories, tmpfs
//! mounts, group ownership, reconstruction after a restart and teardown.
//!
//! Every function here blocks (mount(2), directory walks, chown): the manager calls them on
//! the blocking pool ([`kubelet_core::blocking::unblock`]), never on an async worker.

// Reviewed (issue 16): blocking helpers by contract; DefaultVolumeManager runs them in
// spawn_blocking, and `reconstruct` once when the manager is built.
#![allow(clippy::disallowed_methods)]

use std::collections::{HashMap, HashSet};
use std::path::Path;

use kubelet_core::pod::PodUid;
use kubelet_core::volume::{Error, MountedVolume, Result};
use tracing::{debug, info, warn};

use crate::manager::{
    CONFIG_MAP_PLUGIN, DOWNWARD_API_PLUGIN, EMPTY_DIR_PLUGIN, PROJECTED_PLUGIN, SECRET_PLUGIN,
};
use crate::mount;

/// How a volume type is stored.
pub(crate) enum Backing {
    /// A directory on the kubelet's disk.
    Disk,
    /// A tmpfs mount of `size` bytes (the kernel's default without) and root `mode`.
    Tmpfs {
        /// Size limit in bytes.
        size: Option<u64>,
        /// Root directory mode, e.g. `1777`.
        mode: &'static str,
    },
}

/// Creates (or adopts) the volume directory, mounting a tmpfs when asked.
pub(crate) fn make_dir(path: &Path, backing: &Backing) -> Result<()> {
    if mount::is_mount_point(path) {
        debug!(path = %path.display(), "volume already mounted; keeping it");
        return Ok(());
    }
    match backing {
        Backing::Disk => create_dir(path, 0o777),
        Backing::Tmpfs { size, mode } => {
            create_dir(path, 0o750)?;
            let mut options = format!("mode={mode}");
            if let Some(size) = size {
                options.push_str(&format!(",size={size}"));
            }
            mount::mount_tmpfs(path, &options).map_err(|e| Error::Io {
                path: path.to_path_buf(),
                source: std::io::Error::other(e),
            })
        }
    }
}

/// Unmounts everything under the pod directory `pod_dir` and removes its `volume-subpaths`
/// and `volumes` directories (upstream's unmount and orphan cleanup).
pub(crate) fn tear_down(pod_dir: &Path) -> Result<()> {
    let io = |path: &Path, e: crate::Error| Error::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    };
    mount::unmount_all_under(pod_dir).map_err(|r| io(pod_dir, r))?;
    for sub in ["volume-subpaths", "volumes"] {
        let dir = pod_dir.join(sub);
        mount::remove_all_one_fs(&dir).map_err(|r| io(&dir, r))?;
    }
    Ok(())
}

/// Unmounts and removes every pod directory under `pods_dir` whose pod is not in `active`
/// (housekeeping); a directory that cannot be removed is logged and kept.
pub(crate) fn remove_orphaned_pod_dirs(pods_dir: &Path, active: &HashSet<PodUid>) -> Result<()> {
    let entries = match std::fs::read_dir(pods_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Io {
                path: pods_dir.to_path_buf(),
                source,
            });
        }
    };
    for entry in entries.flatten() {
        let uid = PodUid(entry.file_name().to_string_lossy().into_owned());
        if active.contains(&uid) {
            continue;
        }
        // Only directories we created; never follow a symlink out of the pods dir.
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        info!(pod = %uid, "removing orphaned pod directory");
        let path = entry.path();
        let result = mount::unmount_all_under(&path).and_then(|()| mount::remove_all_one_fs(&path));
        if let Err(e) = result {
            warn!(path = %path.display(), error = %e, "removing orphaned pod directory");
        }
    }
    Ok(())
}

/// The actual state of world rebuilt from disk after a restart (upstream
/// `reconciler/reconstruct.go`): every `<pods>/<uid>/volumes/<plugin>/<name>` the kubelet set
/// up, so running pods keep their volumes without a remount. hostPath volumes leave nothing on
/// disk; they are re-checked on the pod's next sync.
pub(crate) fn reconstruct(pods_dir: &Path) -> HashMap<PodUid, HashMap<String, MountedVolume>> {
    let mut out: HashMap<PodUid, HashMap<String, MountedVolume>> = HashMap::new();
    let dirs = |p: &Path| -> Vec<std::fs::DirEntry> {
        std::fs::read_dir(p)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .collect()
    };
    for pod in dirs(pods_dir) {
        let uid = PodUid(pod.file_name().to_string_lossy().into_owned());
        for plugin in dirs(&pod.path().join("volumes")) {
            let plugin_name = plugin.file_name().to_string_lossy().into_owned();
            let read_only = match plugin_name.as_str() {
                EMPTY_DIR_PLUGIN => false,
                CONFIG_MAP_PLUGIN | SECRET_PLUGIN | DOWNWARD_API_PLUGIN | PROJECTED_PLUGIN => true,
                _ => continue,
            };
            for volume in dirs(&plugin.path()) {
                out.entry(uid.clone()).or_default().insert(
                    volume.file_name().to_string_lossy().into_owned(),
                    MountedVolume {
                        host_path: volume.path(),
                        read_only,
                        size_limit_bytes: None,
                    },
                );
            }
        }
    }
    if !out.is_empty() {
        info!(
            pods = out.len(),
            volumes = out.values().map(HashMap::len).sum::<usize>(),
            "reconstructed volumes from disk"
        );
    }
    out
}

fn io_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Gives a directory to `gid` with setgid and `mask` added (upstream `SetVolumeOwnership`).
pub(crate) fn set_dir_group(path: &Path, gid: u32, mask: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::lchown(path, None, Some(gid)).map_err(|e| io_error(path, e))?;
    let mode = std::fs::symlink_metadata(path)
        .map_err(|e| io_error(path, e))?
        .permissions()
        .mode();
    std::fs::set_permissions(
        path,
        std::fs::Permissions::from_mode((mode & 0o7777) | mask | 0o2000),
    )
    .map_err(|e| io_error(path, e))
}

/// Gives every entry under `dir` to `gid` without following symlinks; directories get
/// setgid and group read/exec (upstream `SetVolumeOwnership` for read-only volumes).
pub(crate) fn set_tree_group(dir: &Path, gid: u32) -> Result<()> {
    set_dir_group(dir, gid, 0o550)?;
    let entries = std::fs::read_dir(dir).map_err(|e| io_error(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir, e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| io_error(&path, e))?;
        if kind.is_dir() {
            set_tree_group(&path, gid)?;
        } else {
            // Symlinks are lchowned; their targets are handled where they live.
            std::os::unix::fs::lchown(&path, None, Some(gid)).map_err(|e| io_error(&path, e))?;
        }
    }
    Ok(())
}

/// Mode of the kubelet's own directories on the way to a volume (upstream `0750`).
const POD_DIR_MODE: u32 = 0o750;

/// Creates `path` (parents included) with [`POD_DIR_MODE`], or takes access for other users
/// away from an existing one.
pub(crate) fn private_dir(path: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let io = |source| io_error(path, source);
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            let mode = meta.permissions().mode() & 0o7777;
            if mode & 0o007 != 0 {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & !0o007))
                    .map_err(io)?;
            }
            Ok(())
        }
        Ok(_) => Err(io(std::io::Error::other("exists and is not a directory"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(POD_DIR_MODE)
                .create(path)
                .map_err(io)?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(POD_DIR_MODE))
                .map_err(io)
        }
        Err(e) => Err(io(e)),
    }
}

fn create_dir(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(io)?;
    // emptyDir is world-writable as upstream (0777), regardless of the umask.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)
}
