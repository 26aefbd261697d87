//! Issue 12 acceptance 6's restart scenario against the real kube-apiserver (the fake API
//! server runs it with 50 pods in `cluster_fake_api.rs`): a kubelet restarted while its API
//! pods run restarts no container and writes no pod status that did not change, which the
//! real server shows as unchanged `resourceVersion`s. The kubelet is the library node
//! (`NodeBuilder::cluster`) as `system:node:node-a` on the fake runtime, which outlives it.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use kubelet::NodeBuilder;
use kubelet::cluster::ClusterOptions;
use kubelet_core::testing::FakeRuntime;
use support::api::{bound_pod, client, config, disruptive, start_cluster, wait_running};

const NODE: &str = "node-a";
const PODS: usize = 20;
/// Longer than the status manager's 10 s resync: every unchanged status had its chance to be
/// written again.
const QUIET: Duration = Duration::from_secs(15);

async fn start_node(
    runtime: &FakeRuntime,
    config: kube::Config,
    root: &std::path::Path,
) -> Result<kubelet::Node> {
    let mut node = NodeBuilder::with_runtime(Arc::new(runtime.clone()))
        .node_name(NODE)
        .root_dir(root)
        .no_probes()
        .cluster(ClusterOptions::new(config))
        .build()
        .await?;
    node.spawn().await;
    Ok(node)
}

#[tokio::test]
async fn a_restart_with_api_pods_restarts_nothing_and_writes_no_status() -> Result<()> {
    let Some(cluster) = start_cluster(&[NODE]).await? else {
        return Ok(());
    };
    let pods: Api<Pod> = Api::namespaced(client(cluster.admin_kubeconfig()).await?, "default");
    for i in 0..PODS {
        pods.create(
            &PostParams::default(),
            &bound_pod(&format!("web-{i:02}"), NODE),
        )
        .await?;
    }
    let node_config = config(cluster.node_kubeconfig(NODE)?).await?;
    let runtime = FakeRuntime::new();
    let root = tempfile::tempdir()?;
    let first = start_node(&runtime, node_config.clone(), root.path()).await?;
    // Settled: the versions stay the same over a quiet window.
    let mut before = wait_running(&pods, PODS)
        .await
        .with_context(|| cluster.log_tail())?;
    loop {
        tokio::time::sleep(QUIET).await;
        let now = wait_running(&pods, PODS).await?;
        if now == before {
            break;
        }
        before = now;
    }
    ensure!(first.stop().await, "the first kubelet stops");
    drop(first);

    runtime.clear_calls();
    let second = start_node(&runtime, node_config, root.path()).await?;
    let status = second
        .local_status_manager()
        .context("default status manager")?
        .clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while second.pod_manager().pods().len() < PODS
        || !second.pod_manager().pods().iter().all(|p| {
            status
                .versioned_status(&kubelet_core::PodExt::uid(p))
                .and_then(|s| s.status.phase)
                .as_deref()
                == Some("Running")
        })
    {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the restarted kubelet never saw its pods Running"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(QUIET).await;

    let calls = runtime.calls();
    ensure!(
        disruptive(&calls).is_empty(),
        "the restart started or killed: {:?}",
        disruptive(&calls)
    );
    let after = wait_running(&pods, PODS).await?;
    let rewritten: Vec<&String> = after
        .iter()
        .filter(|(name, version)| before.get(*name) != Some(version))
        .map(|(name, _)| name)
        .collect();
    ensure!(
        rewritten.is_empty(),
        "statuses written again after the restart: {rewritten:?}"
    );
    ensure!(second.stop().await, "every task stops");
    Ok(())
}
