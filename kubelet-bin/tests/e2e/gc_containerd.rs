//! Container garbage collection on a real containerd (issue 15, acceptance 1): a pod
//! crash-looping keeps at most two containers of its container name (the current one and
//! the newest dead one) and as many log files, while its restart count keeps counting; once
//! the pod is removed nothing of it is left. The collection runs every 2 s here
//! (`--experimental-container-gc-period`) instead of upstream's minute.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use support::{NODE, Node, container_status, pod_yaml, uid};

/// The `app` containers containerd holds for pod `uid` (not the sandbox's pause container).
fn app_containers(node: &Node, uid: &str) -> Vec<String> {
    let filter = format!(
        "labels.\"io.kubernetes.pod.uid\"=={uid},labels.\"io.kubernetes.container.name\"==app"
    );
    let out = node
        .testbed
        .ctr(&["containers", "ls", "-q", &filter])
        .expect("ctr containers ls");
    out.lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn pod_log_dir(node: &Node, uid: &str) -> PathBuf {
    node.dir
        .join("kubelet/logs")
        .join(format!("default_crash-{NODE}_{uid}"))
}

/// The log files of container `app` (`<restart>.log`), sorted.
fn app_logs(node: &Node, uid: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(pod_log_dir(node, uid).join("app"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn restart_count(node: &Node) -> Option<i64> {
    let pod = node.pod("crash")?;
    container_status(&pod, "app")?["restartCount"].as_i64()
}

#[test]
fn a_crash_looping_pod_keeps_one_dead_container_and_its_log() {
    let mut node = Node::new("gc");
    node.extra_args = [
        "--experimental-crash-loop-initial-backoff",
        "1s",
        "--experimental-container-gc-period",
        "2s",
    ]
    .map(String::from)
    .to_vec();
    node.start_kubelet();
    node.write_manifest(
        "crash.yaml",
        &pod_yaml("crash", "Always", &[("app", "echo run; exit 1")]),
    );
    let uid = node.wait_for(Duration::from_secs(60), "crash pod known", |n| {
        n.pod("crash").map(|p| uid(&p)).filter(|u| !u.is_empty())
    });
    // Crash-loop back-off doubles from 1 s: restarts at about 1, 3, 7, 15, 31 s.
    node.wait_for(Duration::from_secs(120), "three restarts", |n| {
        (restart_count(n)? >= 3).then_some(())
    });
    let mut last_restarts = 0;
    for _ in 0..2 {
        let (containers, logs, restarts) = node.wait_for(
            Duration::from_secs(90),
            "a collected state: at most 2 app containers and as many logs",
            |n| {
                let containers = app_containers(n, &uid);
                let logs = app_logs(n, &uid);
                let restarts = restart_count(n)?;
                (containers.len() <= 2
                    && logs.len() == containers.len()
                    && restarts > last_restarts)
                    .then_some((containers, logs, restarts))
            },
        );
        eprintln!("restarts {restarts}: containers {containers:?}, logs {logs:?}");
        // The newest instances' logs are the ones kept.
        for log in &logs {
            let n: i64 = log
                .trim_end_matches(".log")
                .parse()
                .unwrap_or_else(|_| panic!("log file {log}"));
            assert!(
                n >= restarts - 1,
                "old log {log} kept at restart {restarts}"
            );
        }
        last_restarts = restarts;
    }
    // Five instances at least: without collection there would be five containers.
    assert!(
        last_restarts >= 4,
        "the restart count kept counting: {last_restarts}"
    );

    node.remove_manifest("crash.yaml");
    node.wait_for(
        Duration::from_secs(90),
        "everything of the pod removed",
        |n| (n.runtime_containers(&uid).is_empty() && !pod_log_dir(n, &uid).exists()).then_some(()),
    );
}
