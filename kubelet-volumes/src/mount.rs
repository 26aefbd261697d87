//! Mount helpers: tmpfs, bind mounts, the mount table, and removal that never crosses into
//! another filesystem (upstream `k8s.io/mount-utils` and `pkg/volume/util/subpath`).

// Reviewed (issue 16): blocking by contract (mount(2), umount(2) and directory walks);
// DefaultVolumeManager calls this module on the blocking pool only.
#![allow(clippy::disallowed_methods)]

use nix::mount::{MntFlags, MsFlags};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result, io_error};

/// Mount points at or under `prefix`, deepest first (from `/proc/self/mountinfo`).
pub fn mounts_under(prefix: &Path) -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape(p)))
        .filter(|p| p.starts_with(prefix))
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out.dedup();
    out
}

/// `true` when `path` is a mount point.
pub fn is_mount_point(path: &Path) -> bool {
    mounts_under(path).iter().any(|p| p == path)
}

/// The filesystem type mounted at `path`, if it is a mount point.
pub fn fs_type(path: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().rev().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mp = PathBuf::from(unescape(left.split(' ').nth(4)?));
        (mp == path).then(|| right.split(' ').next().unwrap_or("").to_owned())
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len() + 1
            && b.get(i + 1..i + 4)
                .is_some_and(|o| o.iter().all(u8::is_ascii_digit))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mounts a tmpfs at `dir` with `options` (e.g. `size=1048576,mode=0755`).
pub fn mount_tmpfs(dir: &Path, options: &str) -> Result<()> {
    nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options),
    )
    .map_err(|source| Error::Mount {
        action: "mounting tmpfs on",
        path: dir.to_path_buf(),
        source,
    })
}

/// Bind-mounts `source` (typically `/proc/self/fd/N`) onto `target`.
pub fn bind_mount(source: &Path, target: &Path) -> Result<()> {
    nix::mount::mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|source| Error::Mount {
        action: "bind-mounting onto",
        path: target.to_path_buf(),
        source,
    })
}

/// Lazily unmounts `target`; not being mounted is not an error.
pub fn unmount(target: &Path) -> Result<()> {
    match nix::mount::umount2(target, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW) {
        Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => Ok(()),
        Err(source) => Err(Error::Mount {
            action: "unmounting",
            path: target.to_path_buf(),
            source,
        }),
    }
}

/// Unmounts everything at or under `dir`, deepest first.
pub fn unmount_all_under(dir: &Path) -> Result<()> {
    for mp in mounts_under(dir) {
        unmount(&mp)?;
    }
    Ok(())
}

/// Removes `path` recursively without following symlinks and without entering another
/// filesystem: an entry on a different device (a mount that is still there) is an error and
/// is left alone, so data outside the pod's directory is never removed.
pub fn remove_all_one_fs(path: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(path, e)),
    };
    remove_inner(path, meta.dev())
}

fn remove_inner(path: &Path, dev: u64) -> Result<()> {
    let io = |e| io_error(path, e);
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    if meta.dev() != dev {
        return Err(Error::OtherFilesystem {
            path: path.to_path_buf(),
        });
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).map_err(io)? {
            remove_inner(&entry.map_err(io)?.path(), dev)?;
        }
        std::fs::remove_dir(path).map_err(io)
    } else {
        std::fs::remove_file(path).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_unescapes() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }

    #[test]
    fn removal_does_not_follow_symlinks() {
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("keep"), b"x").expect("write");
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("v");
        std::fs::create_dir(&victim).expect("mkdir");
        std::os::unix::fs::symlink(outside.path(), victim.join("link")).expect("symlink");
        remove_all_one_fs(&victim).expect("remove");
        assert!(!victim.exists());
        assert!(outside.path().join("keep").exists());
    }
}
