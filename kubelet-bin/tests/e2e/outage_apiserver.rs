//! Issue 12 acceptance 6's outage and watch-relist scenarios against the real
//! kube-apiserver (the fake API server runs them in `cluster_fake_api.rs`): kube-apiserver is
//! stopped for 20 s (connections refused; etcd keeps the data) and started again on the same
//! port, so every watch ends and is made anew. The kubelet (the library node as
//! `system:node:node-a` on the fake runtime):
//! - kills, restarts or starts no pod during or after the outage;
//! - writes the Lease, the Node status and the status of a pod that finished during the
//!   outage after the server's return (times printed; the fake asserts 20 s);
//! - watches its pods again: a pod created after the return runs.
//!
//! Unlike the fake's five minutes of refusals and black hole on a paced clock, this outage is
//! 20 s of real time, and the server's restart is a real one (watch caches rebuilt from etcd).

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use kubelet::NodeBuilder;
use kubelet::cluster::ClusterOptions;
use kubelet::cluster::node_status::NodeStatusOptions;
use kubelet_core::PodExt;
use kubelet_core::testing::FakeRuntime;
use support::api::{bound_pod, client, config, disruptive, start_cluster, wait_running};

const NODE: &str = "node-a";
const OUTAGE: Duration = Duration::from_secs(20);
/// How long writes may take to resume (the fake's acceptance is 20 s; a real restart adds the
/// backoff the outage grew: up to 30 s, 60 s with jitter, before a watch is re-opened).
const RESUME: Duration = Duration::from_secs(60);

/// Polls `check` every 200 ms until it holds; fails after `limit`.
async fn wait_until(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> Result<bool>,
) -> Result<Duration> {
    let start = Instant::now();
    loop {
        if check().await? {
            return Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            bail!("{what} not within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_outage_and_restart_kill_nothing_and_writes_resume() -> Result<()> {
    // The kubelet's log, with `RUST_LOG` (e.g. `debug`) and `--nocapture`.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let Some(mut cluster) = start_cluster(&[NODE]).await? else {
        return Ok(());
    };
    let admin = client(cluster.admin_kubeconfig()).await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    for name in ["web-0", "web-1"] {
        pods.create(&PostParams::default(), &bound_pod(name, NODE))
            .await?;
    }
    let mut job = bound_pod("job", NODE);
    if let Some(spec) = job.spec.as_mut() {
        spec.restart_policy = Some("Never".into());
    }
    let job = pods.create(&PostParams::default(), &job).await?;

    let runtime = FakeRuntime::new();
    let root = tempfile::tempdir()?;
    // A Node status report every 10 s, so its writes are seen without a change.
    let mut status = NodeStatusOptions::new(NODE);
    status.report_frequency = Duration::from_secs(10);
    let options = ClusterOptions::new(config(cluster.node_kubeconfig(NODE)?).await?)
        .node_lease_duration(Duration::from_secs(8))
        .node_status(status);
    let mut node = NodeBuilder::with_runtime(Arc::new(runtime.clone()))
        .node_name(NODE)
        .root_dir(root.path())
        .no_probes()
        .cluster(options)
        .build()
        .await?;
    node.spawn().await;
    wait_running(&pods, 3)
        .await
        .with_context(|| cluster.log_tail())?;
    runtime.clear_calls();

    // The outage; the job finishes meanwhile.
    let mut cluster = tokio::task::spawn_blocking(move || {
        cluster.stop_apiserver();
        cluster
    })
    .await?;
    tokio::time::sleep(OUTAGE / 2).await;
    ensure!(
        runtime.exit_container(&job.uid(), "app", 0),
        "the job's container exits"
    );
    tokio::time::sleep(OUTAGE / 2).await;
    let cluster =
        tokio::task::spawn_blocking(move || cluster.start_apiserver().map(|()| cluster)).await??;
    let back = Timestamp::now();

    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-node-lease");
    let lease = wait_until("a Lease renewal", RESUME, async || {
        let lease = leases.get(NODE).await?;
        Ok(lease
            .spec
            .and_then(|s| s.renew_time)
            .is_some_and(|t| t.0 > back))
    })
    .await?;
    let nodes: Api<Node> = Api::all(admin.clone());
    let node_status = wait_until("a Node status write", RESUME, async || {
        let n = nodes.get(NODE).await?;
        Ok(n.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| {
                c.type_ == "Ready" && c.last_heartbeat_time.as_ref().is_some_and(|t| t.0 > back)
            }))
    })
    .await?;
    let job_status = wait_until("the job's Succeeded status", RESUME, async || {
        let p = pods.get("job").await?;
        Ok(p.status.and_then(|s| s.phase).as_deref() == Some("Succeeded"))
    })
    .await?;
    println!(
        "after the restart: lease {lease:?}, node status {node_status:?}, pod status {job_status:?}"
    );
    let calls = runtime.calls();
    let others: Vec<_> = disruptive(&calls)
        .into_iter()
        .filter(|c| !matches!(c, kubelet_core::testing::Call::StopSandbox(_)))
        .collect();
    ensure!(others.is_empty(), "nothing killed or started: {others:?}");

    // The pod watch works again.
    pods.create(&PostParams::default(), &bound_pod("late", NODE))
        .await?;
    let late = wait_until("the late pod Running", RESUME, async || {
        let p = pods.get("late").await?;
        Ok(p.status.and_then(|s| s.phase).as_deref() == Some("Running"))
    })
    .await
    .with_context(|| cluster.log_tail())?;
    println!("a pod created after the restart ran in {late:?}");
    ensure!(node.stop().await, "every task stops");
    Ok(())
}
