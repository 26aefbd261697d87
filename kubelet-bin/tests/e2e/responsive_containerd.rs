//! Issue 16 item 2 on real containerd: the kubelet's endpoints stay responsive while its sync
//! loop is saturated and while the runtime does not answer at all.
//!
//! 1. A burst of 110 static pods (upstream's default `maxPods`) lands in the manifest
//!    directory at once; until all of them run, `/healthz` (healthz port) and `/pods`
//!    (read-only port) are requested back to back and every answer must come within 1 s.
//! 2. containerd is frozen (SIGSTOP) for 30 s: `/healthz` must still answer within 1 s every
//!    time (`/pods` is measured and reported too) (it may say the runtime is unhealthy, as upstream's PLEG and runtime checks do).
//!    After SIGCONT every pod still runs, no container restarted and no sandbox was
//!    recreated (containerd holds exactly one sandbox and one container per pod).
//!
//! A latency is one request's connect-to-last-byte time, measured from this process (a
//! responsiveness requirement of the issue, not a performance figure: the distributions are
//! printed, and the assertion is only on the maximum).

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::{Node, container_status, phase, pod_yaml, send_signal};

const PODS: usize = 110;
const LIMIT: Duration = Duration::from_secs(1);
const FREEZE: Duration = Duration::from_secs(30);

/// Every request's latency on one endpoint, the answers' status codes and the requests that
/// got no answer.
struct Latencies {
    endpoint: &'static str,
    samples: Vec<Duration>,
    statuses: BTreeMap<u16, usize>,
    unanswered: usize,
}

impl Latencies {
    fn new(endpoint: &'static str) -> Self {
        Self {
            endpoint,
            samples: Vec::new(),
            statuses: BTreeMap::new(),
            unanswered: 0,
        }
    }

    fn max(&self) -> Duration {
        self.samples.iter().max().copied().unwrap_or_default()
    }

    fn summary(&self) -> String {
        let mut sorted = self.samples.clone();
        sorted.sort();
        let at = |q: f64| {
            let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
            sorted.get(i).copied().unwrap_or_default()
        };
        format!(
            "{}: {} requests (status: count {:?}), {} unanswered, p50 {:?} p90 {:?} p99 {:?} max {:?}",
            self.endpoint,
            sorted.len(),
            self.statuses,
            self.unanswered,
            at(0.5),
            at(0.9),
            at(0.99),
            self.max()
        )
    }

    fn assert_responsive(&self) {
        assert_eq!(self.unanswered, 0, "{}", self.summary());
        assert!(
            self.max() < LIMIT,
            "slower than {LIMIT:?}: {}",
            self.summary()
        );
    }
}

/// Requests each of `endpoints` (port, path) in turn until `stop` is set.
fn probe(node: &Node, endpoints: &[(u16, &'static str)], stop: &AtomicBool) -> Vec<Latencies> {
    let mut out: Vec<Latencies> = endpoints.iter().map(|(_, p)| Latencies::new(p)).collect();
    while !stop.load(Ordering::Relaxed) {
        for ((port, path), latencies) in endpoints.iter().zip(&mut out) {
            let (took, answer) = node.timed_get(*port, path);
            match answer {
                Some((status, _)) => {
                    latencies.samples.push(took);
                    *latencies.statuses.entry(status).or_default() += 1;
                }
                None => latencies.unanswered += 1,
            }
        }
    }
    out
}

/// Runs `probe` on another thread while `work` runs here; returns both results.
fn probing<T>(
    node: &Node,
    endpoints: &[(u16, &'static str)],
    work: impl FnOnce() -> T,
) -> (T, Vec<Latencies>) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let prober = scope.spawn(|| probe(node, endpoints, &stop));
        let result = work();
        stop.store(true, Ordering::Relaxed);
        (result, prober.join().expect("prober thread"))
    })
}

/// The pods `/pods` shows Running with every container running, none restarted.
fn running_unrestarted(node: &Node) -> Option<usize> {
    let pods = node.pods()?;
    let ok = pods
        .iter()
        .filter(|p| {
            phase(p) == "Running"
                && container_status(p, "sleep").is_some_and(|c| {
                    c["state"]["running"].is_object() && c["restartCount"].as_u64() == Some(0)
                })
        })
        .count();
    Some(ok)
}

/// Sends SIGCONT to containerd when dropped, so a failing test never leaves it frozen.
struct Thaw(i32);

impl Drop for Thaw {
    fn drop(&mut self) {
        send_signal(self.0, "CONT");
    }
}

#[test]
fn endpoints_answer_within_a_second_during_a_burst_and_a_frozen_runtime() {
    let node = Node::start("responsive");
    node.wait_for(Duration::from_secs(60), "/healthz", |n| {
        (n.healthz() == Some(200)).then_some(())
    });
    let endpoints = [
        (node.healthz_port, "/healthz"),
        (node.read_only_port, "/pods"),
    ];

    // 1. The burst.
    let started = Instant::now();
    let (burst_took, burst) = probing(&node, &endpoints, || {
        for i in 0..PODS {
            node.write_manifest(
                &format!("burst-{i:03}.yaml"),
                &pod_yaml(
                    &format!("burst-{i:03}"),
                    "Always",
                    &[("sleep", "sleep 3600")],
                ),
            );
        }
        node.wait_for(Duration::from_secs(900), "110 running pods", |n| {
            (running_unrestarted(n)? == PODS).then_some(())
        });
        started.elapsed()
    });
    for l in &burst {
        eprintln!(
            "burst ({burst_took:?} to {PODS} running pods) {}",
            l.summary()
        );
    }

    // 2. containerd frozen.
    let pid = i32::try_from(node.testbed.pid().expect("containerd pid")).expect("pid");
    let (_, frozen) = probing(&node, &endpoints, || {
        send_signal(pid, "STOP");
        let _thaw = Thaw(pid);
        // The freeze's length is the scenario, not a wait for something to happen.
        std::thread::sleep(FREEZE);
    });
    for l in &frozen {
        eprintln!("containerd frozen for {FREEZE:?}: {}", l.summary());
    }
    let health_after = node.healthz();
    eprintln!("healthz right after SIGCONT: {health_after:?}");

    // 3. After SIGCONT: everything still runs, nothing restarted or recreated.
    let recovered = Instant::now();
    node.wait_for(
        Duration::from_secs(300),
        "all pods running after SIGCONT",
        |n| (running_unrestarted(n)? == PODS).then_some(()),
    );
    let containers = node
        .testbed
        .ctr(&["containers", "ls", "-q"])
        .expect("ctr containers ls");
    let containers = containers.lines().filter(|l| !l.is_empty()).count();
    eprintln!(
        "after SIGCONT: {PODS} pods running within {:?}, {containers} containers in containerd, {} running tasks",
        recovered.elapsed(),
        node.running_tasks()
    );
    assert_eq!(
        containers,
        2 * PODS,
        "one sandbox and one container per pod"
    );

    for l in &burst {
        l.assert_responsive();
    }
    // `/healthz` is the requirement while the runtime is frozen; `/pods` is reported.
    frozen[0].assert_responsive();
}
