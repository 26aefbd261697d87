//! Tests of [`read_logs`] over real files: every option, partial lines, rotated files.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::jiff::Timestamp;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use super::*;
use crate::runtime::{ContainerLog, MockRuntime};

/// A CRI line at second `sec` of 2024-01-01T00:00.
fn cri(sec: u32, stream: &str, tag: &str, msg: &str) -> String {
    format!("2024-01-01T00:00:{sec:02}.000000001Z {stream} {tag} {msg}\n")
}

fn ts(sec: u32) -> Timestamp {
    format!("2024-01-01T00:00:{sec:02}.000000001Z")
        .parse()
        .expect("test step")
}

/// A runtime whose container runs while `running` is set.
fn runtime(running: Arc<AtomicBool>) -> MockRuntime {
    let mut rt = MockRuntime::new();
    rt.expect_container_log().returning(move |_| {
        Ok(ContainerLog {
            path: PathBuf::new(),
            running: running.load(Ordering::SeqCst),
        })
    });
    rt
}

async fn read(path: &Path, opts: LogOptions) -> String {
    let rt = runtime(Arc::new(AtomicBool::new(false)));
    let mut out = Vec::new();
    read_logs(path, "c1", &opts, &rt, &mut out)
        .await
        .expect("test step");
    String::from_utf8(out).expect("test step")
}

fn ten_lines(dir: &Path) -> PathBuf {
    let path = dir.join("0.log");
    let body: String = (0..10)
        .map(|i| {
            cri(
                i,
                if i % 2 == 0 { "stdout" } else { "stderr" },
                "F",
                &format!("line {i}"),
            )
        })
        .collect();
    std::fs::write(&path, body).expect("test step");
    path
}

fn lines(from: u32, to: u32) -> String {
    (from..to).map(|i| format!("line {i}\n")).collect()
}

#[tokio::test]
async fn every_query_option() {
    let dir = tempfile::tempdir().expect("test step");
    let path = ten_lines(dir.path());
    assert_eq!(read(&path, LogOptions::default()).await, lines(0, 10));
    let tail = |n| LogOptions {
        tail: Some(n),
        ..Default::default()
    };
    assert_eq!(read(&path, tail(3)).await, lines(7, 10));
    assert_eq!(read(&path, tail(0)).await, "");
    assert_eq!(read(&path, tail(100)).await, lines(0, 10));
    let limit = LogOptions {
        bytes: Some(10),
        ..Default::default()
    };
    assert_eq!(read(&path, limit).await, "line 0\nlin");
    let since = LogOptions {
        since: Some(ts(8)),
        ..Default::default()
    };
    assert_eq!(read(&path, since).await, lines(8, 10));
    let stamps = LogOptions {
        timestamps: true,
        tail: Some(1),
        ..Default::default()
    };
    assert_eq!(
        read(&path, stamps).await,
        "2024-01-01T00:00:09.000000001Z line 9\n"
    );
}

#[test]
fn options_from_the_api_as_upstream() {
    let now: Timestamp = "2024-01-01T01:00:00Z".parse().expect("test step");
    let api = PodLogOptions {
        tail_lines: Some(5),
        limit_bytes: Some(100),
        since_seconds: Some(60),
        follow: true,
        timestamps: true,
        ..Default::default()
    };
    assert_eq!(
        LogOptions::new(&api, now),
        LogOptions {
            tail: Some(5),
            bytes: Some(100),
            since: Some("2024-01-01T00:59:00Z".parse().expect("test step")),
            follow: true,
            timestamps: true,
        }
    );
    let api = PodLogOptions {
        since_time: Some("2024-01-01T00:30:00Z".parse().expect("test step")),
        ..Default::default()
    };
    assert_eq!(LogOptions::new(&api, now).since, api.since_time);
    assert_eq!(api.validate(), Ok(()));
    let bad = |f: fn(&mut PodLogOptions)| {
        let mut o = PodLogOptions::default();
        f(&mut o);
        o.validate()
    };
    assert_eq!(
        bad(|o| o.tail_lines = Some(-1)),
        Err(InvalidOptions::TailLines(-1))
    );
    assert_eq!(
        bad(|o| o.limit_bytes = Some(0)),
        Err(InvalidOptions::LimitBytes(0))
    );
    assert_eq!(
        bad(|o| o.since_seconds = Some(0)),
        Err(InvalidOptions::SinceSeconds(0))
    );
    assert_eq!(
        bad(|o| {
            o.since_seconds = Some(1);
            o.since_time = Some(Timestamp::UNIX_EPOCH);
        }),
        Err(InvalidOptions::BothSince)
    );
}

#[tokio::test]
async fn partial_lines_are_joined_and_bad_lines_skipped() {
    let dir = tempfile::tempdir().expect("test step");
    let path = dir.path().join("0.log");
    let body = [
        cri(1, "stdout", "P", "hel"),
        cri(1, "stdout", "P", "lo "),
        cri(1, "stdout", "F", "world"),
        "garbage\n".to_owned(),
        cri(2, "stderr", "F", "done"),
    ]
    .concat();
    std::fs::write(&path, body).expect("test step");
    assert_eq!(
        read(&path, LogOptions::default()).await,
        "hello world\ndone\n"
    );
}

#[tokio::test]
async fn docker_json_logs_are_read() {
    let dir = tempfile::tempdir().expect("test step");
    let path = dir.path().join("0.log");
    std::fs::write(
        &path,
        "{\"log\":\"a\\n\",\"stream\":\"stdout\",\"time\":\"2024-01-01T00:00:00Z\"}\n",
    )
    .expect("test step");
    assert_eq!(read(&path, LogOptions::default()).await, "a\n");
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).expect("test step");
    enc.finish().expect("test step")
}

/// Lines 0-3 in a compressed rotated file, 4-6 in the newest rotated one (with a partial line
/// split across the rotation), 7-9 live; plus leftovers of an interrupted rotation.
fn rotated(dir: &Path) -> PathBuf {
    let block = |from, to| -> String {
        (from..to)
            .map(|i| cri(i, "stdout", "F", &format!("line {i}")))
            .collect()
    };
    let path = dir.join("0.log");
    std::fs::write(
        dir.join("0.log.20240101-000001.gz"),
        gzip(block(0, 4).as_bytes()),
    )
    .expect("test step");
    // An uncompressed copy of a compressed one, and a temporary file: not logs.
    std::fs::write(dir.join("0.log.20240101-000001"), "stale\n").expect("test step");
    std::fs::write(dir.join("0.log.20240101-000002.tmp"), "tmp\n").expect("test step");
    std::fs::write(
        dir.join("0.log.20240101-000005"),
        block(4, 6) + &cri(6, "stdout", "P", "li"),
    )
    .expect("test step");
    std::fs::write(&path, cri(6, "stdout", "F", "ne 6") + &block(7, 10)).expect("test step");
    path
}

#[tokio::test]
async fn rotated_files_are_read_oldest_first() {
    let dir = tempfile::tempdir().expect("test step");
    let path = rotated(dir.path());
    assert_eq!(
        files::all_logs(&path).expect("test step"),
        vec![
            dir.path().join("0.log.20240101-000001.gz"),
            dir.path().join("0.log.20240101-000005"),
            path.clone(),
        ]
    );
    assert_eq!(read(&path, LogOptions::default()).await, lines(0, 10));
}

#[tokio::test]
async fn tail_crosses_rotation_boundaries() {
    let dir = tempfile::tempdir().expect("test step");
    let path = rotated(dir.path());
    let tail = |n| LogOptions {
        tail: Some(n),
        ..Default::default()
    };
    // Live file: 4 physical lines ("ne 6" and 7-9).
    assert_eq!(
        read(&path, tail(4)).await,
        "ne 6\n".to_owned() + &lines(7, 10)
    );
    // One more line: the partial "li" of the rotated file joins "ne 6".
    assert_eq!(read(&path, tail(5)).await, lines(6, 10));
    // Into the compressed file.
    assert_eq!(read(&path, tail(8)).await, lines(3, 10));
    assert_eq!(read(&path, tail(50)).await, lines(0, 10));
}

async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> String {
    let mut s = String::new();
    r.read_line(&mut s).await.expect("test step");
    s
}

fn append(path: &Path, data: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("test step");
    f.write_all(data.as_bytes()).expect("test step");
}

#[tokio::test]
async fn follow_streams_across_a_rotation_until_the_container_exits() {
    let dir = tempfile::tempdir().expect("test step");
    let path = dir.path().join("0.log");
    std::fs::write(&path, cri(0, "stdout", "F", "first")).expect("test step");
    let running = Arc::new(AtomicBool::new(true));
    let rt = runtime(running.clone());
    let (mut tx, rx) = tokio::io::duplex(1024);
    let opts = LogOptions {
        follow: true,
        tail: Some(1),
        ..Default::default()
    };
    let reader = {
        let path = path.clone();
        tokio::spawn(async move { read_logs(&path, "c1", &opts, &rt, &mut tx).await })
    };
    let mut rx = BufReader::new(rx);
    assert_eq!(next_line(&mut rx).await, "first\n");
    // A line written in two pieces comes out once complete.
    append(&path, "2024-01-01T00:00:01.000000001Z stdout F sec");
    append(&path, "ond\n");
    assert_eq!(next_line(&mut rx).await, "second\n");
    // Rotation: the file is renamed and the runtime reopens a new one.
    append(&path, &cri(2, "stdout", "F", "before rotation"));
    std::fs::rename(&path, dir.path().join("0.log.20240101-000003")).expect("test step");
    std::fs::write(&path, cri(3, "stdout", "F", "after rotation")).expect("test step");
    assert_eq!(next_line(&mut rx).await, "before rotation\n");
    assert_eq!(next_line(&mut rx).await, "after rotation\n");
    // The container exits after a last line: it is written, then the stream ends.
    append(&path, &cri(4, "stdout", "F", "last"));
    running.store(false, Ordering::SeqCst);
    assert_eq!(next_line(&mut rx).await, "last\n");
    let mut rest = String::new();
    rx.read_to_string(&mut rest).await.expect("test step");
    assert_eq!(rest, "");
    reader.await.expect("test step").expect("test step");
}

/// A chmod of the live file or the removal of a rotated one (inotify ATTRIB, DELETE_SELF,
/// upstream's reasons to reopen) do not write the live file again.
#[tokio::test]
async fn follow_writes_each_line_once_across_chmod_and_removal_of_rotated_files() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("test step");
    let path = dir.path().join("0.log");
    let rotated = dir.path().join("0.log.20240101-000001");
    std::fs::write(&path, cri(0, "stdout", "F", "first")).expect("test step");
    let running = Arc::new(AtomicBool::new(true));
    let rt = runtime(running.clone());
    let (mut tx, rx) = tokio::io::duplex(1024);
    let opts = LogOptions {
        follow: true,
        ..Default::default()
    };
    let reader = {
        let path = path.clone();
        tokio::spawn(async move { read_logs(&path, "c1", &opts, &rt, &mut tx).await })
    };
    let mut rx = BufReader::new(rx);
    assert_eq!(next_line(&mut rx).await, "first\n");
    std::fs::rename(&path, &rotated).expect("test step");
    std::fs::write(&path, cri(1, "stdout", "F", "second")).expect("test step");
    assert_eq!(next_line(&mut rx).await, "second\n");
    std::fs::remove_file(&rotated).expect("test step");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("test step");
    append(&path, &cri(2, "stdout", "F", "third"));
    assert_eq!(next_line(&mut rx).await, "third\n");
    append(&path, &cri(3, "stdout", "F", "last"));
    running.store(false, Ordering::SeqCst);
    let mut rest = String::new();
    rx.read_to_string(&mut rest).await.expect("test step");
    assert_eq!(rest, "last\n");
    reader.await.expect("test step").expect("test step");
}

#[tokio::test]
async fn follow_stops_when_the_client_goes_away() {
    let dir = tempfile::tempdir().expect("test step");
    let path = dir.path().join("0.log");
    std::fs::write(&path, cri(0, "stdout", "F", "first")).expect("test step");
    let rt = runtime(Arc::new(AtomicBool::new(true)));
    let (mut tx, rx) = tokio::io::duplex(1024);
    let opts = LogOptions {
        follow: true,
        ..Default::default()
    };
    let reader = {
        let path = path.clone();
        tokio::spawn(async move { read_logs(&path, "c1", &opts, &rt, &mut tx).await })
    };
    let mut rx = BufReader::new(rx);
    assert_eq!(next_line(&mut rx).await, "first\n");
    drop(rx);
    append(&path, &cri(1, "stdout", "F", "nobody reads this"));
    assert!(matches!(
        reader.await.expect("test step"),
        Err(Error::Write(_))
    ));
}
