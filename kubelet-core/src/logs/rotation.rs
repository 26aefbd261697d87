//! Container log rotation (mirrors upstream `pkg/kubelet/logs/container_log_manager.go`).
//!
//! Every [`DEFAULT_MONITOR_INTERVAL`] the [`ContainerLogManager`] looks at the log of each
//! running container; one of `containerLogMaxSize` or more is rotated:
//!
//! 1. leftovers of an interrupted rotation are removed (`.tmp` files, uncompressed copies of
//!    a compressed file);
//! 2. the oldest rotated files are removed so that at most `containerLogMaxFiles - 2` stay
//!    (with the one about to be rotated and the new live file: `containerLogMaxFiles`);
//! 3. the rotated files still uncompressed are gzipped (`0.log.<ts>` → `0.log.<ts>.gz`);
//! 4. the live file is renamed `0.log.<YYYYMMDD-hhmmss>` (left uncompressed so readers can
//!    finish it) and the runtime is asked to reopen it (CRI `ReopenContainerLog`); if it
//!    cannot, the rename is undone so the next round tries again.
//!
//! A log file that does not exist (removed by hand) is reopened by the runtime first. Only
//! running containers are looked at: a stopped one writes nothing more.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::files::{COMPRESS_SUFFIX, TMP_SUFFIX, filter_unused, rotated_candidates};
use crate::runtime::{ContainerState, Runtime};

/// Upstream's default `containerLogMaxSize` (10Mi).
pub const DEFAULT_MAX_SIZE: u64 = 10 * 1024 * 1024;
/// Upstream's default `containerLogMaxFiles`.
pub const DEFAULT_MAX_FILES: usize = 5;
/// Upstream's default `containerLogMonitorInterval`.
pub const DEFAULT_MONITOR_INTERVAL: Duration = Duration::from_secs(10);
/// The suffix format of a rotated log (upstream `timestampFormat` `20060102-150405`).
const TIMESTAMP_FORMAT: &str = "%Y%m%d-%H%M%S";

/// When and how far logs are rotated (upstream `LogRotatePolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// A live log of this many bytes or more is rotated (`containerLogMaxSize`).
    pub max_size: u64,
    /// At most this many files per container log, the live one included
    /// (`containerLogMaxFiles`, at least 2).
    pub max_files: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            max_size: DEFAULT_MAX_SIZE,
            max_files: DEFAULT_MAX_FILES,
        }
    }
}

/// Why a rotation failed (logged; the next round tries again).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `containerLogMaxFiles` below 2 (upstream's message).
    #[error("invalid MaxFiles {0}, must be > 1")]
    InvalidMaxFiles(usize),
    /// A file operation failed.
    #[error("failed to {op} {path:?}: {source}")]
    Io {
        /// What was being done (`stat`, `remove`, `compress`, `rename`…).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The runtime could not list containers, report a log path or reopen a log.
    #[error(transparent)]
    Runtime(#[from] crate::runtime::Error),
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// Rotates the logs of the running containers (upstream `containerLogManager`).
pub struct ContainerLogManager {
    runtime: Arc<dyn Runtime>,
    policy: Policy,
    monitor_interval: Duration,
}

impl std::fmt::Debug for ContainerLogManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerLogManager")
            .field("policy", &self.policy)
            .field("monitor_interval", &self.monitor_interval)
            .finish_non_exhaustive()
    }
}

impl ContainerLogManager {
    /// A manager of the logs of `runtime`'s containers (upstream `NewContainerLogManager`);
    /// [`Error::InvalidMaxFiles`] when `policy.max_files` < 2.
    pub fn new(runtime: Arc<dyn Runtime>, policy: Policy) -> Result<Self, Error> {
        if policy.max_files <= 1 {
            return Err(Error::InvalidMaxFiles(policy.max_files));
        }
        Ok(Self {
            runtime,
            policy,
            monitor_interval: DEFAULT_MONITOR_INTERVAL,
        })
    }

    /// Sets how often logs are checked (`containerLogMonitorInterval`).
    #[must_use]
    pub fn monitor_interval(mut self, every: Duration) -> Self {
        self.monitor_interval = every;
        self
    }

    /// Checks the logs every monitor interval, the first time at once, until `token` is
    /// cancelled (upstream `Start`).
    pub async fn run(self, token: CancellationToken) {
        tracing::info!(policy = ?self.policy, interval = ?self.monitor_interval, "container log rotation");
        let mut tick = tokio::time::interval(self.monitor_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = token.cancelled() => break,
                _ = tick.tick() => {
                    if let Err(e) = self.rotate_logs().await {
                        tracing::error!(error = %e, "failed to rotate container logs");
                    }
                }
            }
        }
    }

    /// One round: every running container's log (upstream `rotateLogs` and its worker's
    /// `processContainer`). A container whose log cannot be rotated is logged and skipped.
    pub async fn rotate_logs(&self) -> Result<(), Error> {
        let pods = self.runtime.get_pods(false).await?;
        let running = pods
            .iter()
            .flat_map(|p| &p.containers)
            .filter(|c| c.state == ContainerState::Running);
        for container in running {
            if let Err(e) = self.process_container(&container.id).await {
                tracing::error!(error = %e, container = %container.id, "failed to rotate log for container");
            }
        }
        Ok(())
    }

    /// Rotates the log of container `id` when it reached the maximum size.
    pub async fn process_container(&self, id: &str) -> Result<(), Error> {
        let path = self.runtime.container_log(id).await?.path;
        if path.as_os_str().is_empty() {
            return Ok(());
        }
        let size = match tokio::fs::metadata(&path).await {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.runtime.reopen_container_log(id).await?;
                tokio::fs::metadata(&path)
                    .await
                    .map_err(io("stat", &path))?
                    .len()
            }
            Err(e) => return Err(io("stat", &path)(e)),
        };
        if size < self.policy.max_size {
            return Ok(());
        }
        self.rotate_log(id, &path).await
    }

    /// Upstream `rotateLog`.
    async fn rotate_log(&self, id: &str, log: &Path) -> Result<(), Error> {
        let keep = self.policy.max_files.saturating_sub(2);
        let rotated = {
            let log = log.to_owned();
            tokio::task::spawn_blocking(move || clean_and_compress(&log, keep))
                .await
                .map_err(|e| io("compress", Path::new(""))(std::io::Error::other(e)))??
        };
        tracing::debug!(container = %id, kept = rotated.len(), "rotating container log");
        self.rotate_latest_log(id, log).await
    }

    /// Renames the live log and asks the runtime to reopen it; undoes the rename if it
    /// cannot (upstream `rotateLatestLog`).
    async fn rotate_latest_log(&self, id: &str, log: &Path) -> Result<(), Error> {
        let stamp = k8s_openapi::jiff::Zoned::now()
            .strftime(TIMESTAMP_FORMAT)
            .to_string();
        let mut rotated = log.as_os_str().to_owned();
        rotated.push(format!(".{stamp}"));
        let rotated = PathBuf::from(rotated);
        tokio::fs::rename(log, &rotated)
            .await
            .map_err(io("rename", log))?;
        if let Err(e) = self.runtime.reopen_container_log(id).await {
            if let Err(undo) = tokio::fs::rename(&rotated, log).await {
                tracing::error!(error = %undo, rotated = %rotated.display(), log = %log.display(), "failed to rename rotated log back");
            }
            return Err(e.into());
        }
        Ok(())
    }
}

/// Steps 1-3 of a rotation: removes leftovers and the oldest rotated files beyond `keep`,
/// compresses the others; returns the rotated files that stay.
fn clean_and_compress(log: &Path, keep: usize) -> Result<Vec<PathBuf>, Error> {
    let candidates = rotated_candidates(log).map_err(io("list", log))?;
    let (mut in_use, unused) = filter_unused(candidates);
    for l in unused {
        remove(&l)?;
    }
    in_use.sort();
    let excess = in_use.len().saturating_sub(keep);
    for l in in_use.drain(..excess) {
        remove(&l)?;
    }
    let mut kept = Vec::with_capacity(in_use.len());
    for l in in_use {
        if l.to_string_lossy().ends_with(COMPRESS_SUFFIX) {
            kept.push(l);
        } else {
            kept.push(compress(&l)?);
        }
    }
    Ok(kept)
}

// Reviewed (issue 16): only called under clean_and_compress, in spawn_blocking.
#[allow(clippy::disallowed_methods)]
fn remove(path: &Path) -> Result<(), Error> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove", path)(e)),
        _ => Ok(()),
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Gzips `log` to `log.gz` through `log.tmp`, keeping its mode, then removes `log`
/// (upstream `compressLog`).
// Reviewed (issue 16): only called under clean_and_compress, in spawn_blocking.
#[allow(clippy::disallowed_methods)]
fn compress(log: &Path) -> Result<PathBuf, Error> {
    use std::io::Write;
    let tmp = with_suffix(log, TMP_SUFFIX);
    let compressed = with_suffix(log, COMPRESS_SUFFIX);
    let result = (|| {
        let mut input = std::fs::File::open(log).map_err(io("open", log))?;
        let permissions = input.metadata().map_err(io("stat", log))?.permissions();
        let out = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
        out.set_permissions(permissions)
            .map_err(io("chmod", &tmp))?;
        let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        std::io::copy(&mut input, &mut gz).map_err(io("compress", log))?;
        gz.finish()
            .and_then(|mut f| f.flush())
            .map_err(io("compress", log))?;
        std::fs::rename(&tmp, &compressed).map_err(io("rename", &tmp))?;
        remove(log)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| compressed)
}
