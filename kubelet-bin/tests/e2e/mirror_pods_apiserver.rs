//! Issue 12 acceptance 4 against the real kube-apiserver: a node in cluster mode (on the fake
//! runtime, as `system:node:n1`, so NodeRestriction judges every write) gives its static pod
//! a mirror pod owned by the Node; deleting the mirror pod in the API recreates it; removing
//! the manifest deletes it. Skipped when the binary is not built, unless
//! KUBELET_REQUIRE_APISERVER is set.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, Client,
    api::{DeleteParams, PostParams},
};
use kubelet::NodeBuilder;
use kubelet::cluster::ClusterOptions;
use kubelet_core::testing::FakeRuntime;
use serde_json::json;
use support::api::{config, start_cluster};

const NODE: &str = "n1";
const MIRROR: &str = "web-n1";

/// Polls `check` every 100 ms for up to 30 s until it gives a value.
async fn wait_for<T>(what: &str, mut check: impl AsyncFnMut() -> Result<Option<T>>) -> Result<T> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn is_mirror_owned_by(pod: &Pod, node_uid: &str) -> bool {
    let annotated = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let owned = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Node" && o.uid == node_uid && o.controller == Some(true));
    annotated && owned
}

#[tokio::test]
async fn a_static_pods_mirror_follows_it_in_the_api() -> Result<()> {
    let started = start_cluster(&[NODE]).await?;
    let Some(cluster) = started else {
        return Ok(());
    };
    let admin = Client::try_from(config(cluster.admin_kubeconfig()).await?)?;
    let node_config = config(cluster.node_kubeconfig(NODE)?).await?;

    // The Node, as the kubelet registers it (with what pods may use).
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": NODE, "labels": {"kubernetes.io/os": "linux"}},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}
        }
    }))?;
    let node = Api::<Node>::all(Client::try_from(node_config.clone())?)
        .create(&PostParams::default(), &node)
        .await
        .context("the node registers itself")?;
    let node_uid = node.metadata.uid.context("node uid")?;

    let manifests = tempfile::tempdir()?;
    let manifest = manifests.path().join("web.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\n\
         spec: {containers: [{name: app, image: busybox, imagePullPolicy: IfNotPresent}]}\n",
    )?;
    let root = tempfile::tempdir()?;
    let mut kubelet = NodeBuilder::with_runtime(Arc::new(FakeRuntime::new()))
        .node_name(NODE)
        .root_dir(root.path())
        .pod_manifest_path(manifests.path())
        .file_check_frequency(Duration::from_millis(200))
        .no_probes()
        .cluster(ClusterOptions::new(node_config))
        .build()
        .await?;
    kubelet.spawn().await;

    let pods: Api<Pod> = Api::namespaced(admin, "default");
    let first = wait_for("the mirror pod", async || {
        Ok(pods
            .get_opt(MIRROR)
            .await?
            .filter(|p| is_mirror_owned_by(p, &node_uid)))
    })
    .await
    .with_context(|| cluster.log_tail())?;
    let first_uid = first.metadata.uid.clone().context("uid")?;

    // Deleted in the API (gracefully, as kubectl does): the kubelet makes a new one.
    pods.delete(MIRROR, &DeleteParams::default()).await?;
    wait_for("a new mirror pod", async || {
        Ok(pods.get_opt(MIRROR).await?.filter(|p| {
            p.metadata.uid.as_deref() != Some(&first_uid)
                && p.metadata.deletion_timestamp.is_none()
                && is_mirror_owned_by(p, &node_uid)
        }))
    })
    .await?;

    // The manifest goes: so does the mirror pod.
    std::fs::remove_file(&manifest)?;
    wait_for("the mirror pod to go", async || {
        Ok(pods.get_opt(MIRROR).await?.is_none().then_some(()))
    })
    .await?;
    kubelet.stop().await;
    Ok(())
}
