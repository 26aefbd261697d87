//! A node built by [`NodeBuilder`] on the fake runtime: admit handlers and the read-only
//! endpoints are wired.

use kubelet_core::PodExt;
use kubelet_core::config::{ChannelSource, Operation};
use kubelet_core::kubelet::{PodAdmitAttributes, PodAdmitResult};
use kubelet_core::testing::{FakeRuntime, pod};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// Refuses every pod: this agent runs nothing.
struct RefuseAll;

impl PodAdmitHandler for RefuseAll {
    fn admit(&self, _: &PodAdmitAttributes<'_>) -> PodAdmitResult {
        PodAdmitResult::reject("NothingRuns", "this node runs no pods")
    }
}

async fn get(addr: SocketAddr, path: &str) -> String {
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    conn.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .expect("request");
    let mut response = String::new();
    conn.read_to_string(&mut response).await.expect("response");
    response
}

#[tokio::test]
async fn the_builder_wires_admit_handlers_and_the_read_only_endpoints() {
    let root = tempfile::tempdir().expect("tempdir");
    let runtime = FakeRuntime::new();
    let (source, pods) = ChannelSource::new("test");
    let mut node = NodeBuilder::with_runtime(Arc::new(runtime.clone()))
        .node_name("node-a")
        .root_dir(root.path())
        .source(Box::new(source))
        .admit_handler(Arc::new(RefuseAll))
        .read_only_addr("127.0.0.1:0".parse().expect("an address"))
        .build()
        .await
        .expect("builds");
    assert!(root.path().join("pods").is_dir());
    let addr = node.read_only_addr().expect("read-only endpoints");
    assert_ne!(addr.port(), 0, "the bound port");
    assert_eq!(node.healthz_addr(), None);
    node.spawn().await;

    let p = pod("refused");
    pods.send(Operation::Set, vec![p.clone()])
        .await
        .expect("node running");
    let status = node.local_status_manager().expect("default status manager");
    let mut changes = status.subscribe();
    while status.versioned_status(&p.uid()).is_none() {
        tokio::time::timeout(Duration::from_secs(30), changes.changed())
            .await
            .expect("a status within 30 s")
            .expect("status manager alive");
    }
    let listed = get(addr, "/pods").await;
    assert!(listed.starts_with("HTTP/1.1 200"), "{listed}");
    assert!(
        listed.contains("\"reason\":\"NothingRuns\"")
            && listed.contains("Pod was rejected: this node runs no pods"),
        "{listed}"
    );
    assert!(runtime.running_pods().is_empty(), "never started");
    assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
    assert!(node.stop().await, "every task stops");
}

#[tokio::test]
async fn max_pods_caps_what_the_standalone_node_admits() {
    let root = tempfile::tempdir().expect("tempdir");
    let runtime = FakeRuntime::new();
    let (source, pods) = ChannelSource::new("test");
    let mut node = NodeBuilder::with_runtime(Arc::new(runtime.clone()))
        .node_name("node-a")
        .max_pods(1)
        .root_dir(root.path())
        .source(Box::new(source))
        .build()
        .await
        .expect("builds");
    node.spawn().await;

    let (first, second) = (pod("first"), pod("second"));
    pods.send(Operation::Set, vec![first.clone()])
        .await
        .expect("node running");
    let status = node.local_status_manager().expect("default status manager");
    let mut changes = status.subscribe();
    while runtime.running_pods().is_empty() {
        tokio::time::timeout(Duration::from_secs(30), changes.changed())
            .await
            .expect("the first pod starts within 30 s")
            .expect("status manager alive");
    }
    pods.send(Operation::Set, vec![first.clone(), second.clone()])
        .await
        .expect("node running");
    let refused = loop {
        if let Some(status) = status.versioned_status(&second.uid()) {
            break status;
        }
        tokio::time::timeout(Duration::from_secs(30), changes.changed())
            .await
            .expect("a status for the second pod within 30 s")
            .expect("status manager alive");
    };
    assert_eq!(refused.status.reason.as_deref(), Some("OutOfpods"));
    assert_eq!(runtime.running_pods().len(), 1, "only the first pod runs");
    assert!(node.stop().await, "every task stops");
}
