//! Exec probes through the runtime's `ExecSync` (upstream `pkg/probe/exec` and the exec branch
//! of `pkg/kubelet/prober/prober.go`).

use std::time::Duration;

use kubelet_core::runtime::Runtime;

use crate::Error;
use crate::prober::Outcome;

/// How much of the command's output is kept (upstream `maxReadLength`, 10 KiB).
pub const MAX_OUTPUT: usize = 10 * 1024;

/// Runs `command` in the container with `timeout`: exit code 0 is success, any other exit code
/// or a timeout is a failure; a runtime error is [`Error::Exec`] (the result is thrown away).
pub async fn probe(
    runtime: &dyn Runtime,
    container_id: &str,
    command: &[String],
    timeout: Duration,
) -> Result<Outcome, Error> {
    let r = runtime
        .exec_sync(container_id, command, timeout, MAX_OUTPUT)
        .await
        .map_err(Error::Exec)?;
    if r.timed_out {
        return Ok(Outcome::failure(format!(
            "command {command:?} timed out after {timeout:?}"
        )));
    }
    let mut output = r.stdout;
    output.extend_from_slice(&r.stderr);
    output.truncate(MAX_OUTPUT);
    let output = String::from_utf8_lossy(&output).into_owned();
    Ok(if r.exit_code == 0 {
        Outcome::success(output)
    } else {
        Outcome::failure(format!(
            "command {command:?} exited with {}: {output}",
            r.exit_code
        ))
    })
}
