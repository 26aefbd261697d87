//! Secure by default: the secure port of a kubelet started without a config file or auth
//! flags serves nothing to anonymous requests (`curl -k https://127.0.0.1:10250/run/...` →
//! 401), while an explicit `--anonymous-auth=true` keeps upstream's legacy behaviour.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use kubelet::NodeBuilder;
use kubelet_core::testing::FakeRuntime;

use crate::settings::{Flags, Settings};

/// The settings of `kubelet --root-dir <dir> <args>`, the node started on them with the fake
/// runtime, its secure port on a free loopback port.
async fn start(dir: &std::path::Path, args: &[&str]) -> kubelet::Node {
    let root = dir.to_str().expect("utf8");
    let argv = [
        "kubelet",
        "--hostname-override",
        "node-a",
        "--root-dir",
        root,
    ];
    let flags = Flags::try_parse_from(argv.iter().chain(args)).expect("flags");
    let settings = Settings::from_flags(flags).expect("settings");
    let mut secure = crate::app::secure_options(&settings);
    secure.addr = "127.0.0.1:0".parse().expect("addr");
    let mut node = NodeBuilder::with_runtime(Arc::new(FakeRuntime::new()))
        .node_name("node-a")
        .root_dir(dir.join("root"))
        .no_probes()
        .secure_server(secure)
        .build()
        .await
        .expect("the node builds");
    node.spawn().await;
    node
}

/// `curl -sk -X <method> https://<addr><path>`: the HTTP status.
async fn curl(addr: SocketAddr, method: &str, path: &str) -> u16 {
    let out = tokio::process::Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "-X", method])
        .arg(format!("https://{addr}{path}"))
        .output()
        .await
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

const PATHS: &[(&str, &str)] = &[
    ("POST", "/run/default/web/app?cmd=id"),
    ("POST", "/exec/default/web/app?command=id&output=1"),
    ("GET", "/attach/default/web/app?output=1"),
    ("GET", "/containerLogs/default/web/app"),
    ("GET", "/logs/"),
    ("GET", "/pods"),
    ("GET", "/runningpods/"),
    ("GET", "/stats/summary"),
    ("GET", "/metrics"),
    ("GET", "/configz"),
    ("GET", "/healthz/ping"),
];

#[tokio::test]
async fn without_config_or_auth_flags_anonymous_requests_get_401() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = start(dir.path(), &[]).await;
    let addr = node.secure_addr().expect("secure port");
    for (method, path) in PATHS {
        assert_eq!(curl(addr, method, path).await, 401, "{method} {path}");
    }
    node.stop().await;
}

#[tokio::test]
async fn an_explicit_anonymous_auth_restores_upstreams_legacy_flag_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = start(dir.path(), &["--anonymous-auth=true"]).await;
    let addr = node.secure_addr().expect("secure port");
    assert_eq!(curl(addr, "GET", "/pods").await, 200);
    assert_eq!(curl(addr, "GET", "/healthz/ping").await, 200);
    node.stop().await;
}
