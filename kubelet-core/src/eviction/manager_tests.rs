use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, ResourceRequirements, Volume};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::eviction::api::{ThresholdValue, parse_threshold_config};
use crate::eviction::reclaim::{MockContainerGC, MockImageGC};
use crate::stats::v1alpha1::{
    ContainerStats, FsStats, MemoryStats, PodReference, PodStats, RuntimeStats, Summary,
    VolumeStats,
};
use crate::testing::pod;
use std::time::Duration;

const MI: u64 = 1 << 20;

/// A summary whose numbers the test sets.
#[derive(Default)]
struct FakeSummary(Mutex<Summary>);

impl FakeSummary {
    fn set_memory_available(&self, available: u64) {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        s.node.memory = Some(MemoryStats {
            available_bytes: Some(available),
            working_set_bytes: Some(4096 * MI - available),
            ..Default::default()
        });
    }

    fn set_nodefs_available(&self, available: u64) {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let fs = FsStats {
            available_bytes: Some(available),
            capacity_bytes: Some(100_000 * MI),
            inodes_free: Some(1_000_000),
            inodes: Some(1_000_000),
            ..Default::default()
        };
        s.node.fs = Some(fs.clone());
        s.node.runtime = Some(RuntimeStats {
            image_fs: Some(fs.clone()),
            container_fs: Some(fs),
        });
    }

    fn set_pods(&self, pods: Vec<PodStats>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).pods = pods;
    }
}

#[async_trait]
impl crate::stats::SummaryProvider for FakeSummary {
    async fn get(&self) -> crate::stats::Result<Summary> {
        Ok(self.0.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }
    async fn get_cpu_and_memory_stats(&self) -> crate::stats::Result<Summary> {
        self.get().await
    }
    async fn container_infos(
        &self,
    ) -> crate::stats::Result<Vec<crate::stats::cadvisor::ContainerInfo>> {
        Ok(Vec::new())
    }
}

/// Records the pods it terminates and drops them from the active pods.
#[derive(Default)]
struct FakeTerminator {
    active: Mutex<Vec<Pod>>,
    cleanup_pending: Mutex<Vec<crate::PodUid>>,
    terminated: Mutex<Vec<(String, TerminatePodOptions)>>,
}

impl FakeTerminator {
    fn terminated(&self) -> Vec<(String, TerminatePodOptions)> {
        self.terminated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[async_trait]
impl PodTerminator for FakeTerminator {
    async fn terminate_pod_abnormally_and_wait(
        &self,
        pod: &Pod,
        options: TerminatePodOptions,
    ) -> Result<(), super::super::Error> {
        self.active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| p.uid() != pod.uid());
        self.terminated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((pod.name_or_empty().to_owned(), options));
        self.cleanup_pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(pod.uid());
        Ok(())
    }

    fn pod_cleaned_up(&self, pod: &Pod) -> bool {
        !self
            .cleanup_pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&pod.uid())
    }
}

fn stats_of(p: &Pod, working_set: u64) -> PodStats {
    let memory = Some(MemoryStats {
        working_set_bytes: Some(working_set),
        ..Default::default()
    });
    PodStats {
        pod_ref: PodReference {
            name: p.name_or_empty().to_owned(),
            namespace: "default".into(),
            uid: p.uid().as_str().to_owned(),
        },
        containers: vec![ContainerStats {
            name: "app".into(),
            memory: memory.clone(),
            ..Default::default()
        }],
        memory,
        ..Default::default()
    }
}

fn guaranteed(name: &str) -> Pod {
    let mut p = pod(name);
    if let Some(s) = p.spec.as_mut() {
        let list: BTreeMap<String, Quantity> = [
            ("memory".to_owned(), Quantity("512Mi".into())),
            ("cpu".to_owned(), Quantity("100m".into())),
        ]
        .into();
        s.containers[0].resources = Some(ResourceRequirements {
            requests: Some(list.clone()),
            limits: Some(list),
            ..Default::default()
        });
    }
    p
}

fn config(hard: &[(&str, &str)], soft: &[(&str, &str, u64)]) -> Config {
    let map = |pairs: Vec<(&str, &str)>| -> BTreeMap<String, String> {
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    };
    let grace = soft
        .iter()
        .map(|(k, _, s)| ((*k).to_owned(), Duration::from_secs(*s)))
        .collect();
    Config {
        thresholds: parse_threshold_config(
            &map(hard.to_vec()),
            &map(soft.iter().map(|(k, v, _)| (*k, *v)).collect()),
            &grace,
            &BTreeMap::new(),
        )
        .expect("valid thresholds"),
        max_pod_grace_period_seconds: 30,
        ..Config::default()
    }
}

struct Fixture {
    summary: Arc<FakeSummary>,
    terminator: Arc<FakeTerminator>,
    manager: Manager,
    metrics: crate::metrics::KubeletMetrics,
}

fn fixture(config: Config, pods: Vec<Pod>) -> Fixture {
    let summary = Arc::new(FakeSummary::default());
    summary.set_memory_available(2048 * MI);
    summary.set_nodefs_available(50_000 * MI);
    let terminator = Arc::new(FakeTerminator::default());
    *terminator.active.lock().unwrap_or_else(|e| e.into_inner()) = pods;
    let active = terminator.clone();
    let metrics = crate::metrics::KubeletMetrics::default();
    let manager = Manager::new(
        config,
        summary.clone(),
        terminator.clone(),
        Arc::new(move || {
            active
                .active
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        }),
    )
    .with_metrics(metrics.clone());
    Fixture {
        summary,
        terminator,
        manager,
        metrics,
    }
}

#[tokio::test(start_paused = true)]
async fn hard_memory_threshold_evicts_the_best_effort_pod_first_one_per_round() {
    let (be, g) = (pod("best-effort"), guaranteed("guaranteed"));
    let mut f = fixture(
        config(&[("memory.available", "1Gi")], &[]),
        vec![g.clone(), be.clone()],
    );
    f.summary
        .set_pods(vec![stats_of(&be, 100 * MI), stats_of(&g, 500 * MI)]);
    assert!(f.manager.synchronize().await.is_empty(), "2Gi available");
    assert!(f.manager.pressure().conditions().is_empty());

    f.summary.set_memory_available(512 * MI);
    let evicted = f.manager.synchronize().await;
    assert_eq!(evicted.len(), 1);
    let terminated = f.terminator.terminated();
    assert_eq!(terminated.len(), 1);
    let (name, options) = &terminated[0];
    assert_eq!(name, "best-effort");
    assert_eq!(options.grace_period_override, 1);
    assert_eq!(options.reason, "Evicted");
    assert_eq!(
        options.message,
        "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. \
         Container app was using 100Mi, request is 0, has larger consumption of memory. "
    );
    assert_eq!(options.conditions[0].type_, "DisruptionTarget");
    assert_eq!(
        options.conditions[0].reason.as_deref(),
        Some("TerminationByKubelet")
    );
    assert!(f.manager.pressure().is_under_memory_pressure());
    assert_eq!(f.metrics.evictions_total("memory.available"), 1);

    // Still short: the Guaranteed pod (within its requests) is next, in the next round.
    f.manager.synchronize().await;
    let terminated = f.terminator.terminated();
    assert_eq!(terminated.len(), 2);
    assert_eq!(terminated[1].0, "guaranteed");
    assert_eq!(f.metrics.evictions_total("memory.available"), 2);
}

#[tokio::test(start_paused = true)]
async fn critical_pods_are_never_evicted() {
    let mut critical = pod("static");
    critical.metadata.annotations = Some(
        [(
            crate::config::CONFIG_SOURCE_ANNOTATION.to_owned(),
            "file".to_owned(),
        )]
        .into(),
    );
    let mut f = fixture(
        config(&[("memory.available", "1Gi")], &[]),
        vec![critical.clone()],
    );
    f.summary.set_memory_available(10 * MI);
    f.summary.set_pods(vec![stats_of(&critical, 900 * MI)]);
    assert!(f.manager.synchronize().await.is_empty());
    assert!(f.terminator.terminated().is_empty());
    assert!(f.manager.pressure().is_under_memory_pressure());
    assert_eq!(
        f.metrics.evictions_total("memory.available"),
        0,
        "only evictions count"
    );
}

#[tokio::test(start_paused = true)]
async fn soft_threshold_waits_for_its_grace_period_and_uses_the_max_pod_grace_period() {
    let be = pod("be");
    let mut f = fixture(
        config(&[], &[("memory.available", "1Gi", 60)]),
        vec![be.clone()],
    );
    f.summary.set_pods(vec![stats_of(&be, MI)]);
    f.summary.set_memory_available(512 * MI);
    assert!(f.manager.synchronize().await.is_empty());
    assert!(
        f.manager.pressure().is_under_memory_pressure(),
        "the condition does not wait for the grace period"
    );
    tokio::time::advance(Duration::from_secs(59)).await;
    assert!(f.manager.synchronize().await.is_empty(), "59s < 60s");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(f.manager.synchronize().await.len(), 1);
    assert_eq!(f.terminator.terminated()[0].1.grace_period_override, 30);
}

#[tokio::test(start_paused = true)]
async fn a_soft_threshold_that_clears_starts_its_grace_period_again() {
    let be = pod("be");
    let mut f = fixture(
        config(&[], &[("memory.available", "1Gi", 60)]),
        vec![be.clone()],
    );
    f.summary.set_pods(vec![stats_of(&be, MI)]);
    f.summary.set_memory_available(512 * MI);
    f.manager.synchronize().await;
    tokio::time::advance(Duration::from_secs(50)).await;
    f.summary.set_memory_available(2048 * MI);
    f.manager.synchronize().await;
    f.summary.set_memory_available(512 * MI);
    tokio::time::advance(Duration::from_secs(50)).await;
    assert!(
        f.manager.synchronize().await.is_empty(),
        "observed again 0s ago"
    );
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(f.manager.synchronize().await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn pressure_stays_for_the_transition_period() {
    let mut f = fixture(config(&[("memory.available", "1Gi")], &[]), Vec::new());
    f.summary.set_memory_available(512 * MI);
    f.manager.synchronize().await;
    assert!(f.manager.pressure().is_under_memory_pressure());
    f.summary.set_memory_available(2048 * MI);
    tokio::time::advance(Duration::from_secs(299)).await;
    f.manager.synchronize().await;
    assert!(f.manager.pressure().is_under_memory_pressure(), "4m59s");
    tokio::time::advance(Duration::from_secs(1)).await;
    f.manager.synchronize().await;
    assert!(!f.manager.pressure().is_under_memory_pressure(), "5m");
}

#[tokio::test(start_paused = true)]
async fn min_reclaim_keeps_evicting_until_reclaimed() {
    let (a, b) = (pod("a"), pod("b"));
    let mut cfg = config(&[("memory.available", "1Gi")], &[]);
    cfg.thresholds[0].min_reclaim = Some(ThresholdValue::Quantity(
        crate::quantity::Amount::parse("512Mi").expect("q"),
    ));
    let mut f = fixture(cfg, vec![a.clone(), b.clone()]);
    f.summary
        .set_pods(vec![stats_of(&a, 20 * MI), stats_of(&b, 10 * MI)]);
    f.summary.set_memory_available(1000 * MI);
    assert_eq!(f.manager.synchronize().await.len(), 1, "below 1Gi");
    f.summary.set_memory_available(1200 * MI);
    assert_eq!(
        f.manager.synchronize().await.len(),
        1,
        "above 1Gi, below 1Gi + 512Mi"
    );
    f.summary.set_memory_available(1600 * MI);
    assert!(f.manager.synchronize().await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn disk_pressure_reclaims_at_node_level_first() {
    let be = pod("be");
    let summary_after = Arc::new(Mutex::new(None::<Arc<FakeSummary>>));
    let mut f = fixture(
        config(&[("nodefs.available", "10%")], &[]),
        vec![be.clone()],
    );
    f.summary.set_pods(vec![stats_of(&be, MI)]);
    f.summary.set_nodefs_available(5_000 * MI);
    *summary_after.lock().unwrap_or_else(|e| e.into_inner()) = Some(f.summary.clone());
    let mut containers = MockContainerGC::new();
    containers
        .expect_delete_all_unused_containers()
        .times(1)
        .returning(|| Ok(()));
    let mut images = MockImageGC::new();
    let after = summary_after.clone();
    images
        .expect_delete_unused_images()
        .times(1)
        .returning(move || {
            if let Some(s) = after.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                s.set_nodefs_available(20_000 * MI);
            }
            Ok(())
        });
    f.manager = f
        .manager
        .with_reclaim(Arc::new(images), Arc::new(containers));
    assert!(f.manager.synchronize().await.is_empty());
    assert!(f.terminator.terminated().is_empty(), "GC freed enough");
    assert!(f.manager.pressure().is_under_disk_pressure());
}

#[tokio::test(start_paused = true)]
async fn an_empty_dir_past_its_size_limit_is_evicted_without_any_threshold() {
    let mut p = pod("writer");
    if let Some(s) = p.spec.as_mut() {
        s.volumes = Some(vec![Volume {
            name: "scratch".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity("1Mi".into())),
                ..Default::default()
            }),
            ..Default::default()
        }]);
    }
    let mut f = fixture(config(&[], &[]), vec![p.clone()]);
    let mut stats = stats_of(&p, MI);
    stats.volume = vec![VolumeStats {
        name: "scratch".into(),
        fs: FsStats {
            used_bytes: Some(4 * MI),
            ..Default::default()
        },
    }];
    f.summary.set_pods(vec![stats]);
    assert_eq!(f.manager.synchronize().await.len(), 1);
    let (_, options) = &f.terminator.terminated()[0];
    assert_eq!(
        options.message,
        "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". "
    );
    assert_eq!(options.grace_period_override, 1);
    assert!(options.conditions.is_empty());
    assert_eq!(f.metrics.evictions_total("emptydirfs.limit"), 1);
}

#[tokio::test(start_paused = true)]
async fn run_looks_every_monitoring_interval() {
    let be = pod("be");
    let f = fixture(
        config(&[("memory.available", "1Gi")], &[]),
        vec![be.clone()],
    );
    f.summary.set_pods(vec![stats_of(&be, MI)]);
    let (summary, terminator) = (f.summary.clone(), f.terminator.clone());
    let token = CancellationToken::new();
    let task = tokio::spawn(f.manager.run(token.clone()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    summary.set_memory_available(512 * MI);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(terminator.terminated().is_empty(), "not looked again yet");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(terminator.terminated().len(), 1, "looked at 10s");
    token.cancel();
    assert!(task.await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn after_an_eviction_run_waits_for_the_pod_to_be_cleaned_up() {
    let (a, b) = (pod("a"), pod("b"));
    let f = fixture(
        config(&[("memory.available", "1Gi")], &[]),
        vec![a.clone(), b.clone()],
    );
    f.summary
        .set_pods(vec![stats_of(&a, 20 * MI), stats_of(&b, 10 * MI)]);
    f.summary.set_memory_available(512 * MI);
    let terminator = f.terminator.clone();
    let token = CancellationToken::new();
    let task = tokio::spawn(f.manager.run(token.clone()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(terminator.terminated().len(), 1);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(terminator.terminated().len(), 1, "a is not cleaned up yet");
    terminator
        .cleanup_pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clear();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(terminator.terminated().len(), 2, "the next round at once");
    // Not cleaned up either: the wait ends after 30 s.
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(terminator.terminated().len(), 2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    token.cancel();
    assert!(task.await.is_ok());
}
