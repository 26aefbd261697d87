//! One exec session of [`super::ExecReaper`]: claims the exec's process while the stream
//! is up, kills what is left of it when the stream closed.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use kubelet_core::runtime::{ClosedBy, ExecSession};
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use super::procfs::{Container, ProcessId, Procfs, exec_processes, kill_targets};
use super::{IDENTIFY_DEADLINE, POLL};

/// What a session kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// One process (by pid).
    Process(i32),
    /// A process group (by its leader's pid).
    Group(i32),
}

/// How a session sends SIGKILL (tests record instead).
pub(crate) type Signal = Arc<dyn Fn(Target) -> nix::Result<()> + Send + Sync>;

/// SIGKILL to `target`.
pub(crate) fn sigkill(target: Target) -> nix::Result<()> {
    use nix::sys::signal::{Signal::SIGKILL, kill, killpg};
    use nix::unistd::Pid;
    match target {
        Target::Process(pid) => kill(Pid::from_raw(pid), SIGKILL),
        Target::Group(pgrp) => killpg(Pid::from_raw(pgrp), SIGKILL),
    }
}

/// A session between its begin and its end.
pub(crate) struct Session {
    procfs: Procfs,
    container: Container,
    container_id: String,
    cmd: Vec<String>,
    /// The container's processes when the session began.
    before: HashSet<ProcessId>,
    /// The exec's processes, once seen.
    claimed: Vec<ProcessId>,
    /// When the session stops looking for its process.
    deadline: Instant,
    /// The start window of this container and command, held until the process is claimed.
    window: Option<OwnedMutexGuard<()>>,
    signal: Signal,
}

impl Session {
    pub(crate) fn new(
        procfs: Procfs,
        container: Container,
        before: HashSet<ProcessId>,
        container_id: &str,
        cmd: &[String],
        window: OwnedMutexGuard<()>,
        signal: Signal,
    ) -> Self {
        Self {
            procfs,
            container,
            container_id: container_id.to_owned(),
            cmd: cmd.to_vec(),
            before,
            claimed: Vec::new(),
            deadline: Instant::now() + IDENTIFY_DEADLINE,
            window: Some(window),
            signal,
        }
    }

    /// Looks for the exec's processes once; `true` when the looking is over (found, or
    /// `/proc` failed).
    async fn look(&mut self) -> bool {
        let (procfs, container) = (self.procfs.clone(), self.container.clone());
        let scanned = tokio::task::spawn_blocking(move || procfs.processes(&container)).await;
        match scanned {
            Ok(Ok(processes)) => {
                self.claimed = exec_processes(&processes, &self.before, &self.cmd);
                if self.claimed.is_empty() {
                    return false;
                }
                tracing::debug!(container = %self.container_id, claimed = ?self.claimed, "an exec session's process");
            }
            Ok(Err(e)) => {
                tracing::warn!(container = %self.container_id, error = %e, "reading the container's processes");
            }
            Err(e) => {
                tracing::warn!(container = %self.container_id, error = %e, "reading the container's processes");
            }
        }
        self.window = None;
        true
    }

    /// SIGKILLs what is left of the claimed processes.
    async fn kill(&self) {
        let (procfs, container) = (self.procfs.clone(), self.container.clone());
        let (claimed, signal) = (self.claimed.clone(), self.signal.clone());
        let killed = tokio::task::spawn_blocking(move || {
            let processes = procfs.processes(&container)?;
            let (targets, groups) = kill_targets(&processes, &claimed);
            let targets = targets
                .into_iter()
                .map(|p| Target::Process(p.pid))
                .chain(groups.into_iter().map(Target::Group));
            let mut killed = Vec::new();
            for target in targets {
                match signal(target) {
                    Ok(()) => killed.push(target),
                    // Gone meanwhile.
                    Err(nix::errno::Errno::ESRCH) => {}
                    Err(e) => tracing::warn!(?target, error = %e, "killing an exec's process"),
                }
            }
            Ok::<_, std::io::Error>(killed)
        })
        .await;
        match killed {
            Ok(Ok(killed)) if !killed.is_empty() => tracing::info!(
                container = %self.container_id,
                cmd = ?self.cmd,
                ?killed,
                "killed what an ended exec session left running"
            ),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(container = %self.container_id, error = %e, "reading the container's processes");
            }
            Err(e) => {
                tracing::warn!(container = %self.container_id, error = %e, "reading the container's processes");
            }
        }
    }
}

#[async_trait]
impl ExecSession for Session {
    async fn watch(&mut self) {
        while self.window.is_some() {
            if self.look().await {
                return;
            }
            if Instant::now() >= self.deadline {
                tracing::warn!(
                    container = %self.container_id,
                    cmd = ?self.cmd,
                    "an exec session's process did not appear within {IDENTIFY_DEADLINE:?}: it will not be killed when the session ends"
                );
                self.window = None;
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn end(mut self: Box<Self>, closed_by: ClosedBy) {
        if self.window.is_some() {
            match closed_by {
                // The runtime ends a stream once its exec ended: a last look.
                ClosedBy::Runtime => {
                    self.look().await;
                }
                // The exec may start after its client went away.
                ClosedBy::Client => self.watch().await,
            }
        }
        self.window = None;
        if !self.claimed.is_empty() {
            self.kill().await;
        }
    }
}
