//! The arithmetic of a graceful container stop: the preStop hook runs first with the grace
//! period as its deadline and its whole seconds are taken off; a sidecar then waits for its
//! turn (the app containers and later sidecars must have stopped) and that wait is taken off
//! too; `StopContainer` gets what is left, never less than
//! [`MINIMUM_GRACE_PERIOD_SECONDS`].
//!
//! Mirrors upstream `killContainer`, `executePreStopHook` and `terminationOrdering`
//! (`pkg/kubelet/kuberuntime/kuberuntime_container.go`, `kuberuntime_termination_order.go`).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::container::is_restartable_init_container;
use crate::pod::{MINIMUM_GRACE_PERIOD_SECONDS, PodExt};

/// Who must have stopped before whom (upstream `terminationOrdering`): every sidecar waits
/// for all app containers, and for the sidecars declared after it, so sidecars stop after the
/// app containers, in reverse order.
#[derive(Debug, Default)]
pub(super) struct TerminationOrdering {
    terminated: HashMap<String, watch::Sender<bool>>,
    prereqs: HashMap<String, Vec<watch::Receiver<bool>>>,
}

impl TerminationOrdering {
    /// The ordering for `pod` when the containers called `running` are being stopped;
    /// `None` when the pod has no sidecars (nothing waits for anything).
    pub(super) fn for_pod(pod: &Pod, running: &HashSet<&str>) -> Option<Self> {
        if !pod
            .init_containers()
            .iter()
            .any(is_restartable_init_container)
        {
            return None;
        }
        let mut to = Self::default();
        let mut channel = |name: &str| {
            // Containers that do not run count as stopped already.
            let (tx, rx) = watch::channel(!running.contains(name));
            to.terminated.insert(name.to_owned(), tx);
            rx
        };
        let apps: Vec<watch::Receiver<bool>> =
            pod.containers().iter().map(|c| channel(&c.name)).collect();
        let mut inits = Vec::new();
        for c in pod.init_containers().iter().rev() {
            inits.push((c, channel(&c.name)));
        }
        let mut previous_sidecar: Option<watch::Receiver<bool>> = None;
        for (c, rx) in inits {
            if is_restartable_init_container(c) {
                let mut prereqs = apps.clone();
                prereqs.extend(previous_sidecar.take());
                to.prereqs.insert(c.name.clone(), prereqs);
                previous_sidecar = Some(rx);
            }
        }
        Some(to)
    }

    /// Waits until `name` may stop, at most `grace_seconds` (upstream `waitForTurn`).
    /// Returns how long it waited.
    pub(super) async fn wait_for_turn(&self, name: &str, grace_seconds: i64) -> Duration {
        if grace_seconds <= 0 {
            return Duration::ZERO;
        }
        let start = Instant::now();
        let Some(prereqs) = self.prereqs.get(name) else {
            return Duration::ZERO;
        };
        let all = async {
            for rx in prereqs {
                let mut rx = rx.clone();
                // A dropped sender means nobody will stop that container any more.
                let _ = rx.wait_for(|stopped| *stopped).await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(grace_seconds.unsigned_abs()), all).await;
        start.elapsed()
    }

    /// Records that `name` has stopped (upstream `containerTerminated`).
    pub(super) fn container_terminated(&self, name: &str) {
        if let Some(tx) = self.terminated.get(name) {
            tx.send_replace(true);
        }
    }
}

/// Marks a container stopped in its ordering when dropped, so that a failed or cancelled
/// stop never makes the sidecars wait for the whole grace period.
struct TerminatedOnDrop<'a>(Option<(&'a TerminationOrdering, &'a str)>);

impl Drop for TerminatedOnDrop<'_> {
    fn drop(&mut self) {
        if let Some((ordering, name)) = self.0 {
            ordering.container_terminated(name);
        }
    }
}

/// Stops one container gracefully: runs `pre_stop` (if any and if `grace_seconds > 0`) with
/// `grace_seconds` as its deadline, waits for the container's turn in `ordering`, and calls
/// `stop` with the seconds left, at least [`MINIMUM_GRACE_PERIOD_SECONDS`]. Whole seconds
/// are taken off, as upstream does.
pub(super) async fn stop_gracefully<H, S, F, T>(
    grace_seconds: i64,
    pre_stop: Option<H>,
    ordering: Option<(&TerminationOrdering, &str)>,
    stop: S,
) -> T
where
    H: Future<Output = ()>,
    S: FnOnce(i64) -> F,
    F: Future<Output = T>,
{
    let _terminated = TerminatedOnDrop(ordering);
    let mut grace = grace_seconds;
    if let Some(hook) = pre_stop
        && grace > 0
    {
        let start = Instant::now();
        let deadline = Duration::from_secs(grace.unsigned_abs());
        if tokio::time::timeout(deadline, hook).await.is_err() {
            tracing::info!(
                grace,
                "preStop hook did not complete within the grace period"
            );
        }
        grace -= whole_seconds(start.elapsed());
    }
    if let Some((ordering, name)) = ordering
        && grace > 0
    {
        grace -= whole_seconds(ordering.wait_for_turn(name, grace).await);
    }
    stop(grace.max(MINIMUM_GRACE_PERIOD_SECONDS)).await
}

fn whole_seconds(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use k8s_openapi::api::core::v1::{Container, PodSpec};

    use super::*;

    fn container(name: &str, restart_policy: Option<&str>) -> Container {
        Container {
            name: name.into(),
            restart_policy: restart_policy.map(Into::into),
            ..Default::default()
        }
    }

    fn sidecar_pod() -> Pod {
        Pod {
            spec: Some(PodSpec {
                init_containers: Some(vec![
                    container("sc-1", Some("Always")),
                    container("init", None),
                    container("sc-2", Some("Always")),
                ]),
                containers: vec![container("app", None)],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Stops with a hook that sleeps `hook` and records `(name, seconds since start, grace)`.
    async fn stop_after(
        grace: i64,
        hook: Option<Duration>,
        ordering: Option<(&TerminationOrdering, &str)>,
        log: &Mutex<Vec<(String, u64, i64)>>,
        start: Instant,
    ) -> i64 {
        let name = ordering.map_or("c", |(_, n)| n).to_owned();
        stop_gracefully(
            grace,
            hook.map(tokio::time::sleep),
            ordering,
            |g| async move {
                log.lock()
                    .expect("lock")
                    .push((name, start.elapsed().as_secs(), g));
                g
            },
        )
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn pre_stop_time_is_taken_off_the_grace_period() {
        let log = Mutex::new(Vec::new());
        let start = Instant::now();
        let g = stop_after(10, Some(Duration::from_millis(3_500)), None, &log, start).await;
        assert_eq!(g, 7, "3.5 s of hook takes 3 whole seconds off");
        assert_eq!(log.lock().expect("lock")[0].1, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn hanging_pre_stop_is_cut_at_the_grace_period_and_the_floor_applies() {
        let log = Mutex::new(Vec::new());
        let start = Instant::now();
        let g = stop_after(5, Some(Duration::from_secs(600)), None, &log, start).await;
        assert_eq!(g, MINIMUM_GRACE_PERIOD_SECONDS);
        assert_eq!(log.lock().expect("lock")[0].1, 5, "stopped at the deadline");
    }

    #[tokio::test(start_paused = true)]
    async fn no_pre_stop_without_grace_and_never_below_the_floor() {
        let log = Mutex::new(Vec::new());
        let start = Instant::now();
        let ran = Arc::new(Mutex::new(false));
        let r = ran.clone();
        let hook = async move { *r.lock().expect("lock") = true };
        let g = stop_gracefully(0, Some(hook), None, |g| async move { g }).await;
        assert_eq!(g, MINIMUM_GRACE_PERIOD_SECONDS);
        assert!(
            !*ran.lock().expect("lock"),
            "no hook with a zero grace period"
        );
        assert_eq!(stop_after(1, None, None, &log, start).await, 2);
        assert_eq!(stop_after(30, None, None, &log, start).await, 30);
    }

    #[test]
    fn no_ordering_without_sidecars() {
        let mut p = sidecar_pod();
        if let Some(s) = p.spec.as_mut() {
            s.init_containers = Some(vec![container("init", None)]);
        }
        assert!(TerminationOrdering::for_pod(&p, &HashSet::from(["app"])).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn sidecars_stop_after_apps_in_reverse_order() {
        let p = sidecar_pod();
        let running = HashSet::from(["app", "sc-1", "sc-2"]);
        let ordering = TerminationOrdering::for_pod(&p, &running).expect("sidecars");
        let log = Mutex::new(Vec::new());
        let start = Instant::now();
        let (app, sc2, sc1) = tokio::join!(
            // The app's preStop takes 4 s; the sidecars wait for it.
            stop_after(
                30,
                Some(Duration::from_secs(4)),
                Some((&ordering, "app")),
                &log,
                start
            ),
            stop_after(30, None, Some((&ordering, "sc-2")), &log, start),
            stop_after(30, None, Some((&ordering, "sc-1")), &log, start),
        );
        assert_eq!((app, sc2, sc1), (26, 26, 26));
        let order: Vec<String> = log
            .lock()
            .expect("lock")
            .iter()
            .map(|(n, _, _)| n.clone())
            .collect();
        assert_eq!(order, ["app", "sc-2", "sc-1"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sidecar_waits_no_longer_than_its_grace_period() {
        let p = sidecar_pod();
        let ordering =
            TerminationOrdering::for_pod(&p, &HashSet::from(["app", "sc-1"])).expect("sidecars");
        let log = Mutex::new(Vec::new());
        let start = Instant::now();
        // The app never stops (its stop is never called): sc-1 waits 5 s, then gets the floor.
        let _app_running = ordering.terminated.get("app").expect("app").subscribe();
        let g = stop_after(5, None, Some((&ordering, "sc-1")), &log, start).await;
        assert_eq!(g, MINIMUM_GRACE_PERIOD_SECONDS);
        assert_eq!(log.lock().expect("lock")[0].1, 5);
        // sc-2 is not running: nothing waits for it.
        assert!(*ordering.terminated.get("sc-2").expect("sc-2").borrow());
    }
}
