//! Issue 34 item 2, every component real: `kubectl debug` through a real kube-apiserver
//! v1.20.2 (feature gate `EphemeralContainers`) adds an ephemeral container to a running pod;
//! the kubelet starts it in the target container's process namespace, shows it in
//! `status.ephemeralContainerStatuses`, and `kubectl attach` and `kubectl logs -c` reach it
//! through the API server.
//!
//! Skipped when kube-apiserver is not built, unless `KUBELET_REQUIRE_APISERVER` is set (CI).

use crate::support;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::{NODE, get_json, kubectl_create, kubectl_wait};
use xtask::apiserver::Cluster;

/// The pod being debugged: its `app` is a `sleep` the debugger must see in its `ps`.
fn pod_yaml() -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: target
  namespace: default
spec:
  nodeName: {NODE}
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3601"]
"#
    )
}

/// `kubectl --kubeconfig <admin> args…` with `stdin`, waited for.
fn kubectl(cluster: &Cluster, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cluster.admin_kubeconfig())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    if let Some(mut pipe) = child.stdin.take() {
        pipe.write_all(stdin.as_bytes()).expect("stdin");
    }
    child.wait_with_output().expect("kubectl ends")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The API status of ephemeral container `name`, once it has one.
fn ephemeral_status(cluster: &Cluster, name: &str) -> Option<Value> {
    let pod = get_json(cluster, &["get", "pod", "target"]);
    pod["status"]["ephemeralContainerStatuses"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
}

#[test]
fn kubectl_debug_and_attach_through_the_api_server() {
    let Some(cluster) = Cluster::builder()
        .node(NODE)
        .kubelet_client_certificate()
        .apiserver_arg("--feature-gates=EphemeralContainers=true")
        .start_or_skip()
        .expect("cluster")
    else {
        return;
    };
    let mut node = support::api_reachable_node(&cluster, "ephemeral");
    node.start_kubelet();
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", &format!("node/{NODE}")],
        60,
    );
    kubectl_create(&cluster, &node, "target.yaml", &pod_yaml());
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", "pod/target"],
        90,
    );

    // `kubectl debug -i`: the ephemeral container with stdin, attached to once it runs; the
    // shell it runs reads the commands from kubectl's stdin.
    let out = kubectl(
        &cluster,
        &[
            "debug",
            "target",
            "-i",
            "-c",
            "debugger",
            "--image=docker.io/library/busybox:1.36",
            "--image-pull-policy=IfNotPresent",
            "--target=app",
            "--",
            "sh",
        ],
        "echo debug-hello; ps -o args; exit 0\n",
    );
    let log = text(&out.stderr);
    assert!(out.status.success(), "kubectl debug: {log}");
    let printed = text(&out.stdout);
    assert!(printed.contains("debug-hello"), "{printed}\n{log}");
    // The target's process namespace: the debugger sees the app's `sleep`.
    assert!(printed.contains("sleep 3601"), "{printed}\n{log}");

    // Its status: terminated with exit 0 once the shell exits, never restarted.
    let status = node.wait_for(Duration::from_secs(30), "the debugger's exit", |_| {
        ephemeral_status(&cluster, "debugger")
            .filter(|s| s["state"]["terminated"].is_object())
    });
    assert_eq!(status["state"]["terminated"]["exitCode"], 0, "{status}");
    assert_eq!(status["restartCount"], 0, "{status}");
    assert_eq!(status["image"], "docker.io/library/busybox:1.36", "{status}");
    let id = status["containerID"].as_str().unwrap_or_default();
    assert!(id.starts_with("containerd://"), "{status}");

    // `kubectl logs -c debugger`: what the shell printed.
    let logs = cluster
        .kubectl(&["logs", "target", "-c", "debugger"])
        .expect("kubectl logs -c debugger");
    assert!(logs.contains("debug-hello\n"), "{logs}");
    assert!(logs.contains("sleep 3601"), "{logs}");

    // The pod itself is untouched: still Running and Ready with its app.
    let pod = get_json(&cluster, &["get", "pod", "target"]);
    assert_eq!(pod["status"]["phase"], "Running", "{pod}");
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);
}
