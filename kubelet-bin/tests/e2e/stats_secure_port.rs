//! `/stats/summary` on the secure port (issue 14) over a scripted summary provider: the JSON
//! as upstream names it, `?only_cpu_and_memory=true` (exactly `true`) asks for CPU and memory
//! only, POST as GET, a provider failure is upstream's `500 Internal Error: …`, and without a
//! provider the path is not served.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use kubelet::NodeBuilder;
use kubelet::server::SecureOptions;
use kubelet_core::stats::v1alpha1::{CpuStats, NodeStats, PodReference, PodStats, Summary};
use kubelet_core::stats::{MockSummaryProvider, SummaryProvider};
use kubelet_core::testing::FakeRuntime;

async fn start(dir: &Path, stats: Option<Arc<dyn SummaryProvider>>) -> kubelet::Node {
    let mut builder = NodeBuilder::with_runtime(Arc::new(FakeRuntime::new()))
        .node_name("node-a")
        .node_ips(vec!["127.0.0.1".into()])
        .root_dir(dir.join("root"))
        .no_probes()
        .secure_server(SecureOptions::new(
            "127.0.0.1:0".parse().expect("addr"),
            dir.join("pki"),
        ));
    if let Some(stats) = stats {
        builder = builder.stats_provider(stats);
    }
    let mut node = builder.build().await.expect("the node builds");
    node.spawn().await;
    node
}

async fn curl(addr: SocketAddr, path: &str, args: &[&str]) -> (u16, String) {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-k", "-w", "\n%{http_code}"])
        .args(args)
        .arg(format!("https://{addr}{path}"))
        .output()
        .await
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

fn summary(cpu: u64) -> Summary {
    Summary {
        node: NodeStats {
            node_name: "node-a".into(),
            cpu: Some(CpuStats {
                usage_core_nano_seconds: Some(cpu),
                ..Default::default()
            }),
            ..Default::default()
        },
        pods: vec![PodStats {
            pod_ref: PodReference {
                name: "web".into(),
                namespace: "default".into(),
                uid: "u1".into(),
            },
            ..Default::default()
        }],
    }
}

#[tokio::test]
async fn summary_and_cpu_and_memory_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut stats = MockSummaryProvider::new();
    stats.expect_get().times(2).returning(|| Ok(summary(1)));
    stats
        .expect_get_cpu_and_memory_stats()
        .times(1)
        .returning(|| Ok(summary(2)));
    let node = start(dir.path(), Some(Arc::new(stats))).await;
    let addr = node.secure_addr().expect("secure port");

    let (code, body) = curl(addr, "/stats/summary", &[]).await;
    assert_eq!(code, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(json["node"]["nodeName"], "node-a");
    assert_eq!(json["node"]["cpu"]["usageCoreNanoSeconds"], 1);
    assert_eq!(json["pods"][0]["podRef"]["name"], "web");

    let (code, body) = curl(addr, "/stats/summary?only_cpu_and_memory=true", &[]).await;
    assert_eq!(code, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(json["node"]["cpu"]["usageCoreNanoSeconds"], 2);

    // Anything but `true` is the full summary, and POST works as GET.
    let (code, _) = curl(
        addr,
        "/stats/summary?only_cpu_and_memory=1",
        &["-X", "POST"],
    )
    .await;
    assert_eq!(code, 200);
    node.stop().await;
}

#[tokio::test]
async fn a_failure_is_500_and_no_provider_is_404() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut stats = MockSummaryProvider::new();
    stats.expect_get().returning(|| {
        Err(kubelet_core::stats::Error::Runtime(
            kubelet_core::runtime::Error::Unavailable("connection refused".into()),
        ))
    });
    let node = start(dir.path(), Some(Arc::new(stats))).await;
    let addr = node.secure_addr().expect("secure port");
    let (code, body) = curl(addr, "/stats/summary", &[]).await;
    assert_eq!(code, 500);
    assert!(
        body.starts_with("Internal Error: container runtime:")
            && body.contains("connection refused"),
        "{body}"
    );
    node.stop().await;

    let dir = tempfile::tempdir().expect("tempdir");
    let node = start(dir.path(), None).await;
    let addr = node.secure_addr().expect("secure port");
    assert_eq!(curl(addr, "/stats/summary", &[]).await.0, 404);
    node.stop().await;
}
