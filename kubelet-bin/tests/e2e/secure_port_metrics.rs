//! `/metrics` and `/metrics/probes` on the secure port of a node over the fake runtime (issue
//! 14): the text parses as Prometheus text and carries upstream's names, the node's values
//! (node name, relists, running pods) and Go's process metrics.

use std::collections::HashSet;
use std::sync::Arc;

use kubelet::NodeBuilder;
use kubelet::server::SecureOptions;
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::testing::FakeRuntime;

const NODE: &str = "node-m";

/// `curl -k` of `path`: (HTTP status, content type, body).
async fn curl(addr: std::net::SocketAddr, path: &str) -> (u16, String, String) {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-k", "-w", "\n%{http_code} %{content_type}"])
        .arg(format!("https://{addr}{path}"))
        .output()
        .await
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, trailer) = text.rsplit_once('\n').unwrap_or(("", "0 "));
    let (code, content_type) = trailer.split_once(' ').unwrap_or((trailer, ""));
    (
        code.trim().parse().unwrap_or(0),
        content_type.to_owned(),
        body.to_owned(),
    )
}

fn sample_names(text: &str) -> HashSet<String> {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("Prometheus text");
    scrape.samples.into_iter().map(|s| s.metric).collect()
}

#[tokio::test]
async fn metrics_carry_upstream_names_and_the_nodes_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let metrics = KubeletMetrics::default();
    let mut node = NodeBuilder::with_runtime(Arc::new(FakeRuntime::new()))
        .node_name(NODE)
        .node_ips(vec!["127.0.0.1".into()])
        .root_dir(dir.path().join("root"))
        .metrics(metrics.clone())
        .secure_server(SecureOptions::new(
            "127.0.0.1:0".parse().expect("addr"),
            dir.path().join("pki"),
        ))
        .build()
        .await
        .expect("the node builds");
    node.spawn().await;
    let addr = node.secure_addr().expect("secure port");
    // The PLEG relists at start: wait for its first relist to be recorded (no sleeps: poll
    // the shared metrics, which the served text is made of).
    tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while metrics.pleg_relist_duration.count() == 0 {
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a relist within 30 s");

    let (code, content_type, text) = curl(addr, "/metrics").await;
    assert_eq!(code, 200, "{text}");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    let names = sample_names(&text);
    for name in [
        "kubelet_node_name",
        // The parser names a histogram by its family.
        "kubelet_pleg_relist_duration_seconds",
        "kubelet_running_pods",
        "kubelet_running_containers",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_virtual_memory_bytes",
        "process_start_time_seconds",
    ] {
        assert!(names.contains(name), "{name} missing from\n{text}");
    }
    assert!(
        text.contains(&format!("kubelet_node_name{{node=\"{NODE}\"}} 1")),
        "{text}"
    );
    assert!(text.contains("kubelet_running_pods 0"), "{text}");

    let (code, _, probes) = curl(addr, "/metrics/probes").await;
    assert_eq!(code, 200, "{probes}");
    assert!(!probes.contains("kubelet_"), "{probes}");
    node.stop().await;
}
