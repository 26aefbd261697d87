//! `usageNanoCores` from two samples of cumulative CPU time (upstream
//! `pkg/kubelet/stats/cri_stats_provider.go` `getAndUpdateContainerUsageNanoCores`,
//! `getContainerUsageNanoCores` and `cleanupOutdatedCaches`).
//!
//! A sample is the cumulative CPU time and when it was read. The first sample of a container
//! gives no rate; each later one gives `Δcpu / Δt` in billionths of a core and replaces the
//! cached sample. A counter that went backwards (a new container under the same ID) starts
//! over. Readers that must not move the window (the CPU-and-memory summary, as upstream) get
//! the last computed rate.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::jiff::Timestamp;

/// How long a sample is kept without a newer one (upstream `defaultCachePeriod`).
const CACHE_PERIOD_NANOS: i128 = 10 * 60 * 1_000_000_000;

/// One sample of cumulative CPU time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSample {
    /// When it was read.
    pub time: Timestamp,
    /// Cumulative CPU time in nanoseconds.
    pub usage_core_nano_seconds: u64,
}

#[derive(Clone, Copy, Debug)]
struct Record {
    sample: CpuSample,
    usage_nano_cores: Option<u64>,
}

/// The previous sample of each container (or pod, or the node), keyed by an ID.
#[derive(Debug, Default)]
pub struct UsageNanoCoresCache {
    records: Mutex<HashMap<String, Record>>,
}

impl UsageNanoCoresCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The rate between the cached sample of `id` and `sample`, caching `sample` (upstream
    /// `getAndUpdateContainerUsageNanoCores`). `None` for the first sample, after a counter
    /// reset, and when no time passed.
    pub fn update(&self, id: &str, sample: CpuSample) -> Option<u64> {
        let mut records = self.lock();
        let rate = records
            .get(id)
            .and_then(|cached| rate(cached.sample, sample));
        let rate = match (rate, records.get(id)) {
            (Some(r), _) => Some(r),
            // The same sample again (two scrapes between two runtime readings): keep the
            // rate that was computed for it.
            (None, Some(cached)) if cached.sample == sample => cached.usage_nano_cores,
            _ => None,
        };
        records.insert(
            id.to_owned(),
            Record {
                sample,
                usage_nano_cores: rate,
            },
        );
        rate
    }

    /// The last rate computed for `id`, without moving its window (upstream
    /// `getContainerUsageNanoCores`).
    pub fn get(&self, id: &str) -> Option<u64> {
        self.lock().get(id).and_then(|r| r.usage_nano_cores)
    }

    /// Drops samples older than ten minutes before `now` (upstream `cleanupOutdatedCaches`).
    pub fn cleanup(&self, now: Timestamp) {
        self.lock().retain(|_, r| {
            now.as_nanosecond() - r.sample.time.as_nanosecond() <= CACHE_PERIOD_NANOS
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        // A panic while holding the lock leaves a map of plain values: still usable.
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `(new.cpu − old.cpu) / (new.time − old.time)` in billionths of a core.
fn rate(old: CpuSample, new: CpuSample) -> Option<u64> {
    if new.usage_core_nano_seconds < old.usage_core_nano_seconds {
        return None;
    }
    let nanos = new.time.as_nanosecond() - old.time.as_nanosecond();
    if nanos <= 0 {
        return None;
    }
    let used = new.usage_core_nano_seconds - old.usage_core_nano_seconds;
    // As upstream: float64(Δcpu) / float64(Δt) * 1e9, truncated.
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let cores = (used as f64 / nanos as f64 * 1e9) as u64;
    Some(cores)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64, cpu: u64) -> CpuSample {
        CpuSample {
            time: Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH),
            usage_core_nano_seconds: cpu,
        }
    }

    #[test]
    fn first_sample_gives_nothing_then_the_rate() {
        let cache = UsageNanoCoresCache::new();
        assert_eq!(cache.update("c", at(100, 1_000_000_000)), None);
        assert_eq!(cache.get("c"), None);
        // 0.5 s of CPU over 2 s: a quarter of a core.
        assert_eq!(cache.update("c", at(102, 1_500_000_000)), Some(250_000_000));
        assert_eq!(cache.get("c"), Some(250_000_000));
        // Two cores busy for 10 s.
        assert_eq!(
            cache.update("c", at(112, 21_500_000_000)),
            Some(2_000_000_000)
        );
    }

    #[test]
    fn reading_does_not_move_the_window() {
        let cache = UsageNanoCoresCache::new();
        cache.update("c", at(100, 0));
        cache.update("c", at(110, 1_000_000_000));
        assert_eq!(cache.get("c"), Some(100_000_000));
        assert_eq!(cache.get("c"), Some(100_000_000));
        assert_eq!(cache.get("other"), None);
    }

    #[test]
    fn the_same_sample_again_keeps_its_rate() {
        let cache = UsageNanoCoresCache::new();
        cache.update("c", at(100, 0));
        assert_eq!(cache.update("c", at(110, 1_000_000_000)), Some(100_000_000));
        assert_eq!(cache.update("c", at(110, 1_000_000_000)), Some(100_000_000));
    }

    #[test]
    fn a_counter_reset_or_no_elapsed_time_starts_over() {
        let cache = UsageNanoCoresCache::new();
        cache.update("c", at(100, 5_000_000_000));
        assert_eq!(cache.update("c", at(101, 1_000_000_000)), None);
        assert_eq!(cache.update("c", at(101, 2_000_000_000)), None);
        assert_eq!(
            cache.update("c", at(102, 3_000_000_000)),
            Some(1_000_000_000)
        );
    }

    #[test]
    fn cleanup_drops_old_samples() {
        let cache = UsageNanoCoresCache::new();
        cache.update("old", at(0, 0));
        cache.update("old", at(10, 10));
        cache.update("new", at(500, 0));
        cache.update("new", at(600, 1_000_000_000));
        cache.cleanup(at(700, 0).time);
        assert_eq!(cache.get("old"), None);
        assert_eq!(cache.get("new"), Some(10_000_000));
    }
}
