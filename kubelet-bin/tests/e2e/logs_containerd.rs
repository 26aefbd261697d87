//! `/containerLogs` on the secure port against a real containerd (issue 14): the CRI log files
//! containerd writes are served with the query options, `follow` streams until the container
//! exits, `previous` reads the previous instance, and log rotation keeps a container writing
//! 50 MiB to at most 3 files of about 1 MiB while the tail still reads (acceptance 3).

use crate::support;

use std::process::Command;
use std::time::Duration;

use support::{NODE, Node, container_status, phase, pod_yaml};

/// `curl -k` on the node's secure port (anonymous under AlwaysAllow: the harness's --anonymous-auth=true):
/// (HTTP status, body).
fn curl(node: &Node, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "-k", "--max-time", "120", "-w", "\n%{http_code}"])
        .arg(format!("https://127.0.0.1:{}{path}", node.port))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

fn logs(name: &str, container: &str, query: &str) -> String {
    format!("/containerLogs/default/{name}-{NODE}/{container}{query}")
}

fn running(node: &Node, name: &str, container: &str) -> Option<serde_json::Value> {
    let pod = node.pod(name)?;
    let c = container_status(&pod, container)?;
    c["state"]["running"].is_object().then(|| pod.clone())
}

#[test]
fn logs_of_a_running_container_with_the_query_options() {
    let node = Node::start("logs");
    node.write_manifest(
        "web.yaml",
        &pod_yaml(
            "web",
            "Always",
            &[(
                "app",
                // containerd copies stdout and stderr in two goroutines: without the pause
                // its log file sometimes has `oops` first (2 of 7 runs on a loaded machine).
                "for i in 1 2 3 4 5; do echo line $i; done; sleep 0.5; echo oops >&2; exec sleep 3600",
            )],
        ),
    );
    node.wait_for(Duration::from_secs(30), "web running", |n| {
        running(n, "web", "app")
    });
    let all = "line 1\nline 2\nline 3\nline 4\nline 5\noops\n";
    node.wait_for(Duration::from_secs(10), "the whole log", |n| {
        (curl(n, &logs("web", "app", "")) == (200, all.to_owned())).then_some(())
    });
    assert_eq!(
        curl(&node, &logs("web", "app", "?tailLines=2")),
        (200, "line 5\noops\n".into())
    );
    assert_eq!(
        curl(&node, &logs("web", "app", "?limitBytes=10")),
        (200, "line 1\nlin".into())
    );
    let (code, body) = curl(&node, &logs("web", "app", "?timestamps=true&tailLines=1"));
    assert_eq!(code, 200);
    let (stamp, line) = body.split_once(' ').expect("timestamp prefix");
    assert_eq!(line, "oops\n");
    assert_eq!(
        stamp.len(),
        "2024-01-01T00:00:00.000000000Z".len(),
        "{stamp}"
    );
    assert_eq!(
        curl(&node, &logs("web", "app", "?sinceSeconds=3600")).1,
        all,
        "everything is newer than an hour"
    );
    assert_eq!(
        curl(
            &node,
            &logs("web", "app", "?sinceTime=2999-01-01T00:00:00Z")
        ),
        (200, String::new())
    );
    assert_eq!(
        curl(&node, &logs("web", "nope", "")),
        (
            404,
            format!("container \"nope\" not found in pod \"web-{NODE}\"")
        )
    );
    assert_eq!(
        curl(&node, &logs("web", "..%2F..%2F..%2Fetc%2Fpasswd", "")).0,
        404
    );
}

#[test]
fn follow_streams_until_the_container_exits_and_previous_reads_the_last_instance() {
    let mut node = Node::new("logs-follow");
    node.extra_args = vec![
        "--experimental-crash-loop-initial-backoff".into(),
        "1s".into(),
    ];
    node.start_kubelet();
    // Three lines a second apart, then exit; restarted (Always): each run has its number.
    node.write_manifest(
        "tick.yaml",
        &format!(
            "{}    volumeMounts:\n    - {{name: data, mountPath: /data}}\n  volumes:\n  - {{name: data, emptyDir: {{}}}}\n",
            pod_yaml(
                "tick",
                "Always",
                &[(
                    "app",
                    "n=$(( $(cat /data/n 2>/dev/null || echo 0) + 1 )); echo $n > /data/n; \
                     sleep 1; echo run $n a; sleep 1; echo run $n b; sleep 1; echo run $n c; exit 1",
                )],
            )
        ),
    );
    // Follow the first run from its start: the stream ends when the container exits.
    node.wait_for(Duration::from_secs(30), "tick running", |n| {
        running(n, "tick", "app")
    });
    let (code, body) = curl(&node, &logs("tick", "app", "?follow=true"));
    assert_eq!(code, 200);
    assert_eq!(body, "run 1 a\nrun 1 b\nrun 1 c\n");
    // Once restarted, `previous` is the first run's log and the current one the second's.
    node.wait_for(Duration::from_secs(60), "tick restarted", |n| {
        let pod = n.pod("tick")?;
        let c = container_status(&pod, "app")?;
        (c["restartCount"].as_i64() >= Some(1) && c["state"]["running"].is_object()).then_some(())
    });
    assert_eq!(
        curl(&node, &logs("tick", "app", "?previous=true")),
        (200, "run 1 a\nrun 1 b\nrun 1 c\n".into())
    );
    let (code, body) = curl(&node, &logs("tick", "app", "?follow=true"));
    assert_eq!(code, 200);
    assert!(
        body.starts_with("run 2 a\n") || body.starts_with("run 3 a\n"),
        "{body}"
    );
    assert!(body.ends_with(" c\n"), "{body}");
    assert!(phase(&node.listed_pod("tick")) == "Running");
}

#[test]
fn rotation_keeps_50_mib_in_3_files_of_about_1_mib() {
    let mut node = Node::new("logs-rotate");
    let config = node.dir.join("rotate.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n\
         authentication:\n  anonymous:\n    enabled: true\n  webhook:\n    enabled: false\nauthorization:\n  mode: AlwaysAllow\n",
    )
    .expect("config");
    node.extra_args = vec!["--config".into(), config.display().to_string()];
    node.start_kubelet();
    // 800 blocks of 64 KiB (lines of 1 KiB): 50 MiB at about 300 KiB/s, then a last line.
    node.write_manifest(
        "chatty.yaml",
        &pod_yaml(
            "chatty",
            "Never",
            &[(
                "app",
                "i=0; while [ $i -lt 800 ]; do head -c 65536 /dev/zero | tr '\\0' x | fold -w 1024; echo; \
                 i=$((i+1)); sleep 0.2; done; echo the end; exec sleep 3600",
            )],
        ),
    );
    node.wait_for(Duration::from_secs(30), "chatty running", |n| {
        running(n, "chatty", "app")
    });
    let dir = node
        .dir
        .join("kubelet")
        .join("logs")
        .join(format!(
            "default_chatty-{NODE}_{}",
            support::uid(&node.listed_pod("chatty"))
        ))
        .join("app");
    let mut most_files = 0;
    let mut largest = 0;
    node.wait_for(Duration::from_secs(400), "the end of the log", |n| {
        let files: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.filter_map(Result::ok).collect())
            .unwrap_or_default();
        most_files = most_files.max(files.len());
        for f in &files {
            let name = f.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".gz") {
                largest = largest.max(f.metadata().map(|m| m.len()).unwrap_or(0));
            }
        }
        let (code, body) = curl(n, &logs("chatty", "app", "?tailLines=1"));
        (code == 200 && body == "the end\n").then_some(())
    });
    let files: Vec<String> = std::fs::read_dir(&dir)
        .expect("log dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    eprintln!(
        "rotation: at most {most_files} files at once, largest uncompressed {largest} bytes, now {files:?}"
    );
    assert!(files.len() <= 3, "{files:?}");
    assert!(most_files <= 3, "seen {most_files} files at once");
    // Rotated at 1 MiB, checked every 3 s at ~300 KiB/s: never much more than 2 MiB.
    assert!(
        largest <= 5 << 19,
        "largest uncompressed file {largest} bytes"
    );
    let (code, body) = curl(&node, &logs("chatty", "app", "?tailLines=10"));
    assert_eq!(code, 200);
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines.len(), 10, "{body:.200}");
    assert_eq!(lines[9], "the end");
    assert!(
        lines[..9]
            .iter()
            .all(|l| l.len() == 1024 && l.bytes().all(|b| b == b'x'))
    );
}

/// Log shippers read `/var/log/containers` (upstream `legacyLogSymlink`): a started container
/// gets `<pod>_<namespace>_<container>-<id>.log` beside the pod log root (here the harness's
/// `--pod-log-dir` is `<node>/kubelet/logs`, so `<node>/kubelet/containers`), pointing at its
/// log; the link goes when the container is removed.
#[test]
fn a_started_container_has_a_log_symlink_until_it_is_removed() {
    let node = Node::start("loglinks");
    node.write_manifest(
        "talk.yaml",
        &pod_yaml("talk", "Always", &[("app", "echo hello; exec sleep 3600")]),
    );
    let pod = node.wait_for(Duration::from_secs(30), "talk running", |n| {
        running(n, "talk", "app")
    });
    let id = container_status(&pod, "app")
        .and_then(|c| c["containerID"].as_str())
        .and_then(|id| id.strip_prefix("containerd://"))
        .expect("a containerd container id")
        .to_owned();
    let link = node
        .dir
        .join("kubelet/containers")
        .join(format!("talk-{NODE}_default_app-{id}.log"));
    let target = std::fs::read_link(&link).expect("the log symlink exists");
    assert!(
        target.starts_with(node.dir.join("kubelet/logs")) && target.ends_with("app/0.log"),
        "{}",
        target.display()
    );
    node.wait_for(Duration::from_secs(10), "the log through the link", |_| {
        std::fs::read_to_string(&link)
            .ok()
            .filter(|log| log.contains("hello"))
    });

    node.remove_manifest("talk.yaml");
    node.wait_for(
        Duration::from_secs(60),
        "the link removed with the container",
        |_| (!link.exists() && std::fs::symlink_metadata(&link).is_err()).then_some(()),
    );
}
