//! [`read_logs`]: a container's log to a writer (upstream `ReadLogs`, `waitLogs`,
//! `logWriter`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use inotify::{EventMask, EventStream};
use tokio::io::{AsyncBufReadExt, AsyncSeekExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::live_watch::{LiveWatch, replaced};
use super::parse::{Format, Message};
use super::tail::{TailStart, find_tail_line_start, tail_of};
use super::{Error, LogOptions, files};
use crate::runtime::Runtime;

/// How often a followed log is re-read without an inotify event (upstream
/// `logForceCheckPeriod`), which is also how soon a container's exit is noticed.
const LOG_FORCE_CHECK_PERIOD: Duration = Duration::from_secs(1);

/// Writes the log of container `container_id`, whose live file is `path`, to `out` as `opts`
/// asks (upstream `ReadLogs`): the rotated files first, then `path`; with `opts.follow`, waits
/// for more on `path` (reopening it when rotation replaces it) until the container stops
/// running, then writes what is left. Returns when done, when `opts.bytes` are written, or
/// with [`Error::Write`] when `out` is closed.
///
/// Cancel safe: dropping the future stops the read and the watch.
pub async fn read_logs<W: AsyncWrite + Unpin + Send>(
    path: &Path,
    container_id: &str,
    opts: &LogOptions,
    runtime: &dyn Runtime,
    out: &mut W,
) -> Result<(), Error> {
    let path = tokio::fs::canonicalize(path)
        .await
        .map_err(|source| read_error(path, source))?;
    let plan = {
        let live = path.clone();
        let tail = opts.tail;
        tokio::task::spawn_blocking(move || plan(&live, tail))
            .await
            .map_err(|e| read_error(&path, std::io::Error::other(e)))??
    };
    let mut writer = LogWriter::new(opts, out);
    for chunk in plan.history {
        let (data, offset) = match chunk {
            Chunk::Loaded(data, offset) => (data, offset),
            Chunk::Path(p) => {
                let data = tokio::task::spawn_blocking({
                    let p = p.clone();
                    move || files::read_log_file(&p)
                })
                .await
                .map_err(|e| read_error(&p, std::io::Error::other(e)))?;
                match data {
                    Ok(data) => (data, 0),
                    // Removed by rotation since it was listed: its lines are gone.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(read_error(&p, e)),
                }
            }
        };
        let start = usize::try_from(offset)
            .unwrap_or(data.len())
            .min(data.len());
        for line in data[start..].split_inclusive(|&b| b == b'\n') {
            if writer.line(&path, line).await? == Flow::Stop {
                return Ok(());
            }
        }
    }
    follow_live(&path, plan.live_offset, container_id, runtime, &mut writer).await
}

pub(super) fn read_error(path: &Path, source: std::io::Error) -> Error {
    Error::Read {
        path: path.to_owned(),
        source,
    }
}

/// A rotated file to write before the live one.
enum Chunk {
    /// Loaded to find the tail: write from this offset.
    Loaded(Vec<u8>, u64),
    /// Not loaded yet: write all of it.
    Path(PathBuf),
}

/// What to write: rotated files, then the live file from `live_offset`.
struct Plan {
    history: Vec<Chunk>,
    live_offset: u64,
}

/// Finds where the tail starts, across rotated files when the live one is too short.
/// Blocking.
// Reviewed (issue 16): only called in spawn_blocking (read_logs).
#[allow(clippy::disallowed_methods)]
fn plan(path: &Path, tail: Option<u64>) -> Result<Plan, Error> {
    let mut all = files::all_logs(path).map_err(|e| read_error(path, e))?;
    all.pop();
    let Some(n) = tail else {
        return Ok(Plan {
            history: all.into_iter().map(Chunk::Path).collect(),
            live_offset: 0,
        });
    };
    let mut live = std::fs::File::open(path).map_err(|e| read_error(path, e))?;
    let TailStart { offset, lines } =
        find_tail_line_start(&mut live, n).map_err(|e| read_error(path, e))?;
    let mut history = Vec::new();
    let mut wanted = n - lines;
    while wanted > 0 {
        let Some(older) = all.pop() else { break };
        let data = match files::read_log_file(&older) {
            Ok(data) => data,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(read_error(&older, e)),
        };
        let t = tail_of(&data, wanted);
        wanted -= t.lines;
        history.push(Chunk::Loaded(data, t.offset));
    }
    history.reverse();
    Ok(Plan {
        history,
        live_offset: offset,
    })
}

/// Reads the live file from `offset`; with `follow`, waits for more (upstream `ReadLogs`'s
/// loop).
async fn follow_live<W: AsyncWrite + Unpin + Send>(
    path: &Path,
    offset: u64,
    container_id: &str,
    runtime: &dyn Runtime,
    writer: &mut LogWriter<'_, W>,
) -> Result<(), Error> {
    let mut file = tokio::fs::File::open(path)
        .await
        .map_err(|e| read_error(path, e))?;
    file.seek(std::io::SeekFrom::Start(offset))
        .await
        .map_err(|e| read_error(path, e))?;
    let mut reader = BufReader::new(file);
    let mut watch: Option<LiveWatch> = None;
    let mut found = true;
    let mut reopen = false;
    let mut line = Vec::new();
    loop {
        reader
            .read_until(b'\n', &mut line)
            .await
            .map_err(|e| read_error(path, e))?;
        if line.last() == Some(&b'\n') {
            if writer.line(path, &line).await? == Flow::Stop {
                return Ok(());
            }
            line.clear();
            continue;
        }
        // End of file; `line` holds an incomplete line, kept to be completed.
        if !writer.opts.follow {
            if !line.is_empty() {
                tracing::info!(path = %path.display(), "incomplete line in log file");
                writer.line(path, &line).await?;
            }
            return Ok(());
        }
        if !found {
            // The container stopped and everything it wrote is out.
            return Ok(());
        }
        if reopen {
            // The file was rotated and everything written to it before is out: go on with
            // the new one (upstream reopens at once and can lose the old file's last lines).
            match tokio::fs::File::open(path).await {
                Ok(file) => {
                    reader = BufReader::new(file);
                    reopen = match &mut watch {
                        Some(w) => w.watch(path, reader.get_ref()).await?,
                        None => false,
                    };
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(read_error(path, e)),
            }
        }
        let Some(w) = watch.as_mut() else {
            let mut w = LiveWatch::new(path)?;
            reopen = w.watch(path, reader.get_ref()).await?;
            watch = Some(w);
            // Read again: a write may have come before the watch.
            continue;
        };
        match wait_logs(container_id, w.events(), runtime).await? {
            Wake::Stopped => found = false,
            Wake::Written => {}
            // Moved, removed, its attributes changed (upstream reopens on all three), or no
            // event for a while (a filesystem without inotify): reopen when `path` names
            // another file now, not when it still is the one read (that would write it again).
            Wake::Moved | Wake::Quiet => reopen |= replaced(path, reader.get_ref()).await?,
        }
    }
}

/// What [`wait_logs`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wake {
    /// The container no longer runs (upstream `found == false`).
    Stopped,
    /// The file was written.
    Written,
    /// The file was moved or removed (upstream `recreated`: rotation).
    Moved,
    /// Nothing for [`LOG_FORCE_CHECK_PERIOD`].
    Quiet,
}

/// Waits for the next write (upstream `waitLogs`).
async fn wait_logs(
    container_id: &str,
    events: &mut EventStream<Vec<u8>>,
    runtime: &dyn Runtime,
) -> Result<Wake, Error> {
    if !runtime.container_log(container_id).await?.running {
        return Ok(Wake::Stopped);
    }
    let mut retries = 5;
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(e)) if e.mask.contains(EventMask::MODIFY) => return Ok(Wake::Written),
                Some(Ok(e)) if e.mask.intersects(
                    EventMask::MOVE_SELF | EventMask::DELETE_SELF | EventMask::ATTRIB | EventMask::IGNORED,
                ) => return Ok(Wake::Moved),
                Some(Ok(e)) => tracing::debug!(event = ?e, "unexpected inotify event"),
                Some(Err(e)) => {
                    tracing::error!(error = %e, retries, "inotify watch error");
                    if retries == 0 {
                        return Err(Error::Watch { path: PathBuf::new(), source: e });
                    }
                    retries -= 1;
                }
                None => return Ok(Wake::Quiet),
            },
            () = tokio::time::sleep(LOG_FORCE_CHECK_PERIOD) => return Ok(Wake::Quiet),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

/// Filters and writes parsed lines (upstream `logWriter`, plus `ReadLogs`'s `limitedMode`
/// line count).
struct LogWriter<'a, W> {
    opts: &'a LogOptions,
    out: &'a mut W,
    format: Option<Format>,
    remain: u64,
    /// Lines still to write when tailing without following.
    limited: Option<u64>,
}

impl<'a, W: AsyncWrite + Unpin + Send> LogWriter<'a, W> {
    fn new(opts: &'a LogOptions, out: &'a mut W) -> Self {
        Self {
            opts,
            out,
            format: None,
            remain: opts.bytes.unwrap_or(u64::MAX),
            limited: opts.tail.filter(|_| !opts.follow),
        }
    }

    async fn line(&mut self, path: &Path, line: &[u8]) -> Result<Flow, Error> {
        if self.limited == Some(0) {
            return Ok(Flow::Stop);
        }
        let format = match self.format {
            Some(f) => f,
            None => *self
                .format
                .insert(Format::detect(line).map_err(Error::Format)?),
        };
        let msg = match format.parse(line) {
            Ok(msg) => msg,
            Err(e) => {
                tracing::error!(error = %e, path = %path.display(), line = %String::from_utf8_lossy(line), "failed when parsing line in log file");
                return Ok(Flow::Continue);
            }
        };
        let flow = self.write(&msg).await?;
        if let Some(n) = &mut self.limited {
            *n -= 1;
        }
        Ok(flow)
    }

    async fn write(&mut self, msg: &Message) -> Result<Flow, Error> {
        if self.opts.since.is_some_and(|since| msg.timestamp < since) {
            return Ok(Flow::Continue);
        }
        let mut line = Vec::with_capacity(msg.log.len() + 32);
        if self.opts.timestamps {
            line.extend_from_slice(format_timestamp(msg.timestamp).as_bytes());
            line.push(b' ');
        }
        line.extend_from_slice(&msg.log);
        let n = usize::try_from(self.remain)
            .unwrap_or(usize::MAX)
            .min(line.len());
        self.out.write_all(&line[..n]).await.map_err(Error::Write)?;
        self.remain -= n as u64;
        Ok(if self.remain == 0 {
            Flow::Stop
        } else {
            Flow::Continue
        })
    }
}

/// Upstream `RFC3339NanoFixed`: UTC, nine fractional digits.
pub(super) fn format_timestamp(ts: k8s_openapi::jiff::Timestamp) -> String {
    format!("{ts:.9}")
}
