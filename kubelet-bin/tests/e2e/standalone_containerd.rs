//! Issue acceptance against a real containerd: static pods from a manifest directory, with no
//! API server. Each test runs its own private containerd (xtask testbed) and kubelet process.

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use support::{Node, container_status, phase, pod_yaml, uid};

const SLEEP: &str = "while true; do sleep 1; done";

fn running_with_ip(node: &Node, name: &str) -> Option<serde_json::Value> {
    let pod = node.pod(name)?;
    let all_running = pod["status"]["containerStatuses"]
        .as_array()
        .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c["state"]["running"].is_object()));
    let ip = pod["status"]["podIP"].as_str().unwrap_or("");
    (phase(&pod) == "Running" && all_running && !ip.is_empty()).then_some(pod)
}

#[test]
fn three_static_pods_run_with_pod_ips() {
    let node = Node::start("three");
    node.write_manifest("a.yaml", &pod_yaml("alpha", "Always", &[("main", SLEEP)]));
    node.write_manifest(
        "b.yaml",
        &pod_yaml("beta", "Always", &[("main", SLEEP), ("side", SLEEP)]),
    );
    node.write_manifest(
        "c.json",
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"gamma","namespace":"web"},
            "spec":{"containers":[{"name":"httpd","image":"docker.io/library/busybox:1.36",
            "imagePullPolicy":"IfNotPresent","command":["httpd","-f","-p","8080"]}]}}"#,
    );
    let mut ips = HashSet::new();
    for name in ["alpha", "beta", "gamma"] {
        let pod = node.wait_for(
            Duration::from_secs(10),
            &format!("{name} running with an IP"),
            |n| running_with_ip(n, name),
        );
        assert!(
            ips.insert(pod["status"]["podIP"].as_str().unwrap_or("").to_owned()),
            "pod IPs must differ"
        );
        assert_eq!(pod["status"]["hostIP"], "192.0.2.10");
        assert_eq!(
            pod["metadata"]["annotations"]["kubernetes.io/config.source"],
            "file"
        );
    }
    assert_eq!(
        node.pod("gamma")
            .map(|p| p["metadata"]["namespace"].clone()),
        Some("web".into())
    );
    // 4 app containers + 3 pause containers run in containerd.
    assert_eq!(node.running_tasks(), 7);
}

#[test]
fn restart_policies_decide_the_outcome() {
    let node = Node::start("policies");
    node.write_manifest(
        "ok.yaml",
        &pod_yaml("ok", "Never", &[("job", "echo done; exit 0")]),
    );
    node.write_manifest("bad.yaml", &pod_yaml("bad", "Never", &[("job", "exit 3")]));
    node.write_manifest(
        "loop.yaml",
        &pod_yaml("loop", "Always", &[("job", "sleep 1; exit 1")]),
    );

    let ok = node.wait_for(Duration::from_secs(20), "ok Succeeded", |n| {
        n.pod("ok").filter(|p| phase(p) == "Succeeded")
    });
    let term = &container_status(&ok, "job").expect("status")["state"]["terminated"];
    assert_eq!(term["reason"], "Completed");
    assert_eq!(term["exitCode"], 0);

    let bad = node.wait_for(Duration::from_secs(20), "bad Failed", |n| {
        n.pod("bad").filter(|p| phase(p) == "Failed")
    });
    let term = &container_status(&bad, "job").expect("status")["state"]["terminated"];
    assert_eq!(term["reason"], "Error");
    assert_eq!(term["exitCode"], 3);

    // Restarts: the first at once, the next after the 10 s crash-loop backoff.
    node.wait_for(Duration::from_secs(40), "loop restarted twice", |n| {
        let pod = n.pod("loop")?;
        let count = container_status(&pod, "job")?["restartCount"].as_i64()?;
        (count >= 2).then_some(())
    });
    let pod = node.listed_pod("loop");
    assert_eq!(
        phase(&pod),
        "Running",
        "a restartPolicy Always pod stays Running"
    );
}

#[test]
fn edited_manifest_replaces_the_pod() {
    let node = Node::start("edit");
    node.write_manifest(
        "p.yaml",
        &pod_yaml("edited", "Always", &[("main", "echo v1; sleep 3600")]),
    );
    let before = node.wait_for(Duration::from_secs(10), "v1 running", |n| {
        running_with_ip(n, "edited")
    });
    let old_uid = uid(&before);
    node.write_manifest(
        "p.yaml",
        &pod_yaml("edited", "Always", &[("main", "echo v2; sleep 3600")]),
    );
    let after = node.wait_for(Duration::from_secs(15), "v2 running", |n| {
        running_with_ip(n, "edited").filter(|p| uid(p) != old_uid)
    });
    assert_ne!(
        container_status(&after, "main").map(|c| c["containerID"].clone()),
        container_status(&before, "main").map(|c| c["containerID"].clone())
    );
    node.wait_for(Duration::from_secs(15), "old pod's containers gone", |n| {
        n.runtime_containers(&old_uid).is_empty().then_some(())
    });
    assert_eq!(node.pods().map(|p| p.len()), Some(1));
}

#[test]
fn deleted_manifest_removes_containers_and_sandbox() {
    let node = Node::start("delete");
    node.write_manifest("p.yaml", &pod_yaml("doomed", "Always", &[("main", SLEEP)]));
    let pod = node.wait_for(Duration::from_secs(10), "running", |n| {
        running_with_ip(n, "doomed")
    });
    let uid = uid(&pod);
    assert_eq!(
        node.runtime_containers(&uid).len(),
        2,
        "app + pause container"
    );
    node.remove_manifest("p.yaml");
    node.wait_for(
        Duration::from_secs(15),
        "containers and sandbox removed",
        |n| n.runtime_containers(&uid).is_empty().then_some(()),
    );
    node.wait_for(Duration::from_secs(5), "/pods no longer lists it", |n| {
        n.pods().filter(|p| p.is_empty())
    });
}

#[test]
fn sigkilled_kubelet_readopts_running_containers() {
    let mut node = Node::start("restart");
    node.write_manifest("a.yaml", &pod_yaml("steady", "Always", &[("main", SLEEP)]));
    node.write_manifest("b.yaml", &pod_yaml("once", "Never", &[("job", "exit 0")]));
    let before = node.wait_for(Duration::from_secs(10), "running", |n| {
        running_with_ip(n, "steady")
    });
    node.wait_for(Duration::from_secs(10), "once Succeeded", |n| {
        n.pod("once").filter(|p| phase(p) == "Succeeded")
    });
    let id = container_status(&before, "main").expect("status")["containerID"].clone();
    node.kill9_kubelet();
    node.start_kubelet();
    let after = node.wait_for(Duration::from_secs(10), "running again", |n| {
        running_with_ip(n, "steady")
    });
    let status = container_status(&after, "main").expect("status");
    assert_eq!(
        status["containerID"], id,
        "the same container keeps running"
    );
    assert_eq!(status["restartCount"], 0);
    // The finished run-once pod is not run again.
    let once = node.wait_for(Duration::from_secs(10), "once still Succeeded", |n| {
        n.pod("once").filter(|p| phase(p) == "Succeeded")
    });
    assert_eq!(
        container_status(&once, "job").expect("status")["restartCount"],
        0
    );
    // SIGTERM leaves pods running too.
    let status = node.stop_kubelet();
    assert!(status.success(), "clean exit on SIGTERM: {status:?}");
    assert_eq!(
        node.running_tasks(),
        2,
        "steady's container and pause keep running"
    );
}

#[test]
fn bad_manifests_are_rejected_without_affecting_others() {
    let node = Node::start("badinput");
    let big = format!("# {}\n", "x".repeat(11 * 1024 * 1024));
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "invalid.yaml",
            "kind: Pod\nmetadata: [oops\n".into(),
            "invalid.yaml",
        ),
        (
            "service.yaml",
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n".into(),
            "service.yaml",
        ),
        (
            "nocontainers.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: empty\nspec:\n  containers: []\n".into(),
            "nocontainers.yaml",
        ),
        (
            "dupcontainers.yaml",
            pod_yaml("dup", "Always", &[("same", SLEEP), ("same", SLEEP)]),
            "dupcontainers.yaml",
        ),
        (
            "badname.yaml",
            pod_yaml("Bad_Name!", "Always", &[("main", SLEEP)]),
            "badname.yaml",
        ),
        ("huge.yaml", big, "huge.yaml"),
        (
            "samename.yaml",
            pod_yaml("good", "Always", &[("other", SLEEP)]),
            "samename.yaml",
        ),
        ("empty.yaml", String::new(), "empty.yaml"),
    ];
    node.write_manifest("good.yaml", &pod_yaml("good", "Always", &[("main", SLEEP)]));
    for (file, content, _) in &cases {
        node.write_manifest(file, content);
    }
    let good = node.wait_for(Duration::from_secs(10), "good pod running", |n| {
        running_with_ip(n, "good")
    });
    assert!(
        container_status(&good, "main").is_some(),
        "the first file with the name wins"
    );
    for (_, _, needle) in &cases {
        node.wait_for(
            Duration::from_secs(10),
            &format!("a log line naming {needle}"),
            |n| {
                n.log()
                    .lines()
                    .any(|l| l.contains(needle) && (l.starts_with('W') || l.starts_with('E')))
                    .then_some(())
            },
        );
    }
    assert_eq!(
        node.pods().map(|p| p.len()),
        Some(1),
        "only the good pod is admitted"
    );
    let mut node = node;
    assert!(
        node.kubelet_alive(),
        "the kubelet never panics on bad input"
    );
    assert!(!node.log().contains("panicked"));
}

#[test]
fn containerd_outage_is_retried_and_converges_without_duplicates() {
    let mut node = Node::new("outage");
    node.testbed.stop().expect("stop containerd");
    node.write_manifest("p.yaml", &pod_yaml("patient", "Always", &[("main", SLEEP)]));
    node.start_kubelet();
    // Down at start: the kubelet is up but reports itself unhealthy.
    node.wait_for(Duration::from_secs(10), "healthz failing", |n| {
        (n.healthz() == Some(500)).then_some(())
    });
    assert!(
        node.pods()
            .is_some_and(|p| p.iter().all(|p| phase(p) != "Running"))
    );
    node.testbed.restart().expect("start containerd");
    let pod = node.wait_for(
        Duration::from_secs(30),
        "running once containerd is up",
        |n| running_with_ip(n, "patient"),
    );
    node.wait_for(Duration::from_secs(10), "healthz ok", |n| {
        (n.healthz() == Some(200)).then_some(())
    });
    let id = container_status(&pod, "main").expect("status")["containerID"].clone();

    // containerd dies while pods run, then comes back.
    node.testbed.kill().expect("kill containerd");
    node.wait_for(
        Duration::from_secs(45),
        "healthz failing during the outage",
        |n| (n.healthz() == Some(500)).then_some(()),
    );
    node.testbed.restart().expect("restart containerd");
    node.wait_for(Duration::from_secs(30), "healthz ok again", |n| {
        (n.healthz() == Some(200)).then_some(())
    });
    let after = node.wait_for(Duration::from_secs(20), "running after the outage", |n| {
        running_with_ip(n, "patient")
    });
    assert_eq!(
        container_status(&after, "main").expect("status")["containerID"],
        id,
        "not recreated"
    );
    assert_eq!(
        node.runtime_containers(&uid(&after)).len(),
        2,
        "one sandbox, one container: nothing duplicated"
    );
}
