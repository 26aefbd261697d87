//! Cluster mode against the real kube-apiserver (`xtask::apiserver::Cluster`), with the node
//! built by [`NodeBuilder::cluster`] from the node's kubeconfig, so it runs as
//! `system:node:node-a` and the Node authorizer and NodeRestriction judge every request: the
//! pod watch with `spec.nodeName`, the Lease in `kube-node-lease` with its owner reference to
//! the Node, the Node registered Ready, and a pod created in the API running on the fake
//! runtime and Running in the API. Skipped when the
//! binary is not built, unless KUBELET_REQUIRE_APISERVER is set.

use crate::support;
/// TLS bootstrap and client certificate rotation (issue 30).
mod tls_bootstrap;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::DeleteParams;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kubelet::NodeBuilder;
use kubelet::cluster::ClusterOptions;
use kubelet_core::PodExt;
use kubelet_core::runtime::ContainerState;
use kubelet_core::testing::{FakeRuntime, pod};
use support::api::{client, config, start_cluster};

const NODE: &str = "node-a";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_keeps_its_lease_and_runs_its_api_pods() -> Result<()> {
    let Some(cluster) = start_cluster(&[NODE]).await? else {
        return Ok(());
    };
    let admin = client(cluster.admin_kubeconfig()).await?;
    let config = config(cluster.node_kubeconfig(NODE)?).await?;
    let root = tempfile::tempdir()?;
    let runtime = FakeRuntime::new();
    let started = std::time::Instant::now();
    let mut node = NodeBuilder::with_runtime(Arc::new(runtime.clone()))
        .node_name(NODE)
        .root_dir(root.path())
        .no_probes()
        .cluster(ClusterOptions::new(config).node_lease_duration(Duration::from_secs(4)))
        .build()
        .await?;
    node.spawn().await;

    // The node registers itself, Ready.
    let nodes: Api<Node> = Api::all(admin.clone());
    let registered = tokio::time::timeout(
        Duration::from_secs(20),
        await_condition(nodes.clone(), NODE, |n: Option<&Node>| {
            n.and_then(|n| n.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        }),
    )
    .await
    .context("the Node Ready within 20 s")??
    .context("node")?;
    let node_uid = registered.metadata.uid.context("node uid")?;
    eprintln!("Node Ready in the API {:?} after build", started.elapsed());

    // The Lease: created by the node, owned by the Node, renewed every second.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-node-lease");
    let first = tokio::time::timeout(
        Duration::from_secs(20),
        await_condition(leases.clone(), NODE, |l: Option<&Lease>| l.is_some()),
    )
    .await
    .context("the Lease within 20 s")??
    .context("lease")?;
    let owner = first
        .metadata
        .owner_references
        .as_ref()
        .and_then(|r| r.first())
        .context("owner reference")?;
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Node", node_uid.as_str())
    );
    let spec = first.spec.clone().context("spec")?;
    assert_eq!(spec.holder_identity.as_deref(), Some(NODE));
    assert_eq!(spec.lease_duration_seconds, Some(4));
    let first_renew = spec.renew_time.context("renewTime")?;
    tokio::time::timeout(
        Duration::from_secs(20),
        await_condition(leases.clone(), NODE, move |l: Option<&Lease>| {
            l.and_then(|l| l.spec.as_ref())
                .and_then(|s| s.renew_time.as_ref())
                .is_some_and(|t| t.0 > first_renew.0)
        }),
    )
    .await
    .context("a renewal within 20 s")??;

    // A pod bound to this node in the API runs; one bound elsewhere is never seen.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let created = std::time::Instant::now();
    for (name, node_name) in [("api-pod", NODE), ("elsewhere", "node-b")] {
        let mut p = pod(name);
        p.metadata.uid = None;
        p.spec.as_mut().context("spec")?.node_name = Some(node_name.into());
        pods.create(&PostParams::default(), &p).await?;
    }
    let uid = pods.get("api-pod").await?.uid();
    let status = node.local_status_manager().context("local status")?.clone();
    let mut changes = status.subscribe();
    let running = |s: &kubelet_status::LocalStatusManager| {
        s.versioned_status(&uid)
            .and_then(|v| v.status.phase)
            .as_deref()
            == Some("Running")
    };
    while !running(&status) {
        tokio::time::timeout(Duration::from_secs(20), changes.changed())
            .await
            .context("the API pod Running within 20 s")??;
    }
    let names: Vec<String> = node
        .pod_manager()
        .pods()
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names, vec!["api-pod".to_owned()]);
    // The status syncer writes Running to the API.
    let in_api = tokio::time::timeout(
        Duration::from_secs(20),
        await_condition(pods.clone(), "api-pod", |p: Option<&Pod>| {
            p.and_then(|p| p.status.as_ref())
                .and_then(|s| s.phase.as_deref())
                == Some("Running")
        }),
    )
    .await
    .context("the API pod Running in the API within 20 s")??
    .context("pod")?;
    let api_status = in_api.status.context("status")?;
    assert!(api_status.start_time.is_some(), "{api_status:?}");
    assert!(api_status.host_ip.is_some(), "{api_status:?}");
    eprintln!(
        "api-pod Running in the API {:?} after its creation",
        created.elapsed()
    );

    // A graceful delete: the pod is killed, then the kubelet deletes the API object itself
    // (grace 0, UID precondition) once its containers are gone.
    pods.delete("api-pod", &DeleteParams::default().grace_period(5))
        .await?;
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(
            pods.clone(),
            "api-pod",
            conditions::is_deleted(&uid.to_string()),
        ),
    )
    .await
    .context("the API pod gone within 30 s")??;
    let left: Vec<_> = runtime
        .running_pods()
        .into_iter()
        .filter(|p| {
            p.uid == uid
                && p.containers
                    .iter()
                    .any(|c| c.state == ContainerState::Running)
        })
        .collect();
    assert!(left.is_empty(), "containers still running: {left:?}");
    assert!(node.stop().await, "every task stops");
    Ok(())
}
