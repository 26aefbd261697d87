//! Issue 34 item 2, every component real: `kubectl debug` through a real kube-apiserver
//! v1.20.2 (feature gate `EphemeralContainers`) adds an ephemeral container to a running pod;
//! the kubelet starts it in the target container's process namespace, shows it in
//! `status.ephemeralContainerStatuses`, and `kubectl attach` and `kubectl logs -c` reach it
//! through the API server.
//!
//! Skipped when kube-apiserver is not built, unless `KUBELET_REQUIRE_APISERVER` is set (CI).

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
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

/// `<kubectl> --kubeconfig <admin> args…` with `stdin`, waited for.
fn kubectl(kubectl: &Path, cluster: &Cluster, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(kubectl)
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

    // `kubectl debug` (not attached): a debugger in the app's process namespace that
    // prints what it sees, then ticks.
    let kubectl_1_20 = xtask::apiserver::kubectl_v1_20().expect("kubectl 1.20");
    let debug = |name: &str, extra: &[&str], command: &[&str]| {
        let mut args = vec![
            "debug",
            "target",
            "-c",
            name,
            "--image=docker.io/library/busybox:1.36",
            "--image-pull-policy=IfNotPresent",
            "--target=app",
        ];
        args.extend(extra);
        args.push("--");
        args.extend(command);
        let out = kubectl(&kubectl_1_20, &cluster, &args, "");
        assert!(
            out.status.success(),
            "kubectl debug {name}: {}",
            text(&out.stderr)
        );
    };
    debug(
        "debugger",
        &[],
        &[
            "sh",
            "-c",
            "echo debug-hello; ps -o args; i=0; while [ $i -lt 600 ]; do echo tick $i; i=$((i+1)); sleep 1; done",
        ],
    );
    let status = node.wait_for(Duration::from_secs(60), "the debugger running", |_| {
        ephemeral_status(&cluster, "debugger").filter(|s| s["state"]["running"].is_object())
    });
    assert_eq!(status["restartCount"], 0, "{status}");
    assert_eq!(
        status["image"], "docker.io/library/busybox:1.36",
        "{status}"
    );
    let id = status["containerID"].as_str().unwrap_or_default();
    assert!(id.starts_with("containerd://"), "{status}");

    // `kubectl logs -c debugger`: what it printed; the app's `sleep` is in its `ps`: the
    // target's process namespace.
    let logs = node.wait_for(Duration::from_secs(30), "the debugger's first tick", |_| {
        cluster
            .kubectl(&["logs", "target", "-c", "debugger"])
            .ok()
            .filter(|l| l.contains("tick 0\n"))
    });
    assert!(logs.starts_with("debug-hello\n"), "{logs}");
    assert!(logs.contains("sleep 3601\n"), "{logs}");

    // `kubectl attach -c debugger`: its ticks as it prints them.
    let mut attach = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cluster.admin_kubeconfig())
        .args(["attach", "target", "-c", "debugger"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl attach");
    let mut lines = BufReader::new(attach.stdout.take().expect("stdout")).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    let second = lines.next().and_then(Result::ok).unwrap_or_default();
    let _ = attach.kill();
    let _ = attach.wait();
    let tick = |l: &str| l.strip_prefix("tick ").and_then(|n| n.parse::<u64>().ok());
    assert!(
        matches!((tick(&first), tick(&second)), (Some(a), Some(b)) if b == a + 1),
        "attach printed {first:?}, {second:?}"
    );

    // An ephemeral container with stdin (`-i --attach=false`: `stdin` without `stdinOnce`),
    // attached to with stdin: it answers each line; on `bye` it exits 3, and stays
    // terminated (never restarted, though the pod's policy is Always).
    debug(
        "shout",
        &["-i", "--attach=false"],
        &[
            "sh",
            "-c",
            "while read l; do echo \"got $l\"; [ \"$l\" = bye ] && exit 3; done",
        ],
    );
    node.wait_for(Duration::from_secs(60), "shout running", |_| {
        ephemeral_status(&cluster, "shout").filter(|s| s["state"]["running"].is_object())
    });
    // containerd detaches the output when the attach's stdin ends (no `stdinOnce`): keep
    // it open until the answers came.
    let mut attach = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cluster.admin_kubeconfig())
        .args(["attach", "-i", "target", "-c", "shout"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl attach -i");
    let mut stdin = attach.stdin.take().expect("stdin");
    let mut lines = BufReader::new(attach.stdout.take().expect("stdout")).lines();
    stdin.write_all(b"quiet\n").expect("write");
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    stdin.write_all(b"bye\n").expect("write");
    let second = lines.next().and_then(Result::ok).unwrap_or_default();
    drop(stdin);
    let _ = attach.kill();
    let _ = attach.wait();
    assert_eq!((first.as_str(), second.as_str()), ("got quiet", "got bye"));
    let status = node.wait_for(Duration::from_secs(30), "shout's exit", |_| {
        ephemeral_status(&cluster, "shout").filter(|s| s["state"]["terminated"].is_object())
    });
    assert_eq!(status["state"]["terminated"]["exitCode"], 3, "{status}");
    assert_eq!(status["restartCount"], 0, "{status}");
    // The exit's own sync has run (the status shows it): three more ticks of the debugger
    // later, containerd still holds one instance of each container (sandbox, app, debugger,
    // shout): nothing was started again.
    let ticks = |cluster: &Cluster| {
        cluster
            .kubectl(&["logs", "target", "-c", "debugger"])
            .map(|l| l.matches("tick ").count())
            .unwrap_or(0)
    };
    let now = ticks(&cluster);
    node.wait_for(Duration::from_secs(30), "three more ticks", |_| {
        (ticks(&cluster) >= now + 3).then_some(())
    });
    let uid = get_json(&cluster, &["get", "pod", "target"])["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(node.runtime_containers(&uid).len(), 4);

    // The pod itself is untouched: still Running and Ready with its app.
    let pod = get_json(&cluster, &["get", "pod", "target"]);
    assert_eq!(pod["status"]["phase"], "Running", "{pod}");
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);
    let shout = ephemeral_status(&cluster, "shout").expect("shout's status");
    assert_eq!(shout["restartCount"], 0, "never restarted: {shout}");
    assert!(shout["state"]["terminated"].is_object(), "{shout}");
}
