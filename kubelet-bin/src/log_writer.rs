//! The kubelet's log lines are written to stderr by a thread of their own, never by an async
//! worker: a `write(2)` to a log file or pipe blocks when the disk stalls (dirty-page
//! throttling while the machine writes a lot) or the reader does not read, and a worker
//! blocked in it stops every task queued on it. Upstream's klog buffers in memory and flushes
//! from a daemon goroutine for the same reason.
//!
//! Lines go through a queue of at most [`CAPACITY`] lines; when it is full (the writer is
//! stuck) new lines are dropped and counted rather than blocking the caller, and the count is
//! written once lines flow again. The queue holds memory only for the lines in it (a linked
//! channel with a count), not a preallocated ring: 16,384 slots kept 512 KiB resident for good
//! (issue 17).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

/// How many lines may wait for the writer thread.
pub const CAPACITY: usize = 16_384;

/// The `tracing_subscriber` writer (see the [module docs](self)); cheap to clone.
#[derive(Clone, Debug)]
pub struct NonBlocking {
    lines: Sender<Vec<u8>>,
    /// Lines sent and not yet taken by the writer thread.
    queued: Arc<AtomicUsize>,
    dropped: Arc<AtomicU64>,
}

/// How long dropping the [`Guard`] waits for the queued lines to be written: a stuck
/// output must not keep the kubelet from exiting.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Ends the writer thread when dropped, once it wrote every queued line (or after
/// [`FLUSH_TIMEOUT`]).
#[derive(Debug)]
pub struct Guard {
    lines: Sender<Vec<u8>>,
    /// Closed by the thread when it ends.
    done: Receiver<()>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        // The subscriber keeps a sender for good: an empty line (never sent by a `Line`)
        // tells the thread to stop after what is queued.
        if self.lines.send(Vec::new()).is_ok() {
            let _ = self.done.recv_timeout(FLUSH_TIMEOUT);
        }
    }
}

impl NonBlocking {
    /// A writer whose lines a new thread writes to `out`; keep the [`Guard`] until the end
    /// of `main` so the last lines are written.
    pub fn new(out: impl Write + Send + 'static) -> std::io::Result<(Self, Guard)> {
        let (lines, queue) = std::sync::mpsc::channel();
        let (finished, done) = std::sync::mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn({
                let (queued, dropped) = (queued.clone(), dropped.clone());
                move || {
                    write_lines(queue, out, &queued, &dropped);
                    drop(finished);
                }
            })?;
        let guard = Guard {
            lines: lines.clone(),
            done,
        };
        Ok((
            Self {
                lines,
                queued,
                dropped,
            },
            guard,
        ))
    }
}

fn write_lines(
    queue: Receiver<Vec<u8>>,
    mut out: impl Write,
    queued: &AtomicUsize,
    dropped: &AtomicU64,
) {
    while let Ok(line) = queue.recv() {
        if line.is_empty() {
            break;
        }
        queued.fetch_sub(1, Ordering::Relaxed);
        let lost = dropped.swap(0, Ordering::Relaxed);
        if lost > 0 {
            let _ = writeln!(
                out,
                "kubelet: {lost} log lines dropped: the log writer was stuck"
            );
        }
        let _ = out.write_all(&line);
    }
    let _ = out.flush();
}

/// One event's bytes, sent as a whole when the formatter is done with it.
#[derive(Debug)]
pub struct Line {
    buf: Vec<u8>,
    to: NonBlocking,
}

impl Write for Line {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let to = &self.to;
        if to.queued.fetch_add(1, Ordering::Relaxed) >= CAPACITY {
            to.queued.fetch_sub(1, Ordering::Relaxed);
            to.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if to.lines.send(std::mem::take(&mut self.buf)).is_err() {
            // The writer thread is gone (the kubelet is exiting): nothing will take it.
            to.queued.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for NonBlocking {
    type Writer = Line;

    fn make_writer(&'a self) -> Self::Writer {
        Line {
            buf: Vec::new(),
            to: self.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// An output that blocks every write until released, like a stalled disk.
    #[derive(Clone)]
    struct Stuck {
        gate: Arc<Mutex<()>>,
        written: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Stuck {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            let _gate = self.gate.lock().expect("gate");
            self.written.lock().expect("out").extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn log(writer: &NonBlocking, text: &str) {
        use tracing_subscriber::fmt::MakeWriter;
        let mut line = writer.make_writer();
        line.write_all(text.as_bytes()).expect("buffered");
    }

    #[test]
    fn a_stuck_output_never_blocks_the_logger_and_losses_are_reported() {
        let out = Stuck {
            gate: Arc::default(),
            written: Arc::default(),
        };
        let closed = out.gate.lock().expect("gate");
        let (writer, guard) = NonBlocking::new(out.clone()).expect("a thread");
        // The writer thread takes one line and blocks on it; the queue fills; the rest are
        // dropped without blocking this thread.
        for i in 0..CAPACITY + 100 {
            log(&writer, &format!("line {i}\n"));
        }
        drop(closed);
        // The guard returns once everything queued is written, while the subscriber's
        // writer (here `writer`) still exists.
        drop(guard);
        drop(writer);
        let written = String::from_utf8(out.written.lock().expect("out").clone()).expect("text");
        let kept = written.lines().filter(|l| l.starts_with("line ")).count();
        let lost: usize = written
            .lines()
            .filter_map(|l| l.strip_prefix("kubelet: "))
            .filter_map(|l| l.strip_suffix(" log lines dropped: the log writer was stuck"))
            .map(|n| n.parse::<usize>().expect("a count"))
            .sum();
        assert!(lost >= 99, "{lost} dropped");
        assert_eq!(kept + lost, CAPACITY + 100, "every line written or counted");
    }
}
