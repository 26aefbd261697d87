//! Cached volume usage (upstream `pkg/kubelet/server/stats/fs_resource_analyzer.go` and
//! `volume_stat_calculator.go`).
//!
//! Walking a volume (`du`) is slow and blocks, so the summary does not do it: each pod gets a
//! calculator task that walks the pod's volumes at once and then every
//! `--volume-stats-agg-period` (default 1 m) stretched by up to 100 % of random jitter
//! (upstream `wait.JitterUntil(…, jitterPeriod, 1.0, true, …)`), on the blocking pool, and
//! stores the result; the summary reads the stored one. A pod without a result yet has no
//! volume stats. A period of zero disables volume stats (upstream: "Disabled volume stats
//! collection"). [`FsResourceAnalyzer::sync_pods`] starts calculators for new pods and stops
//! those of pods that went (upstream `updateCachedPodVolumeStats` over the active pods);
//! dropping the analyzer stops them all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio_util::sync::CancellationToken;

use super::volumes::PodVolume;

/// Upstream's default `volumeStatsAggPeriod`.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(60);

/// Computes one pod's volume usage (blocking: it walks directories). Takes the pod UID.
pub type Calculate = Arc<dyn Fn(&str) -> Vec<PodVolume> + Send + Sync>;

/// One pod's calculator: its last result and what stops it.
struct Calculator {
    latest: Arc<Mutex<Option<Vec<PodVolume>>>>,
    stop: CancellationToken,
}

/// Per-pod volume usage computed in the background (upstream `fsResourceAnalyzer`).
pub struct FsResourceAnalyzer {
    period: Duration,
    calculate: Calculate,
    calculators: Mutex<HashMap<String, Calculator>>,
    stop: CancellationToken,
}

impl std::fmt::Debug for FsResourceAnalyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsResourceAnalyzer")
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

impl FsResourceAnalyzer {
    /// An analyzer that runs `calculate` per pod every `period` (zero: never; no pod has
    /// volume stats).
    pub fn new(period: Duration, calculate: Calculate) -> Self {
        Self {
            period,
            calculate,
            calculators: Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
        }
    }

    /// An analyzer of the volume directories under `root_dir` (see
    /// [`super::volumes::pod_volumes`]).
    pub fn of_root_dir(period: Duration, root_dir: std::path::PathBuf) -> Self {
        Self::new(
            period,
            Arc::new(move |uid: &str| {
                super::volumes::pod_volumes(&root_dir, uid, &Time(crate::time::now()))
            }),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Calculator>> {
        self.calculators.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the calculators those of `pods` (UIDs): starts the missing ones, stops the
    /// others. Must be called within a Tokio runtime. Does nothing when disabled.
    pub fn sync_pods<'a>(&self, pods: impl IntoIterator<Item = &'a str>) {
        if self.period.is_zero() {
            return;
        }
        let mut calculators = self.lock();
        let mut wanted: HashMap<String, Calculator> = HashMap::new();
        for uid in pods {
            if wanted.contains_key(uid) {
                continue;
            }
            let calc = calculators
                .remove(uid)
                .unwrap_or_else(|| self.start(uid.to_owned()));
            wanted.insert(uid.to_owned(), calc);
        }
        for (uid, gone) in calculators.drain() {
            tracing::debug!(pod = %uid, "stopping the volume stats calculator");
            gone.stop.cancel();
        }
        *calculators = wanted;
    }

    /// The last computed volumes of pod `uid`; `None` before the first result, for a pod
    /// [`sync_pods`](Self::sync_pods) was not given, and when disabled.
    pub fn pod_volumes(&self, uid: &str) -> Option<Vec<PodVolume>> {
        let calculators = self.lock();
        let latest = calculators.get(uid)?.latest.lock();
        latest.unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How many pods have a calculator.
    pub fn calculator_count(&self) -> usize {
        self.lock().len()
    }

    fn start(&self, uid: String) -> Calculator {
        let latest = Arc::new(Mutex::new(None));
        let stop = self.stop.child_token();
        tokio::spawn(run_calculator(
            uid,
            self.period,
            self.calculate.clone(),
            latest.clone(),
            stop.clone(),
        ));
        Calculator { latest, stop }
    }
}

impl Drop for FsResourceAnalyzer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Upstream `volumeStatCalculator.StartOnce`: compute now, then every jittered period.
async fn run_calculator(
    uid: String,
    period: Duration,
    calculate: Calculate,
    latest: Arc<Mutex<Option<Vec<PodVolume>>>>,
    stop: CancellationToken,
) {
    loop {
        let (calc, pod) = (calculate.clone(), uid.clone());
        let walk = tokio::task::spawn_blocking(move || calc(&pod));
        let volumes = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            done = walk => match done {
                Ok(volumes) => volumes,
                Err(e) => {
                    tracing::warn!(pod = %uid, error = %e, "volume stats calculation failed");
                    Vec::new()
                }
            },
        };
        *latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(volumes);
        let wait = period.mul_f64(1.0 + rand::random::<f64>());
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::v1alpha1::VolumeStats;

    /// A calculation that counts its runs per pod and reports one volume named after the run.
    fn counting() -> (Calculate, Arc<Mutex<HashMap<String, usize>>>) {
        let runs: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let seen = runs.clone();
        let calc: Calculate = Arc::new(move |uid: &str| {
            let mut runs = seen.lock().unwrap_or_else(|e| e.into_inner());
            let n = runs.entry(uid.to_owned()).or_default();
            *n += 1;
            vec![PodVolume {
                stats: VolumeStats {
                    name: format!("run-{n}"),
                    ..Default::default()
                },
                ephemeral: false,
            }]
        });
        (calc, runs)
    }

    fn runs_of(runs: &Mutex<HashMap<String, usize>>, uid: &str) -> usize {
        runs.lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .copied()
            .unwrap_or(0)
    }

    fn names(volumes: Option<Vec<PodVolume>>) -> Option<Vec<String>> {
        volumes.map(|v| v.into_iter().map(|v| v.stats.name).collect())
    }

    /// Lets the calculators and their blocking walks run (the paused clock does not move).
    async fn settle(analyzer: &FsResourceAnalyzer, uid: &str, want: &str) {
        for _ in 0..1000 {
            if names(analyzer.pod_volumes(uid)).is_some_and(|n| n == [want]) {
                return;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!(
            "{uid}: never {want}, got {:?}",
            names(analyzer.pod_volumes(uid))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn each_pod_is_walked_at_once_then_once_per_jittered_period_and_the_summary_reads_the_cache()
     {
        let (calc, runs) = counting();
        let analyzer = FsResourceAnalyzer::new(Duration::from_secs(60), calc);
        assert_eq!(analyzer.pod_volumes("a"), None, "no calculator yet");
        analyzer.sync_pods(["a", "b"]);
        settle(&analyzer, "a", "run-1").await;
        settle(&analyzer, "b", "run-1").await;
        // Reading does not walk.
        for _ in 0..10 {
            assert_eq!(names(analyzer.pod_volumes("a")), Some(vec!["run-1".into()]));
        }
        analyzer.sync_pods(["a", "b"]);
        assert_eq!((runs_of(&runs, "a"), runs_of(&runs, "b")), (1, 1));
        // Not before one period, at the latest after two (100 % jitter).
        tokio::time::sleep(Duration::from_secs(59)).await;
        assert_eq!(runs_of(&runs, "a"), 1);
        tokio::time::sleep(Duration::from_secs(62)).await;
        let n = runs_of(&runs, "a");
        assert!(n >= 2, "{n}");
        settle(&analyzer, "a", &format!("run-{n}")).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_that_goes_stops_its_calculator() {
        let (calc, runs) = counting();
        let analyzer = FsResourceAnalyzer::new(Duration::from_secs(60), calc);
        analyzer.sync_pods(["a", "b"]);
        settle(&analyzer, "a", "run-1").await;
        settle(&analyzer, "b", "run-1").await;
        analyzer.sync_pods(["b"]);
        assert_eq!(analyzer.calculator_count(), 1);
        assert_eq!(analyzer.pod_volumes("a"), None);
        tokio::time::sleep(Duration::from_secs(600)).await;
        // b went on: at least one run per two periods.
        assert!(runs_of(&runs, "b") >= 5, "{}", runs_of(&runs, "b"));
        assert_eq!(runs_of(&runs, "a"), 1, "a's calculator stopped");
        drop(analyzer);
        let b = runs_of(&runs, "b");
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(
            runs_of(&runs, "b"),
            b,
            "dropping the analyzer stops every calculator"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_period_disables_volume_stats() {
        let (calc, runs) = counting();
        let analyzer = FsResourceAnalyzer::new(Duration::ZERO, calc);
        analyzer.sync_pods(["a"]);
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(analyzer.pod_volumes("a"), None);
        assert_eq!((analyzer.calculator_count(), runs_of(&runs, "a")), (0, 0));
    }
}
