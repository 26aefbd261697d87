//! The machine's own wake-up latency, the baseline of the kubelet's tick → run lateness: a
//! plain thread (normal policy, the bench's niceness, as the kubelet's) that sleeps until a
//! deadline every [`STEP`] and notes how late it woke. Whatever the kubelet adds beyond this is
//! its own (its runtime's timer, its busy worker threads); this much any process would see.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

/// How often the thread wakes up.
const STEP: Duration = Duration::from_millis(10);

/// A running sampler; stops when dropped.
pub(crate) struct Sampler {
    late_ms: Arc<Mutex<Vec<f64>>>,
    stop: Arc<AtomicBool>,
}

impl Sampler {
    /// Starts the sampling thread.
    pub(crate) fn start() -> Result<Sampler> {
        let late_ms = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (out, done) = (late_ms.clone(), stop.clone());
        thread::Builder::new()
            .name("wakeup-baseline".into())
            .spawn(move || {
                let mut due = Instant::now() + STEP;
                while !done.load(Ordering::Relaxed) {
                    thread::sleep(due.saturating_duration_since(Instant::now()));
                    let late = Instant::now().saturating_duration_since(due);
                    out.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(late.as_secs_f64() * 1e3);
                    // The next deadline on the grid after now, as a ticker that skips.
                    while due <= Instant::now() {
                        due += STEP;
                    }
                }
            })
            .context("cannot start the wake-up sampler")?;
        Ok(Sampler { late_ms, stop })
    }

    /// The wake-ups' lateness so far, ms, and forgets them.
    pub(crate) fn take(&self) -> Vec<f64> {
        std::mem::take(&mut *self.late_ms.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_wake_ups() {
        let s = Sampler::start().expect("sampler");
        while s.late_ms.lock().expect("lock").len() < 3 {
            thread::sleep(STEP);
        }
        let got = s.take();
        assert!(got.len() >= 3 && got.iter().all(|l| *l >= 0.0), "{got:?}");
    }
}
