//! Tests of [`ContainerLogManager`] over real files and a mock runtime that reopens logs as
//! a CRI runtime does (creates the file again).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::rotation::{ContainerLogManager, Error, Policy};
use crate::runtime::{
    ContainerLog, ContainerState, ContainerSummary, Error as RuntimeError, MockRuntime, RunningPod,
};

/// A runtime with one running container `c1` logging to `log`; `reopen` says whether
/// `ReopenContainerLog` works; counts reopen calls.
fn runtime(log: &Path, reopen: bool, reopens: Arc<AtomicUsize>) -> Arc<MockRuntime> {
    let mut rt = MockRuntime::new();
    rt.expect_get_pods().returning(|_| {
        Ok(vec![RunningPod {
            containers: vec![
                ContainerSummary {
                    id: "c1".into(),
                    state: ContainerState::Running,
                    ..Default::default()
                },
                // Stopped containers are not looked at (no expectation for `c2`).
                ContainerSummary {
                    id: "c2".into(),
                    state: ContainerState::Exited,
                    ..Default::default()
                },
            ],
            ..Default::default()
        }])
    });
    let path = log.to_owned();
    rt.expect_container_log()
        .withf(|id| id == "c1")
        .returning(move |_| {
            Ok(ContainerLog {
                path: path.clone(),
                running: true,
            })
        });
    let path = log.to_owned();
    rt.expect_reopen_container_log().returning(move |_| {
        reopens.fetch_add(1, Ordering::SeqCst);
        if reopen {
            std::fs::File::create(&path).map_err(|e| RuntimeError::Runtime {
                op: "ReopenContainerLog",
                message: e.to_string(),
            })?;
            Ok(())
        } else {
            Err(RuntimeError::Runtime {
                op: "ReopenContainerLog",
                message: "refused".into(),
            })
        }
    });
    Arc::new(rt)
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn policy(max_size: u64, max_files: usize) -> Policy {
    Policy {
        max_size,
        max_files,
    }
}

fn setup() -> (tempfile::TempDir, PathBuf, Arc<AtomicUsize>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("0.log");
    (dir, log, Arc::new(AtomicUsize::new(0)))
}

#[test]
fn max_files_must_be_above_one() {
    let rt = Arc::new(MockRuntime::new());
    assert!(matches!(
        ContainerLogManager::new(rt, policy(1, 1)),
        Err(Error::InvalidMaxFiles(1))
    ));
}

#[tokio::test]
async fn a_log_below_the_maximum_is_left_alone() {
    let (dir, log, reopens) = setup();
    std::fs::write(&log, "x".repeat(99)).expect("write");
    let m = ContainerLogManager::new(runtime(&log, true, reopens.clone()), policy(100, 3))
        .expect("valid policy");
    m.rotate_logs().await.expect("round");
    assert_eq!(names(dir.path()), ["0.log"]);
    assert_eq!(reopens.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_full_log_is_renamed_and_reopened() {
    let (dir, log, reopens) = setup();
    std::fs::write(&log, "x".repeat(100)).expect("write");
    let m = ContainerLogManager::new(runtime(&log, true, reopens.clone()), policy(100, 3))
        .expect("valid policy");
    m.rotate_logs().await.expect("round");
    let files = names(dir.path());
    assert_eq!(files.len(), 2, "{files:?}");
    assert_eq!(files[0], "0.log");
    assert_eq!(std::fs::metadata(&log).expect("new log").len(), 0);
    let rotated = &files[1];
    assert!(
        rotated.len() == "0.log.20240101-000000".len() && rotated.starts_with("0.log.2"),
        "{rotated}"
    );
    assert_eq!(
        std::fs::read(dir.path().join(rotated)).expect("rotated"),
        "x".repeat(100).as_bytes()
    );
    assert_eq!(reopens.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn old_files_are_compressed_and_the_oldest_removed() {
    let (dir, log, reopens) = setup();
    let d = dir.path();
    std::fs::write(d.join("0.log.20240101-000001.gz"), "oldest").expect("write");
    std::fs::write(d.join("0.log.20240101-000002.gz"), "older").expect("write");
    std::fs::write(d.join("0.log.20240101-000003"), "newest rotated\n").expect("write");
    // Leftovers of an interrupted rotation.
    std::fs::write(d.join("0.log.20240101-000002"), "already compressed").expect("write");
    std::fs::write(d.join("0.log.20240101-000003.tmp"), "half").expect("write");
    std::fs::write(&log, "x".repeat(100)).expect("write");
    // 4 files: the new live one, the one just rotated and two older ones.
    let m = ContainerLogManager::new(runtime(&log, true, reopens), policy(100, 4))
        .expect("valid policy");
    m.rotate_logs().await.expect("round");
    let files = names(d);
    assert_eq!(files.len(), 4, "{files:?}");
    assert_eq!(
        &files[..3],
        [
            "0.log",
            "0.log.20240101-000002.gz",
            "0.log.20240101-000003.gz"
        ]
    );
    let gz = std::fs::read(d.join("0.log.20240101-000003.gz")).expect("gz");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut text)
        .expect("gunzip");
    assert_eq!(text, "newest rotated\n");
    // What the reader makes of it: the rotated files in order, then the live one.
    assert_eq!(
        super::files::all_logs(&log).expect("list").len(),
        4,
        "{files:?}"
    );
}

#[tokio::test]
async fn a_refused_reopen_undoes_the_rename() {
    let (dir, log, reopens) = setup();
    std::fs::write(&log, "x".repeat(100)).expect("write");
    let m = ContainerLogManager::new(runtime(&log, false, reopens.clone()), policy(100, 3))
        .expect("valid policy");
    m.rotate_logs().await.expect("round");
    assert_eq!(names(dir.path()), ["0.log"]);
    assert_eq!(std::fs::metadata(&log).expect("log").len(), 100);
    assert_eq!(reopens.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_missing_log_is_reopened() {
    let (dir, log, reopens) = setup();
    let m = ContainerLogManager::new(runtime(&log, true, reopens.clone()), policy(100, 3))
        .expect("valid policy");
    m.rotate_logs().await.expect("round");
    assert_eq!(names(dir.path()), ["0.log"]);
    assert_eq!(reopens.load(Ordering::SeqCst), 1);
}

/// Lets spawned tasks run until they wait (the clock is paused).
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn checks_every_monitor_interval_until_cancelled() {
    let rounds = Arc::new(AtomicUsize::new(0));
    let mut rt = MockRuntime::new();
    let r = rounds.clone();
    rt.expect_get_pods().returning(move |_| {
        r.fetch_add(1, Ordering::SeqCst);
        Ok(Vec::new())
    });
    let m = ContainerLogManager::new(Arc::new(rt), Policy::default()).expect("valid policy");
    let token = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(m.run(token.clone()));
    settle().await;
    assert_eq!(rounds.load(Ordering::SeqCst), 1);
    tokio::time::advance(Duration::from_secs(9)).await;
    settle().await;
    assert_eq!(rounds.load(Ordering::SeqCst), 1);
    tokio::time::advance(Duration::from_secs(1)).await;
    settle().await;
    assert_eq!(rounds.load(Ordering::SeqCst), 2);
    token.cancel();
    task.await.expect("stops");
}
