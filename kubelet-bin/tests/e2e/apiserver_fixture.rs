//! The real kube-apiserver fixture through a real `kube::Client` built from the node's
//! kubeconfig: the Node authorizer and NodeRestriction judge the node's writes the way they will
//! judge the kubelet's (`shared/APISERVER.md`). Skipped when the binary is not built, unless
//! KUBELET_REQUIRE_APISERVER is set.

use crate::support;

use anyhow::{Context, Result, ensure};
use k8s_openapi::{
    api::{
        coordination::v1::{Lease, LeaseSpec},
        core::v1::{Container, Node, Pod, PodSpec},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use support::api::{client, start_cluster};

fn node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

fn lease(name: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("kube-node-lease".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.into()),
            lease_duration_seconds: Some(40),
            ..LeaseSpec::default()
        }),
    }
}

/// The HTTP status of a failed API call, or an error if the call succeeded.
fn status_of<T: std::fmt::Debug>(result: kube::Result<T>) -> Result<u16> {
    match result {
        Err(kube::Error::Api(status)) => Ok(status.code),
        other => anyhow::bail!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn node_restriction_judges_a_node_client() -> Result<()> {
    let started = start_cluster(&["node-a", "node-b"]).await?;
    let Some(cluster) = started else {
        return Ok(());
    };
    let admin = client(cluster.admin_kubeconfig()).await?;
    let node_a = client(cluster.node_kubeconfig("node-a")?).await?;
    let log = cluster.log_tail();

    // The node may create its own Node and its Lease.
    let nodes: Api<Node> = Api::all(node_a.clone());
    let created = nodes
        .create(&PostParams::default(), &node("node-a"))
        .await
        .with_context(|| format!("node-a creates its Node\n{log}"))?;
    ensure!(created.metadata.uid.is_some());
    let leases: Api<Lease> = Api::namespaced(node_a.clone(), "kube-node-lease");
    leases
        .create(&PostParams::default(), &lease("node-a"))
        .await
        .context("node-a creates its Lease")?;

    // ... but not another node's.
    let code = status_of(nodes.create(&PostParams::default(), &node("node-b")).await)?;
    ensure!(code == 403, "node-a creating Node node-b: {code}");
    Api::<Node>::all(admin.clone())
        .create(&PostParams::default(), &node("node-b"))
        .await
        .context("admin creates Node node-b")?;
    let patch = Patch::Merge(json!({"metadata": {"labels": {"e2e": "x"}}}));
    let code = status_of(nodes.patch("node-b", &PatchParams::default(), &patch).await)?;
    ensure!(code == 403, "node-a patching Node node-b: {code}");
    let code = status_of(
        leases
            .create(&PostParams::default(), &lease("node-b"))
            .await,
    )?;
    ensure!(code == 403, "node-a creating Lease node-b: {code}");

    // A node creates only mirror pods.
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("not-a-mirror".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-a".into()),
            containers: vec![Container {
                name: "c".into(),
                image: Some("busybox".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    let pods: Api<Pod> = Api::namespaced(node_a, "default");
    let code = status_of(pods.create(&PostParams::default(), &pod).await)?;
    ensure!(code == 403, "node-a creating a non-mirror pod: {code}");
    // The same pod is fine for the admin.
    Api::<Pod>::namespaced(admin, "default")
        .create(&PostParams::default(), &pod)
        .await
        .context("admin creates the pod")?;
    Ok(())
}
