//! Safe `subPath` mounts (upstream `pkg/volume/util/subpath/subpath_linux.go`, the fix for
//! CVE-2017-1002101 and CVE-2021-25741).
//!
//! A container's `subPath` is resolved inside the volume, checked to stay inside it, then
//! opened component by component with `O_NOFOLLOW` from the volume root, and the opened file
//! descriptor (not the path) is bind-mounted at
//! `<pod-dir>/volume-subpaths/<volume>/<container>/<index>`; the runtime mounts that. A symlink
//! swapped in after the check cannot redirect the mount out of the volume.

// Reviewed (issue 16): blocking by contract (openat(2) walks and bind mounts);
// DefaultVolumeManager calls this module on the blocking pool only.
#![allow(clippy::disallowed_methods)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result, io_error};
use crate::mount;

/// Checks a subPath as the API does: relative, without `..` elements.
pub fn validate(sub_path: &str) -> Result<()> {
    let invalid = |problem| {
        Err(Error::InvalidSubPath {
            sub_path: sub_path.to_owned(),
            problem,
        })
    };
    if sub_path.is_empty() {
        return invalid("must not be empty");
    }
    let p = Path::new(sub_path);
    if p.is_absolute() {
        return invalid("must be a relative path");
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return invalid("must not contain '..'");
    }
    Ok(())
}

fn open_at(dir: &OwnedFd, name: &std::ffi::OsStr, flags: OFlag) -> nix::Result<OwnedFd> {
    nix::fcntl::openat(dir, name, flags | OFlag::O_CLOEXEC, Mode::empty())
}

fn open_root(root: &Path) -> Result<OwnedFd> {
    nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|source| Error::OpenVolume {
        path: root.to_path_buf(),
        source,
    })
}

fn file_type(fd: &OwnedFd) -> u32 {
    nix::sys::stat::fstat(fd).map_or(0, |st| st.st_mode & libc::S_IFMT)
}

fn is_symlink_fd(fd: &OwnedFd) -> bool {
    file_type(fd) == libc::S_IFLNK
}

fn is_dir_fd(fd: &OwnedFd) -> bool {
    file_type(fd) == libc::S_IFDIR
}

/// Opens `rel` under the open `root` without following any symlink; missing directories are
/// created (mode 0755) when `create` is set (upstream `SafeMakeDir` + `doSafeOpen`).
fn safe_open(root: OwnedFd, rel: &Path, create: bool) -> Result<OwnedFd> {
    let mut cur = root;
    for comp in rel.components() {
        let Component::Normal(name) = comp else {
            continue;
        };
        let failed = |action| {
            move |source| Error::SubPathElement {
                action,
                name: name.to_owned(),
                source,
            }
        };
        let next = match open_at(&cur, name, OFlag::O_PATH | OFlag::O_NOFOLLOW) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if create => {
                // mkdirat needs a real directory descriptor, not O_PATH: reopen "." of it.
                let dirfd = open_at(
                    &cur,
                    std::ffi::OsStr::new("."),
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY,
                )
                .map_err(failed("opening parent of"))?;
                match nix::sys::stat::mkdirat(&dirfd, name, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(failed("creating subPath element")(e)),
                }
                open_at(&cur, name, OFlag::O_PATH | OFlag::O_NOFOLLOW)
                    .map_err(failed("opening subPath element"))?
            }
            Err(e) => return Err(failed("opening subPath element")(e)),
        };
        if is_symlink_fd(&next) {
            return Err(Error::SymlinkInSubPath(name.to_owned()));
        }
        cur = next;
    }
    Ok(cur)
}

/// Resolves `sub_path` inside `volume` as [`prepare`] does before mounting: checked with
/// [`validate`], the deepest existing ancestor resolved (through symlinks) and checked to be
/// inside the volume, missing directories created below it, then opened (`O_PATH`) component
/// by component from the volume root without following any symlink. The descriptor is what
/// gets mounted: it names a file or directory inside the volume however the path changes
/// afterwards.
pub fn open(volume: &Path, sub_path: &str) -> Result<OwnedFd> {
    validate(sub_path)?;
    let root = std::fs::canonicalize(volume).map_err(|source| Error::VolumePath {
        path: volume.to_path_buf(),
        source,
    })?;
    let full = root.join(sub_path);
    // The deepest existing ancestor, resolved, must be inside the volume before anything is
    // created below it.
    let existing = full
        .ancestors()
        .find(|a| a.exists())
        .unwrap_or(&root)
        .to_path_buf();
    let resolved_existing =
        std::fs::canonicalize(&existing).map_err(|source| Error::ResolveSubPath {
            sub_path: sub_path.to_owned(),
            source,
        })?;
    if !resolved_existing.starts_with(&root) {
        return Err(Error::OutsideVolume {
            sub_path: sub_path.to_owned(),
            resolved: resolved_existing,
            volume: root,
        });
    }
    let rest = full.strip_prefix(&existing).unwrap_or(Path::new(""));
    let rel = resolved_existing
        .strip_prefix(&root)
        .unwrap_or(Path::new(""))
        .join(rest);
    safe_open(open_root(&root)?, &rel, true)
}

/// Resolves `sub_path` inside `volume` and bind-mounts it at `target`; returns `target`.
///
/// A missing subPath is created as a directory inside the volume (as upstream). Refused when
/// `sub_path` is absolute or has `..`, or when it resolves (through symlinks) outside the
/// volume. An existing mount at `target` (a restarted container, a restarted kubelet) is
/// reused.
pub fn prepare(volume: &Path, sub_path: &str, target: &Path) -> Result<PathBuf> {
    validate(sub_path)?;
    if mount::is_mount_point(target) {
        return Ok(target.to_path_buf());
    }
    let fd = open(volume, sub_path)?;
    if is_dir_fd(&fd) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(target)
            .map_err(|e| io_error(target, e))?;
    } else {
        if let Some(parent) = target.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(parent)
                .map_err(|e| io_error(parent, e))?;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(target)
            .map_err(|e| io_error(target, e))?;
    }
    let proc_path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    mount::bind_mount(&proc_path, target)?;
    Ok(target.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn bad_sub_paths_are_rejected() {
        for bad in ["", "/etc", "../x", "a/../../x"] {
            assert!(validate(bad).is_err(), "{bad:?}");
        }
        assert!(validate("a/b").is_ok());
    }

    #[test]
    fn symlinks_out_of_the_volume_are_refused_and_nothing_is_created_outside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vol = dir.path().join("vol");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(vol.join("real")).expect("mkdir");
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::os::unix::fs::symlink("/", vol.join("root")).expect("symlink");
        std::os::unix::fs::symlink(&outside, vol.join("out")).expect("symlink");
        std::os::unix::fs::symlink("../outside", vol.join("rel-out")).expect("symlink");
        std::os::unix::fs::symlink("real", vol.join("in")).expect("symlink");
        let target = dir.path().join("target");
        for bad in [
            "root",
            "root/etc",
            "out",
            "out/new",
            "rel-out",
            "rel-out/x/y",
        ] {
            let err = prepare(&vol, bad, &target).expect_err(bad);
            assert!(matches!(err, Error::OutsideVolume { .. }), "{bad}: {err}");
            assert!(
                err.to_string().contains("outside the volume"),
                "{bad}: {err}"
            );
        }
        assert_eq!(
            std::fs::read_dir(&outside).expect("ls").count(),
            0,
            "nothing created outside"
        );
        assert!(!target.exists());
        if !is_root() {
            return;
        }
        // A symlink that stays inside the volume is followed, as upstream.
        std::fs::write(vol.join("real/f"), b"inside").expect("write");
        let t = prepare(&vol, "in", &target).expect("inside symlink");
        assert_eq!(
            std::fs::read_to_string(t.join("f")).expect("read"),
            "inside"
        );
        mount::unmount(&target).expect("umount");
        // A missing subPath is created inside the volume.
        let t2 = dir.path().join("target2");
        prepare(&vol, "new/dir", &t2).expect("create");
        assert!(vol.join("new/dir").is_dir());
        assert!(mount::is_mount_point(&t2));
        mount::unmount(&t2).expect("umount");
    }

    #[test]
    fn a_symlink_swapped_in_under_the_walk_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vol = dir.path().join("vol");
        std::fs::create_dir_all(&vol).expect("mkdir");
        std::os::unix::fs::symlink("/", vol.join("a")).expect("symlink");
        // The safe walk itself refuses any symlink, whatever the earlier check said.
        let err = safe_open(open_root(&vol).expect("root"), Path::new("a/etc"), false)
            .expect_err("symlink");
        assert!(matches!(err, Error::SymlinkInSubPath(_)), "{err}");
        assert!(err.to_string().contains("symlink"), "{err}");
    }
}
