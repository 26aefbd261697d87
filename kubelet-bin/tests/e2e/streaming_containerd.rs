//! Issue 14 acceptance 1 (exec, attach, port-forward) and 5 (a client that disconnects
//! mid-session leaves no exec process) with every component real: the machine's `kubectl`
//! (v1.32) through a real kube-apiserver (v1.20, `--kubelet-client-certificate` signed by the
//! kubelet's `--client-ca-file`) to the `kubelet` binary's secure port, which proxies the
//! upgrade to containerd's streaming server.
//!
//! kubectl 1.32 tries websockets first and falls back to SPDY/3.1 when the upgrade fails:
//! exec and attach ask for `v5.channel.k8s.io`, which containerd 1.6 does not speak; the
//! kubelet serves it in v4 to containerd, over a websocket for sessions without stdin (the
//! non-interactive exec, attach) and over SPDY for those with stdin (`exec -i`, `attach -i`:
//! v5's CLOSE of stdin becomes a FIN on the stdin stream), so kubectl stays on v5 (its `-v=4`
//! log names the subprotocol, and would name a fallback); port-forward asks for a websocket
//! tunnel (`SPDY/3.1+portforward.k8s.io`) without `?port=`, which the kubelet refuses with
//! upstream's 400 `query parameter "port" is required` (upstream kubelets before
//! `ExtendWebSocketsToKubelet` do the same).
//!
//! Skipped when kube-apiserver is not built, unless `KUBELET_REQUIRE_APISERVER` is set (CI).

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use support::{NODE, kubectl_create, kubectl_wait};
use xtask::apiserver::Cluster;

/// The pod: `web` serves `/www` over HTTP on 8080 (busybox httpd), `ticker` prints a line a
/// second (for attach), `shout` upper-cases its stdin (for attach with stdin; its stdin
/// closes with the first attach's, and it ends then).
fn pod_yaml() -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: stream
  namespace: default
spec:
  nodeName: {NODE}
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "mkdir -p /www && echo hello-from-the-pod > /www/index.html && exec httpd -f -p 8080 -h /www"]
  - name: ticker
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 1; done"]
  - name: shout
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    stdin: true
    stdinOnce: true
    command: ["tr", "a-z", "A-Z"]
"#
    )
}

/// `kubectl --kubeconfig <admin> args…` with `stdin`, waited for.
fn kubectl(cluster: &Cluster, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cluster.admin_kubeconfig())
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).expect("stdin");
    }
    child.wait_with_output().expect("kubectl ends")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The processes of container `web` (`ps` through `kubectl exec`).
fn ps(cluster: &Cluster) -> String {
    let out = kubectl(cluster, &["exec", "stream", "-c", "web", "--", "ps"], None);
    assert!(out.status.success(), "ps: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn kubectl_exec_attach_and_port_forward_through_the_api_server() {
    let Some(cluster) = Cluster::builder()
        .node(NODE)
        .kubelet_client_certificate()
        .start_or_skip()
        .expect("cluster")
    else {
        return;
    };
    let mut node = support::api_reachable_node(&cluster, "streaming");
    node.start_kubelet();
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", &format!("node/{NODE}")],
        60,
    );
    kubectl_create(&cluster, &node, "stream.yaml", &pod_yaml());
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", "pod/stream"],
        90,
    );

    // Non-interactive exec: stdout, stderr and the exit code come back.
    let out = kubectl(
        &cluster,
        &[
            "exec",
            "stream",
            "-c",
            "web",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "out\n");
    assert!(
        text(&out.stderr).starts_with("err\n"),
        "{}",
        text(&out.stderr)
    );

    // Interactive: stdin reaches the command, and its end ends the command.
    let out = kubectl(
        &cluster,
        &[
            "exec",
            "-i",
            "stream",
            "-c",
            "web",
            "--",
            "sh",
            "-c",
            "while read l; do echo got:$l; done",
        ],
        Some("one\ntwo\n"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "got:one\ngot:two\n");

    // With stdin, on v5 (no SPDY fallback): the end of stdin reaches the command, whose
    // output after it comes back, and so does its exit code.
    let out = kubectl(
        &cluster,
        &["-v=4", "exec", "-i", "stream", "-c", "web", "--", "cat"],
        Some("hello\n"),
    );
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert_eq!(text(&out.stdout), "hello\n");
    assert!(
        log.contains("The subprotocol is v5.channel.k8s.io"),
        "{log}"
    );
    assert!(!log.contains("fallback"), "{log}");
    let out = kubectl(
        &cluster,
        &[
            "-v=4",
            "exec",
            "-i",
            "stream",
            "-c",
            "web",
            "--",
            "sh",
            "-c",
            "read x; sort; exit 3",
        ],
        Some("first\nb\na\n"),
    );
    let log = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{log}");
    assert_eq!(text(&out.stdout), "a\nb\n");
    assert!(
        log.contains("The subprotocol is v5.channel.k8s.io"),
        "{log}"
    );

    // Attach: the ticker's output as it prints.
    let mut attach = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cluster.admin_kubeconfig())
        .args(["attach", "stream", "-c", "ticker"])
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

    // Port-forward carrying an HTTP request.
    let local = support::free_port();
    let mut forward = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cluster.admin_kubeconfig())
        .args(["port-forward", "pod/stream", &format!("{local}:8080")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl port-forward");
    // Kept open until kubectl ends: it dies of SIGPIPE when its stdout is closed.
    let mut forward_out = BufReader::new(forward.stdout.take().expect("stdout"));
    let mut ready = String::new();
    forward_out
        .read_line(&mut ready)
        .expect("port-forward prints");
    assert!(ready.starts_with("Forwarding from"), "{ready:?}");
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", local)).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    conn.write_all(b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n")
        .expect("request");
    let mut response = String::new();
    let read = conn.read_to_string(&mut response);
    let _ = forward.kill();
    let forward = forward
        .wait_with_output()
        .expect("kubectl port-forward ends");
    drop(forward_out);
    assert!(read.is_ok(), "{read:?}: kubectl: {}", text(&forward.stderr));
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.ends_with("hello-from-the-pod\n"), "{response}");

    // Attach with stdin, on v5 too: the container's stdin closes with the attach's
    // (stdinOnce), and what it printed comes back before it ends (and restarts).
    let out = kubectl(
        &cluster,
        &["-v=4", "attach", "-i", "stream", "-c", "shout"],
        Some("quiet\n"),
    );
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert_eq!(text(&out.stdout), "QUIET\n");
    assert!(
        log.contains("The subprotocol is v5.channel.k8s.io"),
        "{log}"
    );

    // Acceptance 5: a client killed mid-session ends the exec, even one that ignores its
    // stdin (containerd 1.6 keeps it running; the kubelet kills it when the session ends).
    let mut session = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cluster.admin_kubeconfig())
        .args(["exec", "-i", "stream", "-c", "web", "--", "sleep", "600"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl exec");
    let sleep = |ps: &str| ps.lines().any(|l| l.ends_with(" sleep 600"));
    node.wait_for(Duration::from_secs(30), "the exec's process", |_| {
        sleep(&ps(&cluster)).then_some(())
    });
    session.kill().expect("kill kubectl");
    let _ = session.wait();
    node.wait_for(Duration::from_secs(30), "the exec's process to end", |_| {
        (!sleep(&ps(&cluster))).then_some(())
    });
}
