//! The secure port (issue 14) on the fake runtime, requests made with `curl`: HTTPS only (plain
//! HTTP gets Go's 400), the self-signed pair verifies for the node's name, `--tls-min-version`,
//! anonymous requests under AlwaysAllow, x509 client certificates of `--client-ca-file`, and
//! the token and SubjectAccessReview webhooks against the fake API server (401 and 403 texts as
//! upstream's).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use kubelet::NodeBuilder;
use kubelet::cluster::ClusterOptions;
use kubelet::server::SecureOptions;
use kubelet::server::authz::Mode;
use kubelet_core::testing::FakeRuntime;
use kubelet_core::testing::apiserver::{FakeApiServer, UserInfo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NODE: &str = "node-a";

async fn start(dir: &Path, opts: SecureOptions, cluster: Option<ClusterOptions>) -> kubelet::Node {
    let mut builder = NodeBuilder::with_runtime(Arc::new(FakeRuntime::new()))
        .node_name(NODE)
        .node_ips(vec!["127.0.0.1".into()])
        .root_dir(dir.join("root"))
        .no_probes()
        .secure_server(opts);
    if let Some(cluster) = cluster {
        builder = builder.cluster(cluster);
    }
    let mut node = builder.build().await.expect("the node builds");
    node.spawn().await;
    node
}

fn options(dir: &Path) -> SecureOptions {
    SecureOptions::new("127.0.0.1:0".parse().expect("addr"), dir.join("pki"))
}

/// `curl` of `path` on the node's secure port: (HTTP status, body). `args` go before the URL.
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

#[tokio::test]
async fn https_only_with_a_self_signed_pair_for_the_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = start(dir.path(), options(dir.path()), None).await;
    let addr = node.secure_addr().expect("secure port");

    // Anonymous under AlwaysAllow (the flags' defaults).
    let (code, body) = curl(addr, "/pods", &[]).await;
    assert_eq!(code, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(list["kind"], "PodList");
    assert_eq!(curl(addr, "/healthz/ping", &[]).await, (200, "ok".into()));
    let (code, body) = curl(addr, "/configz", &[]).await;
    assert_eq!((code, body.as_str()), (200, "{\"kubeletconfig\":{}}"));

    // The pair verifies for the node's name with the CA in kubelet.crt.
    let cert = dir.path().join("pki").join("kubelet.crt");
    let resolve = format!("{NODE}:{}:127.0.0.1", addr.port());
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&cert)
        .args(["--resolve", &resolve])
        .arg(format!("https://{NODE}:{}/healthz/ping", addr.port()))
        .output()
        .await
        .expect("curl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Plain HTTP: Go's 400, nothing served.
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"GET /pods HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.expect("read");
    assert_eq!(
        reply,
        "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
    );
    node.stop().await;
}

#[tokio::test]
async fn tls_min_version_13_refuses_tls_12() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = options(dir.path());
    opts.tls.min_version = kubelet::server::tls::MinVersion::Tls13;
    let node = start(dir.path(), opts, None).await;
    let addr = node.secure_addr().expect("secure port");
    assert_eq!(
        curl(addr, "/healthz/ping", &["--tls-max", "1.2"]).await.0,
        0
    );
    assert_eq!(curl(addr, "/healthz/ping", &["--tlsv1.3"]).await.0, 200);
    node.stop().await;
}

#[tokio::test]
async fn client_certificates_of_the_client_ca_authenticate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = dir.path().join("client");
    std::fs::create_dir_all(&pki).expect("mkdir");
    xtask::apiserver::write_client_pki(&pki, "/CN=kubelet-client-ca", "/O=ops/O=dev/CN=carol")
        .expect("client certificate");
    let mut opts = options(dir.path());
    opts.tls.client_ca_file = Some(pki.join("ca.crt"));
    opts.authn.client_ca_file = Some(pki.join("ca.crt"));
    opts.authn.anonymous = false;
    let node = start(dir.path(), opts, None).await;
    let addr = node.secure_addr().expect("secure port");
    assert_eq!(curl(addr, "/pods", &[]).await, (401, "Unauthorized".into()));
    let cert = pki.join("client.crt").display().to_string();
    let key = pki.join("client.key").display().to_string();
    let (code, body) = curl(addr, "/pods", &["--cert", &cert, "--key", &key]).await;
    assert_eq!(code, 200, "{body}");
    node.stop().await;
}

#[tokio::test]
async fn webhooks_decide_with_upstreams_answers() {
    let fake = FakeApiServer::start().await.expect("fake API server");
    fake.auth().add_token("alice-token", UserInfo::new("alice"));
    fake.auth().add_token("bob-token", UserInfo::new("bob"));
    fake.auth().add_token("carol-token", UserInfo::new("carol"));
    fake.auth().allow("bob", "get", "nodes/proxy");
    fake.auth().allow("carol", "get", "nodes/pods");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = options(dir.path());
    opts.authn.webhook = true;
    opts.authn.anonymous = false;
    opts.authz.mode = Mode::Webhook;
    let config = fake
        .kube_config(None, "kubelet/v0.1.0 (linux/amd64) kubernetes/test")
        .expect("kube config");
    let node = start(dir.path(), opts, Some(ClusterOptions::new(config))).await;
    let addr = node.secure_addr().expect("secure port");
    let bearer = |t: &str| format!("Authorization: Bearer {t}");

    assert_eq!(curl(addr, "/pods", &[]).await, (401, "Unauthorized".into()));
    assert_eq!(
        curl(addr, "/pods", &["-H", &bearer("nobody")]).await,
        (401, "Unauthorized".into())
    );
    assert_eq!(
        curl(addr, "/pods", &["-H", &bearer("alice-token")]).await,
        (
            403,
            "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
                .into()
        )
    );
    assert_eq!(
        curl(addr, "/pods", &["-H", &bearer("bob-token")]).await.0,
        200
    );
    assert_eq!(
        curl(addr, "/pods", &["-H", &bearer("carol-token")]).await.0,
        200
    );
    // nodes/pods is not nodes/proxy.
    let (code, body) = curl(
        addr,
        "/exec/ns/p/c",
        &["-X", "POST", "-H", &bearer("carol-token")],
    )
    .await;
    assert_eq!(
        (code, body.as_str()),
        (
            403,
            "Forbidden (user=carol, verb=create, resource=nodes, subresource(s)=[proxy])\n"
        )
    );
    node.stop().await;
}
