//! `sync_throughput`: goal G8 of `cargo xtask bench`, the sync loop's throughput against the
//! in-process fake runtime ([`FakeRuntime`], zero latency).
//!
//! The node is assembled by [`NodeBuilder`] as the `kubelet` binary's is: sync loop, pod
//! workers, `KubeletPodSyncer`, `GenericPleg` (1 s relist; the start path does not wait for
//! it), `LocalStatusManager`, `DefaultVolumeManager` under a temporary root, no probes. Only
//! the runtime is the fake, and pods come through a [`ChannelSource`] as one `ADD` of
//! `--pods` pods (as a watch would deliver them). Each of `--rounds` bursts is timed from the `ADD`
//! until the status manager holds phase `Running` for every pod; then the pods are removed
//! (not timed). CPU is the process's own (every thread's `/proc/self/task/*/schedstat`),
//! over the timed part only, and includes the small cost of watching the statuses.
//! After each round the process's RSS is recorded (`rss_kib_after_round`), after waiting
//! `--settle-ms` (default 0): with 2500 or more, housekeeping (every 2 s) has dropped the
//! removed pods' state, so a growing series is a leak. Prints one JSON object.
//!
//! ```text
//! cargo run --release -p kubelet-bin --example sync_throughput -- --pods 110 --rounds 10
//! cargo run --release -p kubelet-bin --example sync_throughput -- --rounds 30 --settle-ms 2500
//! ```

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kubelet::NodeBuilder;
use kubelet_core::config::{ChannelSource, ChannelSourceSender, FILE_SOURCE, Operation};
use kubelet_core::pod::{PodExt, PodUid};
use kubelet_core::testing::{FakeRuntime, pod_with};
use kubelet_status::LocalStatusManager;
use serde_json::json;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// How long one burst may take before the example gives up.
const TIMEOUT: Duration = Duration::from_secs(120);

/// CPU nanoseconds of every live thread of this process (`/proc/self/task/*/schedstat`).
fn cpu_ns() -> Result<u64, Error> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task")? {
        let path = task?.path().join("schedstat");
        // A thread that exits between the listing and the read is skipped.
        if let Ok(text) = std::fs::read_to_string(path) {
            total += text
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(total)
}

struct Node {
    node: kubelet::Node,
    runtime: FakeRuntime,
    status: Arc<LocalStatusManager>,
    pods: ChannelSourceSender,
    _root: tempfile::TempDir,
}

/// A node around a fake runtime, assembled by the node builder.
async fn node() -> Result<Node, Error> {
    let root = tempfile::tempdir()?;
    let fake = FakeRuntime::new();
    let (source, pods) = ChannelSource::new(FILE_SOURCE);
    let mut node = NodeBuilder::with_runtime(Arc::new(fake.clone()))
        .node_name("bench")
        .root_dir(root.path())
        .node_ips(vec!["192.0.2.1".into()])
        .source(Box::new(source))
        .no_probes()
        .build()
        .await?;
    node.spawn().await;
    let status = node
        .local_status_manager()
        .ok_or("the default status manager")?
        .clone();
    Ok(Node {
        node,
        runtime: fake,
        status,
        pods,
        _root: root,
    })
}

impl Node {
    async fn send(&self, op: Operation, pods: Vec<Pod>) -> Result<(), Error> {
        Ok(self.pods.send(op, pods).await?)
    }

    /// Waits until every pod of `uids` has phase `Running` in the status manager.
    async fn wait_running(&self, uids: &[PodUid]) -> Result<(), Error> {
        let mut changes = self.status.subscribe();
        let mut waiting: HashSet<&PodUid> = uids.iter().collect();
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            waiting.retain(|uid| {
                self.status
                    .versioned_status(uid)
                    .and_then(|s| s.status.phase)
                    .is_none_or(|phase| phase != "Running")
            });
            if waiting.is_empty() {
                return Ok(());
            }
            tokio::time::timeout_at(deadline, changes.changed())
                .await
                .map_err(|_| format!("{} pods not Running after {TIMEOUT:?}", waiting.len()))??;
        }
    }

    /// Waits until the fake runtime holds no pod (polled: not part of the measurement).
    async fn wait_empty(&self) -> Result<(), Error> {
        let deadline = Instant::now() + TIMEOUT;
        while !self.runtime.running_pods().is_empty() {
            if Instant::now() > deadline {
                return Err("removed pods still in the runtime".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }
}

/// This process's resident set (`VmRSS`), in KiB.
fn rss_kib_now() -> Result<u64, Error> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| "no VmRSS in /proc/self/status".into())
}

struct Args {
    pods: usize,
    rounds: usize,
    settle: Duration,
}

fn parse_args() -> Result<Args, Error> {
    let (mut pods, mut rounds, mut settle_ms) = (110, 10, 0);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value: usize = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?
            .parse()
            .map_err(|e| format!("{flag}: {e}"))?;
        match flag.as_str() {
            "--pods" => pods = value.max(1),
            "--rounds" => rounds = value.max(1),
            "--settle-ms" => settle_ms = value as u64,
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    Ok(Args {
        pods,
        rounds,
        settle: Duration::from_millis(settle_ms),
    })
}

async fn run() -> Result<serde_json::Value, Error> {
    let args = parse_args()?;
    let (n, rounds) = (args.pods, args.rounds);
    let node = node().await?;
    // The file source's first snapshot: housekeeping may run.
    node.send(Operation::Set, vec![]).await?;
    let (mut burst_ms, mut cpu_ms, mut rss_kib) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..=rounds {
        let pods: Vec<Pod> = (0..n)
            .map(|i| pod_with(&format!("g8-{round}-{i}"), "Always", &["app"]))
            .collect();
        let uids: Vec<PodUid> = pods.iter().map(PodExt::uid).collect();
        let (t, cpu) = (Instant::now(), cpu_ns()?);
        node.send(Operation::Add, pods.clone()).await?;
        node.wait_running(&uids).await?;
        let (wall, used) = (t.elapsed(), cpu_ns()?.saturating_sub(cpu));
        // Round 0 warms up (allocations, thread pool).
        if round > 0 {
            burst_ms.push(wall.as_secs_f64() * 1e3);
            cpu_ms.push(used as f64 / 1e6);
        }
        node.send(Operation::Remove, pods).await?;
        node.wait_empty().await?;
        // The fake runtime's call log is a test aid, not kubelet state.
        node.runtime.clear_calls();
        tokio::time::sleep(args.settle).await;
        rss_kib.push(rss_kib_now()?);
    }
    node.node.stop().await;
    let total_ms: f64 = burst_ms.iter().sum();
    let total_cpu_ms: f64 = cpu_ms.iter().sum();
    let starts = (n * rounds) as f64;
    Ok(json!({
        "pods": n,
        "rounds": rounds,
        "burst_ms": burst_ms,
        "cpu_ms": cpu_ms,
        "rss_kib_after_round": rss_kib,
        "pods_per_second": starts / (total_ms / 1e3),
        "cpu_ms_per_pod": total_cpu_ms / starts,
    }))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(v) => {
            println!("{v}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sync_throughput: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
