//! Atomic projection of a set of files into a volume directory (upstream
//! `pkg/volume/util/atomic_writer.go`).
//!
//! Layout, as upstream:
//! ```text
//! <target>/..2026_11_21_17_30_00.123456789   the current payload (a timestamped directory)
//! <target>/..data -> ..2026_11_21_17_30_00.123456789
//! <target>/<key>  -> ..data/<key>             one symlink per top-level payload entry
//! ```
//! A new payload is written to a fresh timestamped directory, then `..data` is swapped with one
//! `rename(2)` of a temporary symlink, so a reader that opens `<target>/<key>` sees either the
//! whole old set or the whole new set, never a mix.

// Reviewed (issue 16): blocking by contract (file writes, renames and symlinks);
// DefaultVolumeManager calls this module on the blocking pool only.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Result, io_error};

/// Upstream `maxFileNameLength`.
pub const MAX_FILE_NAME_LENGTH: usize = 255;
/// Upstream `maxPathLength`.
pub const MAX_PATH_LENGTH: usize = 4096;

const DATA_DIR: &str = "..data";
const DATA_DIR_TMP: &str = "..data_tmp";

/// One file of a payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileProjection {
    /// The content.
    pub data: Vec<u8>,
    /// Permission bits (only `0o777` is kept).
    pub mode: u32,
    /// Owner to give the file (upstream `FileProjection.FsUser`, set for service-account
    /// tokens when every container runs as the same user); `None` keeps the kubelet's user.
    pub fs_user: Option<u32>,
}

/// Files by relative path.
pub type Payload = BTreeMap<String, FileProjection>;

/// Why a payload path is refused (upstream `validatePath`'s rules).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// The path is empty.
    #[error("invalid path: must not be empty")]
    Empty,
    /// The path is longer than [`MAX_PATH_LENGTH`].
    #[error("invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters")]
    TooLong,
    /// The path is absolute.
    #[error("invalid path {0:?}: must be relative")]
    Absolute(String),
    /// An element is longer than [`MAX_FILE_NAME_LENGTH`].
    #[error(
        "invalid path {path:?}: element {element:?} is longer than {MAX_FILE_NAME_LENGTH} characters"
    )]
    ElementTooLong {
        /// The path.
        path: String,
        /// The element.
        element: String,
    },
    /// An element is `..`.
    #[error("invalid path {0:?}: must not contain '..'")]
    ParentElement(String),
    /// An element is empty or `.`.
    #[error("invalid path {0:?}: must not contain empty or '.' elements")]
    EmptyElement(String),
    /// The first element starts with `..`, the writer's own prefix.
    #[error("invalid path {0:?}: must not start with '..'")]
    ReservedPrefix(String),
    /// The path contains a NUL byte.
    #[error("invalid path {0:?}: must not contain NUL")]
    Nul(String),
}

/// Checks a payload path as upstream's `validatePath`: not empty, relative, at most 4096
/// bytes, no `..` element, no element over 255 bytes, and a first element that does not start
/// with `..` (which would collide with the writer's own `..data` and timestamped entries).
/// `.` elements are refused too (newer upstream).
pub fn validate_path(path: &str) -> Result<(), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if path.len() > MAX_PATH_LENGTH {
        return Err(PathError::TooLong);
    }
    if path.starts_with('/') {
        return Err(PathError::Absolute(path.to_owned()));
    }
    for (i, element) in path.split('/').enumerate() {
        if element.len() > MAX_FILE_NAME_LENGTH {
            return Err(PathError::ElementTooLong {
                path: path.to_owned(),
                element: element.to_owned(),
            });
        }
        if element == ".." {
            return Err(PathError::ParentElement(path.to_owned()));
        }
        if element == "." || element.is_empty() {
            return Err(PathError::EmptyElement(path.to_owned()));
        }
        if i == 0 && element.starts_with("..") {
            return Err(PathError::ReservedPrefix(path.to_owned()));
        }
        if element.contains('\0') {
            return Err(PathError::Nul(path.to_owned()));
        }
    }
    Ok(())
}

/// Writes payloads atomically into one target directory.
#[derive(Clone, Debug)]
pub struct AtomicWriter {
    target: PathBuf,
}

impl AtomicWriter {
    /// A writer for the (existing) directory `target`.
    pub fn new(target: PathBuf) -> Self {
        Self { target }
    }

    /// The current payload directory name, if any.
    fn current(&self) -> Option<String> {
        let link = std::fs::read_link(self.target.join(DATA_DIR)).ok()?;
        let name = link.to_str()?.to_owned();
        // Only ever a `..<timestamp>` sibling that we created.
        (name.starts_with("..") && !name.contains('/')).then_some(name)
    }

    /// Writes `payload` if it differs from what is on disk; returns `true` when it did.
    pub fn write(&self, payload: &Payload) -> Result<bool> {
        for path in payload.keys() {
            validate_path(path)?;
        }
        let old = self.current();
        if let Some(old) = &old
            && same_payload(&self.target.join(old), payload)
        {
            return Ok(false);
        }
        let ts_name = timestamp_dir_name();
        let ts_dir = self.target.join(&ts_name);
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(&ts_dir)
            .map_err(|e| io_error(&ts_dir, e))?;
        set_mode(&ts_dir, 0o755)?;
        if let Err(e) = write_payload(&ts_dir, payload) {
            let _ = std::fs::remove_dir_all(&ts_dir);
            return Err(e);
        }
        // Swap `..data` with one rename.
        let tmp = self.target.join(DATA_DIR_TMP);
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&ts_name, &tmp).map_err(|e| io_error(&tmp, e))?;
        let data = self.target.join(DATA_DIR);
        std::fs::rename(&tmp, &data).map_err(|e| io_error(&data, e))?;
        // User-visible symlinks for the new top-level entries; stale ones removed.
        let top: BTreeSet<&str> = payload.keys().filter_map(|p| p.split('/').next()).collect();
        for name in &top {
            let link = self.target.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(Path::new(DATA_DIR).join(name), &link)
                    .map_err(|e| io_error(&link, e))?;
            }
        }
        let entries = std::fs::read_dir(&self.target).map_err(|e| io_error(&self.target, e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("..") {
                // A payload directory left by an interrupted write.
                if name != ts_name
                    && name != DATA_DIR
                    && entry.file_type().is_ok_and(|t| t.is_dir())
                {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
                continue;
            }
            if top.contains(name.as_str()) {
                continue;
            }
            // Only our own `<key> -> ..data/<key>` symlinks are ever removed.
            if std::fs::read_link(entry.path())
                .is_ok_and(|t| t.starts_with(DATA_DIR) && t.components().count() == 2)
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(true)
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o777))
        .map_err(|e| io_error(path, e))
}

fn write_payload(dir: &Path, payload: &Payload) -> Result<()> {
    for (path, file) in payload {
        let full = dir.join(path);
        if let Some(parent) = full.parent()
            && parent != dir
        {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(|e| io_error(parent, e))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(file.mode & 0o777)
            .open(&full)
            .map_err(|e| io_error(&full, e))?;
        f.write_all(&file.data).map_err(|e| io_error(&full, e))?;
        if let Some(uid) = file.fs_user {
            std::os::unix::fs::fchown(&f, Some(uid), None).map_err(|e| io_error(&full, e))?;
        }
        set_mode(&full, file.mode)?;
    }
    Ok(())
}

fn same_payload(dir: &Path, payload: &Payload) -> bool {
    let mut on_disk = BTreeSet::new();
    if !collect_files(dir, dir, &mut on_disk) {
        return false;
    }
    if on_disk.len() != payload.len() || !payload.keys().all(|k| on_disk.contains(k)) {
        return false;
    }
    payload.iter().all(|(path, file)| {
        let full = dir.join(path);
        let owner = file
            .fs_user
            .unwrap_or_else(|| nix::unistd::geteuid().as_raw());
        std::fs::symlink_metadata(&full).is_ok_and(|m| {
            m.is_file() && m.permissions().mode() & 0o777 == file.mode & 0o777 && m.uid() == owner
        }) && std::fs::read(&full).is_ok_and(|d| d == file.data)
    })
}

fn collect_files(root: &Path, dir: &Path, out: &mut BTreeSet<String>) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => {
                if !collect_files(root, &path, out) {
                    return false;
                }
            }
            Ok(_) => {
                let Ok(rel) = path.strip_prefix(root) else {
                    return false;
                };
                if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
                    return false;
                }
                out.insert(rel.to_string_lossy().into_owned());
            }
            Err(_) => return false,
        }
    }
    true
}

/// `..2006_01_02_15_04_05.<unique>` as upstream's `os.MkdirTemp` pattern, in UTC.
fn timestamp_dir_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (y, mo, d) = civil_from_days(i64::try_from(secs / 86_400).unwrap_or(0));
    let rem = secs % 86_400;
    format!(
        "..{y:04}_{mo:02}_{d:02}_{:02}_{:02}_{:02}.{}{:09}{}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        std::process::id(),
        now.subsec_nanos(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Days since 1970-01-01 to (year, month, day) (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: data.as_bytes().to_vec(),
            mode,
            fs_user: None,
        }
    }

    #[test]
    fn paths_are_validated_as_upstream() {
        for bad in [
            "", "/abs", "../x", "a/../b", "..data/x", "..data", "..x", "a/./b", "a//b", "./a",
        ] {
            assert!(validate_path(bad).is_err(), "{bad:?} must be rejected");
        }
        assert!(validate_path(&"a".repeat(256)).is_err());
        assert!(validate_path(&format!("{}/b", "a/".repeat(2100))).is_err());
        for good in ["a", "a/b", "a..b", "a/..b", ".hidden", "x.y/z"] {
            assert!(validate_path(good).is_ok(), "{good:?} must be accepted");
        }
    }

    #[test]
    fn layout_modes_and_update() {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = AtomicWriter::new(dir.path().to_path_buf());
        let mut p = Payload::new();
        p.insert("a".into(), file("1", 0o644));
        p.insert("sub/b".into(), file("2", 0o600));
        assert!(w.write(&p).expect("write"));
        let data = std::fs::read_link(dir.path().join("..data")).expect("..data");
        assert!(data.to_string_lossy().starts_with("..20"), "{data:?}");
        assert_eq!(
            std::fs::read_link(dir.path().join("a")).expect("a"),
            Path::new("..data/a")
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("sub/b")).expect("b"),
            "2"
        );
        let mode = |p: &str| {
            std::fs::metadata(dir.path().join(p))
                .expect("meta")
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("a"), 0o644);
        assert_eq!(mode("sub/b"), 0o600);
        // Unchanged payload: nothing written.
        assert!(!w.write(&p).expect("write"));
        // Update: new content, a removed key disappears, the old timestamped dir is gone.
        let mut q = Payload::new();
        q.insert("a".into(), file("3", 0o400));
        assert!(w.write(&q).expect("write"));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a")).expect("a"),
            "3"
        );
        assert_eq!(mode("a"), 0o400);
        assert!(std::fs::symlink_metadata(dir.path().join("sub")).is_err());
        assert!(!dir.path().join(&data).exists());
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("ls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}"); // a, ..data, ..<ts>
    }

    #[test]
    fn bad_keys_write_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = AtomicWriter::new(dir.path().to_path_buf());
        for bad in ["../x", "/abs", "..data/x"] {
            let mut p = Payload::new();
            p.insert("ok".into(), file("1", 0o644));
            p.insert(bad.into(), file("evil", 0o644));
            assert!(w.write(&p).is_err(), "{bad}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).expect("ls").count(), 0);
        assert!(!dir.path().parent().expect("parent").join("x").exists());
    }

    #[test]
    fn readers_never_see_a_mixed_set() {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = AtomicWriter::new(dir.path().to_path_buf());
        let gen_payload = |n: usize| {
            let mut p = Payload::new();
            for k in ["a", "b", "c"] {
                p.insert(k.into(), file(&n.to_string(), 0o644));
            }
            p
        };
        w.write(&gen_payload(0)).expect("write");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let stop = stop.clone();
            let root = dir.path().to_path_buf();
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Resolve `..data` once, as a reader holding the directory would.
                    let Ok(target) = std::fs::read_link(root.join("..data")) else {
                        continue;
                    };
                    let snap = root.join(target);
                    let vals: Vec<_> = ["a", "b", "c"]
                        .iter()
                        .map(|k| std::fs::read_to_string(snap.join(k)).ok())
                        .collect();
                    if vals.iter().all(Option::is_some) {
                        assert!(vals.windows(2).all(|w| w[0] == w[1]), "mixed set {vals:?}");
                        reads += 1;
                    }
                }
                reads
            })
        };
        for n in 1..200 {
            w.write(&gen_payload(n)).expect("write");
        }
        stop.store(true, Ordering::Relaxed);
        let reads = reader.join().expect("reader");
        assert!(reads > 0);
    }

    #[test]
    fn leftovers_of_an_interrupted_write_are_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("..2020_01_01_00_00_00.1")).expect("mkdir");
        let w = AtomicWriter::new(dir.path().to_path_buf());
        let mut p = Payload::new();
        p.insert("a".into(), file("1", 0o644));
        w.write(&p).expect("write");
        assert!(!dir.path().join("..2020_01_01_00_00_00.1").exists());
        assert_eq!(std::fs::read_dir(dir.path()).expect("ls").count(), 3);
    }

    #[test]
    fn timestamp_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_413), (2025, 11, 21));
    }
}
