//! The two start-latency scenarios, each alternating the arms in short blocks (ABAB…):
//! A = the kubelet (the agent writes manifests and times until CRI shows the containers
//! running), B = the agent's raw CRI replay of the same requests, timed by the same poller.
//! G1 adds C = the same pod started raw with a bare config (`RunPodSandbox`,
//! `CreateContainer`, `StartContainer`): the floor of a pod start on this runtime.

use std::{path::Path, sync::mpsc::Receiver, time::Duration};

use anyhow::{Result, bail};
use serde_json::{Value, json};

use super::{agent::Agent, kubelet::Kubelet};

/// The node name the kubelet runs as (pods are `<name>-bench-node`).
pub(crate) const NODE: &str = "bench-node";

/// How long a start or a stop may take before the bench fails.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The benchmark pod: busybox `sleep 3600`, pod network (the CNI bridge), image present.
pub(crate) fn manifest(name: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: sleep
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: [\"sleep\", \"3600\"]
"
    )
}

/// `n` pods named `<prefix>-<i>`, as the agent's `pods` argument.
fn pods(prefix: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let name = format!("{prefix}-{i}");
            json!({ "file": format!("{name}.yaml"), "manifest": manifest(&name) })
        })
        .collect()
}

/// One start of `n` pods by one arm.
#[derive(Debug, Clone, Default)]
pub(crate) struct Start {
    /// First write (A) or first CRI call (B) → last container running per CRI, ms.
    pub(crate) total_ms: f64,
    /// Per pod, from the same origin, ms.
    pub(crate) running_ms: Vec<f64>,
    /// A only: per pod, when the kubelet's `/pods` first reported it running, ms.
    pub(crate) reported_ms: Vec<f64>,
    /// B only: per pod, when `StartContainer` returned, ms.
    pub(crate) started_ms: Vec<f64>,
    /// B only: the CRI methods the kubelet's `sync_pod` calls for such a pod.
    pub(crate) calls: Vec<String>,
    /// A only: the first write by the wall clock, seconds since the epoch.
    pub(crate) t0_unix_s: f64,
    /// B and C: the CRI calls of the first pod as `(method, began, took)`, ms from the start.
    pub(crate) timings: Vec<(String, f64, f64)>,
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .collect()
}

/// `[[method, began_ms, took_ms], …]` as the agent replies it.
fn timed_calls(v: &Value) -> Vec<(String, f64, f64)> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| Some((c[0].as_str()?.to_owned(), c[1].as_f64()?, c[2].as_f64()?)))
        .collect()
}

impl Start {
    fn from_reply(v: &Value) -> Start {
        Start {
            total_ms: v["total_ms"].as_f64().unwrap_or(f64::NAN),
            running_ms: floats(&v["running_ms"]),
            reported_ms: floats(&v["reported_ms"]),
            started_ms: floats(&v["started_ms"]),
            calls: v["calls"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect(),
            t0_unix_s: v["t0_unix_s"].as_f64().unwrap_or(f64::NAN),
            timings: timed_calls(&v["timings"][0]),
        }
    }
}

/// Arm A: the kubelet starts `n` pods from manifests; `while_running` runs once they all run
/// (and the kubelet reports them running).
pub(crate) fn kubelet_start(
    agent: &mut Agent,
    kubelet: &Kubelet,
    dir: &Path,
    prefix: &str,
    n: usize,
    while_running: impl FnOnce() -> Result<()>,
) -> Result<Start> {
    let reply = agent.call(json!({
        "op": "kubelet_start",
        "dir": dir,
        "pods": pods(prefix, n),
        "timeout_ms": TIMEOUT.as_millis() as u64,
        "status_port": kubelet.read_only_port(),
    }))?;
    let start = Start::from_reply(&reply);
    let during = while_running();
    let stop =
        agent.call(json!({ "op": "kubelet_stop", "timeout_ms": TIMEOUT.as_millis() as u64 }))?;
    if let Some(left) = stop["left"].as_array().filter(|l| !l.is_empty()) {
        bail!("the kubelet did not remove {left:?} within {TIMEOUT:?}");
    }
    during?;
    Ok(start)
}

/// What a raw arm sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Raw {
    /// Arm B: the kubelet's own requests for the pod.
    Replay,
    /// Arm C: a bare config, three calls.
    Minimal,
}

/// Arm B or C: the raw client starts `n` pods, `n` at a time, while the kubelet is frozen
/// (see [`Kubelet::freeze`]).
pub(crate) fn raw_start(
    agent: &mut Agent,
    kubelet: &Kubelet,
    dir: &Path,
    prefix: &str,
    n: usize,
    raw: Raw,
) -> Result<Start> {
    let _frozen = kubelet.freeze()?;
    let reply = agent.call(json!({
        "op": "raw_start",
        "dir": dir,
        "pods": pods(prefix, n),
        "concurrency": n,
        "minimal": raw == Raw::Minimal,
        "timeout_ms": TIMEOUT.as_millis() as u64,
    }));
    // Clean up even when the start failed half-way.
    let stop = agent.call(json!({ "op": "raw_stop" }));
    let start = Start::from_reply(&reply?);
    stop?;
    Ok(start)
}

/// Results of one scenario: the A, B (and C) starts, in run order.
#[derive(Debug, Default)]
pub(crate) struct Runs {
    /// Kubelet starts.
    pub(crate) a: Vec<Start>,
    /// Raw CRI starts, the kubelet's requests.
    pub(crate) b: Vec<Start>,
    /// G1 only: raw CRI starts of a bare pod.
    pub(crate) c: Vec<Start>,
}

impl Runs {
    /// Totals of arm A, ms.
    pub(crate) fn a_totals(&self) -> Vec<f64> {
        self.a.iter().map(|s| s.total_ms).collect()
    }

    /// Totals of arm B, ms.
    pub(crate) fn b_totals(&self) -> Vec<f64> {
        self.b.iter().map(|s| s.total_ms).collect()
    }

    /// Totals of arm C, ms.
    pub(crate) fn c_totals(&self) -> Vec<f64> {
        self.c.iter().map(|s| s.total_ms).collect()
    }

    /// Every per-pod time of arm A, ms.
    pub(crate) fn a_pods(&self) -> Vec<f64> {
        self.a.iter().flat_map(|s| s.running_ms.clone()).collect()
    }

    /// Every per-pod time of arm A until the kubelet reported the pod running, ms.
    pub(crate) fn a_reported(&self) -> Vec<f64> {
        self.a.iter().flat_map(|s| s.reported_ms.clone()).collect()
    }

    /// Arm A's batch totals until the kubelet reported every pod running, ms.
    pub(crate) fn a_reported_totals(&self) -> Vec<f64> {
        self.a
            .iter()
            .map(|s| s.reported_ms.iter().copied().fold(f64::NAN, f64::max))
            .collect()
    }

    /// Every per-pod time of arm B, ms.
    pub(crate) fn b_pods(&self) -> Vec<f64> {
        self.b.iter().flat_map(|s| s.running_ms.clone()).collect()
    }
}

/// G1: `rounds` single-pod starts per arm, sequential, A B C A B C…, after one warm-up of
/// each.
pub(crate) fn single_pod(
    agent: &mut Agent,
    kubelet: &Kubelet,
    dir: &Path,
    rounds: usize,
    interrupted: &Receiver<()>,
) -> Result<Runs> {
    kubelet_start(agent, kubelet, dir, "warm-a", 1, || Ok(()))?;
    raw_start(agent, kubelet, dir, "warm-b", 1, Raw::Replay)?;
    raw_start(agent, kubelet, dir, "warm-c", 1, Raw::Minimal)?;
    let mut runs = Runs::default();
    for i in 0..rounds {
        check(interrupted)?;
        let a = kubelet_start(agent, kubelet, dir, &format!("g1-a{i}"), 1, || Ok(()))?;
        let b = raw_start(agent, kubelet, dir, &format!("g1-b{i}"), 1, Raw::Replay)?;
        let c = raw_start(agent, kubelet, dir, &format!("g1-c{i}"), 1, Raw::Minimal)?;
        println!(
            "    round {:>2}/{rounds}: kubelet {:>7.1} ms   raw {:>7.1} ms   minimal {:>7.1} ms",
            i + 1,
            a.total_ms,
            b.total_ms,
            c.total_ms
        );
        runs.a.push(a);
        runs.b.push(b);
        runs.c.push(c);
    }
    Ok(runs)
}

/// G2: `blocks` batches of `n` pods per arm, A B A B…; `while_running` runs in every A block
/// once all its pods run (block index given).
pub(crate) fn batch(
    agent: &mut Agent,
    kubelet: &Kubelet,
    dir: &Path,
    n: usize,
    blocks: usize,
    interrupted: &Receiver<()>,
    mut while_running: impl FnMut(usize) -> Result<()>,
) -> Result<Runs> {
    let mut runs = Runs::default();
    for i in 0..blocks {
        check(interrupted)?;
        let a = kubelet_start(agent, kubelet, dir, &format!("g2-a{i}"), n, || {
            while_running(i)
        })?;
        let b = raw_start(agent, kubelet, dir, &format!("g2-b{i}"), n, Raw::Replay)?;
        println!(
            "    block {}/{blocks}: kubelet {:>7.1} ms   raw {:>7.1} ms",
            i + 1,
            a.total_ms,
            b.total_ms
        );
        runs.a.push(a);
        runs.b.push(b);
    }
    Ok(runs)
}

fn check(interrupted: &Receiver<()>) -> Result<()> {
    if interrupted.try_recv().is_ok() {
        bail!("interrupted");
    }
    Ok(())
}
