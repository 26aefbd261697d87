//! The eviction manager in the assembled kubelet: under memory pressure the BestEffort pod
//! is killed and ends `Failed` / `Evicted` with upstream's message, the Guaranteed pod stays,
//! and new BestEffort pods are refused while the pressure lasts.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::config::{API_SERVER_SOURCE, ChannelSource};
use crate::eviction::{self, api::parse_threshold_config};
use crate::stats::MockSummaryProvider;
use crate::stats::v1alpha1::{MemoryStats, Summary};

fn guaranteed(name: &str) -> Pod {
    let mut p = pod(name);
    if let Some(s) = p.spec.as_mut() {
        let list: BTreeMap<String, Quantity> = [
            ("memory".to_owned(), Quantity("64Mi".into())),
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

/// A summary whose node has 512Mi available while `low` is set, else 2Gi.
fn memory_summary(low: &Arc<AtomicBool>) -> MockSummaryProvider {
    let mut summary = MockSummaryProvider::new();
    let is_low = low.clone();
    summary.expect_get().returning(move || {
        let available = if is_low.load(Ordering::SeqCst) {
            512 << 20
        } else {
            2 << 30
        };
        let mut s = Summary::default();
        s.node.memory = Some(MemoryStats {
            available_bytes: Some(available),
            working_set_bytes: Some(3 << 30),
            ..Default::default()
        });
        Ok(s)
    });
    summary
}

/// Eviction at `memory.available<1Gi`.
fn memory_config() -> eviction::Config {
    let hard: BTreeMap<String, String> = [("memory.available".to_owned(), "1Gi".to_owned())].into();
    eviction::Config {
        thresholds: parse_threshold_config(
            &hard,
            &BTreeMap::new(),
            &BTreeMap::new(),
            &BTreeMap::new(),
        )
        .expect("valid"),
        ..eviction::Config::default()
    }
}

#[tokio::test(start_paused = true)]
async fn memory_pressure_evicts_the_best_effort_pod_and_refuses_new_ones() {
    let low = Arc::new(AtomicBool::new(false));
    let options = eviction::Options::new(memory_config(), Arc::new(memory_summary(&low)));
    let (api_source, api) = ChannelSource::new(API_SERVER_SOURCE);
    let n = node_built(Arc::new(crate::probe::NoProbes), FakeRuntime::new(), |b| {
        b.source(Box::new(api_source)).eviction(options)
    })
    .await;
    n.send(Operation::Set, Vec::new()).await;
    let (be, g) = (pod("best-effort"), guaranteed("guaranteed"));
    api.send(Operation::Set, vec![g.clone(), be.clone()])
        .await
        .expect("running");
    eventually(Duration::from_secs(30), "both running", || {
        running(&n.runtime, &be.uid(), "app").is_some()
            && running(&n.runtime, &g.uid(), "app").is_some()
    })
    .await;
    low.store(true, Ordering::SeqCst);
    eventually(Duration::from_secs(30), "best-effort evicted", || {
        n.status.reason(&be.uid()).as_deref() == Some("Evicted")
            && running(&n.runtime, &be.uid(), "app").is_none()
    })
    .await;
    assert_eq!(n.status.phase(&be.uid()).as_deref(), Some("Failed"));
    assert!(
        n.recorder.has(
            "Evicted",
            "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. "
        ),
        "the pod event carries upstream's message"
    );
    assert!(
        n.recorder
            .has("EvictionThresholdMet", "Attempting to reclaim memory")
    );
    // The next round takes the next pod: the Guaranteed one is all that is left.
    eventually(Duration::from_secs(30), "guaranteed evicted next", || {
        n.status.reason(&g.uid()).as_deref() == Some("Evicted")
    })
    .await;

    let late = pod("late");
    api.send(Operation::Add, vec![late.clone()])
        .await
        .expect("running");
    eventually(Duration::from_secs(5), "late pod refused", || {
        n.status.reason(&late.uid()).as_deref() == Some("Evicted")
    })
    .await;
    assert!(running(&n.runtime, &late.uid(), "app").is_none());
    n.token.cancel();
}

/// Upstream `IsEvicted` / `ShouldPodContentBeRemoved`: an evicted pod keeps its record
/// (`Failed` / `Evicted`, still in the config) while container GC removes its dead containers
/// and sandbox at once; a pod that is merely running keeps everything.
#[tokio::test(start_paused = true)]
async fn an_evicted_pods_containers_go_and_its_record_stays() {
    use crate::container_gc::{self, PodStateProvider};
    let low = Arc::new(AtomicBool::new(false));
    let options = eviction::Options::new(memory_config(), Arc::new(memory_summary(&low)));
    let (api_source, api) = ChannelSource::new(API_SERVER_SOURCE);
    let n = node_built(Arc::new(crate::probe::NoProbes), FakeRuntime::new(), |b| {
        b.source(Box::new(api_source))
            .eviction(options)
            .container_gc(container_gc::Policy::default(), Duration::from_secs(5))
    })
    .await;
    n.send(Operation::Set, Vec::new()).await;
    let (be, g) = (pod("best-effort"), guaranteed("guaranteed"));
    api.send(Operation::Set, vec![g.clone(), be.clone()])
        .await
        .expect("running");
    eventually(Duration::from_secs(30), "both running", || {
        running(&n.runtime, &be.uid(), "app").is_some()
            && running(&n.runtime, &g.uid(), "app").is_some()
    })
    .await;
    assert!(!n.kubelet.should_pod_content_be_removed(&be.uid()));
    low.store(true, Ordering::SeqCst);
    eventually(Duration::from_secs(30), "best-effort evicted", || {
        n.status.reason(&be.uid()).as_deref() == Some("Evicted")
    })
    .await;
    // Before the next round takes the Guaranteed pod too: memory is back.
    low.store(false, Ordering::SeqCst);
    assert!(n.kubelet.should_pod_content_be_removed(&be.uid()));
    eventually(
        Duration::from_secs(60),
        "the evicted pod's containers collected",
        || {
            n.runtime
                .running_pods()
                .iter()
                .filter(|p| p.uid == be.uid())
                .all(|p| p.containers.is_empty() && p.sandboxes.is_empty())
        },
    )
    .await;
    assert_eq!(n.status.phase(&be.uid()).as_deref(), Some("Failed"));
    assert_eq!(n.status.reason(&be.uid()).as_deref(), Some("Evicted"));
    assert!(
        n.kubelet.pod_manager.contains(&be.uid()),
        "the record stays until the API deletes it"
    );
    assert!(running(&n.runtime, &g.uid(), "app").is_some());
    assert!(!n.kubelet.should_pod_content_be_removed(&g.uid()));
    n.token.cancel();
}
