//! Issue 12: after repeated heartbeat failures the kubelet drops its heartbeat connections
//! and the next heartbeat dials anew (upstream `onRepeatedHeartbeatFailure`, which calls
//! `closeAllConns`, in `updateNodeStatus` and the Lease controller's `retryUpdateLease`). A
//! whole node (`NodeBuilder::cluster` on the fake runtime, the real client stack) against
//! the in-process fake API server, whose journal records each request's client address
//! (one per connection):
//! - two node status reads answered `500` in one round: the third read comes on a new
//!   connection (without the hook it reuses the kept-alive one);
//! - two node status reads black-holed: heartbeats resume on a new connection once the
//!   server answers again.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use kubelet::NodeBuilder;
use kubelet::cluster::ClusterOptions;
use kubelet_core::testing::FakeRuntime;
use kubelet_core::testing::apiserver::{Entry, FakeApiServer, Fault, RequestFilter};
use tokio::time::timeout;

const NODE: &str = "node-a";
/// A safety net for waits on things that take seconds.
const PATIENCE: Duration = Duration::from_secs(60);
/// The node status period, and so the heartbeat client's timeout.
const STATUS_EVERY: Duration = Duration::from_secs(2);

async fn start_node(fake: &FakeApiServer, root: &Path) -> anyhow::Result<kubelet::Node> {
    let config = fake.kube_config(None, "kubelet/v0.1.0 (linux/amd64) kubernetes/test")?;
    let runtime = FakeRuntime::new();
    let mut node = NodeBuilder::new(move |ctx: &kubelet::RuntimeContext| {
        Ok::<_, std::convert::Infallible>(runtime.with_event_recorder(ctx.event_recorder.clone()))
    })
    .node_name(NODE)
    .root_dir(root)
    .no_probes()
    .cluster(
        ClusterOptions::new(config)
            .node_status_update_frequency(STATUS_EVERY)
            .node_lease_duration(Duration::from_secs(8)),
    )
    .build()
    .await?;
    node.spawn().await;
    Ok(node)
}

/// A node status read of this node (the only reads of `nodes/node-a` once the Lease has its
/// owner reference).
fn node_read(entry: &Entry) -> bool {
    entry.is("get", "nodes") && entry.name.as_deref() == Some(NODE)
}

/// Waits until the node is Ready in the API and its Lease has been renewed, so every later
/// read of the Node is the node status loop's.
async fn wait_steady(fake: &FakeApiServer) -> anyhow::Result<()> {
    timeout(
        PATIENCE,
        fake.journal().wait_for(|e| {
            e.is("patch", "nodes/status") && e.status == 200 && e.body.contains("KubeletReady")
        }),
    )
    .await?;
    timeout(
        PATIENCE,
        fake.journal()
            .wait_for(|e| e.is("update", "leases") && e.status == 200),
    )
    .await?;
    Ok(())
}

/// Waits for a successful read of the Node after the journal's first `skip` entries; returns
/// its index in the journal.
async fn next_good_read(fake: &FakeApiServer, skip: usize) -> anyhow::Result<usize> {
    let found = timeout(PATIENCE, async {
        loop {
            let entries = fake.journal().entries();
            if let Some(i) =
                (skip..entries.len()).find(|i| node_read(&entries[*i]) && entries[*i].status == 200)
            {
                return i;
            }
            let reads = fake.journal().count("get", "nodes");
            fake.journal()
                .wait_for_count("get", "nodes", reads + 1)
                .await;
        }
    })
    .await?;
    Ok(found)
}

/// Two reads of the Node fail with `fault`; the next good one must come on a connection
/// never used before.
async fn failures_then_a_new_connection(fault: Fault) -> anyhow::Result<()> {
    let fake = FakeApiServer::start().await?;
    let root = tempfile::tempdir()?;
    let node = start_node(&fake, root.path()).await?;
    wait_steady(&fake).await?;

    let before = fake.journal().entries().len();
    fake.faults().inject(
        fault.clone(),
        RequestFilter::any()
            .verb("get")
            .resource("nodes")
            .name(NODE),
        Some(2),
    );
    let resumed = next_good_read(&fake, before).await?;
    let entries = fake.journal().entries();
    let failed: Vec<Option<SocketAddr>> = entries[before..resumed]
        .iter()
        .filter(|e| node_read(e))
        .map(|e| e.peer)
        .collect();
    let peer = entries[resumed].peer.expect("the fake records peers");
    println!("{fault:?}: failed reads on {failed:?}; the next read on {peer}");
    if fault == Fault::Status(500) {
        assert_eq!(failed.len(), 2, "two failed reads first");
    }
    let seen: HashSet<SocketAddr> = entries[..resumed].iter().filter_map(|e| e.peer).collect();
    assert!(
        !seen.contains(&peer),
        "the read after two failures reused connection {peer}"
    );
    node.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_read_after_two_errors_dials_a_new_connection() -> anyhow::Result<()> {
    failures_then_a_new_connection(Fault::Status(500)).await
}

#[tokio::test]
async fn heartbeats_resume_on_a_new_connection_after_a_black_hole() -> anyhow::Result<()> {
    failures_then_a_new_connection(Fault::BlackHole).await
}
