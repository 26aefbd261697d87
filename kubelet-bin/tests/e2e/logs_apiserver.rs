//! Issue 14 acceptance 1 for logs, every component real: `kubectl logs` (with `--tail`,
//! `--since`, `-f` and `--previous`) through a real kube-apiserver, which dials the `kubelet`
//! binary's secure port with its kubelet client certificate (signed by the CA the kubelet got
//! as `--client-ca-file`) at the Node's `InternalIP` and `daemonEndpoints.kubeletEndpoint`
//! port; the kubelet reads the CRI log files a private containerd writes.
//!
//! Skipped when kube-apiserver is not built, unless `KUBELET_REQUIRE_APISERVER` is set (CI).

use crate::support;

use std::time::Duration;

use support::{NODE, Node, get_json, kubectl_create, kubectl_wait};
use xtask::apiserver::Cluster;

/// A pod whose container prints `run <n> line <i>` for i in 1..=5 (n counts its runs in an
/// emptyDir), then `run <n> done` after 4 s, then exits 1 (restarted: Always).
const POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: talker
  namespace: default
spec:
  nodeName: it-node
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "n=$(( $(cat /data/n 2>/dev/null || echo 0) + 1 )); echo $n > /data/n; for i in 1 2 3 4 5; do echo run $n line $i; done; sleep 4; echo run $n done; exit 1"]
    volumeMounts:
    - {name: data, mountPath: /data}
  volumes:
  - {name: data, emptyDir: {}}
"#;

fn restart_count(cluster: &Cluster) -> i64 {
    get_json(cluster, &["get", "pod", "talker"])["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .unwrap_or(0)
}

#[test]
fn kubectl_logs_through_the_api_server() {
    let Some(cluster) = Cluster::builder()
        .node(NODE)
        .kubelet_client_certificate()
        .start_or_skip()
        .expect("cluster")
    else {
        return;
    };
    let mut node = Node::new("logs-kubectl");
    node.node_ip = "127.0.0.1".into();
    let kubeconfig = cluster.node_kubeconfig(NODE).expect("node kubeconfig");
    let client_ca = cluster.kubelet_client_ca().expect("kubelet client CA");
    node.extra_args = vec![
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--client-ca-file".into(),
        client_ca.display().to_string(),
        "--experimental-crash-loop-initial-backoff".into(),
        "1s".into(),
    ];
    node.start_kubelet();
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", &format!("node/{NODE}")],
        60,
    );
    kubectl_create(&cluster, &node, "talker.yaml", POD);
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", "pod/talker"],
        60,
    );

    // `-f` from the first run's start: the five lines, then `done` when it comes, then the
    // stream ends as the container exits.
    let followed = cluster
        .kubectl(&["logs", "-f", "talker"])
        .expect("kubectl logs -f");
    assert!(
        followed.starts_with("run 1 line 1\n") && followed.ends_with("run 1 done\n"),
        "{followed}"
    );
    // Once it runs again: `--previous` is run 1, the current log is run 2 (or later).
    node.wait_for(Duration::from_secs(60), "a restart", |_| {
        (restart_count(&cluster) >= 1).then_some(())
    });
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", "pod/talker"],
        60,
    );
    let previous = cluster
        .kubectl(&["logs", "--previous", "talker"])
        .expect("kubectl logs --previous");
    let run_of = |line: &str| -> i64 {
        line.split(' ')
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let k = run_of(&previous);
    assert!(k >= 1, "{previous}");
    let expected: String = (1..=5)
        .map(|i| format!("run {k} line {i}\n"))
        .chain([format!("run {k} done\n")])
        .collect();
    assert_eq!(previous, expected);
    let current = cluster
        .kubectl(&["logs", "talker", "--tail", "2"])
        .expect("kubectl logs --tail");
    let lines: Vec<&str> = current.lines().collect();
    assert_eq!(lines.len(), 2, "{current}");
    assert!(lines.iter().all(|l| run_of(l) > k), "{current}");
    let since = cluster
        .kubectl(&["logs", "talker", "--since", "1h"])
        .expect("kubectl logs --since");
    assert!(since.contains(" line 1\n"), "{since}");
    let recent = cluster
        .kubectl(&["logs", "talker", "--since-time", "2999-01-01T00:00:00Z"])
        .expect("kubectl logs --since-time");
    assert_eq!(recent, "");
    let (code, _) = cluster
        .admin_request(
            "GET",
            "/api/v1/namespaces/default/pods/talker/log?container=nope",
            None,
        )
        .expect("request");
    assert_eq!(code, 400);
}
