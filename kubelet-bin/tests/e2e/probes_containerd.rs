//! Probe acceptance against a real containerd: exec liveness restarts, httpGet and tcpSocket
//! readiness, startup gating. Each test runs its own containerd and kubelet; probes use a 1 s
//! period so each test takes well under a minute.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Node, container_status};

const IMAGE: &str = "docker.io/library/busybox:1.36";

fn manifest(name: &str, containers: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n{containers}"
    )
}

fn cs(node: &Node, pod: &str, container: &str) -> Option<Value> {
    container_status(&node.pod(pod)?, container).cloned()
}

fn running(c: &Value) -> bool {
    c["state"]["running"].is_object()
}

fn restarts(c: &Value) -> i64 {
    c["restartCount"].as_i64().unwrap_or(0)
}

fn condition(pod: &Value, kind: &str) -> String {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_owned()
}

/// Runs `cmd` in the container (`ctr tasks exec`), by its `containerID` from `/pods`.
fn exec(node: &Node, c: &Value, cmd: &[&str]) {
    let id = c["containerID"]
        .as_str()
        .and_then(|s| s.split_once("://"))
        .map(|(_, id)| id.to_owned())
        .expect("containerID");
    let exec_id = format!("t{}", rand_suffix());
    let mut args = vec!["tasks", "exec", "--exec-id", &exec_id, &id];
    args.extend_from_slice(cmd);
    node.testbed.ctr(&args).expect("ctr tasks exec");
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

#[test]
fn failing_exec_liveness_restarts_the_container() {
    let node = Node::start("probe-live");
    node.write_manifest(
        "live.yaml",
        &manifest(
            "live",
            &format!(
                "  - name: app\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, 'touch /tmp/healthy; exec sleep 3600']\n    livenessProbe:\n      exec:\n        command: [cat, /tmp/healthy]\n      periodSeconds: 1\n      failureThreshold: 2\n      terminationGracePeriodSeconds: 1\n"
            ),
        ),
    );
    node.wait_for(Duration::from_secs(15), "app running", |n| {
        cs(n, "live", "app").filter(running)
    });
    // Healthy for a while: no restart.
    std::thread::sleep(Duration::from_secs(3));
    let c = cs(&node, "live", "app").expect("status");
    assert_eq!(restarts(&c), 0, "{c}");
    exec(&node, &c, &["rm", "/tmp/healthy"]);
    let removed = Instant::now();
    node.wait_for(Duration::from_secs(10), "restartCount 1", |n| {
        cs(n, "live", "app").filter(|c| restarts(c) == 1 && running(c))
    });
    let took = removed.elapsed();
    eprintln!("liveness: restarted {took:?} after the file was removed");
    // period × failureThreshold (2 s) ± one period, plus the kill (grace 1 s, sleep exits on
    // SIGTERM at once) and the next relist (1 s).
    assert!(
        took >= Duration::from_secs(1) && took <= Duration::from_secs(5),
        "restart took {took:?}"
    );
    assert!(
        node.log()
            .contains("failed liveness probe, will be restarted"),
        "{}",
        node.log()
    );
    // The new instance is healthy again (its command recreated the file).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(restarts(&cs(&node, "live", "app").expect("status")), 1);
}

#[test]
fn http_readiness_follows_the_served_file_without_restarts() {
    let node = Node::start("probe-http");
    node.write_manifest(
        "web.yaml",
        &manifest(
            "web",
            &format!(
                "  - name: httpd\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, 'mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www']\n    ports:\n    - name: http\n      containerPort: 8080\n    readinessProbe:\n      httpGet:\n        path: /index.html\n        port: http\n        httpHeaders:\n        - name: X-Probe\n          value: yes\n      periodSeconds: 1\n      failureThreshold: 2\n"
            ),
        ),
    );
    let pod = node.wait_for(Duration::from_secs(20), "web Ready", |n| {
        n.pod("web").filter(|p| condition(p, "Ready") == "True")
    });
    assert_eq!(condition(&pod, "ContainersReady"), "True");
    let c = container_status(&pod, "httpd").expect("status").clone();
    assert_eq!(c["ready"], true);
    exec(&node, &c, &["rm", "/www/index.html"]);
    let removed = Instant::now();
    let pod = node.wait_for(Duration::from_secs(10), "web NotReady", |n| {
        n.pod("web").filter(|p| condition(p, "Ready") == "False")
    });
    let took = removed.elapsed();
    eprintln!("readiness: NotReady {took:?} after the file was removed");
    // period × failureThreshold + 1 s, plus one second for /pods to show it.
    assert!(took <= Duration::from_secs(4), "NotReady after {took:?}");
    let c2 = container_status(&pod, "httpd").expect("status");
    assert_eq!(c2["ready"], false);
    assert_eq!(condition(&pod, "ContainersReady"), "False");
    assert_eq!(restarts(c2), 0);
    assert!(running(c2));
    exec(&node, &c, &["sh", "-c", "echo ok > /www/index.html"]);
    let pod = node.wait_for(Duration::from_secs(5), "web Ready again", |n| {
        n.pod("web").filter(|p| condition(p, "Ready") == "True")
    });
    assert_eq!(
        restarts(container_status(&pod, "httpd").expect("status")),
        0
    );
}

#[test]
fn tcp_readiness_open_and_closed_ports() {
    let node = Node::start("probe-tcp");
    node.write_manifest(
        "tcp.yaml",
        &manifest(
            "tcp",
            &format!(
                "  - name: open\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [httpd, -f, -p, '8080']\n    readinessProbe:\n      tcpSocket:\n        port: 8080\n      periodSeconds: 1\n  - name: closed\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n    readinessProbe:\n      tcpSocket:\n        port: 9999\n      periodSeconds: 1\n      failureThreshold: 1\n"
            ),
        ),
    );
    let pod = node.wait_for(Duration::from_secs(20), "open ready", |n| {
        n.pod("tcp").filter(|p| {
            container_status(p, "open").is_some_and(|c| c["ready"] == true)
                && container_status(p, "closed").is_some_and(running)
        })
    });
    // Give the closed port's probe a few periods: it must stay not ready.
    std::thread::sleep(Duration::from_secs(3));
    let pod2 = node.listed_pod("tcp");
    for p in [&pod, &pod2] {
        assert_eq!(
            container_status(p, "closed").expect("closed")["ready"],
            false
        );
        assert_eq!(condition(p, "Ready"), "False");
        assert_eq!(condition(p, "ContainersReady"), "False");
    }
    assert_eq!(
        container_status(&pod2, "open").expect("open")["ready"],
        true
    );
    assert_eq!(
        restarts(container_status(&pod2, "closed").expect("closed")),
        0
    );
}

#[test]
fn startup_probe_holds_liveness_until_it_succeeds() {
    let node = Node::start("probe-startup");
    // Liveness would fail at once (no /tmp/live): it must not run before startup succeeds
    // (after ~5 s), and must restart the container soon after.
    node.write_manifest(
        "slow.yaml",
        &manifest(
            "slow",
            &format!(
                "  - name: app\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, 'sleep 5; touch /tmp/started; exec sleep 3600']\n    startupProbe:\n      exec:\n        command: [cat, /tmp/started]\n      periodSeconds: 1\n      failureThreshold: 30\n    livenessProbe:\n      exec:\n        command: [cat, /tmp/live]\n      periodSeconds: 1\n      failureThreshold: 3\n      terminationGracePeriodSeconds: 1\n"
            ),
        ),
    );
    node.wait_for(Duration::from_secs(15), "app running", |n| {
        cs(n, "slow", "app").filter(running)
    });
    let seen_running = Instant::now();
    let c = node.wait_for(Duration::from_secs(10), "app started", |n| {
        let c = cs(n, "slow", "app")?;
        assert_eq!(restarts(&c), 0, "restarted before startup succeeded: {c}");
        (c["started"] == true).then_some(c)
    });
    let took = seen_running.elapsed();
    eprintln!("startup: started {took:?} after the container was seen running");
    assert!(
        took >= Duration::from_secs(3),
        "started after {took:?}: {c}"
    );
    assert_eq!(c["ready"], true);
    // Now liveness runs and fails: a restart follows.
    node.wait_for(Duration::from_secs(10), "restart by liveness", |n| {
        cs(n, "slow", "app").filter(|c| restarts(c) >= 1)
    });
    assert!(
        node.log()
            .contains("failed liveness probe, will be restarted")
    );
}

/// `VmHWM` (peak RSS) of the kubelet serving `node`, in KiB, found by its `--root-dir`.
fn kubelet_peak_rss_kib(node: &Node) -> u64 {
    let root = node.dir.join("kubelet").join("root");
    let root = root.to_string_lossy();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains("--root-dir") && cmdline.split('\0').any(|a| a == root) {
            let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
            return status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .expect("VmHWM");
        }
    }
    panic!("kubelet process not found");
}

#[test]
fn exec_probe_with_100_mib_of_output_keeps_kubelet_memory_flat() {
    let node = Node::start("probe-mem");
    node.write_manifest(
        "big.yaml",
        &manifest(
            "big",
            &format!(
                "  - name: app\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n    readinessProbe:\n      exec:\n        command: [sh, -c, 'head -c 104857600 /dev/zero']\n      initialDelaySeconds: 4\n      periodSeconds: 1\n      timeoutSeconds: 10\n"
            ),
        ),
    );
    node.wait_for(Duration::from_secs(15), "app running", |n| {
        cs(n, "big", "app").filter(running)
    });
    std::thread::sleep(Duration::from_secs(2));
    let before = kubelet_peak_rss_kib(&node);
    // At least five probe runs, each printing 100 MiB.
    std::thread::sleep(Duration::from_secs(10));
    let after = kubelet_peak_rss_kib(&node);
    let c = cs(&node, "big", "app").expect("status");
    eprintln!(
        "100 MiB exec probe: kubelet peak RSS {before} KiB -> {after} KiB (+{} KiB), ready={}",
        after.saturating_sub(before),
        c["ready"]
    );
    assert!(
        after.saturating_sub(before) < 8 * 1024,
        "kubelet peak RSS grew from {before} KiB to {after} KiB"
    );
    assert_eq!(restarts(&c), 0);
}

/// Not a test: the gRPC health server [`grpc_readiness_follows_the_health_status`] runs inside
/// a pod's network namespace (re-executing this test binary under `nsenter`). Serves
/// `grpc.health.v1` on `GRPC_HELPER_PORT`; the status of service `probe` is read from the file
/// `GRPC_HELPER_STATE` (`SERVING` or anything else) every 100 ms.
#[test]
#[ignore = "helper process, started by grpc_readiness_follows_the_health_status"]
fn grpc_health_server_helper() {
    let (Ok(port), Ok(state)) = (
        std::env::var("GRPC_HELPER_PORT"),
        std::env::var("GRPC_HELPER_STATE"),
    ) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async move {
        let (reporter, service) = tonic_health::server::health_reporter();
        tokio::spawn(async move {
            loop {
                let serving = std::fs::read_to_string(&state).unwrap_or_default();
                let status = if serving.trim() == "SERVING" {
                    tonic_health::ServingStatus::Serving
                } else {
                    tonic_health::ServingStatus::NotServing
                };
                reporter.set_service_status("probe", status).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let l = tokio::net::TcpListener::bind(format!("0.0.0.0:{port}"))
            .await
            .expect("bind");
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l))
            .await
            .expect("serve");
    });
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn grpc_readiness_follows_the_health_status() {
    let node = Node::start("probe-grpc");
    node.write_manifest(
        "grpc.yaml",
        &manifest(
            "grpc",
            &format!(
                "  - name: app\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n    readinessProbe:\n      grpc:\n        port: 9555\n        service: probe\n      periodSeconds: 1\n      failureThreshold: 1\n"
            ),
        ),
    );
    let c = node.wait_for(Duration::from_secs(15), "app running", |n| {
        cs(n, "grpc", "app").filter(running)
    });
    let id = c["containerID"]
        .as_str()
        .and_then(|s| s.split_once("://"))
        .map(|(_, id)| id.to_owned())
        .expect("containerID");
    let tasks = node.testbed.ctr(&["tasks", "ls"]).expect("ctr tasks ls");
    let pid = tasks
        .lines()
        .find(|l| l.starts_with(&id))
        .and_then(|l| l.split_whitespace().nth(1))
        .expect("task pid")
        .to_owned();
    let state = node.dir.join("grpc-state");
    std::fs::write(&state, "SERVING").expect("state");
    // The server runs in the pod's network namespace, so the probe reaches it on the pod IP.
    let _server = KillOnDrop(
        std::process::Command::new("nsenter")
            .arg(format!("--net=/proc/{pid}/ns/net"))
            .arg(std::env::current_exe().expect("test binary"))
            .args(["--exact", "--ignored"])
            .arg(support::test_path(
                module_path!(),
                "grpc_health_server_helper",
            ))
            .env("GRPC_HELPER_PORT", "9555")
            .env("GRPC_HELPER_STATE", &state)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("nsenter"),
    );
    node.wait_for(Duration::from_secs(10), "grpc Ready (SERVING)", |n| {
        n.pod("grpc").filter(|p| condition(p, "Ready") == "True")
    });
    std::fs::write(&state, "NOT_SERVING").expect("state");
    let pod = node.wait_for(
        Duration::from_secs(10),
        "grpc NotReady (NOT_SERVING)",
        |n| n.pod("grpc").filter(|p| condition(p, "Ready") == "False"),
    );
    assert_eq!(restarts(container_status(&pod, "app").expect("status")), 0);
    std::fs::write(&state, "SERVING").expect("state");
    node.wait_for(Duration::from_secs(10), "grpc Ready again", |n| {
        n.pod("grpc").filter(|p| condition(p, "Ready") == "True")
    });
}
