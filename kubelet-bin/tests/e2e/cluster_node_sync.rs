//! Issue 12: API pods are admitted against the right Node from the first one (upstream
//! `NewSourceApiserver` waits for `nodeHasSynced`; `getNodeAnyWay` falls back to
//! `initialNode`). A whole node (`NodeBuilder::cluster` on the fake runtime, the real client
//! stack) against the in-process fake API server:
//! - no pod is listed before the node's own Node has been listed;
//! - while no Node can be read, admission uses the Node the kubelet registers: its
//!   `--node-labels` satisfy a nodeSelector and its `--register-with-taints` NoExecute taint
//!   refuses a pod that does not tolerate it.

use std::path::Path;
use std::time::Duration;

use kubelet::NodeBuilder;
use kubelet::cluster::ClusterOptions;
use kubelet::cluster::node_status::{NodeStatusOptions, initial};
use kubelet_core::testing::FakeRuntime;
use kubelet_core::testing::apiserver::{Entry, FakeApiServer, Fault, RequestFilter};
use serde_json::{Value, json};
use tokio::time::timeout;

const NODE: &str = "node-a";
/// How long a test waits for something that takes well under a second (a safety net).
const PATIENCE: Duration = Duration::from_secs(60);

fn pod(name: &str, extra_spec: Value) -> Value {
    let mut spec = json!({
        "nodeName": NODE,
        "restartPolicy": "Always",
        "containers": [{"name": "app", "image": "busybox:1.36"}],
    });
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra_spec) {
        spec.extend(extra);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

async fn start_node(options: ClusterOptions, root: &Path) -> anyhow::Result<kubelet::Node> {
    let runtime = FakeRuntime::new();
    let mut node = NodeBuilder::new(move |ctx: &kubelet::RuntimeContext| {
        Ok::<_, std::convert::Infallible>(runtime.with_event_recorder(ctx.event_recorder.clone()))
    })
    .node_name(NODE)
    .root_dir(root)
    .no_probes()
    .cluster(options)
    .build()
    .await?;
    node.spawn().await;
    Ok(node)
}

fn config(fake: &FakeApiServer) -> anyhow::Result<kube::Config> {
    Ok(fake.kube_config(None, "kubelet/v0.1.0 (linux/amd64) kubernetes/test")?)
}

fn is_list(entry: &Entry, resource: &str) -> bool {
    entry.verb == "list" && entry.resource == resource
}

/// Waits for the status PATCH of pod `name` that sets `phase`; returns its body.
async fn wait_phase(fake: &FakeApiServer, name: &str, phase: &str) -> Value {
    let entry = timeout(
        PATIENCE,
        fake.journal().wait_for(|e| {
            e.is("patch", "pods/status")
                && e.name.as_deref() == Some(name)
                && e.json()["status"]["phase"] == phase
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} was not written {phase}"));
    entry.json()
}

#[tokio::test]
async fn pods_are_listed_only_after_the_node_is() -> anyhow::Result<()> {
    let fake = FakeApiServer::start().await?;
    fake.create("v1", "pods", "default", pod("web", json!({})))?;
    fake.faults().inject(
        Fault::Status(500),
        RequestFilter::any().verb("list").resource("nodes"),
        None,
    );
    let root = tempfile::tempdir()?;
    let node = start_node(ClusterOptions::new(config(&fake)?), root.path()).await?;

    // The node list fails twice (kube's backoff retries it); no pod is listed meanwhile.
    let failed_lists = |e: &Entry| is_list(e, "nodes") && e.status == 500;
    timeout(PATIENCE, fake.journal().wait_for_count("list", "nodes", 2)).await?;
    assert!(
        fake.journal()
            .entries()
            .iter()
            .all(|e| !is_list(e, "nodes") || failed_lists(e))
    );
    let listed_pods = |e: &Entry| is_list(e, "pods");
    assert!(
        !fake.journal().entries().iter().any(listed_pods),
        "pods were listed before the node"
    );

    fake.faults().clear();
    timeout(PATIENCE, fake.journal().wait_for(listed_pods)).await?;
    let entries = fake.journal().entries();
    let node_listed = entries
        .iter()
        .position(|e| is_list(e, "nodes") && e.status == 200);
    let pods_listed = entries.iter().position(listed_pods);
    assert!(
        node_listed.is_some() && node_listed < pods_listed,
        "node list at {node_listed:?}, pod list at {pods_listed:?}"
    );
    wait_phase(&fake, "web", "Running").await;
    node.stop().await;
    Ok(())
}

#[tokio::test]
async fn before_the_node_is_readable_admission_uses_the_registered_labels_and_taints()
-> anyhow::Result<()> {
    let fake = FakeApiServer::start().await?;
    // Registration fails, so the node list finds no Node: admission has only the fallback.
    fake.faults().inject(
        Fault::Status(500),
        RequestFilter::any().verb("create").resource("nodes"),
        None,
    );
    let tolerates = json!([{"key": "dedicated", "operator": "Equal", "value": "edge",
        "effect": "NoExecute"}]);
    fake.create(
        "v1",
        "pods",
        "default",
        pod(
            "fits",
            json!({"nodeSelector": {"role": "edge"}, "tolerations": tolerates}),
        ),
    )?;
    fake.create(
        "v1",
        "pods",
        "default",
        pod("untolerated", json!({"nodeSelector": {"role": "edge"}})),
    )?;
    fake.create(
        "v1",
        "pods",
        "default",
        pod(
            "elsewhere",
            json!({"nodeSelector": {"role": "core"}, "tolerations": tolerates}),
        ),
    )?;
    let mut status = NodeStatusOptions::new(NODE);
    status.node_labels = initial::parse_labels("role=edge")?;
    status.register_with_taints = initial::parse_taints("dedicated=edge:NoExecute")?;
    let options = ClusterOptions::new(config(&fake)?).node_status(status);
    let root = tempfile::tempdir()?;
    let node = start_node(options, root.path()).await?;

    wait_phase(&fake, "fits", "Running").await;
    let untolerated = wait_phase(&fake, "untolerated", "Failed").await;
    assert_eq!(untolerated["status"]["reason"], "TaintToleration");
    let elsewhere = wait_phase(&fake, "elsewhere", "Failed").await;
    assert_eq!(elsewhere["status"]["reason"], "NodeAffinity");
    assert!(
        !fake
            .journal()
            .entries()
            .iter()
            .any(|e| e.is("create", "nodes") && e.status == 201),
        "the Node was never registered"
    );
    node.stop().await;
    Ok(())
}
