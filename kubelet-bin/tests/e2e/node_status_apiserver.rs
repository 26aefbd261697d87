//! Node registration and node status against the real kube-apiserver, as `system:node:node-a`
//! (the Node authorizer and NodeRestriction judge every write). Skipped when the binary is not
//! built, unless KUBELET_REQUIRE_APISERVER is set.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kubelet::cluster::node_status::{self, NodeStatusInputs, NodeStatusOptions, initial};
use kubelet_core::cache::PodCache;
use kubelet_core::kubelet::RuntimeState;
use kubelet_core::testing::{FakePleg, FakeRuntime};
use serde_json::json;
use support::api::{client, start_cluster};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Polls the Node (as the admin) until `check` passes; fails after 20 s with the last Node.
async fn eventually(nodes: &Api<Node>, check: impl Fn(&Node) -> bool) -> Result<Node> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let node = nodes.get_opt("node-a").await?;
        if let Some(n) = &node
            && check(n)
        {
            return Ok(n.clone());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("node never matched: {node:#?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn condition(node: &Node, type_: &str) -> Option<(String, String)> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.message.clone().unwrap_or_default()))
}

fn options() -> Result<NodeStatusOptions> {
    let mut opts = NodeStatusOptions::new("node-a");
    opts.node_ips = vec!["10.0.0.5".parse()?];
    opts.node_labels = initial::parse_labels("role=edge")?;
    opts.register_with_taints = initial::parse_taints("dedicated=edge:NoSchedule")?;
    opts.kube_reserved = "cpu=100m,memory=100Mi".parse()?;
    opts.update_frequency = Duration::from_secs(1);
    opts.root_dir = std::env::temp_dir();
    Ok(opts)
}

#[tokio::test]
async fn registers_reports_and_adopts_as_a_node() -> Result<()> {
    let started = start_cluster(&["node-a"]).await?;
    let Some(cluster) = started else {
        return Ok(());
    };
    let admin: Api<Node> = Api::all(client(cluster.admin_kubeconfig()).await?);
    let node_client = client(cluster.node_kubeconfig("node-a")?).await?;

    let runtime = Arc::new(FakeRuntime::new());
    let state = RuntimeState::new(Arc::new(FakePleg::new(runtime.clone(), PodCache::new())));
    state.update(runtime.as_ref()).await;
    let tracker = TaskTracker::new();
    let token = CancellationToken::new();
    let inputs = NodeStatusInputs::new(runtime.clone(), state.clone());
    node_status::spawn(
        node_client.clone(),
        options()?,
        inputs.clone(),
        &tracker,
        token.clone(),
    );

    let node = eventually(&admin, |n| {
        condition(n, "Ready").is_some_and(|(s, _)| s == "True")
    })
    .await
    .with_context(|| cluster.log_tail())?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    ensure!(labels.get("kubernetes.io/hostname").map(String::as_str) == Some("node-a"));
    ensure!(labels.get("kubernetes.io/os").map(String::as_str) == Some("linux"));
    ensure!(labels.get("role").map(String::as_str) == Some("edge"));
    let taints = node.spec.clone().and_then(|s| s.taints).unwrap_or_default();
    ensure!(
        taints
            .iter()
            .any(|t| t.key == "dedicated" && t.effect == "NoSchedule")
    );
    let status = node.status.clone().unwrap_or_default();
    let capacity = status.capacity.clone().unwrap_or_default();
    for resource in ["cpu", "memory", "pods", "ephemeral-storage"] {
        ensure!(
            capacity.contains_key(resource),
            "capacity lacks {resource}: {capacity:?}"
        );
    }
    ensure!(capacity["pods"].0 == "110");
    let allocatable = status.allocatable.clone().unwrap_or_default();
    ensure!(allocatable.contains_key("memory"), "{allocatable:?}");
    let info = status.node_info.clone().unwrap_or_default();
    ensure!(info.container_runtime_version == "fake://0.1.0", "{info:?}");
    ensure!(info.kubelet_version == kubelet_core::version::GIT_VERSION);
    let addresses: Vec<_> = status
        .addresses
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    ensure!(
        addresses
            == [
                ("InternalIP".to_owned(), "10.0.0.5".to_owned()),
                ("Hostname".to_owned(), "node-a".to_owned())
            ],
        "{addresses:?}"
    );
    for c in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        ensure!(
            condition(&node, c).is_some_and(|(s, _)| s == "False"),
            "{c}"
        );
    }

    // A restarted kubelet adopts the Node: its hostname label is put back, a label and a
    // condition owned by others stay; its addresses (a new IP) replace the list whole, as
    // upstream's patch does (an address another writer added is gone).
    token.cancel();
    tracker.close();
    tracker.wait().await;
    admin
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "kubernetes.io/hostname": "old", "team": "ops"}}})),
        )
        .await?;
    admin
        .patch_status(
            "node-a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {
                "conditions": [
                    {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"}],
                "addresses": [{"type": "ExternalIP", "address": "192.0.2.1"}]}})),
        )
        .await?;
    runtime.set_down(true);
    state.update(runtime.as_ref()).await;
    let token = CancellationToken::new();
    let tracker = TaskTracker::new();
    let mut moved = options()?;
    moved.node_ips = vec!["10.0.0.6".parse()?];
    node_status::spawn(node_client, moved, inputs, &tracker, token.clone());
    let node = eventually(&admin, |n| {
        condition(n, "Ready").is_some_and(|(s, _)| s == "False")
    })
    .await?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    ensure!(labels.get("kubernetes.io/hostname").map(String::as_str) == Some("node-a"));
    ensure!(labels.get("team").map(String::as_str) == Some("ops"));
    ensure!(
        condition(&node, "NetworkUnavailable").is_some(),
        "{node:#?}"
    );
    let addresses: Vec<_> = node
        .status
        .clone()
        .and_then(|s| s.addresses)
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    ensure!(
        addresses
            == [
                ("InternalIP".to_owned(), "10.0.0.6".to_owned()),
                ("Hostname".to_owned(), "node-a".to_owned())
            ],
        "{addresses:?}"
    );
    let (_, message) = condition(&node, "Ready").unwrap_or_default();
    ensure!(
        message.contains("container runtime status check failed"),
        "{message}"
    );
    token.cancel();
    Ok(())
}

/// Issue 38: 20 fresh Nodes registered in a row against the real API server, each written
/// Ready soon after its start. The create says NotReady (the runtime check has not completed);
/// the update that says Ready follows. A `resourceVersion=0` read right after the create can
/// miss the new Node in the server's watch cache; the kubelet then used to re-register on the
/// next 10 s round, so a start took ~10 s about one time in two. The bound here (5 s) separates
/// the two modes without timing the fast one; the distribution is printed
/// (`--nocapture`) for the record.
#[tokio::test]
async fn twenty_fresh_nodes_in_a_row_are_each_ready_without_waiting_a_status_round() -> Result<()> {
    const STARTS: usize = 20;
    let names: Vec<String> = (0..STARTS).map(|i| format!("fresh-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let Some(cluster) = start_cluster(&refs).await? else {
        return Ok(());
    };
    let runtime = Arc::new(FakeRuntime::new());
    let mut took = Vec::with_capacity(STARTS);
    for name in &names {
        // As at a kubelet's start: the first runtime status check has not completed when the
        // Node is created (NotReady), and does right after, so Ready needs a status write
        // right after the create.
        let state = RuntimeState::new(Arc::new(FakePleg::new(runtime.clone(), PodCache::new())));
        let inputs = NodeStatusInputs::new(runtime.clone(), state.clone());
        let node_client = client(cluster.node_kubeconfig(name)?).await?;
        let mut opts = NodeStatusOptions::new(name.as_str());
        opts.node_ips = vec!["10.0.0.5".parse()?];
        opts.root_dir = std::env::temp_dir();
        let tracker = TaskTracker::new();
        let token = CancellationToken::new();
        let started = tokio::time::Instant::now();
        let handle = node_status::spawn(node_client, opts, inputs, &tracker, token.clone());
        let checked = {
            let (runtime, mut registered) = (runtime.clone(), handle.node());
            tokio::spawn(async move {
                let _ = registered.wait_for(Option::is_some).await;
                state.update(runtime.as_ref()).await;
            })
        };
        let mut published = handle.node();
        let ready = tokio::time::timeout(
            Duration::from_secs(30),
            published.wait_for(|n| n.as_deref().is_some_and(node_status::sync::is_ready)),
        )
        .await
        .is_ok_and(|r| r.is_ok());
        let elapsed = started.elapsed();
        checked.await?;
        token.cancel();
        tracker.close();
        tracker.wait().await;
        ensure!(
            ready,
            "{name} was not Ready within 30 s\n{}",
            cluster.log_tail()
        );
        took.push(elapsed);
    }
    no_start_waited_for_a_status_round(
        &format!("node Ready after spawn, {STARTS} fresh nodes"),
        &took,
    )
}

/// Prints the distribution of `took` (`--nocapture`) and fails if any start took 5 s or more:
/// the slow mode waited for the 10 s status round, the fast one takes well under a second.
fn no_start_waited_for_a_status_round(what: &str, took: &[Duration]) -> Result<()> {
    let mut sorted = took.to_vec();
    sorted.sort();
    let Some(&max) = sorted.last() else {
        return Ok(());
    };
    let ms = |d: Duration| (d.as_secs_f64() * 1000.0).round();
    println!(
        "{what}: p50 {} ms, p90 {} ms, max {} ms; all: {:?}",
        ms(sorted[sorted.len() / 2]),
        ms(sorted[sorted.len() * 9 / 10]),
        ms(max),
        took.iter().map(|d| ms(*d)).collect::<Vec<_>>()
    );
    ensure!(
        max < Duration::from_secs(5),
        "a start waited for a status round: {took:?}"
    );
    Ok(())
}

/// Issue 38's acceptance: the kubelet binary (real containerd, real API server) started 20
/// times in a row, each time with its Node deleted first, so each start registers a new Node.
/// Prints the time from the process start to the API showing that Node Ready
/// (`--nocapture`); fails if a start waited for a 10 s status round (the bound, 5 s, does not
/// time the fast mode).
#[test]
fn twenty_kubelet_starts_each_register_a_fresh_node_that_is_ready_at_once() -> Result<()> {
    const STARTS: usize = 20;
    let Some(cluster) = support::node_cluster() else {
        return Ok(());
    };
    let node_path = format!("/api/v1/nodes/{}", support::NODE);
    let mut node = support::Node::new("fresh-starts");
    let kubeconfig = cluster.node_kubeconfig(support::NODE)?;
    node.extra_args
        .extend(["--kubeconfig".into(), kubeconfig.display().to_string()]);
    let mut took = Vec::with_capacity(STARTS);
    let mut uids = std::collections::BTreeSet::new();
    for _ in 0..STARTS {
        cluster.admin_request("DELETE", &node_path, None)?;
        while cluster.admin_request("GET", &node_path, None)?.0 != 404 {
            std::thread::sleep(Duration::from_millis(10));
        }
        let started = std::time::Instant::now();
        node.start_kubelet();
        let ready = loop {
            let (code, found) = cluster.admin_request("GET", &node_path, None)?;
            let is_ready = found["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            if code == 200 && is_ready {
                uids.insert(found["metadata"]["uid"].to_string());
                break Some(started.elapsed());
            }
            if started.elapsed() > Duration::from_secs(30) {
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        node.stop_kubelet();
        let Some(ready) = ready else {
            bail!("the Node was not Ready within 30 s\n{}", node.log());
        };
        took.push(ready);
    }
    ensure!(uids.len() == STARTS, "a fresh Node each start: {uids:?}");
    no_start_waited_for_a_status_round(
        &format!("kubelet process start to Node Ready, {STARTS} starts"),
        &took,
    )
}
