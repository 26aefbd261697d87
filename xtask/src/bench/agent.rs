//! The measuring agent: `cri_replay`, an example of `kubelet-cri` (xtask itself must build
//! without protoc, so it has no gRPC). It is the raw-CRI arm B, and it times arm A too: it
//! writes the manifests and polls CRI for running containers, so both arms are timed by one
//! process with one clock and one poller. See `kubelet-cri/examples/cri_replay/main.rs` for the
//! protocol: one JSON line per command and per reply.

use std::{
    fs::File,
    io::{BufRead, BufReader, Write},
    os::unix::process::CommandExt,
    path::Path,
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use super::kubelet::Dirs;
use serde_json::{Value, json};

/// The running agent; told to quit (then killed) when dropped.
pub(crate) struct Agent {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The runtime's name and version, as the agent's `Version` call saw it.
    pub(crate) runtime: String,
}

impl Agent {
    /// Starts `bin` on `endpoint` for the bench's node, with the kubelet's pod log directory of
    /// `dirs`; its stderr goes to `cri_replay.log` beside the kubelet's log.
    pub(crate) fn spawn(bin: &Path, endpoint: &str, dirs: &Dirs) -> Result<Agent> {
        let (node, pod_log_dir) = (super::scenario::NODE, &dirs.pod_logs);
        let log = &dirs.logs.join("cri_replay.log");
        let mut child = Command::new(bin)
            .args(["--endpoint", endpoint, "--node", node])
            .arg("--pod-log-dir")
            .arg(pod_log_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(File::create(log)?)
            // Its own process group: Ctrl-C reaches only xtask, which then stops it in order.
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut agent = Agent {
            child,
            stdin,
            stdout,
            runtime: String::new(),
        };
        let ready = agent.reply()?;
        agent.runtime = ready["runtime"].as_str().unwrap_or_default().to_owned();
        Ok(agent)
    }

    /// Sends one command and returns the reply; a reply with `ok: false` is an error.
    pub(crate) fn call(&mut self, cmd: Value) -> Result<Value> {
        writeln!(self.stdin, "{cmd}").context("the agent is gone")?;
        self.stdin.flush()?;
        self.reply()
            .with_context(|| format!("agent command {}", cmd["op"]))
    }

    fn reply(&mut self) -> Result<Value> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            bail!("the agent exited");
        }
        let reply: Value = serde_json::from_str(&line)
            .with_context(|| format!("bad reply from the agent: {line:?}"))?;
        if reply["ok"] != json!(true) {
            bail!("{}", reply["error"].as_str().unwrap_or(line.trim()));
        }
        Ok(reply)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "{}", json!({ "op": "quit" }));
        let _ = self.stdin.flush();
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}
