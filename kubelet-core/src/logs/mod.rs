//! Container logs: reading a container's CRI log files for `kubectl logs` (mirrors upstream
//! `pkg/kubelet/kuberuntime/logs/logs.go` `ReadLogs`, with `pkg/util/tail`) and rotating
//! them (mirrors `pkg/kubelet/logs/container_log_manager.go`).
//!
//! * [`PodLogOptions`]: the v1 API's query (`follow`, `tailLines`, `limitBytes`,
//!   `sinceSeconds`, `sinceTime`, `timestamps`, `previous`), validated as upstream
//!   `ValidatePodLogOptions`; [`LogOptions`] is what the reader does with it.
//! * [`read_logs`]: writes a container's log to a writer: the rotated files first (oldest
//!   first, `.gz` ones decompressed), then the live file, following it with inotify while the
//!   container runs when asked.
//! * [`rotation`]: the [`ContainerLogManager`](rotation::ContainerLogManager) that rotates
//!   the logs of running containers at `containerLogMaxSize`, keeping `containerLogMaxFiles`.
//! * [`parse`]: the CRI and Docker JSON line formats; [`tail`]: where the last lines start;
//!   [`files`]: which files belong to a log.
//!
//! Unlike upstream's `ReadLogs`, which reads only the live file ("It will not retrieve logs
//! in rotated log file"), [`read_logs`] also reads the rotated ones, so `tailLines` and a full
//! read still find lines just after a rotation.

pub mod files;
mod live_watch;
pub mod parse;
mod reader;
pub mod rotation;
#[cfg(test)]
mod rotation_tests;
pub mod tail;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

pub use reader::read_logs;

/// Why a log could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The log file (or a rotated one) could not be opened or read.
    #[error("failed to read log file {path:?}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The first line is in no known format.
    #[error("failed to get parse function: {0}")]
    Format(#[source] parse::ParseError),
    /// The inotify watch of a followed file could not be set up.
    #[error("failed to watch file {path:?}: {source}")]
    Watch {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The output could not be written (the client went away).
    #[error("writing the log: {0}")]
    Write(#[source] std::io::Error),
    /// The runtime could not tell whether the container still runs.
    #[error(transparent)]
    Runtime(#[from] crate::runtime::Error),
}

/// A v1 `PodLogOptions` as the kubelet reads it from the `/containerLogs` query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodLogOptions {
    /// `follow`: keep streaming while the container runs.
    pub follow: bool,
    /// `previous`: the previous instance's log.
    pub previous: bool,
    /// `tailLines`.
    pub tail_lines: Option<i64>,
    /// `limitBytes`.
    pub limit_bytes: Option<i64>,
    /// `sinceSeconds`.
    pub since_seconds: Option<i64>,
    /// `sinceTime` (RFC 3339).
    pub since_time: Option<Timestamp>,
    /// `timestamps`: prefix each line with its RFC3339Nano timestamp.
    pub timestamps: bool,
}

/// A field of [`PodLogOptions`] that upstream `ValidatePodLogOptions` rejects.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidOptions {
    /// `tailLines` < 0.
    #[error("tailLines: Invalid value: {0}: must be greater than or equal to 0")]
    TailLines(i64),
    /// `limitBytes` < 1.
    #[error("limitBytes: Invalid value: {0}: must be greater than 0")]
    LimitBytes(i64),
    /// Both `sinceSeconds` and `sinceTime`.
    #[error("at most one of `sinceTime` or `sinceSeconds` may be specified")]
    BothSince,
    /// `sinceSeconds` < 1.
    #[error("sinceSeconds: Invalid value: {0}: must be greater than 0")]
    SinceSeconds(i64),
}

impl PodLogOptions {
    /// Upstream `ValidatePodLogOptions`: the first invalid field.
    pub fn validate(&self) -> Result<(), InvalidOptions> {
        if let Some(t) = self.tail_lines.filter(|t| *t < 0) {
            return Err(InvalidOptions::TailLines(t));
        }
        if let Some(b) = self.limit_bytes.filter(|b| *b < 1) {
            return Err(InvalidOptions::LimitBytes(b));
        }
        match (self.since_seconds, self.since_time) {
            (Some(_), Some(_)) => Err(InvalidOptions::BothSince),
            (Some(s), None) if s < 1 => Err(InvalidOptions::SinceSeconds(s)),
            _ => Ok(()),
        }
    }
}

/// What the reader does (upstream `LogOptions`, from `NewLogOptions`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Only the last lines; `None`: all.
    pub tail: Option<u64>,
    /// At most this many bytes; `None`: no limit.
    pub bytes: Option<u64>,
    /// Only lines at or after this time.
    pub since: Option<Timestamp>,
    /// Keep reading while the container runs.
    pub follow: bool,
    /// Prefix lines with their timestamp.
    pub timestamps: bool,
}

impl LogOptions {
    /// The reader's options for `api` at `now` (upstream `NewLogOptions`: `sinceSeconds`
    /// counts back from `now`; the later of it and `sinceTime` wins).
    pub fn new(api: &PodLogOptions, now: Timestamp) -> Self {
        let mut since = api
            .since_seconds
            .and_then(|s| now.checked_sub(SignedDuration::from_secs(s)).ok());
        if let Some(t) = api.since_time
            && since.is_none_or(|s| t > s)
        {
            since = Some(t);
        }
        Self {
            tail: api.tail_lines.and_then(|t| u64::try_from(t).ok()),
            bytes: api.limit_bytes.and_then(|b| u64::try_from(b).ok()),
            since,
            follow: api.follow,
            timestamps: api.timestamps,
        }
    }
}
