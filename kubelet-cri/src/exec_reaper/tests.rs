//! Sessions over a fake `/proc`, with SIGKILL recorded instead of sent.

use std::path::Path;
use std::sync::{Arc, Mutex};

use kubelet_core::runtime::{ClosedBy, ExecSession};

use super::ExecReaper;
use super::procfs::Procfs;
use super::procfs::fake::{Fake, write};
use super::session::Target;

const NS: &str = "pid:[4026532281]";
const CG: &str = "0::/kubepods/pod1/ctr\n";
const SHIM: i32 = 90;

/// A process of the container: `parent` the shim for an exec.
fn process(root: &Path, pid: i32, parent: i32, cmdline: &[&str]) {
    write(
        root,
        &Fake {
            pid,
            ppid: parent,
            pgrp: pid,
            start: u64::try_from(pid).expect("positive"),
            ns: NS,
            cgroup: CG,
            cmdline,
        },
    );
}

fn gone(root: &Path, pid: i32) {
    std::fs::remove_dir_all(root.join(pid.to_string())).expect("remove");
}

/// A container (init 100, `sleep 600` of its own as 101) and a reaper that records kills.
fn fixture() -> (tempfile::TempDir, ExecReaper, Arc<Mutex<Vec<Target>>>) {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        &Fake {
            pid: SHIM,
            ppid: 1,
            pgrp: SHIM,
            start: 1,
            ns: "pid:[1]",
            cgroup: "0::/system\n",
            cmdline: &["shim"],
        },
    );
    process(dir.path(), 100, SHIM, &["sh"]);
    process(dir.path(), 101, 100, &["sleep", "600"]);
    let killed = Arc::new(Mutex::new(Vec::new()));
    let record = killed.clone();
    let reaper = ExecReaper::new(
        Procfs::new(dir.path()),
        Arc::new(move |target| {
            record.lock().expect("lock").push(target);
            Ok(())
        }),
    );
    (dir, reaper, killed)
}

fn sleep_600() -> Vec<String> {
    vec!["sleep".into(), "600".into()]
}

fn taken(killed: &Mutex<Vec<Target>>) -> Vec<Target> {
    std::mem::take(&mut *killed.lock().expect("lock"))
}

#[tokio::test]
async fn a_session_whose_client_left_kills_its_process_and_what_it_started() {
    let (dir, reaper, killed) = fixture();
    let mut session = reaper
        .begin_with_init(100, "ctr", &sleep_600())
        .await
        .expect("begins");
    // The runtime starts the exec (the shim's child), which starts a child of its own.
    process(dir.path(), 200, SHIM, &["sleep", "600"]);
    process(dir.path(), 201, 200, &["cat"]);
    session.watch().await;
    Box::new(session).end(ClosedBy::Client).await;
    let mut killed = taken(&killed);
    killed.sort_by_key(|t| format!("{t:?}"));
    assert_eq!(
        killed,
        [
            Target::Group(200),
            Target::Process(200),
            Target::Process(201)
        ],
        "not the container's own sleep (101)"
    );
}

#[tokio::test]
async fn a_concurrent_session_of_the_same_command_keeps_its_process() {
    let (dir, reaper, killed) = fixture();
    let cmd = sleep_600();
    let mut first = reaper
        .begin_with_init(100, "ctr", &cmd)
        .await
        .expect("begins");
    process(dir.path(), 200, SHIM, &["sleep", "600"]);
    first.watch().await;
    // The second session begins once the first one's process was seen, and its exec
    // starts.
    let mut second = reaper
        .begin_with_init(100, "ctr", &cmd)
        .await
        .expect("begins");
    process(dir.path(), 300, SHIM, &["sleep", "600"]);
    second.watch().await;

    Box::new(second).end(ClosedBy::Client).await;
    assert_eq!(taken(&killed), [Target::Process(300), Target::Group(300)]);
    gone(dir.path(), 300);
    Box::new(first).end(ClosedBy::Client).await;
    assert_eq!(taken(&killed), [Target::Process(200), Target::Group(200)]);
}

#[tokio::test]
async fn the_next_session_of_the_same_command_waits_for_the_first_to_see_its_process() {
    let (dir, reaper, _) = fixture();
    let cmd = sleep_600();
    let mut first = reaper
        .begin_with_init(100, "ctr", &cmd)
        .await
        .expect("begins");
    let second = reaper.begin_with_init(100, "ctr", &cmd);
    tokio::pin!(second);
    assert!(
        futures::poll!(second.as_mut()).is_pending(),
        "the first session holds the window"
    );
    // Another command is not held up.
    reaper
        .begin_with_init(100, "ctr", &["ls".to_owned()])
        .await
        .expect("begins");
    process(dir.path(), 200, SHIM, &["sleep", "600"]);
    first.watch().await;
    second.await.expect("begins");
}

#[tokio::test]
async fn an_ended_process_or_a_reused_pid_is_not_killed() {
    let (dir, reaper, killed) = fixture();
    let mut session = reaper
        .begin_with_init(100, "ctr", &sleep_600())
        .await
        .expect("begins");
    process(dir.path(), 200, SHIM, &["sleep", "600"]);
    session.watch().await;
    // The exec ended and its pid went to another process (another start time).
    gone(dir.path(), 200);
    write(
        dir.path(),
        &Fake {
            pid: 200,
            ppid: SHIM,
            pgrp: 200,
            start: 999,
            ns: NS,
            cgroup: CG,
            cmdline: &["sleep", "600"],
        },
    );
    Box::new(session).end(ClosedBy::Runtime).await;
    assert_eq!(taken(&killed), []);
}

#[tokio::test]
async fn a_session_whose_runtime_closed_before_its_process_was_seen_kills_nothing() {
    let (_dir, reaper, killed) = fixture();
    let session = reaper
        .begin_with_init(100, "ctr", &sleep_600())
        .await
        .expect("begins");
    Box::new(session).end(ClosedBy::Runtime).await;
    assert_eq!(taken(&killed), []);
}

#[tokio::test]
async fn a_container_that_cannot_be_seen_gives_an_error() {
    let (_dir, reaper, _) = fixture();
    assert!(
        reaper
            .begin_with_init(4242, "ctr", &sleep_600())
            .await
            .is_err()
    );
}
