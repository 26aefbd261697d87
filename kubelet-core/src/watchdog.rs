//! The stall watchdog: a plain OS thread, outside tokio's workers, that notices when a worker
//! of the async runtime has made no progress for a while and logs what every thread of the
//! process is doing (no upstream file: the Go kubelet's goroutines are preempted by Go's
//! scheduler, a blocked tokio worker is not; the closest upstream piece is the `syncloop`
//! health check of `pkg/kubelet/kubelet.go`, which [`Health`] joins on `/healthz`).
//!
//! How a stall is seen: tokio publishes, per worker, how often it parked and unparked
//! (odd = parked, idle) and how long it has been busy; a worker publishes both at least every
//! 61 task polls and at every park. A worker that is not parked and has published nothing for
//! [`Config::threshold`] is stuck in one poll: a blocking call (a `std::process::Command`,
//! a read of a FIFO, a mount, a `std::sync::Mutex` held elsewhere) on an async worker. This
//! needs no task on the runtime (a heartbeat task would keep running on the other worker
//! while one is blocked, and would wake paused clocks in tests) and no `tokio_unstable`.
//! tokio's task dump (`Handle::dump`) is no help here: it is an async call that needs the
//! very workers that are stuck.
//!
//! What the log says: the worker, how long, and [`threads::dump_current`] of the process (each
//! thread's name, state, kernel wait channel, current syscall, CPU time and, as root, kernel
//! stack). [`Health::check`] fails while a worker is stuck, for `/healthz`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kubelet_core::watchdog::Error> {
//! use kubelet_core::watchdog::{Config, Watchdog};
//! let watchdog = Watchdog::start(&tokio::runtime::Handle::current(), Config::default())?;
//! let health = watchdog.health();
//! assert!(health.check().is_ok());
//! # Ok(()) }
//! ```

pub mod spans;
pub mod threads;

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, RuntimeFlavor};

/// The watchdog's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// How long a worker may go without progress before it counts as stalled (default 5 s).
    pub threshold: Duration,
    /// How often the watchdog thread looks (default 250 ms).
    pub check_every: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            threshold: Duration::from_secs(5),
            check_every: Duration::from_millis(250),
        }
    }
}

/// Why the watchdog could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The OS refused a new thread (not retryable in any useful way).
    #[error("spawning the stall watchdog thread: {0}")]
    Spawn(#[source] std::io::Error),
}

/// A worker that has made no progress (what [`Health::check`] fails with).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("async runtime worker {worker} has made no progress for {:.1}s", .stalled_for.as_secs_f64())]
pub struct Stall {
    /// The worker's index in the runtime.
    pub worker: usize,
    /// How long it has been stuck.
    pub stalled_for: Duration,
}

/// Whether the runtime's workers make progress, as last seen by the watchdog; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Health {
    stall: Arc<Mutex<Option<Stall>>>,
}

impl Health {
    /// `Err` while a worker is stalled.
    pub fn check(&self) -> Result<(), Stall> {
        match *self.lock() {
            Some(stall) => Err(stall),
            None => Ok(()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Stall>> {
        self.stall.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, stall: Option<Stall>) {
        *self.lock() = stall;
    }
}

/// One worker's published metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    /// Parks plus unparks: odd while parked.
    park_unpark: u64,
    /// Total busy time.
    busy: Duration,
}

/// The per-worker stall rule, apart from the clock and the runtime so it can be tested.
#[derive(Debug)]
pub(crate) struct Detector {
    threshold: Duration,
    /// Each worker's last sample and when it last changed.
    workers: Vec<(Sample, Instant)>,
}

impl Detector {
    pub(crate) fn new(threshold: Duration) -> Self {
        Self {
            threshold,
            workers: Vec::new(),
        }
    }

    /// Takes this round's samples (one per worker) at `now`; returns the worker stuck the
    /// longest, if any is stuck for at least the threshold.
    pub(crate) fn observe(&mut self, now: Instant, samples: &[Sample]) -> Option<Stall> {
        self.workers.truncate(samples.len());
        let mut worst: Option<Stall> = None;
        for (worker, sample) in samples.iter().enumerate() {
            let Some((last, since)) = self.workers.get_mut(worker) else {
                self.workers.push((*sample, now));
                continue;
            };
            if *last != *sample {
                *last = *sample;
                *since = now;
                continue;
            }
            let parked = sample.park_unpark % 2 == 1;
            let stalled_for = now.saturating_duration_since(*since);
            if !parked
                && stalled_for >= self.threshold
                && worst.is_none_or(|w| stalled_for > w.stalled_for)
            {
                worst = Some(Stall {
                    worker,
                    stalled_for,
                });
            }
        }
        worst
    }
}

/// The running watchdog; it stops when dropped (or when the runtime shuts down).
#[derive(Debug)]
pub struct Watchdog {
    health: Health,
    /// Dropping it ends the runtime's task, which tells the thread to stop.
    _stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Watchdog {
    /// Starts watching the runtime of `handle` on a thread of its own. A current-thread
    /// runtime is not watched (its one "worker" is whoever calls `block_on`, idle or not
    /// between calls): the health then always passes.
    pub fn start(handle: &Handle, config: Config) -> Result<Self, Error> {
        let health = Health::default();
        if handle.runtime_flavor() != RuntimeFlavor::MultiThread {
            tracing::debug!("not a multi-thread runtime: no stall watchdog");
            return Ok(Self {
                health,
                _stop: None,
            });
        }
        // A task that holds the thread's reference until the watchdog is dropped; the runtime
        // drops it too when it shuts down, so the thread stops even if the watchdog leaks.
        let alive = Arc::new(());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let weak = Arc::downgrade(&alive);
        handle.spawn(async move {
            let _alive = alive;
            let _ = stopped.await;
        });
        let watch = Watch {
            handle: handle.clone(),
            config,
            health: health.clone(),
            alive: weak,
        };
        std::thread::Builder::new()
            .name("stall-watchdog".into())
            .spawn(move || watch.run())
            .map_err(Error::Spawn)?;
        Ok(Self {
            health,
            _stop: Some(stop),
        })
    }

    /// The health the watchdog keeps (for `/healthz`).
    pub fn health(&self) -> Health {
        self.health.clone()
    }
}

/// The thread's side.
struct Watch {
    handle: Handle,
    config: Config,
    health: Health,
    /// Gone once the [`Watchdog`] is dropped or the runtime shut down.
    alive: Weak<()>,
}

impl Watch {
    fn run(self) {
        let mut detector = Detector::new(self.config.threshold);
        let mut current: Option<Stall> = None;
        while self.alive.strong_count() > 0 {
            // Reviewed (issue 16): the watchdog's own OS thread, never an async worker.
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(self.config.check_every);
            let stall = detector.observe(Instant::now(), &samples(&self.handle));
            match (current, stall) {
                (None, Some(stall)) => tracing::error!(
                    worker = stall.worker,
                    "the async runtime is stalled: {stall}; a blocking call on an async worker? threads:\n{}",
                    threads::dump_current()
                ),
                (Some(was), None) => tracing::warn!(
                    worker = was.worker,
                    "the async runtime makes progress again after a stall of at least {:.1}s",
                    was.stalled_for.as_secs_f64()
                ),
                _ => {}
            }
            current = stall;
            self.health.set(stall);
        }
        self.health.set(None);
    }
}

/// The published metrics of every worker of `handle`'s runtime.
#[cfg(target_has_atomic = "64")]
fn samples(handle: &Handle) -> Vec<Sample> {
    let metrics = handle.metrics();
    (0..metrics.num_workers())
        .map(|worker| Sample {
            park_unpark: metrics.worker_park_unpark_count(worker),
            busy: metrics.worker_total_busy_duration(worker),
        })
        .collect()
}

/// Without 64-bit atomics tokio publishes no worker metrics: nothing is ever stalled.
#[cfg(not(target_has_atomic = "64"))]
fn samples(_handle: &Handle) -> Vec<Sample> {
    Vec::new()
}

#[cfg(test)]
mod tests;
