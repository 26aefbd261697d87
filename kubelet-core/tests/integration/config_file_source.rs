//! FileSource + PodConfig against a real directory: the initial snapshot, inotify-driven
//! changes (new file, edit, delete, valid → invalid), the periodic rescan and the missing-path
//! case.
//!
//! Files are written atomically (a dotfile renamed into place), as operators should, so each
//! step is one change. Waits use a generous timeout on the channel, never a fixed sleep.

// Test code, on the test's own runtime: blocking file calls are fine here.
#![allow(clippy::disallowed_methods)]

use std::fs;
use std::path::Path;
use std::time::Duration;

use kubelet_core::PodExt;
use kubelet_core::config::{
    CONFIG_SEEN_ANNOTATION, FILE_SOURCE, FileSource, Operation, PodConfig, PodSource, PodUpdate,
    SourcesReady,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const NODE: &str = "node-1";
const WAIT: Duration = Duration::from_secs(10);
/// Long enough that only inotify can explain a prompt update.
const NO_RESCAN: Duration = Duration::from_secs(3600);

fn manifest(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    image: {image}\n"
    )
}

fn manifest_with_uid(name: &str, uid: &str, image: &str) -> String {
    manifest(name, image).replace("metadata:\n", &format!("metadata:\n  uid: {uid}\n"))
}

/// Writes `body` to `dir/file` atomically.
fn put(dir: &Path, file: &str, body: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    fs::write(&tmp, body).expect("write temp manifest");
    fs::rename(&tmp, dir.join(file)).expect("rename manifest into place");
}

async fn next(rx: &mut mpsc::Receiver<PodUpdate>) -> PodUpdate {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("an update within 10 s")
        .expect("channel open")
}

fn names(u: &PodUpdate) -> Vec<&str> {
    u.pods.iter().map(|p| p.name_or_empty()).collect()
}

struct Harness {
    updates: mpsc::Receiver<PodUpdate>,
    ready: SourcesReady,
    token: CancellationToken,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

fn start(source: FileSource) -> Harness {
    let token = CancellationToken::new();
    let (mut config, updates) = PodConfig::new();
    let ready = config.sources_ready();
    let tx = config.channel(source.name());
    tokio::spawn(Box::new(source).run(tx, token.child_token()));
    tokio::spawn(config.run(token.child_token()));
    Harness {
        updates,
        ready,
        token,
    }
}

#[tokio::test]
async fn initial_set_then_inotify_add_update_remove() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    put(d, "a.yaml", &manifest("a", "busybox:1.36"));
    put(
        d,
        "b.yaml",
        &manifest_with_uid("b", "uid-b", "busybox:1.36"),
    );
    let mut h = start(FileSource::new(d, NODE).check_frequency(NO_RESCAN));

    // Initial snapshot.
    let u = next(&mut h.updates).await;
    assert_eq!((u.op, u.source.as_str()), (Operation::Add, FILE_SOURCE));
    assert_eq!(names(&u), ["a-node-1", "b-node-1"]);
    assert!(h.ready.seen_all_sources());
    let seen_a = u.pods[0]
        .annotation(CONFIG_SEEN_ANNOTATION)
        .map(str::to_owned);
    assert!(seen_a.is_some());

    // A new manifest is picked up promptly through inotify (the rescan is an hour away).
    put(d, "c.yaml", &manifest("c", "busybox:1.36"));
    let u = next(&mut h.updates).await;
    assert_eq!((u.op, names(&u)), (Operation::Add, vec!["c-node-1"]));

    // Editing a manifest with an explicit UID is an UPDATE of the same pod.
    put(
        d,
        "b.yaml",
        &manifest_with_uid("b", "uid-b", "busybox:1.37"),
    );
    let u = next(&mut h.updates).await;
    assert_eq!((u.op, names(&u)), (Operation::Update, vec!["b-node-1"]));
    assert_eq!(u.pods[0].uid().as_str(), "uid-b");
    let image = u.pods[0].containers()[0].image.as_deref();
    assert_eq!(image, Some("busybox:1.37"));

    // Without an explicit UID the UID is a hash of the content, so an edit replaces the pod
    // (REMOVE old, ADD new), exactly as upstream.
    put(d, "a.yaml", &manifest("a", "busybox:1.37"));
    let u = next(&mut h.updates).await;
    assert_eq!((u.op, names(&u)), (Operation::Remove, vec!["a-node-1"]));
    let old_uid = u.pods[0].uid();
    let u = next(&mut h.updates).await;
    assert_eq!((u.op, names(&u)), (Operation::Add, vec!["a-node-1"]));
    assert_ne!(u.pods[0].uid(), old_uid);

    // Deleting a manifest removes its pod.
    fs::remove_file(d.join("c.yaml")).expect("delete");
    let u = next(&mut h.updates).await;
    assert_eq!((u.op, names(&u)), (Operation::Remove, vec!["c-node-1"]));

    // Dotfiles never count.
    put(d, ".hidden.yaml", &manifest("hidden", "busybox:1.36"));
    // Valid → invalid: the pod disappears from the snapshot and is removed (upstream
    // `replaceStore` semantics, reliability.md 3.1); the other pod is untouched.
    put(
        d,
        "b.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: []}\n",
    );
    let u = next(&mut h.updates).await;
    assert_eq!((u.op, names(&u)), (Operation::Remove, vec!["b-node-1"]));

    // Fixing it brings the pod back.
    put(
        d,
        "b.yaml",
        &manifest_with_uid("b", "uid-b", "busybox:1.37"),
    );
    let u = next(&mut h.updates).await;
    assert_eq!((u.op, names(&u)), (Operation::Add, vec!["b-node-1"]));
    assert!(
        h.updates.try_recv().is_err(),
        "no further updates, in particular none for the dotfile"
    );
}

#[tokio::test]
async fn missing_path_is_ready_and_picked_up_when_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifests = dir.path().join("manifests");
    let mut h = start(FileSource::new(&manifests, NODE).check_frequency(NO_RESCAN));

    // An empty snapshot marks the source ready.
    let u = next(&mut h.updates).await;
    assert_eq!((u.op, u.pods.len()), (Operation::Add, 0));
    assert!(h.ready.seen_all_sources());

    // The directory appears (noticed through the parent's watch), then a manifest in it
    // (noticed through the new watch on the directory itself).
    fs::create_dir(&manifests).expect("mkdir");
    put(&manifests, "a.yaml", &manifest("a", "busybox:1.36"));
    let u = next(&mut h.updates).await;
    assert_eq!((u.op, names(&u)), (Operation::Add, vec!["a-node-1"]));
    put(&manifests, "b.yaml", &manifest("b", "busybox:1.36"));
    let u = next(&mut h.updates).await;
    assert_eq!((u.op, names(&u)), (Operation::Add, vec!["b-node-1"]));
}

#[tokio::test]
async fn single_file_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("web.yaml");
    put(dir.path(), "web.yaml", &manifest("web", "nginx:1.27"));
    put(dir.path(), "other.yaml", &manifest("other", "nginx:1.27"));
    let mut h = start(FileSource::new(&file, NODE).check_frequency(NO_RESCAN));
    let u = next(&mut h.updates).await;
    assert_eq!((u.op, names(&u)), (Operation::Add, vec!["web-node-1"]));

    // Atomic replacement of the file is seen through the parent directory's watch; a
    // valid → invalid edit removes the pod here too.
    put(dir.path(), "web.yaml", "kind: Pod\n");
    let u = next(&mut h.updates).await;
    assert_eq!((u.op, names(&u)), (Operation::Remove, vec!["web-node-1"]));
}

/// Without inotify, a change is seen at the next periodic rescan and not before; an unchanged
/// directory is not re-sent (the first-seen annotation is stable across rescans).
#[tokio::test(start_paused = true)]
async fn periodic_rescan_without_inotify() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_owned();
    put(&d, "a.yaml", &manifest("a", "busybox:1.36"));
    let period = Duration::from_secs(20);
    let source = FileSource::new(&d, NODE)
        .check_frequency(period)
        .inotify(false);
    let (tx, mut rx) = mpsc::channel(8);
    let token = CancellationToken::new();
    let task = tokio::spawn(Box::new(source).run(tx, token.clone()));

    let start = tokio::time::Instant::now();
    let first = next(&mut rx).await;
    assert_eq!(
        (first.op, names(&first)),
        (Operation::Set, vec!["a-node-1"])
    );

    // Several periods pass with nothing changed: nothing is sent.
    let quiet = tokio::time::timeout(period * 3 + Duration::from_secs(1), rx.recv()).await;
    assert!(quiet.is_err(), "unchanged snapshot re-sent: {quiet:?}");

    // A new file is seen only at the next tick (t = 80 s).
    put(&d, "b.yaml", &manifest("b", "busybox:1.36"));
    let early = tokio::time::timeout(Duration::from_secs(18), rx.recv()).await;
    assert!(early.is_err(), "update before the rescan: {early:?}");
    let u = next(&mut rx).await;
    assert_eq!(
        (u.op, names(&u)),
        (Operation::Set, vec!["a-node-1", "b-node-1"])
    );
    assert!(start.elapsed() >= period * 4, "{:?}", start.elapsed());
    // The first-seen time of the unchanged pod is kept.
    assert_eq!(
        u.pods[0].annotation(CONFIG_SEEN_ANNOTATION),
        first.pods[0].annotation(CONFIG_SEEN_ANNOTATION)
    );

    token.cancel();
    task.await.expect("source stops on cancel");
}

/// Two manifests with the same pod name: the first file wins, the second never reaches the
/// merger; the SET holds one pod.
#[tokio::test]
async fn duplicate_names_across_files_first_wins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    put(d, "a.yaml", &manifest("web", "nginx:1.27"));
    put(d, "b.yaml", &manifest("web", "nginx:1.28"));
    let (tx, mut rx) = mpsc::channel(8);
    let token = CancellationToken::new();
    tokio::spawn(Box::new(FileSource::new(d, NODE)).run(tx, token.clone()));
    let u = next(&mut rx).await;
    assert_eq!(names(&u), ["web-node-1"]);
    assert_eq!(
        u.pods[0].containers()[0].image.as_deref(),
        Some("nginx:1.27")
    );
    token.cancel();
}
