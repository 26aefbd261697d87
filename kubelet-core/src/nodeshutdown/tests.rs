//! The manager against a stateful fake logind and a terminator that records and takes time.

use std::sync::Mutex as StdMutex;
use std::sync::atomic::AtomicUsize;

use tokio::time::Instant;

use super::*;
use crate::testing::pod;

/// A fake logind: a maximum delay the override raises (unless refused), locks counted while
/// held, `PrepareForShutdown` sent by the test.
#[derive(Default)]
struct FakeLogind {
    delay: StdMutex<Duration>,
    refuse_override: bool,
    held: Arc<AtomicUsize>,
    taken: AtomicUsize,
    calls: StdMutex<Vec<String>>,
    signals: StdMutex<Option<mpsc::Sender<bool>>>,
}

struct Held(Arc<AtomicUsize>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl FakeLogind {
    fn with_delay(secs: u64) -> Arc<Self> {
        let fake = Self::default();
        *fake.delay.lock().expect("lock") = Duration::from_secs(secs);
        Arc::new(fake)
    }
    fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
    fn calls(&self) -> Vec<String> {
        self.calls.lock().expect("lock").clone()
    }
    async fn signal(&self, shutting_down: bool) {
        let tx = self.signals.lock().expect("lock").clone();
        tx.expect("monitored")
            .send(shutting_down)
            .await
            .expect("manager listens");
    }
    fn disconnect(&self) {
        self.signals.lock().expect("lock").take();
    }
    fn call(&self, what: String) {
        self.calls.lock().expect("lock").push(what);
    }
}

#[async_trait]
impl Inhibitor for FakeLogind {
    async fn current_inhibit_delay(&self) -> Result<Duration> {
        Ok(*self.delay.lock().expect("lock"))
    }
    async fn inhibit_shutdown(&self) -> Result<InhibitLock> {
        self.held.fetch_add(1, Ordering::SeqCst);
        self.taken.fetch_add(1, Ordering::SeqCst);
        self.call("Inhibit".into());
        Ok(InhibitLock::new(Held(self.held.clone())))
    }
    async fn override_inhibit_delay(&self, delay: Duration) -> Result<()> {
        self.call(format!("Override {}", delay.as_secs()));
        if !self.refuse_override {
            *self.delay.lock().expect("lock") = delay;
        }
        Ok(())
    }
    async fn reload_logind_conf(&self) -> Result<()> {
        self.call("Reload".into());
        Ok(())
    }
    async fn monitor_shutdown(&self) -> Result<mpsc::Receiver<bool>> {
        let (tx, rx) = mpsc::channel(4);
        *self.signals.lock().expect("lock") = Some(tx);
        self.call("Monitor".into());
        Ok(rx)
    }
}

/// Records each termination with the (virtual) time it started, and takes `takes` to end
/// each pod.
struct SlowTerminator {
    started: Instant,
    takes: Duration,
    log: StdMutex<Vec<(String, TerminatePodOptions, Duration, bool)>>,
}

#[async_trait]
impl PodTerminator for SlowTerminator {
    async fn terminate_pod_abnormally_and_wait(
        &self,
        pod: &Pod,
        options: TerminatePodOptions,
    ) -> Result<(), crate::eviction::Error> {
        let at = self.started.elapsed();
        let index = {
            let mut log = self.log.lock().expect("lock");
            log.push((pod.name_or_empty().to_owned(), options, at, false));
            log.len() - 1
        };
        tokio::time::sleep(self.takes).await;
        self.log.lock().expect("lock")[index].3 = true;
        Ok(())
    }
    fn pod_cleaned_up(&self, _pod: &Pod) -> bool {
        true
    }
}

fn with_priority(name: &str, priority: i32, grace: Option<i64>) -> Pod {
    let mut p = pod(name);
    let spec = p.spec.as_mut().expect("spec");
    spec.priority = Some(priority);
    spec.termination_grace_period_seconds = grace;
    p
}

fn config(grace: u64, critical: u64) -> Config {
    Config {
        shutdown_grace_period: Duration::from_secs(grace),
        shutdown_grace_period_critical_pods: Duration::from_secs(critical),
        ..Default::default()
    }
}

#[test]
fn the_two_periods_become_two_priority_groups() {
    assert_eq!(
        config(30, 10).groups().expect("valid"),
        [
            GracePeriodByPriority {
                priority: 0,
                shutdown_grace_period_seconds: 20
            },
            GracePeriodByPriority {
                priority: SYSTEM_CRITICAL_PRIORITY,
                shutdown_grace_period_seconds: 10
            },
        ]
    );
    assert!(config(0, 0).groups().expect("valid").is_empty());
    let err = config(10, 30)
        .groups()
        .expect_err("critical above the whole");
    assert!(
        err.to_string()
            .starts_with("invalid shutdownGracePeriodCriticalPods:"),
        "{err}"
    );
    // The by-priority form wins, sorted; a negative period is refused by name.
    let mut c = config(30, 10);
    c.shutdown_grace_period_by_pod_priority = vec![
        GracePeriodByPriority {
            priority: 100_000,
            shutdown_grace_period_seconds: 5,
        },
        GracePeriodByPriority {
            priority: 0,
            shutdown_grace_period_seconds: 7,
        },
    ];
    let groups = c.groups().expect("valid");
    assert_eq!(groups[0].priority, 0);
    assert_eq!(groups[1].priority, 100_000);
    c.shutdown_grace_period_by_pod_priority[0].shutdown_grace_period_seconds = -1;
    let err = c.groups().expect_err("negative");
    assert!(
        err.to_string()
            .starts_with("invalid shutdownGracePeriodByPodPriority:"),
        "{err}"
    );
}

#[test]
fn pods_go_to_the_highest_group_not_above_their_priority() {
    let groups = [
        GracePeriodByPriority {
            priority: 1,
            shutdown_grace_period_seconds: 1,
        },
        GracePeriodByPriority {
            priority: 10,
            shutdown_grace_period_seconds: 2,
        },
        GracePeriodByPriority {
            priority: 100,
            shutdown_grace_period_seconds: 3,
        },
    ];
    let pods = [
        ("low", 0),
        ("one", 1),
        ("mid", 50),
        ("ten", 10),
        ("top", 1000),
    ]
    .map(|(n, p)| with_priority(n, p, None))
    .to_vec();
    let grouped = group_by_priority(&groups, pods);
    let names: Vec<Vec<&str>> = grouped
        .iter()
        .map(|(_, pods)| pods.iter().map(PodExt::name_or_empty).collect())
        .collect();
    assert_eq!(names, [vec!["low", "one"], vec!["mid", "ten"], vec!["top"]]);
}

#[test]
fn new_pods_are_refused_while_shutting_down() {
    let state = ShutdownState::default();
    let p = pod("web");
    let attrs = PodAdmitAttributes {
        pod: &p,
        other_pods: &[],
    };
    assert!(state.admit(&attrs).admit);
    assert_eq!(state.status(), None);
    state.set(true);
    assert_eq!(
        state.admit(&attrs),
        PodAdmitResult::reject(
            "NodeShutdown",
            "Pod was rejected as the node is shutting down."
        )
    );
    assert_eq!(state.status(), Some("node is shutting down"));
}

async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// Regular pods first with their period (or their own shorter grace), then critical pods;
/// a group that overruns its period is left behind; the lock is released at the end and
/// taken again after a cancellation.
#[tokio::test(start_paused = true)]
async fn a_shutdown_terminates_regular_then_critical_pods_and_releases_the_lock() {
    let logind = FakeLogind::with_delay(5);
    let terminator = Arc::new(SlowTerminator {
        started: Instant::now(),
        takes: Duration::from_secs(3),
        log: StdMutex::default(),
    });
    let pods = vec![
        with_priority("web", 0, Some(60)),
        with_priority("quick", 0, Some(2)),
        with_priority("dns", SYSTEM_CRITICAL_PRIORITY, None),
    ];
    let manager = Manager::new(
        &config(30, 10),
        logind.clone(),
        terminator.clone(),
        Arc::new(move || pods.clone()),
    )
    .expect("valid")
    .expect("enabled");
    let state = manager.state();
    let manager = Arc::new(manager);
    let token = CancellationToken::new();
    let run = tokio::spawn(manager.clone().run(token.clone()));
    settle().await;
    // logind allowed 5 s, the kubelet needs 30: raised through the drop-in, then the lock.
    assert_eq!(
        logind.calls(),
        ["Override 30", "Reload", "Inhibit", "Monitor"]
    );
    assert_eq!(logind.held(), 1);

    logind.signal(true).await;
    settle().await;
    assert!(state.is_shutting_down());
    tokio::time::timeout(Duration::from_millis(1), state.changed())
        .await
        .expect("the node status is told at once");
    // Regular pods now, with min(20, own grace).
    {
        let log = terminator.log.lock().expect("lock");
        let graces: Vec<(&str, i64)> = log
            .iter()
            .map(|(n, o, _, _)| (n.as_str(), o.grace_period_override))
            .collect();
        assert_eq!(graces, [("web", 20), ("quick", 2)]);
        let options = &log[0].1;
        assert_eq!(options.reason, "Terminated");
        assert_eq!(
            options.message,
            "Pod was terminated in response to imminent node shutdown."
        );
        assert_eq!(options.conditions[0].type_, "DisruptionTarget");
        assert_eq!(
            options.conditions[0].reason.as_deref(),
            Some("TerminationByKubelet")
        );
    }
    assert_eq!(logind.held(), 1, "held while pods terminate");
    tokio::time::sleep(Duration::from_secs(4)).await;
    settle().await;
    // The regular group finished after 3 s: critical pods start then, not after 20 s.
    {
        let log = terminator.log.lock().expect("lock");
        assert_eq!(log.len(), 3);
        assert_eq!(log[2].0, "dns");
        assert_eq!(log[2].1.grace_period_override, 10);
        assert_eq!(log[2].2, Duration::from_secs(3));
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    settle().await;
    assert_eq!(logind.held(), 0, "released once every group is done");
    assert!(!manager.holds_lock().await);

    // Cancelled: not shutting down any more, the lock is taken again.
    logind.signal(false).await;
    settle().await;
    assert!(!state.is_shutting_down());
    assert_eq!(logind.held(), 1);

    // The bus connection is lost: watched again after a second, with a new lock.
    logind.disconnect();
    tokio::time::sleep(RECONNECT_PERIOD + Duration::from_millis(100)).await;
    settle().await;
    assert_eq!(logind.calls().iter().filter(|c| *c == "Monitor").count(), 2);
    assert_eq!(logind.held(), 1, "the new lock replaced the old one");

    token.cancel();
    run.await.expect("joins").expect("ran");
}

#[tokio::test(start_paused = true)]
async fn a_group_that_overruns_its_period_is_left_behind() {
    let logind = FakeLogind::with_delay(60);
    let terminator = Arc::new(SlowTerminator {
        started: Instant::now(),
        takes: Duration::from_secs(100),
        log: StdMutex::default(),
    });
    let pods = vec![
        with_priority("web", 0, None),
        with_priority("dns", SYSTEM_CRITICAL_PRIORITY, None),
    ];
    let manager = Manager::new(
        &config(30, 10),
        logind.clone(),
        terminator.clone(),
        Arc::new(move || pods.clone()),
    )
    .expect("valid")
    .expect("enabled");
    let manager = Arc::new(manager);
    let run = tokio::spawn(manager.clone().run(CancellationToken::new()));
    settle().await;
    assert_eq!(logind.calls(), ["Inhibit", "Monitor"], "60 s are enough");
    logind.signal(true).await;
    tokio::time::sleep(Duration::from_secs(31)).await;
    settle().await;
    let log = terminator.log.lock().expect("lock").clone();
    assert_eq!(log.len(), 2);
    assert_eq!(
        log[1].2,
        Duration::from_secs(20),
        "critical pods after 20 s"
    );
    assert!(!log[0].3 && !log[1].3, "neither finished");
    assert_eq!(logind.held(), 0, "released after the periods");
    run.abort();
}

#[tokio::test]
async fn a_delay_logind_will_not_raise_fails_the_start() {
    let fake = FakeLogind {
        refuse_override: true,
        delay: StdMutex::new(Duration::from_secs(5)),
        ..Default::default()
    };
    let logind = Arc::new(fake);
    let terminator = Arc::new(SlowTerminator {
        started: Instant::now(),
        takes: Duration::ZERO,
        log: StdMutex::default(),
    });
    let manager = Manager::new(
        &config(30, 10),
        logind.clone(),
        terminator,
        Arc::new(Vec::new),
    )
    .expect("valid")
    .expect("enabled");
    let err = Arc::new(manager)
        .run(CancellationToken::new())
        .await
        .expect_err("too short");
    assert_eq!(
        err.to_string(),
        "node shutdown manager was unable to update logind InhibitDelayMaxSec to 30s (ShutdownGracePeriod), current value of InhibitDelayMaxSec (5s) is less than requested ShutdownGracePeriod"
    );
    assert_eq!(logind.held(), 0);
}
