//! What one relist sends and caches (upstream `generic_test.go`: TestRelisting,
//! TestRelistingWithSandboxes, TestRelistWithCache, TestRemoveCacheEntry,
//! TestRelistIPChange).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use kubelet_core::PodUid;
use kubelet_core::cache::PodCache;
use kubelet_core::pleg::{EventType, Pleg};
use kubelet_core::runtime::{ContainerState, SandboxState};
use kubelet_pleg::{Config, GenericPleg};
use tokio::time::Instant;

use ContainerState::{Created, Exited, Running};
use EventType::{ContainerDied, ContainerRemoved, ContainerStarted, PodSync};

fn setup(
    rt: &Arc<ScriptedRuntime>,
) -> (
    GenericPleg,
    tokio::sync::mpsc::Receiver<kubelet_core::pleg::Event>,
    PodCache,
) {
    let cache = PodCache::new();
    let (pleg, rx) = GenericPleg::new(rt.clone(), cache.clone(), Config::default());
    (pleg, rx, cache)
}

fn cached_state(cache: &PodCache, uid: &str, id: &str) -> Option<ContainerState> {
    let (status, _) = cache.get(&PodUid::from(uid))?;
    status
        .containers
        .iter()
        .find(|c| c.id == id)
        .map(|c| c.state)
}

#[tokio::test(start_paused = true)]
async fn new_pod_starts_containers_and_is_cached() {
    let rt = ScriptedRuntime::new(vec![pod(
        "p1",
        SandboxState::Ready,
        &[("c1", Running), ("c2", Exited)],
    )]);
    let (pleg, mut rx, cache) = setup(&rt);
    pleg.relist().await;
    assert_eq!(
        drain(&mut rx),
        [
            ev(ContainerStarted, "p1", "c1"),
            ev(ContainerDied, "p1", "c2"),
            ev(PodSync, "p1", "sb-p1"),
        ]
    );
    assert_eq!(cached_state(&cache, "p1", "c1"), Some(Running));
    let (status, _) = cache.get(&PodUid::from("p1")).expect("cached");
    assert_eq!(status.ips, [IP]);
    assert_eq!(status.name, "name-p1");

    pleg.relist().await;
    assert!(drain(&mut rx).is_empty(), "nothing changed");
    assert_eq!(rt.status_calls(), 1, "unchanged pods are not re-inspected");
}

#[tokio::test(start_paused = true)]
async fn container_dies_and_is_removed() {
    let rt = ScriptedRuntime::new(vec![pod("p1", SandboxState::Ready, &[("c1", Running)])]);
    let (pleg, mut rx, cache) = setup(&rt);
    pleg.relist().await;
    drain(&mut rx);

    rt.set_pod(pod("p1", SandboxState::Ready, &[("c1", Exited)]));
    pleg.relist().await;
    assert_eq!(drain(&mut rx), [ev(ContainerDied, "p1", "c1")]);
    assert_eq!(cached_state(&cache, "p1", "c1"), Some(Exited));

    rt.set_pod(pod("p1", SandboxState::Ready, &[]));
    pleg.relist().await;
    assert_eq!(drain(&mut rx), [ev(ContainerRemoved, "p1", "c1")]);
    assert_eq!(cached_state(&cache, "p1", "c1"), None);
}

#[tokio::test(start_paused = true)]
async fn running_container_that_disappears_dies_first() {
    let rt = ScriptedRuntime::new(vec![pod("p1", SandboxState::Ready, &[("c1", Running)])]);
    let (pleg, mut rx, _cache) = setup(&rt);
    pleg.relist().await;
    drain(&mut rx);
    rt.set_pod(pod("p1", SandboxState::Ready, &[]));
    pleg.relist().await;
    assert_eq!(
        drain(&mut rx),
        [
            ev(ContainerDied, "p1", "c1"),
            ev(ContainerRemoved, "p1", "c1")
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn restarted_container_starts_again_under_a_new_id() {
    let rt = ScriptedRuntime::new(vec![pod("p1", SandboxState::Ready, &[("c1", Exited)])]);
    let (pleg, mut rx, _cache) = setup(&rt);
    pleg.relist().await;
    drain(&mut rx);
    rt.set_pod(pod(
        "p1",
        SandboxState::Ready,
        &[("c1", Exited), ("c1-2", Running)],
    ));
    pleg.relist().await;
    assert_eq!(drain(&mut rx), [ev(ContainerStarted, "p1", "c1-2")]);
}

#[tokio::test(start_paused = true)]
async fn sandbox_state_changes_are_pod_syncs() {
    let rt = ScriptedRuntime::new(vec![pod("p1", SandboxState::Ready, &[])]);
    let (pleg, mut rx, cache) = setup(&rt);
    pleg.relist().await;
    assert_eq!(drain(&mut rx), [ev(PodSync, "p1", "sb-p1")]);
    rt.set_pod(pod("p1", SandboxState::NotReady, &[]));
    pleg.relist().await;
    assert_eq!(drain(&mut rx), [ev(PodSync, "p1", "sb-p1")]);
    let (status, _) = cache.get(&PodUid::from("p1")).expect("cached");
    assert_eq!(status.sandboxes[0].state, SandboxState::NotReady);
}

#[tokio::test(start_paused = true)]
async fn changed_state_refreshes_the_cache_without_an_event() {
    let rt = ScriptedRuntime::new(vec![pod("p1", SandboxState::Ready, &[])]);
    let (pleg, mut rx, cache) = setup(&rt);
    pleg.relist().await;
    drain(&mut rx);
    rt.set_pod(pod("p1", SandboxState::Ready, &[("c1", Created)]));
    pleg.relist().await;
    assert!(
        drain(&mut rx).is_empty(),
        "ContainerChanged is not sent, as upstream"
    );
    assert_eq!(cached_state(&cache, "p1", "c1"), Some(Created));
}

#[tokio::test(start_paused = true)]
async fn vanished_pod_leaves_the_cache() {
    let rt = ScriptedRuntime::new(vec![
        pod("p1", SandboxState::Ready, &[("c1", Running)]),
        pod("p2", SandboxState::Ready, &[("c2", Running)]),
    ]);
    let (pleg, mut rx, cache) = setup(&rt);
    pleg.relist().await;
    drain(&mut rx);
    rt.remove_pod("p1");
    pleg.relist().await;
    assert_eq!(
        drain(&mut rx),
        [
            ev(ContainerDied, "p1", "c1"),
            ev(ContainerRemoved, "p1", "c1"),
            ev(PodSync, "p1", "sb-p1"),
        ]
    );
    assert!(cache.get(&PodUid::from("p1")).is_none());
    assert!(cache.get(&PodUid::from("p2")).is_some());
}

#[tokio::test(start_paused = true)]
async fn failed_inspection_is_retried_on_the_next_relist() {
    let rt = ScriptedRuntime::new(vec![
        pod("p1", SandboxState::Ready, &[("c1", Running)]),
        pod("p2", SandboxState::Ready, &[("c2", Running)]),
    ]);
    rt.with(|s| s.fail_status.insert(PodUid::from("p1")));
    let (pleg, mut rx, cache) = setup(&rt);

    pleg.relist().await;
    assert_eq!(
        drain(&mut rx),
        [ev(ContainerStarted, "p2", "c2"), ev(PodSync, "p2", "sb-p2")],
        "no events for the pod that could not be inspected"
    );
    assert!(cache.get(&PodUid::from("p1")).is_none());

    pleg.relist().await;
    assert!(drain(&mut rx).is_empty());
    let p1_calls = rt.with(|s| s.status_calls.iter().filter(|u| u.as_str() == "p1").count());
    assert_eq!(p1_calls, 2, "re-inspected");

    rt.with(|s| s.fail_status.clear());
    pleg.relist().await;
    assert_eq!(
        drain(&mut rx),
        [ev(ContainerStarted, "p1", "c1"), ev(PodSync, "p1", "sb-p1")]
    );
    assert_eq!(cached_state(&cache, "p1", "c1"), Some(Running));

    let calls = rt.status_calls();
    pleg.relist().await;
    assert_eq!(rt.status_calls(), calls, "done re-inspecting");
}

#[tokio::test(start_paused = true)]
async fn relist_releases_cache_waiters() {
    let rt = ScriptedRuntime::new(vec![pod("p1", SandboxState::Ready, &[("c1", Running)])]);
    let (pleg, _rx, cache) = setup(&rt);
    let t0 = Instant::now();
    tokio::time::advance(Duration::from_millis(1)).await;
    let known = tokio::spawn({
        let cache = cache.clone();
        async move { cache.get_newer_than(&PodUid::from("p1"), t0).await }
    });
    let unknown = tokio::spawn({
        let cache = cache.clone();
        async move { cache.get_newer_than(&PodUid::from("nobody"), t0).await }
    });
    settle().await;
    assert!(!known.is_finished() && !unknown.is_finished());

    pleg.relist().await;
    let released = |waiter| tokio::time::timeout(Duration::from_secs(5), waiter);
    let status = released(known).await.expect("released").expect("waiter");
    assert_eq!(status.containers.len(), 1);
    let status = released(unknown).await.expect("released").expect("waiter");
    assert!(
        status.containers.is_empty(),
        "global timestamp: unknown pods read as empty"
    );
}

#[tokio::test(start_paused = true)]
async fn pod_ips_survive_teardown() {
    let rt = ScriptedRuntime::new(vec![pod("p1", SandboxState::Ready, &[("c1", Running)])]);
    let (pleg, _rx, cache) = setup(&rt);
    pleg.relist().await;
    rt.set_pod(pod("p1", SandboxState::NotReady, &[("c1", Exited)]));
    pleg.relist().await;
    let (status, _) = cache.get(&PodUid::from("p1")).expect("cached");
    assert_eq!(status.ips, [IP], "old IPs kept while no sandbox is ready");
}

#[tokio::test(start_paused = true)]
async fn relist_pod_stamps_the_time_the_inspection_started() {
    let rt = ScriptedRuntime::new(vec![pod("p1", SandboxState::Ready, &[("c1", Running)])]);
    rt.with(|s| s.status_delay = Duration::from_millis(100));
    let (pleg, mut rx, cache) = setup(&rt);
    let before = Instant::now();
    pleg.relist_pod(&PodUid::from("p1"), "name-p1", "default")
        .await
        .expect("inspected");
    assert!(Instant::now() >= before + Duration::from_millis(100));
    let (status, at) = cache.get(&PodUid::from("p1")).expect("cached");
    assert_eq!(at, before);
    assert_eq!(status.containers.len(), 1);

    // The next relist still reports what it sees, as upstream.
    pleg.relist().await;
    assert_eq!(
        drain(&mut rx),
        [ev(ContainerStarted, "p1", "c1"), ev(PodSync, "p1", "sb-p1")]
    );
}

#[tokio::test(start_paused = true)]
async fn relist_pod_error_leaves_the_cache_alone() {
    let rt = ScriptedRuntime::new(vec![pod("p1", SandboxState::Ready, &[("c1", Running)])]);
    let (pleg, _rx, cache) = setup(&rt);
    pleg.relist().await;
    let (_, at) = cache.get(&PodUid::from("p1")).expect("cached");
    rt.with(|s| s.fail_status.insert(PodUid::from("p1")));
    tokio::time::advance(Duration::from_secs(1)).await;
    let err = pleg
        .relist_pod(&PodUid::from("p1"), "name-p1", "default")
        .await
        .expect_err("scripted failure");
    assert!(err.is_retryable());
    assert_eq!(cache.get(&PodUid::from("p1")).map(|(_, t)| t), Some(at));
}

#[tokio::test(start_paused = true)]
async fn full_channel_drops_events_without_blocking() {
    let ids: Vec<String> = (0..1_005).map(|i| format!("c{i}")).collect();
    let containers: Vec<(&str, ContainerState)> =
        ids.iter().map(|id| (id.as_str(), Running)).collect();
    let rt = ScriptedRuntime::new(vec![pod("p1", SandboxState::Ready, &containers)]);
    let (pleg, mut rx, cache) = setup(&rt);
    pleg.relist().await;
    assert_eq!(drain(&mut rx).len(), kubelet_pleg::CHANNEL_CAPACITY);
    assert!(cache.get(&PodUid::from("p1")).is_some());
}

#[tokio::test(start_paused = true)]
async fn relist_without_receiver_still_updates_the_cache() {
    let rt = ScriptedRuntime::new(vec![pod("p1", SandboxState::Ready, &[("c1", Running)])]);
    let (pleg, rx, cache) = setup(&rt);
    drop(rx);
    pleg.relist().await;
    assert!(cache.get(&PodUid::from("p1")).is_some());
}

/// Upstream `Relist`'s metrics: every relist's duration, the interval since the last
/// successful one, and the pods and containers it found.
#[tokio::test(start_paused = true)]
async fn relists_are_recorded_in_the_metrics() {
    let rt = ScriptedRuntime::new(vec![
        pod(
            "p1",
            SandboxState::Ready,
            &[("c1", Running), ("c2", Exited)],
        ),
        pod("p2", SandboxState::NotReady, &[("c3", Exited)]),
    ]);
    let metrics = kubelet_core::metrics::KubeletMetrics::default();
    let (pleg, _rx) = GenericPleg::with_metrics(
        rt.clone(),
        PodCache::new(),
        Config::default(),
        metrics.clone(),
    );
    pleg.relist().await;
    assert_eq!(metrics.pleg_relist_duration.count(), 1);
    assert_eq!(
        metrics.pleg_relist_interval.count(),
        0,
        "no previous relist"
    );
    assert_eq!(
        metrics.running_pods.get(),
        1,
        "one pod with a ready sandbox"
    );
    assert_eq!(metrics.running_containers("running"), 1);
    assert_eq!(metrics.running_containers("exited"), 2);

    tokio::time::advance(Duration::from_secs(2)).await;
    rt.with(|s| s.fail_get_pods = true);
    pleg.relist().await;
    assert_eq!(
        metrics.pleg_relist_duration.count(),
        2,
        "failed relists count too"
    );
    assert_eq!(metrics.pleg_relist_interval.count(), 1);
    assert!((metrics.pleg_relist_interval.sum() - 2.0).abs() < 1e-6);
    assert_eq!(
        metrics.running_pods.get(),
        1,
        "a failed relist changes nothing"
    );

    rt.with(|s| s.fail_get_pods = false);
    rt.remove_pod("p1");
    pleg.relist().await;
    assert_eq!(metrics.running_pods.get(), 0);
    assert_eq!(metrics.running_containers("running"), 0);
}
