//! When a probe worker runs its probe (the ticker loop of upstream
//! `pkg/kubelet/prober/worker.go` `run`): a ticker with Go's `time.Ticker` semantics, a manual
//! trigger that runs at once and restarts the period, and the stop signal.
//!
//! Go's ticker fires on the grid `start + k × period`. Its channel holds one tick: a run that
//! ends after its next tick finds that tick waiting and runs again at once (a late run is run,
//! not skipped); ticks that pass while one is already waiting are dropped, and the grid goes on.
//! tokio's [`MissedTickBehavior::Skip`] is exactly that.

use tokio::sync::Notify;
use tokio::time::{Duration, Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// Why the worker wakes up for its next run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The period's tick (on time or late).
    Tick,
    /// A manual trigger (upstream `manualTriggerCh`); the period restarts from now.
    Manual,
}

/// One worker's run schedule.
#[derive(Debug)]
pub(crate) struct Schedule {
    ticker: Interval,
    /// When the run the last wake-up started was due.
    due: Instant,
}

impl Schedule {
    /// A schedule whose first tick is one `period` from now (upstream creates its ticker after
    /// the first run's jitter, and runs once before waiting on it).
    pub(crate) fn new(period: Duration) -> Self {
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        Self {
            ticker,
            due: Instant::now(),
        }
    }

    /// When the current run was due: its tick's time on the grid, the trigger's time for a
    /// manual run, the schedule's creation for the first run. How late a run starts is
    /// `due().elapsed()` at its start.
    pub(crate) fn due(&self) -> Instant {
        self.due
    }

    /// Waits for the next run: the next tick (at once if it passed during the last run), or a
    /// notification on `trigger`, which restarts the period from now (upstream
    /// `probeTicker.Reset`). `None` once `stop` is cancelled, which wins over both.
    ///
    /// A notification sent while the worker was busy is kept (a [`Notify`] permit, as
    /// upstream's one-slot channel) and several collapse into one.
    pub(crate) async fn next(
        &mut self,
        stop: &CancellationToken,
        trigger: &Notify,
    ) -> Option<Wake> {
        tokio::select! {
            biased;
            _ = stop.cancelled() => None,
            scheduled = self.ticker.tick() => {
                self.due = scheduled;
                Some(Wake::Tick)
            }
            _ = trigger.notified() => {
                self.ticker.reset();
                self.due = Instant::now();
                Some(Wake::Manual)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const P: Duration = Duration::from_secs(1);

    fn ms(d: Duration) -> u64 {
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
    }

    /// Drives a worker-like loop whose runs last `run_for(i)` and returns each run's start (ms
    /// from the schedule's creation) until `until`.
    async fn starts(run_for: impl Fn(usize) -> Duration, until: Duration) -> Vec<u64> {
        let t0 = Instant::now();
        let (stop, trigger) = (CancellationToken::new(), Notify::new());
        let mut schedule = Schedule::new(P);
        let mut out = Vec::new();
        loop {
            out.push(ms(t0.elapsed()));
            tokio::time::sleep(run_for(out.len() - 1)).await;
            schedule.next(&stop, &trigger).await;
            if t0.elapsed() >= until {
                return out;
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn runs_every_period_on_the_grid() {
        let got = starts(|_| Duration::from_millis(300), Duration::from_secs(4)).await;
        assert_eq!(got, [0, 1000, 2000, 3000]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_tick_is_run_at_once_and_the_grid_goes_on() {
        // The second run lasts 1.5 periods: its tick at 2 s passed meanwhile, so the next run
        // starts as it ends (2.5 s), and the one after on the grid (3 s): no run is skipped.
        let got = starts(
            |i| Duration::from_millis(if i == 1 { 1500 } else { 100 }),
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(got, [0, 1000, 2500, 3000, 4000]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_run_knows_when_it_was_due() {
        let t0 = Instant::now();
        let (stop, trigger) = (CancellationToken::new(), Notify::new());
        let mut schedule = Schedule::new(P);
        assert_eq!(schedule.due(), t0);
        tokio::time::sleep(Duration::from_millis(1300)).await;
        assert_eq!(schedule.next(&stop, &trigger).await, Some(Wake::Tick));
        assert_eq!(ms(schedule.due() - t0), 1000);
        assert_eq!(ms(schedule.due().elapsed()), 300);
        assert_eq!(schedule.next(&stop, &trigger).await, Some(Wake::Tick));
        assert_eq!(ms(schedule.due() - t0), 2000);
        assert_eq!(ms(schedule.due().elapsed()), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn ticks_passing_while_one_waits_are_dropped_as_gos_ticker_does() {
        // A run of 2.5 periods spans the ticks at 1 s and 2 s: one is delivered (at 2.5 s), the
        // other dropped, as Go's one-slot ticker channel does.
        let got = starts(
            |i| Duration::from_millis(if i == 0 { 2500 } else { 100 }),
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(got, [0, 2500, 3000, 4000]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_manual_trigger_runs_at_once_and_restarts_the_period() {
        let t0 = Instant::now();
        let stop = CancellationToken::new();
        let trigger = Arc::new(Notify::new());
        let mut schedule = Schedule::new(P);
        let remote = trigger.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1400)).await;
            remote.notify_one();
        });
        let mut wakes = Vec::new();
        while t0.elapsed() < Duration::from_millis(3500) {
            let wake = schedule.next(&stop, &trigger).await;
            wakes.push((ms(t0.elapsed()), wake));
        }
        assert_eq!(
            wakes,
            [
                (1000, Some(Wake::Tick)),
                (1400, Some(Wake::Manual)),
                (2400, Some(Wake::Tick)),
                (3400, Some(Wake::Tick)),
                (4400, Some(Wake::Tick)),
            ]
        );
        // A trigger sent while the worker was busy is kept for the next wait.
        trigger.notify_one();
        trigger.notify_one();
        assert_eq!(schedule.next(&stop, &trigger).await, Some(Wake::Manual));
        assert_eq!(ms(t0.elapsed()), 4400);
        assert_eq!(schedule.next(&stop, &trigger).await, Some(Wake::Tick));
        assert_eq!(ms(t0.elapsed()), 5400);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_wins() {
        let stop = CancellationToken::new();
        let trigger = Notify::new();
        let mut schedule = Schedule::new(P);
        tokio::time::sleep(Duration::from_secs(3)).await;
        trigger.notify_one();
        stop.cancel();
        assert_eq!(schedule.next(&stop, &trigger).await, None);
    }
}
