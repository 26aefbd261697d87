//! `cri_replay`: the raw-CRI agent of `cargo xtask bench` (a long-lived CRI client on the
//! runtime's socket).
//!
//! It lives here rather than in `xtask` because `xtask` must build before `protoc` is
//! installed. Usage:
//!
//! ```text
//! cri_replay --endpoint unix:///…/containerd.sock --node NAME --pod-log-dir DIR
//! ```
//!
//! It prints one JSON line when ready, then answers each JSON line on stdin with one JSON line
//! on stdout (`{"ok": false, "error": …}` on failure). Times are in milliseconds. Each command
//! takes `dir` (the kubelet's `--pod-manifest-path`) and `pods`, a list of
//! `{"file": NAME, "manifest": YAML}`:
//!
//! - `{"op": "kubelet_start", …, "timeout_ms": T, "status_port": P}`: writes every manifest as
//!   a hidden temporary file, then, from `t0`, renames them into place (the kubelet sees them
//!   appear atomically) and polls CRI until each pod has a running container. Replies
//!   `t0_unix_s` (`t0` by the wall clock, to find the start in the kubelet's log), `total_ms`
//!   and `running_ms` (per pod, from `t0`). With `status_port` (the kubelet's
//!   read-only port), it then polls `/pods` until the kubelet reports each pod running:
//!   `reported_ms`.
//! - `{"op": "kubelet_stop", "timeout_ms": T}`: deletes those manifests and waits until the
//!   runtime has no sandbox of those pods. Replies `ms` and `left` (pods still there).
//! - `{"op": "wait_gone", "pods": [[NAMESPACE, NAME], …], "timeout_ms": T}`: waits until the
//!   runtime has no sandbox of those pods (e.g. API pods the kubelet is stopping). Replies
//!   `ms` and `left`.
//! - `{"op": "raw_start", …, "concurrency": N, "timeout_ms": T}`: decodes each manifest as the
//!   kubelet's file source does (a different pod name, so a different UID), captures the
//!   kubelet's requests for it (not timed, see `capture`), then from `t0` replays the
//!   kubelet's sequence (`RunPodSandbox`, `PodSandboxStatus`, `ImageStatus`,
//!   `CreateContainer`, `StartContainer`) for all pods, N at a time, while the same poller as
//!   above waits for running containers. Replies `total_ms`, `running_ms`, `started_ms` (when
//!   `StartContainer` returned), `calls` (what the kubelet's `sync_pod` called) and
//!   `timings` (per pod, each call as `[method, began_ms, took_ms]`, from `t0`). With
//!   `"minimal": true` it starts each pod with a bare config instead (see `Replay::minimal`):
//!   the floor of a pod start on this runtime.
//! - `{"op": "raw_stop"}`: `StopPodSandbox` + `RemovePodSandbox` of every replayed pod.
//! - `{"op": "quit"}`.

// A command-line tool whose main thread may block (not the kubelet's async workers).
#![allow(clippy::disallowed_methods)]

mod capture;
mod cri;
mod poll;
mod status;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::config::CONFIG_SEEN_ANNOTATION;
use kubelet_core::config::static_pod;
use kubelet_core::pod::PodExt;
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore};

use crate::capture::{Capture, Replay};
use crate::cri::{Client, Error};

/// A pod the agent started (or had the kubelet start): its manifest and CRI identity.
struct Started {
    file: PathBuf,
    key: (String, String),
    sandbox_id: Option<String>,
    log_dir: Option<PathBuf>,
}

struct Agent {
    node: String,
    /// The long-lived raw client (arm B).
    raw: Client,
    /// The measurement poller's own connection (both arms).
    poller: Client,
    capture: Capture,
    kubelet_pods: Vec<Started>,
    raw_pods: Vec<Started>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn timeout(cmd: &Value) -> Duration {
    Duration::from_millis(cmd["timeout_ms"].as_u64().unwrap_or(120_000))
}

/// `(file name, manifest text)` of each entry of `cmd["pods"]`.
fn manifests(cmd: &Value) -> Result<Vec<(String, String)>, Error> {
    let pods = cmd["pods"].as_array().ok_or("`pods` must be a list")?;
    pods.iter()
        .map(|p| {
            let file = p["file"].as_str().ok_or("pod without `file`")?;
            let text = p["manifest"].as_str().ok_or("pod without `manifest`")?;
            Ok((file.to_owned(), text.to_owned()))
        })
        .collect()
}

fn dir(cmd: &Value) -> Result<PathBuf, Error> {
    Ok(PathBuf::from(cmd["dir"].as_str().ok_or("`dir` missing")?))
}

fn key(pod: &Pod) -> (String, String) {
    (
        pod.namespace_or_default().to_owned(),
        pod.name_or_empty().to_owned(),
    )
}

impl Agent {
    async fn handle(&mut self, cmd: &Value) -> Result<Value, Error> {
        match cmd["op"].as_str().unwrap_or_default() {
            "kubelet_start" => self.kubelet_start(cmd).await,
            "kubelet_stop" => self.kubelet_stop(cmd).await,
            "wait_gone" => self.wait_gone(cmd).await,
            "raw_start" => self.raw_start(cmd).await,
            "raw_stop" => self.raw_stop().await,
            op => Err(format!("unknown op {op:?}").into()),
        }
    }

    async fn kubelet_start(&mut self, cmd: &Value) -> Result<Value, Error> {
        let dir = dir(cmd)?;
        let mut staged = Vec::new();
        for (file, text) in manifests(cmd)? {
            let path = dir.join(&file);
            let pod = static_pod::decode(text.as_bytes(), &path, &self.node)?;
            let tmp = dir.join(format!(".{file}.tmp"));
            std::fs::write(&tmp, &text)?;
            staged.push((tmp, path, key(&pod)));
        }
        let t0 = Instant::now();
        let t0_unix_s = unix_seconds();
        for (tmp, path, key) in &staged {
            std::fs::rename(tmp, path)?;
            self.kubelet_pods.push(Started {
                file: path.clone(),
                key: key.clone(),
                sandbox_id: None,
                log_dir: None,
            });
        }
        let keys: Vec<_> = staged.into_iter().map(|(_, _, k)| k).collect();
        let running = poll::wait_running(&self.poller, &keys, t0, timeout(cmd)).await?;
        let reported = match cmd["status_port"].as_u64() {
            Some(port) => {
                let port = u16::try_from(port)?;
                status::wait_reported(port, &keys, t0, timeout(cmd)).await?
            }
            None => Vec::new(),
        };
        Ok(json!({
            "t0_unix_s": t0_unix_s,
            "total_ms": running.iter().max().map_or(0.0, |d| ms(*d)),
            "running_ms": running.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
            "reported_ms": reported.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
        }))
    }

    async fn kubelet_stop(&mut self, cmd: &Value) -> Result<Value, Error> {
        let started = Instant::now();
        let pods = std::mem::take(&mut self.kubelet_pods);
        for p in &pods {
            match std::fs::remove_file(&p.file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        let keys: Vec<_> = pods.into_iter().map(|p| p.key).collect();
        let left = poll::wait_gone(&self.poller, &keys, timeout(cmd)).await?;
        Ok(json!({ "ms": ms(started.elapsed()), "left": left }))
    }

    async fn wait_gone(&mut self, cmd: &Value) -> Result<Value, Error> {
        let started = Instant::now();
        let keys: Vec<(String, String)> = serde_json::from_value(cmd["pods"].clone())?;
        let left = poll::wait_gone(&self.poller, &keys, timeout(cmd)).await?;
        Ok(json!({ "ms": ms(started.elapsed()), "left": left }))
    }

    /// The pod a manifest gives, as the kubelet's file source sees it on first read.
    fn decode(&self, dir: &Path, file: &str, text: &str) -> Result<Pod, Error> {
        let mut pod = static_pod::decode(text.as_bytes(), &dir.join(file), &self.node)?;
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(CONFIG_SEEN_ANNOTATION.into(), seen_now());
        Ok(pod)
    }

    async fn raw_start(&mut self, cmd: &Value) -> Result<Value, Error> {
        let dir = dir(cmd)?;
        let concurrency = cmd["concurrency"].as_u64().unwrap_or(1).max(1) as usize;
        let minimal = cmd["minimal"] == json!(true);
        let mut replays = Vec::new();
        for (file, text) in manifests(cmd)? {
            let pod = self.decode(&dir, &file, &text)?;
            replays.push((key(&pod), self.capture.replay_of(&pod).await?));
        }
        let calls = replays.first().map(|(_, r)| r.calls.clone());
        let keys: Vec<_> = replays.iter().map(|(k, _)| k.clone()).collect();

        let failed = Arc::new(Notify::new());
        let permits = Arc::new(Semaphore::new(concurrency));
        let t0 = Instant::now();
        let tasks: Vec<_> = replays
            .into_iter()
            .map(|(_, replay)| {
                let (client, failed, permits) = (self.raw.clone(), failed.clone(), permits.clone());
                tokio::spawn(async move {
                    let _permit = permits.acquire_owned().await;
                    let mut sandbox_id = None;
                    let mut timer = Timer::new(t0);
                    let result = if minimal {
                        start_minimal(&client, &replay, &mut sandbox_id, &mut timer).await
                    } else {
                        replay_one(&client, &replay, &mut sandbox_id, &mut timer).await
                    };
                    if result.is_err() {
                        failed.notify_one();
                    }
                    (sandbox_id, replay.pod_log_dir, result, timer.calls)
                })
            })
            .collect();
        let running = tokio::select! {
            r = poll::wait_running(&self.poller, &keys, t0, timeout(cmd)) => r,
            () = failed.notified() => Err("a replay failed".into()),
        };
        let mut started = Vec::new();
        let mut timings = Vec::new();
        let mut first_error = None;
        for (task, key) in tasks.into_iter().zip(keys) {
            let (sandbox_id, log_dir, result, calls) = task.await?;
            timings.push(calls);
            self.raw_pods.push(Started {
                file: PathBuf::new(),
                key,
                sandbox_id,
                log_dir: Some(log_dir),
            });
            match result {
                Ok(d) => started.push(ms(d)),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let running = running?;
        Ok(json!({
            "total_ms": running.iter().max().map_or(0.0, |d| ms(*d)),
            "running_ms": running.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
            "started_ms": started,
            "calls": calls,
            "timings": timings,
        }))
    }

    async fn raw_stop(&mut self) -> Result<Value, Error> {
        let started = Instant::now();
        let pods = std::mem::take(&mut self.raw_pods);
        let stops = pods.iter().filter_map(|p| p.sandbox_id.clone()).map(|id| {
            let client = self.raw.clone();
            async move {
                client.stop_pod_sandbox(&id).await?;
                client.remove_pod_sandbox(&id).await
            }
        });
        let results = futures::future::join_all(stops).await;
        for p in &pods {
            if let Some(dir) = &p.log_dir {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        results.into_iter().collect::<Result<Vec<()>, Error>>()?;
        Ok(json!({ "ms": ms(started.elapsed()) }))
    }
}

/// Now by the wall clock, seconds since the epoch (the kubelet's log's clock).
fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Now as the kubelet's file source writes it into `kubernetes.io/config.seen`.
fn seen_now() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(0));
    k8s_openapi::jiff::Timestamp::from_nanosecond(nanos)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

/// The CRI calls of one pod's start, each timed from `t0`.
struct Timer {
    t0: Instant,
    /// `[method, began_ms, took_ms]` per call.
    calls: Vec<Value>,
}

impl Timer {
    fn new(t0: Instant) -> Self {
        Self {
            t0,
            calls: Vec::new(),
        }
    }

    async fn time<T>(
        &mut self,
        method: &str,
        call: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let began = self.t0.elapsed();
        let result = call.await;
        self.calls
            .push(json!([method, ms(began), ms(self.t0.elapsed() - began)]));
        result
    }
}

/// The kubelet's first-sync sequence for one pod, as `RemoteRuntime::sync_pod` issues it;
/// returns when `StartContainer` returned, measured from the timer's `t0`.
async fn replay_one(
    client: &Client,
    replay: &Replay,
    sandbox_id: &mut Option<String>,
    timer: &mut Timer,
) -> Result<Duration, Error> {
    tokio::fs::create_dir_all(&replay.pod_log_dir).await?;
    let id = timer
        .time(
            "RunPodSandbox",
            client.run_pod_sandbox(replay.sandbox.clone()),
        )
        .await?;
    *sandbox_id = Some(id.clone());
    timer
        .time("PodSandboxStatus", client.pod_sandbox_status(&id))
        .await?;
    let image_id = timer
        .time("ImageStatus", client.image_id(replay.image.clone()))
        .await?;
    tokio::fs::create_dir_all(&replay.container_log_dir).await?;
    let mut config = replay.container.clone();
    if let Some(image) = config.image.as_mut() {
        image.image = image_id;
    }
    let container_id = timer
        .time(
            "CreateContainer",
            client.create_container(&id, config, replay.sandbox.clone()),
        )
        .await?;
    timer
        .time("StartContainer", client.start_container(&container_id))
        .await?;
    Ok(timer.t0.elapsed())
}

/// The floor of a pod start: `RunPodSandbox`, `CreateContainer` and `StartContainer` of the
/// same pod with bare configs; returns when `StartContainer` returned, from the timer's `t0`.
async fn start_minimal(
    client: &Client,
    replay: &Replay,
    sandbox_id: &mut Option<String>,
    timer: &mut Timer,
) -> Result<Duration, Error> {
    let (sandbox, container) = replay.minimal();
    let id = timer
        .time("RunPodSandbox", client.run_pod_sandbox(sandbox.clone()))
        .await?;
    *sandbox_id = Some(id.clone());
    let container_id = timer
        .time(
            "CreateContainer",
            client.create_container(&id, container, sandbox),
        )
        .await?;
    timer
        .time("StartContainer", client.start_container(&container_id))
        .await?;
    Ok(timer.t0.elapsed())
}

struct Args {
    endpoint: String,
    node: String,
    pod_log_dir: PathBuf,
}

fn parse_args() -> Result<Args, Error> {
    let mut args = std::env::args().skip(1);
    let (mut endpoint, mut node, mut pod_log_dir) = (None, None, None);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--endpoint" => endpoint = Some(value),
            "--node" => node = Some(value),
            "--pod-log-dir" => pod_log_dir = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    Ok(Args {
        endpoint: endpoint.ok_or("--endpoint is required")?,
        node: node.ok_or("--node is required")?,
        pod_log_dir: pod_log_dir.ok_or("--pod-log-dir is required")?,
    })
}

async fn run() -> Result<(), Error> {
    let args = parse_args()?;
    let socket = args
        .endpoint
        .strip_prefix("unix://")
        .unwrap_or(&args.endpoint);
    let raw = Client::connect(Path::new(socket));
    let poller = Client::connect(Path::new(socket));
    let runtime = raw.version().await?;
    poller.version().await?;
    let mut agent = Agent {
        capture: Capture::start(&args.node, &args.pod_log_dir).await?,
        node: args.node,
        raw,
        poller,
        kubelet_pods: Vec::new(),
        raw_pods: Vec::new(),
    };
    println!("{}", json!({ "ok": true, "runtime": runtime }));

    // Commands arrive on a plain thread (tokio's stdin needs a feature the workspace lacks).
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = lines.recv().await {
        let cmd: Value = serde_json::from_str(&line)?;
        if cmd["op"] == "quit" {
            break;
        }
        let reply = match agent.handle(&cmd).await {
            Ok(mut v) => {
                v["ok"] = json!(true);
                v
            }
            Err(e) => json!({ "ok": false, "error": e.to_string() }),
        };
        println!("{reply}");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cri_replay: {e}");
            println!("{}", json!({ "ok": false, "error": e.to_string() }));
            ExitCode::FAILURE
        }
    }
}
