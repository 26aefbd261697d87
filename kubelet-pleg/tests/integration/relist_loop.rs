//! The relist loop and health (upstream `generic_test.go`: TestHealthy; `wait.Until`).

use crate::common;

use std::time::Duration;

use common::*;
use kubelet_core::cache::PodCache;
use kubelet_core::pleg::Pleg;
use kubelet_core::runtime::SandboxState;
use kubelet_pleg::{Config, GenericPleg};
use tokio_util::sync::CancellationToken;

/// The health verdict with the error's message, as upstream's tests compare it.
fn health(pleg: &GenericPleg) -> Result<(), String> {
    pleg.healthy().map_err(|e| e.to_string())
}

#[tokio::test(start_paused = true)]
async fn healthy_only_after_a_recent_relist() {
    let rt = ScriptedRuntime::new(vec![]);
    let (pleg, _rx) = GenericPleg::new(rt.clone(), PodCache::new(), Config::default());
    assert_eq!(
        health(&pleg),
        Err("pleg has yet to be successful".to_owned())
    );

    pleg.relist().await;
    assert_eq!(health(&pleg), Ok(()));

    tokio::time::advance(Duration::from_secs(180)).await;
    assert_eq!(
        health(&pleg),
        Ok(()),
        "exactly at the threshold is still healthy"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(
        health(&pleg),
        Err("pleg was last seen active 3m1s ago; threshold is 3m0s".to_owned())
    );

    // A failed listing does not count as activity.
    rt.with(|s| s.fail_get_pods = true);
    pleg.relist().await;
    assert!(pleg.healthy().is_err());

    rt.with(|s| s.fail_get_pods = false);
    pleg.relist().await;
    assert_eq!(health(&pleg), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn failed_listing_changes_nothing() {
    let rt = ScriptedRuntime::new(vec![pod("p1", SandboxState::Ready, &[])]);
    rt.with(|s| s.fail_get_pods = true);
    let cache = PodCache::new();
    let (pleg, mut rx) = GenericPleg::new(rt.clone(), cache.clone(), Config::default());
    pleg.relist().await;
    assert!(drain(&mut rx).is_empty());
    assert!(cache.get(&kubelet_core::PodUid::from("p1")).is_none());
    assert_eq!(pleg.last_relist(), None);
}

#[tokio::test(start_paused = true)]
async fn relists_once_per_period() {
    let rt = ScriptedRuntime::new(vec![]);
    let config = Config::default().relist_period(Duration::from_secs(1));
    let (pleg, _rx) = GenericPleg::new(rt.clone(), PodCache::new(), config);
    let token = CancellationToken::new();
    let task = tokio::spawn(pleg.clone().run(token.clone()));
    settle().await;
    assert_eq!(rt.get_pods_calls(), 1, "first relist right away");

    for n in 1..=5 {
        tokio::time::advance(Duration::from_millis(999)).await;
        settle().await;
        assert_eq!(rt.get_pods_calls(), n, "not before the period is over");
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
        assert_eq!(rt.get_pods_calls(), n + 1);
    }

    token.cancel();
    task.await.expect("run returns on cancel");
}

#[tokio::test(start_paused = true)]
async fn relist_now_runs_at_once_and_restarts_the_period() {
    let rt = ScriptedRuntime::new(vec![]);
    let (pleg, _rx) = GenericPleg::new(rt.clone(), PodCache::new(), Config::default());
    let token = CancellationToken::new();
    let task = tokio::spawn(pleg.clone().run(token.clone()));
    settle().await;
    assert_eq!(rt.get_pods_calls(), 1);

    tokio::time::advance(Duration::from_millis(300)).await;
    pleg.relist_now();
    settle().await;
    assert_eq!(rt.get_pods_calls(), 2);

    tokio::time::advance(Duration::from_millis(700)).await;
    settle().await;
    assert_eq!(
        rt.get_pods_calls(),
        2,
        "period restarted at the on-demand relist"
    );
    tokio::time::advance(Duration::from_millis(300)).await;
    settle().await;
    assert_eq!(rt.get_pods_calls(), 3);

    token.cancel();
    task.await.expect("run returns on cancel");
}

#[tokio::test(start_paused = true)]
async fn cancel_interrupts_a_slow_relist() {
    let rt = ScriptedRuntime::new(vec![pod("p1", SandboxState::Ready, &[])]);
    rt.with(|s| s.status_delay = Duration::from_secs(3600));
    let (pleg, _rx) = GenericPleg::new(rt.clone(), PodCache::new(), Config::default());
    let token = CancellationToken::new();
    let task = tokio::spawn(pleg.clone().run(token.clone()));
    settle().await;
    assert_eq!(rt.status_calls(), 1, "stuck inspecting p1");
    token.cancel();
    settle().await;
    assert!(task.is_finished());
    // The PLEG is still usable after the interrupted relist.
    rt.with(|s| s.status_delay = Duration::ZERO);
    pleg.relist().await;
    assert_eq!(health(&pleg), Ok(()));
}
