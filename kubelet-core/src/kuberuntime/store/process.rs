//! Host processes as containers: what a backend whose containers are plain processes on the
//! node (no image, no namespaces) needs on top of the [`ContainerStore`] — the command a
//! record describes, its log file, exit codes as container runtimes report them, and
//! `ExecSync` with a timeout and an output cap (what containerd's CRI plugin does for a
//! container in `pkg/cri/server/container_{start,execsync}.go`, minus the isolation).
//!
//! Every process runs in its own process group, whose ID is the process's: a backend
//! signals the group (`killpg`) so that a stop reaches what the process started.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};

use super::{ContainerRecord, ContainerStore};
use crate::runtime::{ContainerState, Error, ExecResult, Result};

/// The exit code reported when a process's end could not be observed (containerd's
/// `unknownExitCode`).
pub const UNKNOWN_EXIT_CODE: i32 = 255;

/// The exit code as container runtimes report it: the process's own, or 128 + the signal
/// that ended it.
pub fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or(status.signal().map(|signal| 128 + signal))
        .unwrap_or(UNKNOWN_EXIT_CODE)
}

fn io_error(op: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::Runtime {
        op,
        message: e.to_string(),
    }
}

impl<H> ContainerRecord<H> {
    /// `argv` as a host process with the record's environment (and nothing else) and working
    /// directory, stdin closed, in a new process group. `InvalidSpec` when `argv` is empty:
    /// with no image there is no entrypoint to fall back on.
    pub fn command(&self, argv: &[String]) -> Result<Command> {
        let Some((program, args)) = argv.split_first() else {
            return Err(Error::InvalidSpec {
                field: format!("{}.command", self.status.name),
                reason: "a container without an image needs a command".into(),
            });
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .env_clear()
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .process_group(0);
        if !self.working_dir.is_empty() {
            command.current_dir(&self.working_dir);
        }
        Ok(command)
    }

    /// Spawns the container's own command ([`ContainerRecord::argv`]) with stdout and stderr
    /// appended to its log file (whose directory must exist), opened on the blocking pool.
    pub async fn spawn(&self) -> Result<Child> {
        let log = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.status.log_path)
            .await
            .map_err(io_error("StartContainer"))?
            .into_std()
            .await;
        let stderr = log.try_clone().map_err(io_error("StartContainer"))?;
        self.command(&self.argv)?
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(io_error("StartContainer"))
    }

    /// CRI `ExecSync` on the host: runs `cmd` with the container's environment and working
    /// directory, waits at most `timeout` (zero: no limit; the command is killed when it
    /// passes) and keeps at most `max_output` bytes of each of stdout and stderr (the rest is
    /// read and dropped). An error when the container is not running.
    pub async fn exec(
        &self,
        cmd: &[String],
        timeout: Duration,
        max_output: usize,
    ) -> Result<ExecResult> {
        if self.status.state != ContainerState::Running {
            return Err(Error::Runtime {
                op: "ExecSync",
                message: format!("container {} is not running", self.status.id),
            });
        }
        let mut child = self
            .command(cmd)?
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(io_error("ExecSync"))?;
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let run = async {
            tokio::try_join!(
                read_capped(stdout, max_output),
                read_capped(stderr, max_output),
                child.wait(),
            )
        };
        let finished = if timeout.is_zero() {
            run.await
        } else {
            match tokio::time::timeout(timeout, run).await {
                Ok(finished) => finished,
                Err(_elapsed) => {
                    return Ok(ExecResult {
                        timed_out: true,
                        ..Default::default()
                    });
                }
            }
        };
        let (stdout, stderr, status) = finished.map_err(io_error("ExecSync"))?;
        Ok(ExecResult {
            exit_code: exit_code(status),
            stdout,
            stderr,
            timed_out: false,
        })
    }
}

/// Reads `pipe` to its end, keeping the first `max` bytes.
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>, max: usize) -> std::io::Result<Vec<u8>> {
    let Some(mut pipe) = pipe else {
        return Ok(Vec::new());
    };
    let mut kept = Vec::new();
    (&mut pipe)
        .take(u64::try_from(max).unwrap_or(u64::MAX))
        .read_to_end(&mut kept)
        .await?;
    tokio::io::copy(&mut pipe, &mut tokio::io::sink()).await?;
    Ok(kept)
}

impl ContainerStore<u32> {
    /// CRI `StartContainer` of a host process: spawns the created container `id`
    /// ([`ContainerRecord::spawn`]), marks it running with its process ID as handle, and
    /// records its exit ([`exit_code`]) when it ends. Call within a tokio runtime.
    pub async fn start_process(&self, id: &str) -> Result<()> {
        let record = self.record(id)?;
        if record.status.state != ContainerState::Created {
            // Checked before spawning too, so a second start runs nothing.
            return self.start(id, 0);
        }
        let mut child = record.spawn().await?;
        let started = child
            .id()
            .ok_or_else(|| Error::Runtime {
                op: "StartContainer",
                message: "the process ended before it was recorded".into(),
            })
            .and_then(|pid| self.start(id, pid));
        if let Err(e) = started {
            let _ = child.start_kill();
            return Err(e);
        }
        let (store, id) = (self.clone(), id.to_owned());
        tokio::spawn(async move {
            let code = child.wait().await.map_or(UNKNOWN_EXIT_CODE, exit_code);
            store.mark_exited(&id, code);
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::tests::{config, pod, sandbox, spec};
    use super::*;

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    /// A created container running `sh -c script` with `A=1`, its log in `dir`.
    fn create_sh(store: &ContainerStore<u32>, dir: &Path, script: &str) -> String {
        let pod = pod();
        let mut sandbox = sandbox(&pod);
        sandbox.log_directory = dir.to_owned();
        let spec = spec("app");
        std::fs::create_dir_all(dir.join("app")).expect("log directory");
        let mut config = config(&pod, &spec, &sandbox);
        config.command = strings(&["sh", "-c"]);
        config.args = vec![script.to_owned()];
        config.working_dir = dir.to_string_lossy().into_owned();
        store.create_on_host("sb", &config)
    }

    #[test]
    fn exit_codes_are_the_code_or_128_plus_the_signal() {
        let status = |script| {
            std::process::Command::new("sh")
                .args(["-c", script])
                .status()
                .expect("sh runs")
        };
        assert_eq!(exit_code(status("exit 3")), 3);
        assert_eq!(exit_code(status("kill -TERM $$")), 143);
        assert_eq!(exit_code(status("kill -KILL $$")), 137);
    }

    #[tokio::test]
    async fn start_process_runs_the_command_with_its_env_and_dir_and_records_the_exit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = ContainerStore::<u32>::new();
        let id = create_sh(
            &store,
            dir.path(),
            "echo A=$A HOME=$HOME; pwd; echo oops >&2; exit 3",
        );
        store.start_process(&id).await.expect("starts");
        assert!(
            store
                .get(&id)
                .expect("known")
                .handle
                .is_some_and(|pid| pid > 0)
        );
        assert!(store.wait_exit(&id, None).await);
        let status = store.status(&id).expect("known");
        assert_eq!(status.state, ContainerState::Exited);
        assert_eq!((status.exit_code, status.reason.as_str()), (3, "Error"));
        let log = std::fs::read_to_string(&status.log_path).expect("log written");
        let cwd = dir.path().canonicalize().expect("tempdir path");
        assert_eq!(log, format!("A=1 HOME=\n{}\noops\n", cwd.display()));
    }

    #[tokio::test]
    async fn a_container_starts_once_and_needs_a_command() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = ContainerStore::<u32>::new();
        let id = create_sh(&store, dir.path(), "exit 0");
        store.start_process(&id).await.expect("starts");
        assert!(
            store.start_process(&id).await.is_err(),
            "a started container does not start again"
        );
        assert!(store.wait_exit(&id, None).await);
        let log = std::fs::read_to_string(store.status(&id).expect("known").log_path);
        assert_eq!(
            log.expect("log created").len(),
            0,
            "ran once, printed nothing"
        );

        let record = store.record(&id).expect("known");
        assert!(matches!(
            record.command(&[]),
            Err(Error::InvalidSpec { .. })
        ));
        assert!(matches!(
            store.start_process("nope").await,
            Err(Error::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn exec_runs_with_the_container_env_and_caps_the_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = ContainerStore::<u32>::new();
        let id = create_sh(&store, dir.path(), "exec sleep 60");
        let created = store.record(&id).expect("known");
        let echo = strings(&["sh", "-c", "echo $A; echo 0123456789 >&2; exit 4"]);
        assert!(
            created.exec(&echo, Duration::ZERO, 100).await.is_err(),
            "not running"
        );

        store.start_process(&id).await.expect("starts");
        let running = store.record(&id).expect("known");
        let result = running
            .exec(&echo, Duration::ZERO, 100)
            .await
            .expect("runs");
        assert_eq!(result.exit_code, 4);
        assert_eq!(result.stdout, b"1\n");
        assert_eq!(result.stderr, b"0123456789\n");
        assert!(!result.timed_out);

        let flood = strings(&["sh", "-c", "head -c 1000000 /dev/zero; echo done >&2"]);
        let capped = running
            .exec(&flood, Duration::ZERO, 10)
            .await
            .expect("runs");
        assert_eq!(capped.stdout, [0; 10]);
        assert_eq!(capped.stderr, b"done\n", "the command ran to its end");

        let slow = strings(&["sleep", "30"]);
        let timed_out = running
            .exec(&slow, Duration::from_millis(100), 10)
            .await
            .expect("runs");
        assert!(timed_out.timed_out);

        let pid = store.get(&id).and_then(|r| r.handle).expect("running");
        assert!(
            std::process::Command::new("kill")
                .arg(pid.to_string())
                .status()
                .expect("kill")
                .success()
        );
        assert!(store.wait_exit(&id, None).await);
        assert_eq!(store.status(&id).expect("known").exit_code, 143);
    }
}
