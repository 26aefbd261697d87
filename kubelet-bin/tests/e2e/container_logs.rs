//! `/containerLogs/{ns}/{pod}/{container}` on the secure port over the fake runtime (issue 14):
//! the log the runtime reports for the pod's container is served with the query options;
//! bad queries, unknown pods and containers, and traversal attempts get upstream's 4xx and
//! read nothing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kubelet::NodeBuilder;
use kubelet::server::SecureOptions;
use kubelet_core::runtime::{ContainerState, Runtime};
use kubelet_core::testing::FakeRuntime;

const NODE: &str = "node-a";
const POD: &str = "web-node-a";

/// `curl -k` of `path` on the secure port (anonymous, AlwaysAllow): (HTTP status, body).
async fn curl(addr: SocketAddr, path: &str) -> (u16, String) {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-k", "--path-as-is", "-w", "\n%{http_code}"])
        .arg(format!("https://{addr}{path}"))
        .output()
        .await
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// Polls `check` every 50 ms for at most 20 s.
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..400 {
        if let Some(v) = check().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

fn cri(sec: u32, msg: &str) -> String {
    format!("2024-01-01T00:00:{sec:02}.000000001Z stdout F {msg}\n")
}

/// A node running static pod `web` (container `app`) on the fake runtime, and the app's log
/// file, written with lines `line 0`..`line 4`.
async fn start(dir: &Path) -> (kubelet::Node, SocketAddr, PathBuf) {
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).expect("mkdir");
    std::fs::write(
        manifests.join("web.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: busybox\n",
    )
    .expect("manifest");
    let runtime = Arc::new(FakeRuntime::new());
    let mut node = NodeBuilder::with_runtime(runtime.clone())
        .node_name(NODE)
        .node_ips(vec!["127.0.0.1".into()])
        .root_dir(dir.join("root"))
        .pod_manifest_path(&manifests)
        .no_probes()
        .secure_server(SecureOptions::new(
            "127.0.0.1:0".parse().expect("addr"),
            dir.join("pki"),
        ))
        .build()
        .await
        .expect("the node builds");
    node.spawn().await;
    let addr = node.secure_addr().expect("secure port");
    let id = eventually("app running", async || {
        let pods = runtime.get_pods(false).await.ok()?;
        pods.iter()
            .flat_map(|p| &p.containers)
            .find(|c| c.name == "app" && c.state == ContainerState::Running)
            .map(|c| c.id.clone())
    })
    .await;
    let log = runtime.container_log(&id).await.expect("log path").path;
    std::fs::create_dir_all(log.parent().expect("dir")).expect("mkdir");
    std::fs::write(
        &log,
        (0..5)
            .map(|i| cri(i, &format!("line {i}")))
            .collect::<String>(),
    )
    .expect("log");
    // The status carries the container ID once the pod worker synced it.
    eventually("the container's status", async || {
        let (code, _) = curl(addr, &format!("/containerLogs/default/{POD}/app")).await;
        (code == 200).then_some(())
    })
    .await;
    (node, addr, log)
}

#[tokio::test]
async fn serves_the_container_log_with_the_query_options() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (node, addr, _) = start(dir.path()).await;
    let logs = |q: &str| format!("/containerLogs/default/{POD}/app{q}");
    let lines = |from: u32, to: u32| {
        (from..to)
            .map(|i| format!("line {i}\n"))
            .collect::<String>()
    };
    assert_eq!(curl(addr, &logs("")).await, (200, lines(0, 5)));
    assert_eq!(curl(addr, &logs("?tailLines=2")).await, (200, lines(3, 5)));
    assert_eq!(curl(addr, &logs("?tail=2")).await, (200, lines(3, 5)));
    assert_eq!(curl(addr, &logs("?tail=all")).await, (200, lines(0, 5)));
    assert_eq!(
        curl(addr, &logs("?limitBytes=9")).await,
        (200, "line 0\nli".into())
    );
    assert_eq!(
        curl(addr, &logs("?sinceTime=2024-01-01T00:00:04Z")).await,
        (200, lines(4, 5))
    );
    assert_eq!(
        curl(addr, &logs("?timestamps=true&tailLines=1")).await,
        (200, "2024-01-01T00:00:04.000000001Z line 4\n".into())
    );
    // Upstream's errors.
    let decode = (400, r#"{"message": "Unable to decode query."}"#.to_owned());
    let invalid = (422, r#"{"message": "Invalid request."}"#.to_owned());
    assert_eq!(curl(addr, &logs("?follow=maybe")).await, decode);
    assert_eq!(curl(addr, &logs("?tailLines=x")).await, decode);
    assert_eq!(curl(addr, &logs("?tailLines=-1")).await, invalid);
    assert_eq!(curl(addr, &logs("?limitBytes=0")).await, invalid);
    assert_eq!(
        curl(
            addr,
            &logs("?sinceSeconds=5&sinceTime=2024-01-01T00:00:04Z")
        )
        .await,
        invalid
    );
    assert_eq!(
        curl(addr, &logs("?previous=true")).await,
        (
            400,
            format!("previous terminated container \"app\" in pod \"{POD}\" not found")
        )
    );
    assert_eq!(
        curl(addr, "/containerLogs/default/nope/app").await,
        (404, "pod \"nope\" does not exist".into())
    );
    assert_eq!(
        curl(addr, &format!("/containerLogs/default/{POD}/other")).await,
        (
            404,
            format!("container \"other\" not found in pod \"{POD}\"")
        )
    );
    node.stop().await;
}

#[tokio::test]
async fn traversal_in_names_reads_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (node, addr, log) = start(dir.path()).await;
    // A file beside the pod's log directory that a joined path would reach.
    let secret = log
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("logs root")
        .join("secret");
    std::fs::write(&secret, cri(0, "SECRET")).expect("secret");
    for path in [
        format!("/containerLogs/default/{POD}/..%2F..%2Fsecret"),
        format!("/containerLogs/default/{POD}/%2e%2e"),
        format!("/containerLogs/default/{POD}/../../secret"),
        "/containerLogs/..%2F..%2F/secret/app".to_owned(),
        format!("/containerLogs/default/{POD}/app/../../../secret"),
        format!("/containerLogs/default/{POD}%2F..%2F..%2Fsecret/app"),
    ] {
        let (code, body) = curl(addr, &path).await;
        assert!((400..500).contains(&code), "{path}: {code} {body}");
        assert!(!body.contains("SECRET"), "{path}: {body}");
    }
    node.stop().await;
}
