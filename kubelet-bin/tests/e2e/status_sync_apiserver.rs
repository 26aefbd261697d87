//! The pod status syncer against the real kube-apiserver, as `system:node:node-a`: the Node
//! authorizer and NodeRestriction judge its PATCHes of `pods/status` and its final DELETE
//! (`shared/APISERVER.md`). Skipped when the binary is not built, unless
//! KUBELET_REQUIRE_APISERVER is set.

use crate::support;

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, HostIP, Pod, PodCondition, PodStatus,
};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kubelet_core::pod_manager::PodManager;
use kubelet_core::status::StatusManager;
use kubelet_core::{PodExt, PodUid};
use kubelet_status::LocalStatusManager;
use kubelet_status::api::ApiStatusSyncer;
use serde_json::json;
use support::api::{bound_pod, client, start_cluster};

fn condition(type_: &str, status: &str) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        ..PodCondition::default()
    }
}

fn running() -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        host_ip: Some("127.0.0.1".into()),
        host_ips: Some(vec![HostIP {
            ip: "127.0.0.1".into(),
        }]),
        pod_ip: Some("10.88.0.9".into()),
        conditions: Some(vec![
            condition("Initialized", "True"),
            condition("Ready", "True"),
            condition("ContainersReady", "True"),
            condition("PodScheduled", "True"),
        ]),
        container_statuses: Some(vec![ContainerStatus {
            name: "app".into(),
            image: "busybox".into(),
            image_id: String::new(),
            ready: true,
            started: Some(true),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }]),
        ..PodStatus::default()
    }
}

#[tokio::test]
async fn a_node_writes_status_keeps_others_conditions_and_deletes_its_terminated_pod() -> Result<()>
{
    let started = start_cluster(&["node-a"]).await?;
    let Some(cluster) = started else {
        return Ok(());
    };
    let admin: Api<Pod> = Api::namespaced(client(cluster.admin_kubeconfig()).await?, "default");
    let node = client(cluster.node_kubeconfig("node-a")?).await?;

    // A pod bound to node-a, with a condition somebody else owns.
    let created = admin
        .create(&PostParams::default(), &bound_pod("web", "node-a"))
        .await?;
    let gate = json!({ "status": { "conditions": [
        { "type": "example.com/gate", "status": "True" } ] } });
    admin
        .patch_status("web", &PatchParams::default(), &Patch::Strategic(&gate))
        .await?;
    let pods = PodManager::new();
    pods.add_pod(admin.get("web").await?);

    let statuses = Arc::new(LocalStatusManager::new());
    let no_containers = |_: &PodUid| false;
    let mut syncer = ApiStatusSyncer::new(
        node,
        statuses.clone(),
        pods.clone(),
        Arc::new(pods.clone()),
        Arc::new(no_containers),
    );
    statuses.set_pod_status(&created, running());
    let outcome = syncer.sync_batch(false).await;
    ensure!(outcome.failed == 0, "{outcome:?}\n{}", cluster.log_tail());

    let written = admin.get("web").await?;
    let status = written.status.clone().context("status")?;
    ensure!(status.phase.as_deref() == Some("Running"), "{status:?}");
    let mut types: Vec<String> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.clone())
        .collect();
    types.sort();
    ensure!(
        types
            == [
                "ContainersReady",
                "Initialized",
                "PodScheduled",
                "Ready",
                "example.com/gate"
            ],
        "{types:?}"
    );
    // The watch would deliver the written pod; the resync then has nothing to write, even
    // though 1.20 drops hostIPs.
    pods.add_pod(written);
    let version = admin.get("web").await?.metadata.resource_version;
    syncer.sync_batch(true).await;
    syncer.sync_batch(true).await;
    ensure!(
        admin.get("web").await?.metadata.resource_version == version,
        "an unchanged status was written again"
    );

    // Graceful deletion: kept until the kubelet's grace-0 delete with the pod's UID.
    admin
        .delete("web", &DeleteParams::default().grace_period(5))
        .await?;
    let deleting = admin.get("web").await?;
    ensure!(deleting.metadata.deletion_timestamp.is_some());
    pods.add_pod(deleting.clone());
    statuses.set_pod_status(&deleting, running());
    statuses.terminate_pod(&deleting);
    statuses.pod_resources_reclaimed(&deleting);
    let outcome = syncer.sync_batch(false).await;
    ensure!(outcome.failed == 0, "{outcome:?}\n{}", cluster.log_tail());
    ensure!(
        admin.get_opt("web").await?.is_none(),
        "the pod is gone once terminated"
    );
    ensure!(created.uid() == deleting.uid());
    Ok(())
}

#[tokio::test]
async fn a_node_cannot_write_the_status_of_another_nodes_pod() -> Result<()> {
    let started = start_cluster(&["node-a", "node-b"]).await?;
    let Some(cluster) = started else {
        return Ok(());
    };
    let admin: Api<Pod> = Api::namespaced(client(cluster.admin_kubeconfig()).await?, "default");
    let node = client(cluster.node_kubeconfig("node-a")?).await?;
    let other = admin
        .create(&PostParams::default(), &bound_pod("other", "node-b"))
        .await?;
    let pods = PodManager::new();
    pods.add_pod(other.clone());
    let statuses = Arc::new(LocalStatusManager::new());
    let no_containers = |_: &PodUid| false;
    let mut syncer = ApiStatusSyncer::new(
        node,
        statuses.clone(),
        pods.clone(),
        Arc::new(pods.clone()),
        Arc::new(no_containers),
    );
    statuses.set_pod_status(&other, running());
    let outcome = syncer.sync_batch(false).await;
    ensure!(outcome.failed == 1, "{outcome:?}");
    let status = admin.get("other").await?.status.unwrap_or_default();
    ensure!(status.phase.as_deref() == Some("Pending"), "{status:?}");
    Ok(())
}
