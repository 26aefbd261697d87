//! Termination messages: the file the kubelet mounts at a container's
//! `terminationMessagePath`, and reading it (or the tail of the container's log, with
//! `terminationMessagePolicy: FallbackToLogsOnError`) when the container has exited.
//!
//! Mirrors upstream `makeMounts` (the termination log part), `getTerminationMessage` and
//! `readLastStringFromContainerLogs` of `pkg/kubelet/kuberuntime/kuberuntime_container.go`,
//! with the limits of `pkg/kubelet/container/runtime.go`. The per-pod limit
//! (`MaxPodTerminationMessageLogLength`) is applied by the status manager.

use std::hash::{BuildHasher, Hasher};
use std::io::SeekFrom;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Container;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::api::ContainerStatus;
use super::labels::ContainerAnnotations;

/// The API default of `terminationMessagePath`.
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// The `terminationMessagePolicy` that reads the log when the file is empty.
pub const FALLBACK_TO_LOGS_ON_ERROR: &str = "FallbackToLogsOnError";
/// Upstream `MaxContainerTerminationMessageLength`: at most the last 4 KiB of the file.
pub const MAX_CONTAINER_TERMINATION_MESSAGE_LENGTH: u64 = 1024 * 4;
/// Upstream `MaxContainerTerminationMessageLogLength`: at most the last 2 KiB of the log.
pub const MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LENGTH: usize = 1024 * 2;
/// Upstream `MaxContainerTerminationMessageLogLines`: at most the last 80 log lines.
pub const MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LINES: usize = 80;

/// How much of the end of a log file is read: the last 2 KiB of content of the last 80
/// lines lie within 2 KiB plus 80 line prefixes (`<RFC 3339 time> <stream> <tag> `, about
/// 50 bytes each) of the end, so 16 KiB is plenty and keeps each relist cheap.
const LOG_TAIL_BYTES: u64 = 16 * 1024;

/// The container's `terminationMessagePath`, with the API default when unset; `None` when
/// set to the empty string (nothing is mounted).
pub fn termination_message_path(container: &Container) -> Option<&str> {
    match container.termination_message_path.as_deref() {
        None => Some(DEFAULT_TERMINATION_MESSAGE_PATH),
        Some("") => None,
        Some(p) => Some(p),
    }
}

/// Eight random hex digits (upstream `makeUID`).
fn random_id() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("{:08x}", h.finish() & 0xffff_ffff)
}

/// Creates an empty, world-writable termination log for one container instance under
/// `<pod dir>/containers/<name>/` and returns its path (upstream `makeMounts`: a random name
/// per instance, mode 0666 so that any user in the container can write it).
pub(super) async fn create_termination_log(
    pod_dir: &Path,
    container_name: &str,
) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let dir = pod_dir.join("containers").join(container_name);
    tokio::fs::create_dir_all(&dir).await?;
    let path = dir.join(random_id());
    tokio::fs::File::create(&path).await?;
    tokio::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).await?;
    Ok(path)
}

/// The last `max` bytes of the file at `path` (upstream `tail.ReadAtMost`).
async fn read_at_most(path: &Path, max: u64) -> std::io::Result<(Vec<u8>, bool)> {
    let mut f = tokio::fs::File::open(path).await?;
    let len = f.metadata().await?.len();
    let truncated = len > max;
    if truncated {
        f.seek(SeekFrom::Start(len - max)).await?;
    }
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf).await?;
    Ok((buf, truncated))
}

/// The message from the termination log file mounted at `path`, and whether the log should
/// be read instead (upstream `getTerminationMessage`).
async fn from_file(status: &ContainerStatus, path: &str, fallback_to_logs: bool) -> (String, bool) {
    if path.is_empty() {
        return (String::new(), fallback_to_logs);
    }
    let Some(mount) = status.mounts.iter().find(|m| m.container_path == path) else {
        return (String::new(), fallback_to_logs);
    };
    let host = mount.host_path.as_path();
    match read_at_most(host, MAX_CONTAINER_TERMINATION_MESSAGE_LENGTH).await {
        Ok((data, _)) => {
            let empty = data.is_empty();
            (
                String::from_utf8_lossy(&data).into_owned(),
                fallback_to_logs && empty,
            )
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), fallback_to_logs),
        Err(e) => (
            format!("Error on reading termination log {}: {e}", host.display()),
            false,
        ),
    }
}

/// The content of the last [`MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LINES`] lines of a CRI
/// log (`<time> <stream> <P|F>[:tags] <content>`), at most its last
/// [`MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LENGTH`] bytes.
pub fn log_tail(log: &[u8], starts_mid_line: bool) -> Vec<u8> {
    let mut lines: Vec<&[u8]> = log.split(|b| *b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    if starts_mid_line && !lines.is_empty() {
        lines.remove(0);
    }
    let first = lines
        .len()
        .saturating_sub(MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LINES);
    let mut out = Vec::new();
    for line in &lines[first..] {
        let mut parts = line.splitn(4, |b| *b == b' ');
        let (Some(_time), Some(_stream), Some(tag)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        out.extend_from_slice(parts.next().unwrap_or_default());
        if !tag.starts_with(b"P") {
            out.push(b'\n');
        }
    }
    let keep = out
        .len()
        .saturating_sub(MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LENGTH);
    out.split_off(keep)
}

/// The termination message of an exited container, `None` when there is none (upstream
/// `getTerminationMessage` plus `readLastStringFromContainerLogs`). `exit_code` and
/// `reason` decide whether `FallbackToLogsOnError` reads the log.
pub(super) async fn termination_message(
    status: &ContainerStatus,
    exit_code: i32,
    reason: &str,
) -> Option<String> {
    let annotations = ContainerAnnotations::parse(&status.annotations);
    let fallback_to_logs = annotations.termination_message_policy == FALLBACK_TO_LOGS_ON_ERROR
        && exit_code != 0
        && reason != "ContainerCannotRun";
    let path = if annotations.termination_message_path.is_empty() {
        DEFAULT_TERMINATION_MESSAGE_PATH
    } else {
        annotations.termination_message_path.as_str()
    };
    let (mut message, check_logs) = from_file(status, path, fallback_to_logs).await;
    if check_logs {
        message = match read_at_most(Path::new(&status.log_path), LOG_TAIL_BYTES).await {
            Ok((log, truncated)) => {
                String::from_utf8_lossy(&log_tail(&log, truncated)).into_owned()
            }
            Err(e) => format!("Error on reading termination message from logs: {e}"),
        };
    }
    (!message.is_empty()).then_some(message)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::labels::{
        CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION,
        CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION,
    };
    use super::*;

    fn status(dir: &Path, message_file: Option<&Path>, policy: &str) -> ContainerStatus {
        ContainerStatus {
            annotations: HashMap::from([
                (
                    CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION.into(),
                    "/dev/termination-log".into(),
                ),
                (
                    CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION.into(),
                    policy.into(),
                ),
            ]),
            mounts: message_file
                .map(|f| {
                    vec![crate::runtime::Mount {
                        container_path: "/dev/termination-log".into(),
                        host_path: f.to_owned(),
                        ..Default::default()
                    }]
                })
                .unwrap_or_default(),
            log_path: dir.join("0.log").display().to_string(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn the_file_is_created_world_writable_and_read_up_to_4_kib() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let f = create_termination_log(dir.path(), "app")
            .await
            .expect("create");
        assert!(f.starts_with(dir.path().join("containers").join("app")));
        let mode = std::fs::metadata(&f).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o666);
        let other = create_termination_log(dir.path(), "app")
            .await
            .expect("create");
        assert_ne!(f, other, "one file per instance");

        let st = status(dir.path(), Some(&f), "File");
        assert_eq!(
            termination_message(&st, 1, "Error").await,
            None,
            "empty file"
        );
        std::fs::write(&f, "bye").expect("write");
        assert_eq!(
            termination_message(&st, 0, "Completed").await.as_deref(),
            Some("bye")
        );
        let big = format!("{}{}", "a".repeat(5000), "z".repeat(4096));
        std::fs::write(&f, &big).expect("write");
        let m = termination_message(&st, 0, "Completed").await.expect("msg");
        assert_eq!(m.len(), 4096);
        assert_eq!(m, "z".repeat(4096), "the last 4 KiB");
    }

    #[tokio::test]
    async fn fallback_reads_the_log_tail_only_on_error_and_empty_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = create_termination_log(dir.path(), "app")
            .await
            .expect("create");
        std::fs::write(
            dir.path().join("0.log"),
            "2024-01-01T00:00:00Z stdout F first\n2024-01-01T00:00:01Z stderr P par\n2024-01-01T00:00:02Z stderr F tial\n",
        )
        .expect("log");
        let st = status(dir.path(), Some(&f), FALLBACK_TO_LOGS_ON_ERROR);
        assert_eq!(
            termination_message(&st, 2, "Error").await.as_deref(),
            Some("first\npartial\n")
        );
        assert_eq!(termination_message(&st, 0, "Completed").await, None);
        assert_eq!(
            termination_message(&st, 128, "ContainerCannotRun").await,
            None
        );
        std::fs::write(&f, "from file").expect("write");
        assert_eq!(
            termination_message(&st, 2, "Error").await.as_deref(),
            Some("from file")
        );
        // No mount at all (e.g. no kubelet root dir configured): the log.
        let st = status(dir.path(), None, FALLBACK_TO_LOGS_ON_ERROR);
        assert!(termination_message(&st, 2, "Error").await.is_some());
        let st = status(dir.path(), None, "File");
        assert_eq!(termination_message(&st, 2, "Error").await, None);
    }

    #[test]
    fn log_tail_keeps_80_lines_and_2_kib() {
        let log: String = (0..100)
            .map(|i| format!("2024-01-01T00:00:00Z stdout F line {i}\n"))
            .collect();
        let tail = String::from_utf8(log_tail(log.as_bytes(), false)).expect("utf8");
        assert!(tail.starts_with("line 20\n"), "{tail}");
        assert!(tail.ends_with("line 99\n"));
        let long: String = (0..10)
            .map(|i| {
                format!(
                    "2024-01-01T00:00:00Z stdout F {}\n",
                    i.to_string().repeat(500)
                )
            })
            .collect();
        let tail = log_tail(long.as_bytes(), false);
        assert_eq!(tail.len(), MAX_CONTAINER_TERMINATION_MESSAGE_LOG_LENGTH);
        assert!(tail.ends_with(b"9999\n"));
        // A read that started mid-line drops that line.
        assert_eq!(log_tail(b"ut F cut\nT stdout F ok\n", true), b"ok\n");
    }

    #[test]
    fn default_path() {
        let mut c = Container::default();
        assert_eq!(termination_message_path(&c), Some("/dev/termination-log"));
        c.termination_message_path = Some(String::new());
        assert_eq!(termination_message_path(&c), None);
        c.termination_message_path = Some("/tmp/msg".into());
        assert_eq!(termination_message_path(&c), Some("/tmp/msg"));
    }
}
