//! Lifecycle hook handlers (postStart, preStop): the [`HandlerRunner`] the pod engine runs
//! them with, and a default that handles `exec` and `sleep` itself.
//!
//! Mirrors upstream `pkg/kubelet/lifecycle/handlers.go` (`HandlerRunner`, `handlerRunner.Run`,
//! `runSleepHandler`) and the `CommandRunner` of `pkg/kubelet/container/runtime.go`. The
//! httpGet handler needs an HTTP client, which this crate does not have: `kubelet-probe`
//! implements a [`HandlerRunner`] with it (as upstream uses `httpprobe`); the default here
//! reports httpGet hooks as failed with [`HookError::NoHttpRunner`].

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, ExecAction, LifecycleHandler, Pod};

use crate::pod::PodExt;
use crate::runtime::{self, ExecResult};

/// What hooks need from the runtime (upstream `kubecontainer.CommandRunner`, plus the pod
/// IPs upstream's handler runner reads through its pod status provider).
#[async_trait]
pub trait CommandRunner: Send + Sync {
    /// Runs `cmd` in the container and waits for it, at most `timeout` (zero: no timeout)
    /// (upstream `RunInContainer`).
    async fn run_in_container(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> runtime::Result<ExecResult>;

    /// The pod's IPs, primary first: where an httpGet hook without `host` goes.
    async fn pod_ips(&self, pod: &Pod) -> runtime::Result<Vec<String>>;
}

/// The container a hook runs for.
#[derive(Clone, Copy, Debug)]
pub struct HookTarget<'a> {
    /// The pod (restored from the container's annotations for a pod the kubelet no longer
    /// knows).
    pub pod: &'a Pod,
    /// The container's spec.
    pub container: &'a Container,
    /// The container's runtime ID.
    pub container_id: &'a str,
}

/// Why a hook failed, with upstream's messages (they end up in events and in the
/// `PostStartHookError` waiting message).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HookError {
    /// The exec handler's command failed, timed out or could not be run.
    #[error(
        "Exec lifecycle hook ([{command}]) for Container {container:?} in Pod {pod:?} failed - error: {error}, message: {output:?}"
    )]
    Exec {
        /// The command, words joined by spaces (Go's `%v` of a string slice).
        command: String,
        /// Container name.
        container: String,
        /// `<name>_<namespace>(<uid>)`.
        pod: String,
        /// What went wrong.
        error: String,
        /// The command's stdout then stderr.
        output: String,
    },
    /// The httpGet handler's request could not be made.
    #[error(
        "HTTP lifecycle hook ({path}) for Container {container:?} in Pod {pod:?} failed - error: {error}"
    )]
    Http {
        /// The request path.
        path: String,
        /// Container name.
        container: String,
        /// `<name>_<namespace>(<uid>)`.
        pod: String,
        /// What went wrong.
        error: String,
    },
    /// An httpGet handler, and the runner has no HTTP client.
    #[error("no HTTP hook runner configured: cannot run the httpGet hook of container {0:?}")]
    NoHttpRunner(String),
    /// The handler names no action.
    #[error("Cannot run handler: invalid handler: no exec, httpGet or sleep action")]
    InvalidHandler,
}

/// Runs lifecycle hook handlers (upstream `lifecycle.HandlerRunner`).
///
/// Cancel safe: dropping the future abandons the hook.
#[async_trait]
pub trait HandlerRunner: Send + Sync {
    /// Runs `handler` for `target`, with `runtime` for exec and the pod IPs.
    async fn run(
        &self,
        runtime: &dyn CommandRunner,
        target: HookTarget<'_>,
        handler: &LifecycleHandler,
    ) -> Result<(), HookError>;
}

/// The runner of a bare engine: exec and sleep handlers; httpGet handlers fail with
/// [`HookError::NoHttpRunner`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ExecSleepHandlerRunner;

#[async_trait]
impl HandlerRunner for ExecSleepHandlerRunner {
    async fn run(
        &self,
        runtime: &dyn CommandRunner,
        target: HookTarget<'_>,
        handler: &LifecycleHandler,
    ) -> Result<(), HookError> {
        if let Some(result) = run_exec_or_sleep(runtime, target, handler).await {
            return result;
        }
        if handler.http_get.is_some() {
            return Err(HookError::NoHttpRunner(target.container.name.clone()));
        }
        Err(HookError::InvalidHandler)
    }
}

/// Runs an exec or sleep handler; `None` when `handler` has neither (an httpGet one, or none).
/// For runners that add the httpGet handler.
pub async fn run_exec_or_sleep(
    runtime: &dyn CommandRunner,
    target: HookTarget<'_>,
    handler: &LifecycleHandler,
) -> Option<Result<(), HookError>> {
    if let Some(exec) = &handler.exec {
        return Some(run_exec(runtime, target, exec).await);
    }
    if let Some(sleep) = &handler.sleep {
        tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0).unsigned_abs())).await;
        return Some(Ok(()));
    }
    None
}

/// `"<name>_<namespace>(<uid>)"`, upstream `format.Pod`.
pub fn format_pod(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.name_or_empty(),
        pod.namespace_or_default(),
        pod.uid()
    )
}

async fn run_exec(
    runtime: &dyn CommandRunner,
    target: HookTarget<'_>,
    exec: &ExecAction,
) -> Result<(), HookError> {
    let cmd = exec.command.clone().unwrap_or_default();
    let (error, output) = match runtime
        .run_in_container(target.container_id, &cmd, Duration::ZERO)
        .await
    {
        Ok(r) if r.timed_out => (
            format!("command '{}' timed out", cmd.join(" ")),
            String::new(),
        ),
        Ok(r) if r.exit_code == 0 => return Ok(()),
        Ok(r) => {
            let mut output = r.stdout;
            output.extend_from_slice(&r.stderr);
            (
                format!(
                    "command '{}' exited with {}: {}",
                    cmd.join(" "),
                    r.exit_code,
                    String::from_utf8_lossy(&r.stderr)
                ),
                String::from_utf8_lossy(&output).into_owned(),
            )
        }
        Err(e) => (e.to_string(), String::new()),
    };
    Err(HookError::Exec {
        command: cmd.join(" "),
        container: target.container.name.clone(),
        pod: format_pod(target.pod),
        error,
        output,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{HTTPGetAction, SleepAction};

    use super::*;

    /// Answers every exec with `result` and reports one pod IP.
    struct Commands(ExecResult);

    #[async_trait]
    impl CommandRunner for Commands {
        async fn run_in_container(
            &self,
            _container_id: &str,
            _cmd: &[String],
            _timeout: Duration,
        ) -> runtime::Result<ExecResult> {
            Ok(self.0.clone())
        }

        async fn pod_ips(&self, _pod: &Pod) -> runtime::Result<Vec<String>> {
            Ok(vec!["10.0.0.2".into()])
        }
    }

    fn exec(cmd: &[&str]) -> LifecycleHandler {
        LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(cmd.iter().map(|s| (*s).to_owned()).collect()),
            }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn exec_failure_has_upstreams_message() {
        let pod = crate::testing::pod("web");
        let container = pod.containers()[0].clone();
        let target = HookTarget {
            pod: &pod,
            container: &container,
            container_id: "c1",
        };
        let failing = Commands(ExecResult {
            exit_code: 1,
            stdout: b"out".to_vec(),
            stderr: b"err".to_vec(),
            timed_out: false,
        });
        let err = ExecSleepHandlerRunner
            .run(&failing, target, &exec(&["sh", "-c", "exit 1"]))
            .await
            .expect_err("exit 1");
        assert_eq!(
            err.to_string(),
            "Exec lifecycle hook ([sh -c exit 1]) for Container \"app\" in Pod \"web_default(uid-web)\" failed - error: command 'sh -c exit 1' exited with 1: err, message: \"outerr\""
        );
        let ok = Commands(ExecResult::default());
        ExecSleepHandlerRunner
            .run(&ok, target, &exec(&["true"]))
            .await
            .expect("exit 0");
    }

    #[tokio::test(start_paused = true)]
    async fn sleep_waits_and_http_needs_a_runner() {
        let pod = crate::testing::pod("web");
        let container = pod.containers()[0].clone();
        let target = HookTarget {
            pod: &pod,
            container: &container,
            container_id: "c1",
        };
        let commands = Commands(ExecResult::default());
        let start = tokio::time::Instant::now();
        let sleep = LifecycleHandler {
            sleep: Some(SleepAction { seconds: 3 }),
            ..Default::default()
        };
        ExecSleepHandlerRunner
            .run(&commands, target, &sleep)
            .await
            .expect("sleep");
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        let http = LifecycleHandler {
            http_get: Some(HTTPGetAction::default()),
            ..Default::default()
        };
        let err = ExecSleepHandlerRunner
            .run(&commands, target, &http)
            .await
            .expect_err("no HTTP client");
        assert!(matches!(err, HookError::NoHttpRunner(ref c) if c == "app"));
        assert!(err.to_string().contains("no HTTP hook runner configured"));
        let err = ExecSleepHandlerRunner
            .run(&commands, target, &LifecycleHandler::default())
            .await
            .expect_err("empty");
        assert!(matches!(err, HookError::InvalidHandler));
    }
}
