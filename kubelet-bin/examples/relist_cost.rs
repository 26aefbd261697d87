//! `relist_cost`: goal G6 of `cargo xtask bench`, the cost of one PLEG relist at 500 pods /
//! 1,000 containers against the raw CRI `List` calls it is made of.
//!
//! A [`FakeCriServer`] on a unix socket holds `--pods` pods of two containers each, created
//! by `RemoteRuntime::sync_pod` (so they carry the kubelet's labels). Then, alternating in one
//! process (ABAB…), `--rounds` times:
//!
//! - **A**: one [`GenericPleg::relist`] with nothing changed (`ListPodSandbox` +
//!   `ListContainers` through `RemoteRuntime::get_pods`, grouping, diff against the previous
//!   listing, no inspection);
//! - **B**: the same two `List` calls, concurrently, from a plain CRI client on its own
//!   connection to the same socket, and nothing else.
//!
//! Last, `--changed` containers exit and one relist is timed with their pods' re-inspection.
//! Prints one JSON object: times in milliseconds.
//!
//! ```text
//! cargo run --release -p kubelet-bin --example relist_cost -- --pods 500 --rounds 200
//! ```

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use kubelet_core::backoff::Backoff;
use kubelet_core::cache::PodCache;
use kubelet_core::pod::PodExt;
use kubelet_core::runtime::{Runtime, RuntimeHelper};
use kubelet_core::testing::{FakeRuntimeHelper, pod_with};
use kubelet_cri::fake::FakeCriServer;
use kubelet_cri::{Options, RemoteRuntime};
use kubelet_pleg::{Config, GenericPleg};
use serde_json::json;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    pods: usize,
    rounds: usize,
    changed: usize,
}

fn parse_args() -> Result<Args, Error> {
    let mut args = Args {
        pods: 500,
        rounds: 200,
        changed: 100,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value: usize = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?
            .parse()
            .map_err(|e| format!("{flag}: {e}"))?;
        match flag.as_str() {
            "--pods" => args.pods = value,
            "--rounds" => args.rounds = value.max(1),
            "--changed" => args.changed = value,
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    Ok(args)
}

/// A plain CRI client with its own connection to `socket` (arm B).
fn raw_client(socket: &Path) -> RuntimeServiceClient<Channel> {
    let socket = socket.to_owned();
    let channel = Endpoint::from_static("http://[::]:50051").connect_with_connector_lazy(
        tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(socket).await?)) }
        }),
    );
    RuntimeServiceClient::new(channel).max_decoding_message_size(16 * 1024 * 1024)
}

/// `ListPodSandbox` + `ListContainers` without filters, concurrently, as `get_pods(true)`
/// sends them; returns how many sandboxes and containers came back.
async fn raw_list(client: &RuntimeServiceClient<Channel>) -> Result<(usize, usize), Error> {
    let (mut a, mut b) = (client.clone(), client.clone());
    let (sandboxes, containers) = tokio::try_join!(
        a.list_pod_sandbox(cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter::default()),
        }),
        b.list_containers(cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter::default()),
        }),
    )?;
    Ok((
        sandboxes.into_inner().items.len(),
        containers.into_inner().containers.len(),
    ))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Creates `n` pods of two containers through the kubelet's own `sync_pod`.
async fn populate(rt: &RemoteRuntime, n: usize) -> Result<(), Error> {
    let helper: Arc<dyn RuntimeHelper> = Arc::new(FakeRuntimeHelper);
    let backoff = Backoff::crash_loop_default();
    let pods: Vec<_> = (0..n)
        .map(|i| pod_with(&format!("relist-{i}"), "Always", &["app", "sidecar"]))
        .collect();
    for chunk in pods.chunks(16) {
        let syncs = chunk.iter().map(|pod| {
            let (helper, backoff) = (helper.clone(), &backoff);
            async move {
                let status = rt
                    .get_pod_status(&pod.uid(), pod.name_or_empty(), pod.namespace_or_default())
                    .await?;
                let result = rt.sync_pod(pod, &status, helper, backoff).await?;
                if !result.is_ok() {
                    return Err(
                        format!("sync of {} failed: {result:?}", pod.name_or_empty()).into(),
                    );
                }
                Ok::<_, Error>(())
            }
        });
        futures::future::try_join_all(syncs).await?;
    }
    Ok(())
}

async fn run() -> Result<serde_json::Value, Error> {
    let args = parse_args()?;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("resolv.conf"), "nameserver 192.0.2.53\n")?;
    let server = FakeCriServer::start(dir.path()).await?;
    server.cri().add_image("busybox:1.36");
    let options = Options::default()
        .with_pod_logs_dir(dir.path().join("logs"))
        .with_resolv_conf(dir.path().join("resolv.conf"))
        .with_node_name("relist-node");
    let rt = kubelet_cri::connect(&server.endpoint(), options)?;
    populate(&rt, args.pods).await?;

    let raw = raw_client(server.socket_path());
    let (sandboxes, containers) = raw_list(&raw).await?;
    let runtime: Arc<dyn Runtime> = Arc::new(rt);
    let (pleg, _events) = GenericPleg::new(runtime, PodCache::new(), Config::default());
    // The first relist sees every pod as new and inspects it: not what is measured.
    pleg.relist().await;

    let (mut relist, mut list) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        let t = Instant::now();
        pleg.relist().await;
        relist.push(ms(t.elapsed()));
        let t = Instant::now();
        raw_list(&raw).await?;
        list.push(ms(t.elapsed()));
    }

    let exited = server
        .cri()
        .containers()
        .into_iter()
        .step_by(2)
        .take(args.changed)
        .filter(|c| server.cri().exit_container(&c.id, 1))
        .count();
    let t = Instant::now();
    pleg.relist().await;
    let changed_ms = ms(t.elapsed());

    server.shutdown().await;
    Ok(json!({
        "pods": args.pods,
        "sandboxes": sandboxes,
        "containers": containers,
        "rounds": args.rounds,
        "relist_ms": relist,
        "list_ms": list,
        "relist_median_ms": median(&relist),
        "list_median_ms": median(&list),
        "changed": exited,
        "changed_relist_ms": changed_ms,
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
            eprintln!("relist_cost: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
