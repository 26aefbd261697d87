//! `cargo xtask bench --cluster`: the kubelet in cluster mode against the real kube-apiserver
//! (goals G11 and G13 of issue 12, and the kubelet's memory in cluster mode).
//!
//! - **G11**: from the kubelet's process start to its Node's `Ready=True` as the API server
//!   has it (polled every 20 ms by the admin).
//! - **G13**: an API pod (the G1 pod, bound to the node) from its `ADDED` event to the event
//!   that shows it `Running`, both read from one `kubectl get pods --watch` stream, against the
//!   raw CRI start of the same pod (G1's arm B) measured in the same run.
//! - RSS of the kubelet in cluster mode: idle, after the rounds, and with 110 API pods; the
//!   kubelet's CPU time per pod start over that batch (from the first create to the last
//!   `Running` on the watch); RSS again once those pods are deleted and stopped.

use std::{
    io::BufReader,
    process::{Child, Command, Stdio},
    sync::mpsc::{self, Receiver},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use xtask::{apiserver, target_dir, testbed};

use super::{
    SETTLE,
    agent::Agent,
    cpu,
    kubelet::{Dirs, Kubelet},
    rss, scenario,
    stats::{percentile, ratio_ci},
};

/// Pods running at once for the memory sample (upstream's default `maxPods`).
const BATCH: usize = 110;

/// How long one API pod may take to run or go.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The G1 pod as an API object bound to the bench node.
fn api_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": scenario::NODE,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "sleep", "image": "docker.io/library/busybox:1.36",
                "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"],
            }],
        },
    })
}

/// One event of the watch: when it was read, its type, the pod and its phase.
struct WatchLine {
    at: Instant,
    event: String,
    name: String,
    phase: String,
}

/// `kubectl get pods --watch --output-watch-events` in the background.
struct PodWatch {
    child: Child,
    lines: Receiver<WatchLine>,
}

impl PodWatch {
    fn start(cluster: &apiserver::Cluster) -> Result<PodWatch> {
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(cluster.admin_kubeconfig())
            .args([
                "get",
                "pods",
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot run kubectl get pods --watch")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            // One JSON watch event after another: {"type": "ADDED", "object": {...}}.
            let events = serde_json::Deserializer::from_reader(BufReader::new(stdout))
                .into_iter::<Value>()
                .map_while(Result::ok);
            for event in events {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                let line = WatchLine {
                    at: Instant::now(),
                    event: text(&event["type"]),
                    name: text(&event["object"]["metadata"]["name"]),
                    phase: text(&event["object"]["status"]["phase"]),
                };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Ok(PodWatch { child, lines })
    }

    /// Waits for the first line about `name` that satisfies `pred`.
    fn wait(&self, name: &str, pred: impl Fn(&WatchLine) -> bool) -> Result<Instant> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .with_context(|| format!("pod {name}: nothing on the watch within {TIMEOUT:?}"))?;
            if line.name == name && pred(&line) {
                return Ok(line.at);
            }
        }
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the cluster-mode bench and prints its rows; writes `cluster.json` to `out`.
pub(crate) fn run(
    kubelet_bin: &std::path::Path,
    agent_bin: &std::path::Path,
    rounds: usize,
    out: &std::path::Path,
    interrupted: &Receiver<()>,
) -> Result<()> {
    apiserver::ensure_built()?;
    println!("==> starting kube-apiserver + etcd");
    let cluster = apiserver::Cluster::builder().node(scenario::NODE).start()?;
    let kubeconfig = cluster.node_kubeconfig(scenario::NODE)?.to_owned();

    let work = target_dir().join("testbed").join("bench-cluster");
    let dirs = Dirs::fresh(&work)?;
    let testbed = testbed::Testbed::start(&work.join("containerd"))?;
    let endpoint = testbed.endpoint();

    println!("==> G11: process start → Node Ready=True in the API");
    let started = Instant::now();
    let kubelet = Kubelet::start_with(
        kubelet_bin,
        &endpoint,
        &dirs,
        scenario::NODE,
        &["--kubeconfig".into(), kubeconfig.display().to_string()],
        "info",
    )?;
    let node_path = format!("/api/v1/nodes/{}", scenario::NODE);
    let g11 = loop {
        let (status, node) = cluster.admin_request("GET", &node_path, None)?;
        let ready = node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if status == 200 && ready {
            break started.elapsed();
        }
        if started.elapsed() > TIMEOUT {
            bail!("the Node was not Ready within {TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    println!("    {:.0} ms", g11.as_secs_f64() * 1e3);
    thread::sleep(SETTLE);
    let rss_idle = rss::sample(kubelet.pid())?;

    let mut agent = Agent::spawn(agent_bin, &endpoint, &dirs)?;
    println!("==> G1 in cluster mode: {rounds} rounds per arm (A = static pod, B = raw CRI)");
    let g1 = scenario::single_pod(&mut agent, &kubelet, &dirs.manifests, rounds, interrupted)?;

    println!("==> G13: API pod ADDED → Running on a watch, {rounds} rounds");
    let watch = PodWatch::start(&cluster)?;
    let pods_path = "/api/v1/namespaces/default/pods";
    let mut g13 = Vec::new();
    for i in 0..=rounds {
        if interrupted.try_recv().is_ok() {
            bail!("interrupted");
        }
        let name = format!("g13-{i}");
        let (status, body) = cluster.admin_request("POST", pods_path, Some(&api_pod(&name)))?;
        if status != 201 {
            bail!("creating pod {name}: {status} {body}");
        }
        let added = watch.wait(&name, |l| l.event == "ADDED")?;
        let running = watch.wait(&name, |l| l.phase == "Running")?;
        let (status, body) = cluster.admin_request(
            "DELETE",
            &format!("{pods_path}/{name}"),
            Some(&json!({"gracePeriodSeconds": 0})),
        )?;
        if !(200..300).contains(&status) {
            bail!("deleting pod {name}: {status} {body}");
        }
        watch.wait(&name, |l| l.event == "DELETED")?;
        let ms = running.duration_since(added).as_secs_f64() * 1e3;
        if i == 0 {
            println!("    warm-up: {ms:.1} ms");
            continue;
        }
        println!("    round {i:>2}/{rounds}: {ms:>7.1} ms");
        g13.push(ms);
    }
    thread::sleep(SETTLE);
    let rss_after = rss::sample(kubelet.pid())?;

    println!("==> RSS with {BATCH} API pods running");
    let cpu_before = cpu::seconds(kubelet.pid())?;
    for i in 0..BATCH {
        let (status, body) =
            cluster.admin_request("POST", pods_path, Some(&api_pod(&format!("batch-{i}"))))?;
        if status != 201 {
            bail!("creating pod batch-{i}: {status} {body}");
        }
    }
    let mut pending: std::collections::HashSet<String> =
        (0..BATCH).map(|i| format!("batch-{i}")).collect();
    while !pending.is_empty() {
        let line = watch
            .lines
            .recv_timeout(TIMEOUT)
            .with_context(|| format!("{} pods not Running within {TIMEOUT:?}", pending.len()))?;
        if line.phase == "Running" {
            pending.remove(&line.name);
        }
    }
    let cpu_per_pod_ms = (cpu::seconds(kubelet.pid())? - cpu_before) * 1e3 / BATCH as f64;
    thread::sleep(SETTLE);
    let rss_batch = rss::sample(kubelet.pid())?;
    println!(
        "    {}; kubelet CPU {cpu_per_pod_ms:.1} ms per pod start",
        rss_batch.to_json()
    );

    println!("==> RSS after the {BATCH} API pods are deleted and stopped");
    for i in 0..BATCH {
        let name = format!("batch-{i}");
        let (status, body) = cluster.admin_request(
            "DELETE",
            &format!("{pods_path}/{name}"),
            Some(&json!({"gracePeriodSeconds": 0})),
        )?;
        if !(200..300).contains(&status) {
            bail!("deleting pod {name}: {status} {body}");
        }
    }
    let keys: Vec<[String; 2]> = (0..BATCH)
        .map(|i| ["default".to_owned(), format!("batch-{i}")])
        .collect();
    let gone = agent.call(json!({
        "op": "wait_gone", "pods": keys, "timeout_ms": TIMEOUT.as_millis() as u64,
    }))?;
    if let Some(left) = gone["left"].as_array().filter(|l| !l.is_empty()) {
        bail!("the kubelet did not stop {left:?} within {TIMEOUT:?}");
    }
    thread::sleep(SETTLE);
    let rss_batch_after = rss::sample(kubelet.pid())?;
    println!("    {}", rss_batch_after.to_json());
    drop(watch);

    let raw = g1.b_totals();
    let (lo, hi) = ratio_ci(&g13, &raw, 50.0);
    let rows = json!({
        "g11_node_ready_ms": g11.as_secs_f64() * 1e3,
        "g13_p50_ms": percentile(&g13, 50.0),
        "g13_p99_ms": percentile(&g13, 99.0),
        "raw_cri_p50_ms": percentile(&raw, 50.0),
        "raw_cri_p99_ms": percentile(&raw, 99.0),
        "g13_ratio_p50": percentile(&g13, 50.0) / percentile(&raw, 50.0),
        "g13_ratio_p50_ci95": [lo, hi],
        "static_pod_p50_ms": percentile(&g1.a_totals(), 50.0),
        "rss_idle_kib": rss_idle.to_json(),
        "rss_after_kib": rss_after.to_json(),
        "rss_110_pods_kib": rss_batch.to_json(),
        "rss_after_110_pods_kib": rss_batch_after.to_json(),
        "cpu_ms_per_pod_start": cpu_per_pod_ms,
        "g13_ms": g13,
        "raw_cri_ms": raw,
    });
    println!(
        "\nG11 process start → Node Ready: {:.0} ms (goal ≤ 1000)\n\
         G13 API pod → Running on a watch: p50 {:.1} ms, p99 {:.1} ms; raw CRI p50 {:.1} ms, \
         p99 {:.1} ms; ratio p50 {:.2} [{lo:.2}–{hi:.2}] (goal ≤ 1.15)\n\
         kubelet RSS in cluster mode: idle {}, after the rounds {}, with {BATCH} pods {}, after them {}; \
         kubelet CPU per pod start in the batch: {cpu_per_pod_ms:.1} ms",
        rows["g11_node_ready_ms"].as_f64().unwrap_or(f64::NAN),
        rows["g13_p50_ms"].as_f64().unwrap_or(f64::NAN),
        rows["g13_p99_ms"].as_f64().unwrap_or(f64::NAN),
        rows["raw_cri_p50_ms"].as_f64().unwrap_or(f64::NAN),
        rows["raw_cri_p99_ms"].as_f64().unwrap_or(f64::NAN),
        rows["g13_ratio_p50"].as_f64().unwrap_or(f64::NAN),
        rows["rss_idle_kib"],
        rows["rss_after_kib"],
        rows["rss_110_pods_kib"],
        rows["rss_after_110_pods_kib"],
    );
    std::fs::create_dir_all(out)?;
    std::fs::write(
        out.join("cluster.json"),
        serde_json::to_string_pretty(&rows)?,
    )?;
    println!("==> wrote {}", out.join("cluster.json").display());
    drop(agent);
    drop(kubelet);
    testbed.shutdown()
}
