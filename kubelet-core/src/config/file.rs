//! The file source of static pods: a manifest directory (or a single manifest file) watched
//! with inotify and rescanned periodically.
//!
//! Mirrors upstream `pkg/kubelet/config/file.go` (`sourceFile`, `extractFromDir`,
//! `resetStoreFromPath`) and `pkg/kubelet/config/file_linux.go` (the inotify watch).
//!
//! Behaviour, as upstream unless noted:
//!
//! - A directory is read non-recursively, entries sorted by name; names starting with `.` are
//!   ignored (editor swap files); sub-directories and other non-regular entries are logged and
//!   skipped. Symlinks are followed.
//! - A missing path logs "path does not exist, ignoring" and sends an empty
//!   [`Operation::Set`], so the source counts as ready.
//! - Every change re-reads the whole path and sends a `Set` of the *valid* pods only, and only
//!   when it differs from the last `Set` sent. One bad file is logged (once per distinct
//!   error) with its path and reason and never affects the others. Consequently a manifest
//!   edited from valid to invalid makes its pod disappear from the snapshot, so the kubelet
//!   stops it; fixing the file brings it back (reliability.md 3.1, upstream `replaceStore`).
//! - Two manifests with the same pod full name: the first in sorted order wins, the other is
//!   logged naming both files.
//! - Deviation: a *single-file* path that becomes invalid sends an empty `Set` too (upstream
//!   keeps the old pod in that case, and never marks the source ready if the file is invalid
//!   from the start).
//! - Changes are noticed through inotify on the directory (for a single file or a missing
//!   path, on its parent directory) and acted on at once, with no timer on the start path:
//!   events already queued are coalesced into one rescan, and only events that mark a file as
//!   complete count (`CLOSE_WRITE`, `MOVED_TO`, deletes; not `MODIFY`, nor the `CREATE` of a
//!   regular file, which its `CLOSE_WRITE` follows), so a file being written is not read half
//!   way. A rescan every `check_frequency` (default 20 s) catches the rest, and is the only
//!   mechanism if inotify is unavailable or disabled.
//! - Reading happens on the blocking thread pool. Only regular files are opened, so a FIFO in
//!   the directory cannot block the scan (barring a swap between the check and the open).
//!
//! Write manifests atomically (write a dotfile, then rename it into place): a pod is read as
//! soon as its file appears, and a half-written file is at best logged as invalid.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use inotify::{EventMask, EventOwned, EventStream, Inotify, WatchMask};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::static_pod::{self, Error};
use super::{CONFIG_SEEN_ANNOTATION, FILE_SOURCE, Operation, PodSource, PodUpdate};
use crate::pod::{PodExt, PodUid};
use crate::start_path;

/// Default period of the full rescan (upstream `fileCheckFrequency`, 20 s).
pub const DEFAULT_CHECK_FREQUENCY: Duration = Duration::from_secs(20);

/// Static pods from a manifest directory or file (upstream `sourceFile`); a [`PodSource`]
/// named [`FILE_SOURCE`].
#[derive(Clone, Debug)]
pub struct FileSource {
    path: PathBuf,
    node_name: String,
    check_frequency: Duration,
    inotify: bool,
}

impl FileSource {
    /// A source reading `path` (a directory or one file) for node `node_name`, rescanning
    /// every [`DEFAULT_CHECK_FREQUENCY`] and watching with inotify.
    pub fn new(path: impl Into<PathBuf>, node_name: impl Into<String>) -> Self {
        // Drop trailing separators and `.` parts so that UIDs do not depend on them.
        let path: PathBuf = path.into().components().collect();
        Self {
            path,
            node_name: node_name.into(),
            check_frequency: DEFAULT_CHECK_FREQUENCY,
            inotify: true,
        }
    }

    /// Sets the period of the full rescan (`fileCheckFrequency`).
    ///
    /// # Panics
    ///
    /// [`PodSource::run`] panics if the period is zero.
    #[must_use]
    pub fn check_frequency(mut self, period: Duration) -> Self {
        self.check_frequency = period;
        self
    }

    /// Enables or disables the inotify watch; without it changes are seen at the next rescan.
    #[must_use]
    pub fn inotify(mut self, enabled: bool) -> Self {
        self.inotify = enabled;
        self
    }

    /// The watched path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[async_trait]
impl PodSource for FileSource {
    fn name(&self) -> &str {
        FILE_SOURCE
    }

    /// Sends a snapshot at once, then on every change, until `token` is cancelled or the
    /// receiver is dropped. Cancel-safe: on cancellation it returns without sending; a scan
    /// in progress finishes on the blocking pool and is discarded.
    async fn run(self: Box<Self>, updates: mpsc::Sender<PodUpdate>, token: CancellationToken) {
        info!(path = %self.path.display(), "watching static pod manifests");
        let mut state = State::new(*self);
        let mut ticker = tokio::time::interval_at(
            Instant::now() + state.check_frequency,
            state.check_frequency,
        );
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut watcher: Option<Watcher> = None;
        let mut last_is_dir: Option<bool> = None;

        loop {
            if state.inotify {
                let stale = match (&watcher, last_is_dir) {
                    (None, _) => true,
                    (Some(w), Some(is_dir)) => w.dir_mode != is_dir,
                    (Some(_), None) => false,
                };
                if stale {
                    watcher = state.watch().await;
                }
            }

            let Some(is_dir) = state.rescan(&updates, &token).await else {
                return;
            };
            let mismatch = watcher.as_ref().is_some_and(|w| w.dir_mode != is_dir)
                && last_is_dir != Some(is_dir);
            last_is_dir = Some(is_dir);
            if mismatch {
                // The path turned from a file into a directory or back: watch the right
                // directory, then read again so nothing written meanwhile is missed.
                continue;
            }

            loop {
                tokio::select! {
                    biased;
                    _ = token.cancelled() => return,
                    event = next_event(&mut watcher) => {
                        if handle_event(&mut watcher, event).await {
                            break;
                        }
                    }
                    _ = ticker.tick() => break,
                }
            }
        }
    }
}

/// What an inotify event means for the source.
#[derive(Debug, PartialEq, Eq)]
enum Relevance {
    Ignore,
    Rescan,
    /// Rescan and set up a new watch: the watched directory went away.
    WatchLost,
}

struct Watcher {
    stream: EventStream<Vec<u8>>,
    /// Watching the manifest directory itself (else the parent of a file or missing path).
    dir_mode: bool,
    /// In parent mode, the name of the watched file.
    file_name: Option<OsString>,
    /// The directory the watch is on.
    watched_dir: PathBuf,
}

impl Watcher {
    async fn classify(&self, event: &EventOwned) -> Relevance {
        if event.mask.contains(EventMask::Q_OVERFLOW) {
            return Relevance::Rescan;
        }
        if event
            .mask
            .intersects(EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF)
        {
            return Relevance::WatchLost;
        }
        if event.mask.contains(EventMask::CREATE)
            && !event.mask.contains(EventMask::ISDIR)
            && let Some(name) = &event.name
            && tokio::fs::symlink_metadata(self.watched_dir.join(name))
                .await
                .is_ok_and(|m| m.is_file())
        {
            // A new regular file is empty or being written: its CLOSE_WRITE follows.
            return Relevance::Ignore;
        }
        match (&event.name, self.dir_mode) {
            (None, _) => Relevance::Rescan,
            (Some(name), true) if is_hidden(name) => Relevance::Ignore,
            (Some(_), true) => Relevance::Rescan,
            (Some(name), false) if Some(name) == self.file_name.as_ref() => Relevance::Rescan,
            (Some(_), false) => Relevance::Ignore,
        }
    }
}

/// The next inotify event, or never without a watcher.
async fn next_event(watcher: &mut Option<Watcher>) -> Option<io::Result<EventOwned>> {
    match watcher {
        Some(w) => w.stream.next().await,
        None => std::future::pending().await,
    }
}

/// Handles one inotify event; returns `true` if the path must be rescanned. Events already
/// queued behind a relevant one are drained without waiting, so one rescan covers them.
async fn handle_event(
    watcher: &mut Option<Watcher>,
    event: Option<io::Result<EventOwned>>,
) -> bool {
    let Some(w) = watcher.as_mut() else {
        return false;
    };
    let lost = |watcher: &mut Option<Watcher>, why: &dyn std::fmt::Display| {
        warn!(error = %why, "inotify watch of static pod manifests ended; relying on rescans until it is set up again");
        *watcher = None;
    };
    let event = match event {
        Some(Ok(event)) => event,
        Some(Err(e)) => {
            lost(watcher, &e);
            return true;
        }
        None => {
            lost(watcher, &"event stream closed");
            return true;
        }
    };
    match w.classify(&event).await {
        Relevance::Ignore => {
            debug!(?event, "ignoring inotify event");
            return false;
        }
        Relevance::WatchLost => {
            debug!(?event, "watched directory went away");
            *watcher = None;
            return true;
        }
        Relevance::Rescan => {
            debug!(?event, "manifest change");
            crate::start_step!(start_path::MANIFEST_EVENT);
        }
    }
    while let Some(next) = w.stream.next().now_or_never() {
        match next {
            Some(Ok(event)) => {
                if w.classify(&event).await == Relevance::WatchLost {
                    *watcher = None;
                    return true;
                }
            }
            Some(Err(e)) => {
                lost(watcher, &e);
                return true;
            }
            None => {
                lost(watcher, &"event stream closed");
                return true;
            }
        }
    }
    true
}

fn is_hidden(name: &OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b".")
}

/// The state of a running file source.
struct State {
    path: PathBuf,
    node_name: String,
    check_frequency: Duration,
    inotify: bool,
    /// First-seen time of each pod currently provided, so rescans keep it stable.
    first_seen: HashMap<PodUid, String>,
    /// The last snapshot sent.
    last_sent: Option<Vec<Pod>>,
    /// The last error logged per file, so an unchanged bad file is logged once.
    reported: HashMap<PathBuf, String>,
    missing_reported: bool,
    watch_failed: bool,
}

impl State {
    fn new(source: FileSource) -> Self {
        Self {
            path: source.path,
            node_name: source.node_name,
            check_frequency: source.check_frequency,
            inotify: source.inotify,
            first_seen: HashMap::new(),
            last_sent: None,
            reported: HashMap::new(),
            missing_reported: false,
            watch_failed: false,
        }
    }

    /// Sets up an inotify watch; logs (once) and returns `None` if that fails.
    async fn watch(&mut self) -> Option<Watcher> {
        let path = self.path.clone();
        let setup = tokio::task::spawn_blocking(move || setup_watch(&path)).await;
        let result = match setup {
            Ok(Ok((inotify, dir_mode, file_name, watched_dir))) => inotify
                .into_event_stream(vec![0u8; 4096])
                .map(|stream| Watcher {
                    stream,
                    dir_mode,
                    file_name,
                    watched_dir,
                }),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(io::Error::other(e)),
        };
        match result {
            Ok(w) => {
                if std::mem::take(&mut self.watch_failed) {
                    info!(path = %self.path.display(), "inotify watch of static pod manifests set up again");
                }
                Some(w)
            }
            Err(e) => {
                if !std::mem::replace(&mut self.watch_failed, true) {
                    warn!(
                        path = %self.path.display(),
                        error = %e,
                        period = ?self.check_frequency,
                        "unable to watch static pod manifests with inotify; falling back to periodic rescans"
                    );
                } else {
                    debug!(path = %self.path.display(), error = %e, "inotify watch still unavailable");
                }
                None
            }
        }
    }

    /// Reads the path and sends a snapshot if it changed. Returns whether the path is a
    /// directory, or `None` if the source must stop (cancelled, or receiver dropped).
    async fn rescan(
        &mut self,
        updates: &mpsc::Sender<PodUpdate>,
        token: &CancellationToken,
    ) -> Option<bool> {
        let (path, node) = (self.path.clone(), self.node_name.clone());
        // Reviewed (issue 16): the scan's blocking reads run on the blocking pool.
        #[allow(clippy::disallowed_methods)]
        let task = tokio::task::spawn_blocking(move || {
            let is_dir = fs::metadata(&path).is_ok_and(|m| m.is_dir());
            (scan(&path, &node), is_dir)
        });
        let joined = tokio::select! {
            biased;
            _ = token.cancelled() => return None,
            joined = task => joined,
        };
        let (result, is_dir) = match joined {
            Ok(r) => r,
            Err(e) => {
                warn!(path = %self.path.display(), error = %e, "static pod manifest scan failed");
                return Some(false);
            }
        };
        let pods = match result {
            Ok(scan) => {
                self.missing_reported = false;
                self.report(&scan.errors);
                scan.pods.into_iter().map(|(_, pod)| pod).collect()
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !std::mem::replace(&mut self.missing_reported, true) {
                    info!(path = %self.path.display(), "static pod path does not exist, ignoring");
                }
                self.report(&[]);
                Vec::new()
            }
            Err(e) => {
                warn!(path = %self.path.display(), error = %e, "unable to read static pod path");
                return Some(is_dir);
            }
        };
        let pods = self.stamp_first_seen(pods);
        if self.last_sent.as_ref() == Some(&pods) {
            return Some(is_dir);
        }
        debug!(pods = pods.len(), "sending static pod snapshot");
        crate::start_step!(start_path::CONFIG_SNAPSHOT);
        self.last_sent = Some(pods.clone());
        let update = PodUpdate {
            pods,
            op: Operation::Set,
            source: FILE_SOURCE.to_owned(),
        };
        tokio::select! {
            biased;
            _ = token.cancelled() => None,
            sent = updates.send(update) => sent.ok().map(|()| is_dir),
        }
    }

    /// Logs each manifest error once per distinct message.
    fn report(&mut self, errors: &[Error]) {
        let mut now = HashMap::with_capacity(errors.len());
        for e in errors {
            let msg = e.to_string();
            if self.reported.get(e.path()) != Some(&msg) {
                warn!(path = %e.path().display(), error = %msg, "could not process manifest file");
            }
            now.insert(e.path().to_owned(), msg);
        }
        self.reported = now;
    }

    /// Sets [`CONFIG_SEEN_ANNOTATION`] to when each pod (by UID) was first read.
    fn stamp_first_seen(&mut self, mut pods: Vec<Pod>) -> Vec<Pod> {
        let mut seen = HashMap::with_capacity(pods.len());
        for pod in &mut pods {
            let uid = pod.uid();
            let at = self
                .first_seen
                .remove(&uid)
                .unwrap_or_else(super::merge::seen_now);
            pod.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(CONFIG_SEEN_ANNOTATION.into(), at.clone());
            seen.insert(uid, at);
        }
        self.first_seen = seen;
        pods
    }
}

/// Creates an inotify instance watching the manifest directory, or for a file or missing
/// path its parent directory. Returns the instance, whether it watches the directory itself,
/// and in parent mode the file name to look for. Blocking: runs in `spawn_blocking`.
// Reviewed (issue 16): only called in spawn_blocking (State::watch).
#[allow(clippy::disallowed_methods)]
fn setup_watch(path: &Path) -> io::Result<(Inotify, bool, Option<OsString>, PathBuf)> {
    let dir_mode = fs::metadata(path).is_ok_and(|m| m.is_dir());
    let (target, file_name) = if dir_mode {
        (path.to_owned(), None)
    } else {
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        (parent, path.file_name().map(OsStr::to_owned))
    };
    let inotify = Inotify::init()?;
    let mask = WatchMask::CREATE
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::DELETE
        | WatchMask::ATTRIB
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF;
    inotify.watches().add(&target, mask)?;
    Ok((inotify, dir_mode, file_name, target))
}

/// The outcome of reading a manifest path once.
#[derive(Debug, Default)]
pub struct Scan {
    /// The valid pods with the file each came from, in file name order, without duplicates.
    pub pods: Vec<(PathBuf, Pod)>,
    /// Why the other entries were left out, in file name order (duplicates last).
    pub errors: Vec<Error>,
}

/// Reads `path` once: a directory's regular, non-hidden files in name order, or one file
/// (upstream `extractFromDir` / `extractFromFile`). Blocking.
///
/// Per-file problems are collected in [`Scan::errors`]; an `Err` means the path itself could
/// not be read (`NotFound` if it does not exist).
// Reviewed (issue 16): blocking by contract; the file source calls it in spawn_blocking.
#[allow(clippy::disallowed_methods)]
pub fn scan(path: &Path, node_name: &str) -> io::Result<Scan> {
    let meta = fs::metadata(path)?;
    let mut out = Scan::default();
    let mut candidates = Vec::new();
    if meta.is_dir() {
        let mut names = Vec::new();
        for entry in fs::read_dir(path)? {
            match entry {
                Ok(e) if is_hidden(&e.file_name()) => {
                    debug!(path = %e.path().display(), "ignoring hidden file");
                }
                Ok(e) => names.push(e.file_name()),
                Err(e) => warn!(path = %path.display(), error = %e, "reading manifest directory"),
            }
        }
        names.sort();
        for name in names {
            let file = path.join(name);
            match fs::metadata(&file) {
                Err(source) => out.errors.push(Error::Read { path: file, source }),
                Ok(m) if !m.is_file() => out.errors.push(Error::NotAFile {
                    path: file,
                    file_type: static_pod::file_type_name(&m.file_type()),
                }),
                Ok(_) => match static_pod::read_manifest(&file, node_name) {
                    Ok(pod) => candidates.push((file, pod)),
                    Err(e) => out.errors.push(e),
                },
            }
        }
    } else if meta.is_file() {
        match static_pod::read_manifest(path, node_name) {
            Ok(pod) => candidates.push((path.to_owned(), pod)),
            Err(e) => out.errors.push(e),
        }
    } else {
        out.errors.push(Error::NotAFile {
            path: path.to_owned(),
            file_type: static_pod::file_type_name(&meta.file_type()),
        });
    }

    // The first file of a full name (and of a UID) wins (upstream `filterInvalidPods`).
    let mut names: HashMap<String, PathBuf> = HashMap::new();
    let mut uids: HashSet<PodUid> = HashSet::new();
    let mut uid_files: HashMap<PodUid, PathBuf> = HashMap::new();
    for (file, pod) in candidates {
        let name = pod.full_name();
        if let Some(first) = names.get(&name) {
            out.errors.push(Error::DuplicateName {
                path: file,
                name,
                first: first.clone(),
            });
            continue;
        }
        let uid = pod.uid();
        if !uids.insert(uid.clone()) {
            let first = uid_files.get(&uid).cloned().unwrap_or_default();
            out.errors.push(Error::DuplicateUid {
                path: file,
                uid: uid.0,
                first,
            });
            continue;
        }
        names.insert(name, file.clone());
        uid_files.insert(uid, file.clone());
        out.pods.push((file, pod));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = "node-1";

    fn manifest(name: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    image: busybox:1.36\n"
        )
    }

    fn write(dir: &Path, file: &str, body: impl AsRef<[u8]>) {
        fs::write(dir.join(file), body).expect("write manifest");
    }

    fn pod_names(scan: &Scan) -> Vec<&str> {
        scan.pods.iter().map(|(_, p)| p.name_or_empty()).collect()
    }

    /// Every bad input of the brief sits next to good manifests: each is rejected with its
    /// file and reason, and the good pods still load.
    #[test]
    fn bad_files_are_rejected_without_affecting_the_others() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        write(d, "00-good.yaml", manifest("good"));
        write(
            d,
            "10-invalid-yaml.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: [\n",
        );
        write(
            d,
            "11-deployment.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
        );
        write(
            d,
            "12-no-containers.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: nc}\nspec: {containers: []}\n",
        );
        write(
            d,
            "13-dup-containers.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: dc}\nspec:\n  containers: [{name: a, image: x}, {name: a, image: y}]\n",
        );
        write(d, "14-bad-name.yaml", manifest("Bad_Name"));
        let mut huge = manifest("huge").into_bytes();
        huge.resize(static_pod::MAX_MANIFEST_BYTES as usize + 1, b'#');
        write(d, "15-huge.yaml", huge);
        write(d, "16-empty.yaml", "");
        write(
            d,
            "17-secret.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: sec}\nspec:\n  containers:\n  - name: a\n    image: x\n    env: [{name: P, valueFrom: {secretKeyRef: {name: s, key: k}}}]\n",
        );
        write(d, "20-dup-name.yaml", manifest("good"));
        write(
            d,
            "30-other.json",
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"other"},"spec":{"containers":[{"name":"c","image":"nginx"}]}}"#,
        );
        write(d, ".hidden.yaml", manifest("hidden"));
        write(d, ".30-other.json.swp", "\u{0}garbage");
        fs::create_dir(d.join("subdir")).expect("mkdir");
        write(&d.join("subdir"), "nested.yaml", manifest("nested"));

        let scan = scan(d, NODE).expect("scan");
        assert_eq!(pod_names(&scan), ["good-node-1", "other-node-1"]);

        let expect: &[(&str, &str)] = &[
            ("10-invalid-yaml.yaml", "couldn't parse as pod"),
            ("11-deployment.yaml", "kind \"Deployment\""),
            ("12-no-containers.yaml", "spec.containers: Required value"),
            (
                "13-dup-containers.yaml",
                "spec.containers[1].name: Duplicate value: \"a\"",
            ),
            (
                "14-bad-name.yaml",
                "metadata.name: Invalid value: \"Bad_Name-node-1\"",
            ),
            ("15-huge.yaml", "manifest is larger than 10485760 bytes"),
            ("16-empty.yaml", "empty manifest"),
            ("17-secret.yaml", "static pods may not reference secrets"),
            ("subdir", "not a regular file (directory)"),
            (
                "20-dup-name.yaml",
                "duplicate pod name \"good-node-1_default\"",
            ),
        ];
        let got: Vec<String> = scan.errors.iter().map(ToString::to_string).collect();
        assert_eq!(got.len(), expect.len(), "{got:#?}");
        for ((file, reason), msg) in expect.iter().zip(&got) {
            let path = d.join(file);
            assert!(msg.starts_with(&format!("{}: ", path.display())), "{msg}");
            assert!(msg.contains(reason), "{msg:?} should contain {reason:?}");
        }
        // The duplicate names the file that won.
        assert!(
            got[9].contains(&d.join("00-good.yaml").display().to_string()),
            "{}",
            got[9]
        );
    }

    #[test]
    fn single_file_and_missing_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("web.yaml");
        assert_eq!(
            scan(&file, NODE).expect_err("missing").kind(),
            io::ErrorKind::NotFound
        );
        fs::write(&file, manifest("web")).expect("write");
        assert_eq!(pod_names(&scan(&file, NODE).expect("scan")), ["web-node-1"]);
        fs::write(&file, "kind: Pod").expect("write");
        let s = scan(&file, NODE).expect("scan");
        assert!(s.pods.is_empty());
        assert_eq!(s.errors.len(), 1);
    }

    #[test]
    fn duplicate_explicit_uids_first_file_wins() {
        let dir = tempfile::tempdir().expect("tempdir");
        let with_uid =
            |name: &str| manifest(name).replace("metadata:\n", "metadata:\n  uid: same\n");
        write(dir.path(), "a.yaml", with_uid("a"));
        write(dir.path(), "b.yaml", with_uid("b"));
        let s = scan(dir.path(), NODE).expect("scan");
        assert_eq!(pod_names(&s), ["a-node-1"]);
        assert!(
            matches!(&s.errors[..], [Error::DuplicateUid { .. }]),
            "{:?}",
            s.errors
        );
    }

    #[test]
    fn path_is_normalised() {
        let s = FileSource::new("/etc/kubernetes/manifests/", NODE);
        assert_eq!(s.path(), Path::new("/etc/kubernetes/manifests"));
    }

    #[tokio::test]
    async fn fifo_is_skipped_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "a.yaml", manifest("a"));
        let fifo = dir.path().join("fifo.yaml");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !status.is_ok_and(|s| s.success()) {
            return; // no mkfifo on this machine
        }
        let path = dir.path().to_owned();
        let s = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::task::spawn_blocking(move || scan(&path, NODE)),
        )
        .await
        .expect("scan does not block on a fifo")
        .expect("join")
        .expect("scan");
        assert_eq!(pod_names(&s), ["a-node-1"]);
        assert!(
            s.errors[0]
                .to_string()
                .contains("not a regular file (fifo)")
        );
    }
}
