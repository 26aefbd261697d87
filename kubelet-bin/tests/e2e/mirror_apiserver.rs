//! Mirror pods against the real kube-apiserver, as the node (`system:node:<node>`), where
//! NodeRestriction judges them: `KubeMirrorClient` creates a static pod's mirror owned by the
//! Node that `ApiNodeProvider` read, a second create is no error, deletes honour the UID
//! precondition. Skipped when the binary is not built, unless KUBELET_REQUIRE_APISERVER is set.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{Api, api::PostParams};
use kubelet::cluster::{ApiNodeProvider, KubeMirrorClient};
use kubelet_core::PodUid;
use kubelet_core::kubelet::mirror::{MirrorClient, mirror_pod_of};
use kubelet_core::kubelet::node::NodeProvider;
use support::api::{bound_pod, client, start_cluster};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

fn static_pod(node: &str) -> Pod {
    let mut pod = bound_pod(&format!("web-{node}"), node);
    pod.metadata.uid = Some("static-uid".into());
    pod.metadata.annotations = Some(BTreeMap::from([
        ("kubernetes.io/config.hash".to_owned(), "h1".to_owned()),
        ("kubernetes.io/config.source".to_owned(), "file".to_owned()),
    ]));
    pod
}

#[tokio::test]
async fn mirror_pods_pass_node_restriction_and_deletes_check_the_uid() -> Result<()> {
    let started = start_cluster(&["n1"]).await?;
    let Some(cluster) = started else {
        return Ok(());
    };
    let admin = client(cluster.admin_kubeconfig()).await?;
    let node_client = client(cluster.node_kubeconfig("n1")?).await?;
    let nodes: Api<Node> = Api::all(node_client.clone());
    let mut fallback = Node::default();
    fallback.metadata.name = Some("n1".into());
    nodes
        .create(&PostParams::default(), &fallback)
        .await
        .context("the node registers itself")?;

    let (tracker, token) = (TaskTracker::new(), CancellationToken::new());
    let provider =
        ApiNodeProvider::spawn(node_client.clone(), "n1", fallback, &tracker, token.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !provider.has_node() {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the node watch never read the Node"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let node = provider.node();
    let node_uid = node
        .metadata
        .uid
        .clone()
        .context("the API's node has a UID")?;

    let static_pod = static_pod("n1");
    let mirror = KubeMirrorClient::new(node_client.clone());
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");

    // Without the owner reference NodeRestriction refuses the mirror pod.
    let mut unowned = mirror_pod_of(&static_pod, "n1", &node_uid);
    unowned.metadata.owner_references = None;
    let refused = mirror.create_mirror_pod(&unowned).await;
    ensure!(refused.is_err(), "an unowned mirror pod was accepted");

    let wanted = mirror_pod_of(&static_pod, "n1", &node_uid);
    mirror.create_mirror_pod(&wanted).await?;
    let created = pods.get("web-n1").await?;
    ensure!(
        created
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubernetes.io/config.mirror"))
            .map(String::as_str)
            == Some("h1"),
        "mirror annotation: {:?}",
        created.metadata.annotations
    );
    let owner = &created
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default()[0];
    ensure!(
        owner.kind == "Node" && owner.uid == node_uid,
        "owner: {owner:?}"
    );
    mirror
        .create_mirror_pod(&wanted)
        .await
        .context("a second create finds it there: no error")?;

    let uid = PodUid::from(created.metadata.uid.clone().context("uid")?);
    ensure!(
        !mirror
            .delete_mirror_pod("web-n1_default", Some(PodUid::from("another-uid")))
            .await?,
        "a delete with another UID deletes nothing"
    );
    ensure!(pods.get_opt("web-n1").await?.is_some(), "still there");
    ensure!(
        mirror
            .delete_mirror_pod("web-n1_default", Some(uid))
            .await?,
        "the delete with its UID deletes it"
    );
    ensure!(
        pods.get_opt("web-n1").await?.is_none(),
        "grace period 0: gone at once"
    );
    ensure!(
        !mirror.delete_mirror_pod("web-n1_default", None).await?,
        "nothing left to delete"
    );
    token.cancel();
    tracker.close();
    tracker.wait().await;
    Ok(())
}
