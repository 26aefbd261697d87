//! The exec sessions of a CRI runtime ([`RuntimeService::begin_exec_session`]): when a
//! streamed exec ends, its process is gone.
//!
//! Upstream leaves this to the runtime's streaming server (`k8s.io/kubelet/pkg/cri/streaming`
//! ends the exec with the stream's context); containerd 1.6 runs execs under a context of
//! its own (`pkg/cri/server/streaming.go`), so an exec that ignores its stdin (`sleep 600`)
//! survives a client that went away. The kubelet makes sure of it itself, on Linux, through
//! `/proc` ([`procfs`]):
//!
//! 1. before the exec is asked for, the session notes the container (its init's pid
//!    namespace and cgroups; the init pid from the verbose `ContainerStatus`) and the
//!    processes it has;
//! 2. while the stream is up, it watches for the exec's process: a new process of the
//!    container running exactly the exec's command whose parent is outside the container
//!    (the shim), and claims it;
//! 3. when the stream closed, it SIGKILLs what it claimed that still runs: the process, its
//!    descendants, and its process group when it leads one (a terminal exec).
//!
//! Two sessions of the same command in the same container would be told apart by nothing
//! but time, so their start windows are taken in turn: a session holds its window (of its
//! container and command) from step 1 until it claimed its process, the stream closed, or
//! [`IDENTIFY_DEADLINE`] passed; the next session's snapshot then holds the first one's
//! process, which it therefore never claims. A process that takes longer than the deadline
//! to appear is not claimed (nothing is killed that may be another session's).
//!
//! [`RuntimeService::begin_exec_session`]: kubelet_core::kuberuntime::RuntimeService::begin_exec_session

mod procfs;
mod session;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use kubelet_core::runtime::{ExecSession, NoopExecSession};

use crate::client::CriClient;
use procfs::Procfs;
use session::{Session, Signal};

/// How long after a session began its process may take to appear.
pub(crate) const IDENTIFY_DEADLINE: Duration = Duration::from_secs(10);

/// How often a session looks for its process until it appeared.
const POLL: Duration = Duration::from_millis(25);

/// Why a session could not be begun (it then does nothing).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The runtime did not say the container's init pid.
    #[error("the runtime reports no pid for container {0}")]
    NoPid(String),
    /// `ContainerStatus` failed.
    #[error(transparent)]
    Runtime(#[from] kubelet_core::runtime::Error),
    /// `/proc` could not be read (not Linux, or the kubelet sees another pid namespace).
    #[error("reading the container's processes: {0}")]
    Proc(#[from] std::io::Error),
    /// The blocking read panicked or was cancelled.
    #[error("reading the container's processes: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// The start windows of the sessions in flight, by container and command.
type Windows = HashMap<(String, Vec<String>), Weak<tokio::sync::Mutex<()>>>;

/// Begins the exec sessions of one runtime. Cheap to share.
pub(crate) struct ExecReaper {
    procfs: Procfs,
    windows: Mutex<Windows>,
    signal: Signal,
}

impl std::fmt::Debug for ExecReaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecReaper")
            .field("procfs", &self.procfs)
            .finish_non_exhaustive()
    }
}

impl Default for ExecReaper {
    fn default() -> Self {
        Self::new(Procfs::default(), Arc::new(session::sigkill))
    }
}

impl ExecReaper {
    fn new(procfs: Procfs, signal: Signal) -> Self {
        Self {
            procfs,
            windows: Mutex::new(HashMap::new()),
            signal,
        }
    }

    /// Begins a session of `cmd` in container `container_id` (a no-op session when the
    /// container's processes cannot be seen; logged).
    pub(crate) async fn begin(
        &self,
        client: &CriClient,
        container_id: &str,
        cmd: &[String],
    ) -> Box<dyn ExecSession> {
        let session = async {
            let pid = client
                .container_pid(container_id)
                .await?
                .ok_or_else(|| Error::NoPid(container_id.to_owned()))?;
            self.begin_with_init(pid, container_id, cmd).await
        };
        match session.await {
            Ok(session) => Box::new(session),
            Err(e) => {
                tracing::warn!(
                    container = container_id,
                    error = %e,
                    "an exec session's process will not be killed when its stream ends"
                );
                Box::new(NoopExecSession)
            }
        }
    }

    /// [`ExecReaper::begin`] for a container whose init is `init`.
    async fn begin_with_init(
        &self,
        init: u32,
        container_id: &str,
        cmd: &[String],
    ) -> Result<Session, Error> {
        let init = i32::try_from(init).map_err(|_| Error::NoPid(container_id.to_owned()))?;
        let window = self.window(container_id, cmd).lock_owned().await;
        let procfs = self.procfs.clone();
        let (container, before) = tokio::task::spawn_blocking(move || {
            let container = procfs.container(init)?;
            let before = procfs.processes(&container)?;
            Ok::<_, std::io::Error>((container, before))
        })
        .await??;
        Ok(Session::new(
            self.procfs.clone(),
            container,
            before.into_iter().map(|p| p.id).collect(),
            container_id,
            cmd,
            window,
            self.signal.clone(),
        ))
    }

    /// The start window of `cmd` in `container_id`, shared by the sessions in flight.
    fn window(&self, container_id: &str, cmd: &[String]) -> Arc<tokio::sync::Mutex<()>> {
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        windows.retain(|_, w| w.strong_count() > 0);
        let key = (container_id.to_owned(), cmd.to_vec());
        if let Some(window) = windows.get(&key).and_then(Weak::upgrade) {
            return window;
        }
        let window = Arc::new(tokio::sync::Mutex::new(()));
        windows.insert(key, Arc::downgrade(&window));
        window
    }
}

#[cfg(test)]
mod tests;
