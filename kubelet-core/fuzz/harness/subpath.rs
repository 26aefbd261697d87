//! `subPath` resolution (`kubelet_volumes::subpath::open`, upstream
//! `pkg/volume/util/subpath/subpath_linux.go`, CVE-2017-1002101 and CVE-2021-25741): the
//! subPath comes from a pod, the volume's content from its containers, so both are hostile.
//!
//! The input is split at lines `%%`; every part but the last puts an entry in the volume: its
//! first byte chooses a directory, a file or a symlink, the first line after it is the
//! entry's path in the volume, and a symlink's target is the rest (anything: absolute, `..`,
//! into another symlink). The last part is the subPath. Checked: whatever is opened is inside
//! the volume, and nothing is created outside it.

use std::collections::BTreeSet;
use std::os::fd::AsRawFd;
use std::path::{Component, Path, PathBuf};

/// Resolves the subPath of `data` in a volume built from it.
pub fn run(data: &[u8]) {
    let work = super::scratch::dir("subpath");
    let volume = work.join("volume");
    let outside = work.join("outside");
    std::fs::create_dir(&volume).expect("scratch volume");
    std::fs::create_dir(&outside).expect("scratch outside");
    std::fs::write(outside.join("secret"), "secret").expect("scratch file");
    let mut parts = super::split::parts(data);
    let sub_path = String::from_utf8_lossy(parts.pop().unwrap_or_default()).into_owned();
    for part in parts.into_iter().take(32) {
        let Some((&kind, rest)) = part.split_first() else {
            continue;
        };
        let (path, body) = match rest.iter().position(|&b| b == b'\n') {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &[][..]),
        };
        let Some(entry) = inside(&volume, path) else {
            continue;
        };
        if let Some(parent) = entry.parent() {
            // A parent may be a file or a symlink already: then the entry is not made.
            if std::fs::create_dir_all(parent).is_err() {
                continue;
            }
        }
        let _ = match kind % 3 {
            0 => std::fs::create_dir(&entry),
            1 => std::fs::write(&entry, body),
            _ => std::os::unix::fs::symlink(bytes_path(body), &entry),
        };
    }
    let before = tree(&work, &volume);
    let root = std::fs::canonicalize(&volume).expect("the volume");
    if let Ok(fd) = kubelet_volumes::subpath::open(&volume, &sub_path) {
        let opened = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .expect("the opened path");
        assert!(
            opened.starts_with(&root),
            "subPath {sub_path:?} opened {} outside the volume {}",
            opened.display(),
            root.display()
        );
    }
    assert_eq!(
        tree(&work, &volume),
        before,
        "subPath {sub_path:?} changed something outside the volume"
    );
}

/// `path` as an entry of `volume`: only plain names, none too long, no NUL.
fn inside(volume: &Path, path: &[u8]) -> Option<PathBuf> {
    let rel = bytes_path(path);
    let plain = rel
        .components()
        .all(|c| matches!(c, Component::Normal(n) if n.len() <= 255));
    (plain && !path.is_empty() && !path.contains(&0)).then(|| volume.join(rel))
}

fn bytes_path(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let bytes = bytes.split(|&b| b == 0).next().unwrap_or_default();
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

/// Every path under `dir` but inside `skip`, without following symlinks.
fn tree(dir: &Path, skip: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("listing").flatten() {
            let p = e.path();
            if p.starts_with(skip) {
                continue;
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(p.clone());
            }
            out.insert(p);
        }
    }
    out
}
