//! Issue 14 acceptance 2 with every component real: the `kubelet` binary in cluster mode
//! (`system:node:it-node`) on a private containerd, its secure port checking bearer tokens with
//! TokenReviews and requests with SubjectAccessReviews against a real kube-apiserver whose RBAC
//! decides, and client certificates made with `openssl` against `--client-ca-file`. Requests
//! are made with `curl`:
//!
//! - no credentials → 401 (anonymous off); a token the API server rejects → 401;
//! - a valid token without permission → 403 with upstream's text;
//! - `nodes/proxy` (RBAC) → 200; `nodes/pods` alone → 200 on `/pods` (fine-grained), 403 on
//!   `/configz`;
//! - a client certificate of the client CA → its CommonName and Organizations, authorized by
//!   RBAC on the group;
//! - plain HTTP → Go's 400, nothing served;
//! - restarted with `--authorization-mode AlwaysAllow` the token without permission gets 200.
//!
//! Skipped when kube-apiserver is not built, unless `KUBELET_REQUIRE_APISERVER` is set (CI).

use crate::support;

use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use support::{NODE, Node};
use xtask::apiserver::Cluster;

/// `curl -k` of `path` on the node's secure port: (HTTP status, body); status 0 when no
/// HTTP answer came.
fn curl(node: &Node, path: &str, args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "-k", "--max-time", "20", "-w", "\n%{http_code}"])
        .args(args)
        .arg(format!("https://127.0.0.1:{}{path}", node.port))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}")
}

/// A ClusterRole allowing `verbs` on `resources` and its binding to `subject` (`User` or
/// `Group`), created as the admin.
fn grant(cluster: &Cluster, name: &str, resources: &[&str], kind: &str, subject: &str) {
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": resources, "verbs": ["get", "create"]}],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject}],
    });
    for (path, body) in [
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles", role),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            binding,
        ),
    ] {
        let (status, reply) = cluster
            .admin_request("POST", path, Some(&body))
            .expect("request");
        assert_eq!(status, 201, "{path}: {reply}");
    }
}

/// Waits until the secure port answers (any HTTP status).
fn wait_serving(node: &Node) {
    node.wait_for(Duration::from_secs(60), "the secure port", |n| {
        (curl(n, "/healthz", &[]).0 != 0).then_some(())
    });
}

#[test]
fn the_secure_port_authenticates_and_authorizes_through_the_api_server() {
    let Some(cluster) = Cluster::builder()
        .node(NODE)
        .user("alice", &[])
        .user("bob", &[])
        .user("carol", &[])
        .start_or_skip()
        .expect("cluster")
    else {
        return;
    };
    grant(
        &cluster,
        "e2e:kubelet-api-proxy",
        &["nodes/proxy"],
        "User",
        "bob",
    );
    grant(
        &cluster,
        "e2e:kubelet-api-pods",
        &["nodes/pods"],
        "User",
        "carol",
    );
    grant(
        &cluster,
        "e2e:kubelet-api-admins",
        &["nodes/proxy"],
        "Group",
        "kubelet-api-admins",
    );

    let mut node = Node::new("secure-port");
    let pki = node.dir.join("client-pki");
    let _ = std::fs::remove_dir_all(&pki);
    std::fs::create_dir_all(&pki).expect("mkdir");
    xtask::apiserver::write_client_pki(
        &pki,
        "/CN=kubelet-client-ca",
        "/O=kubelet-api-admins/O=ops/CN=dave",
    )
    .expect("client certificate");
    let kubeconfig = cluster.node_kubeconfig(NODE).expect("node kubeconfig");
    let ca = pki.join("ca.crt").display().to_string();
    node.extra_args = vec![
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--anonymous-auth=false".into(),
        "--authentication-token-webhook".into(),
        "--authorization-mode".into(),
        "Webhook".into(),
        "--client-ca-file".into(),
        ca,
    ];
    node.start_kubelet();
    wait_serving(&node);

    let token = |user: &str| bearer(cluster.user_token(user).expect("token"));
    assert_eq!(curl(&node, "/pods", &[]), (401, "Unauthorized".into()));
    assert_eq!(
        curl(&node, "/pods", &["-H", &bearer("not-a-token")]),
        (401, "Unauthorized".into())
    );
    assert_eq!(
        curl(&node, "/pods", &["-H", &token("alice")]),
        (
            403,
            "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
                .to_owned()
        )
    );
    let (code, body) = curl(&node, "/pods", &["-H", &token("bob")]);
    assert_eq!(code, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).expect("a PodList");
    assert_eq!(list["kind"], "PodList");
    let (code, body) = curl(&node, "/configz", &["-H", &token("bob")]);
    assert_eq!(code, 200, "{body}");
    let configz: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(configz["kubeletconfig"]["authorization"]["mode"], "Webhook");
    assert_eq!(configz["kubeletconfig"]["port"], node.port);
    // nodes/pods reaches /pods (fine-grained) and nothing else.
    assert_eq!(curl(&node, "/pods", &["-H", &token("carol")]).0, 200);
    assert_eq!(
        curl(&node, "/configz", &["-H", &token("carol")]),
        (
            403,
            "Forbidden (user=carol, verb=get, resource=nodes, subresource(s)=[configz proxy])\n"
                .into()
        )
    );
    // x509: CN=dave in group kubelet-api-admins.
    let cert = pki.join("client.crt").display().to_string();
    let key = pki.join("client.key").display().to_string();
    let (code, body) = curl(&node, "/pods", &["--cert", &cert, "--key", &key]);
    assert_eq!(code, 200, "{body}");

    // Plain HTTP on the secure port: Go's 400, nothing served.
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", node.port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream
        .write_all(b"GET /pods HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read");
    assert_eq!(
        reply,
        "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
    );

    // AlwaysAllow: any authenticated user.
    node.stop_kubelet();
    node.extra_args.truncate(node.extra_args.len() - 4);
    node.extra_args
        .extend(["--authorization-mode".into(), "AlwaysAllow".into()]);
    node.start_kubelet();
    wait_serving(&node);
    assert_eq!(curl(&node, "/pods", &["-H", &token("alice")]).0, 200);
    assert_eq!(curl(&node, "/pods", &[]), (401, "Unauthorized".into()));
}

/// The API server as the kubelet's client (issue 14 acceptance 1's plumbing): with
/// `--kubelet-client-certificate` signed by the kubelet's `--client-ca-file`,
/// `kubectl get --raw /api/v1/nodes/<node>/proxy/...` reaches the secure port, authenticated by
/// x509 and authorized by a SubjectAccessReview (the certificate is in `system:masters`).
#[test]
fn the_api_server_reaches_the_kubelet_with_its_client_certificate() {
    let Some(cluster) = Cluster::builder()
        .node(NODE)
        .kubelet_client_certificate()
        .start_or_skip()
        .expect("cluster")
    else {
        return;
    };
    let mut node = support::api_reachable_node(&cluster, "secure-port-proxy");
    node.start_kubelet();
    let pods = format!("/api/v1/nodes/{NODE}/proxy/pods");
    let body = node.wait_for(
        Duration::from_secs(90),
        "nodes/proxy/pods through the API server",
        |_| cluster.kubectl(&["get", "--raw", &pods]).ok(),
    );
    let list: serde_json::Value = serde_json::from_str(&body).expect("a PodList");
    assert_eq!(list["kind"], "PodList");
    let configz = cluster
        .kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{NODE}/proxy/configz"),
        ])
        .expect("configz");
    let configz: serde_json::Value = serde_json::from_str(&configz).expect("json");
    assert_eq!(configz["kubeletconfig"]["port"], node.port);
    // Without the certificate the kubelet refuses the same path.
    assert_eq!(curl(&node, "/pods", &[]), (401, "Unauthorized".into()));
}
