//! Termination acceptance against a real containerd: a container that ignores SIGTERM is
//! killed when its grace period ends (exit 137), a preStop hook runs before SIGTERM and counts
//! against the grace period. Containers report what happens to them by touching files in a
//! hostPath directory (their modification times are the host's clock); the kubelet's log
//! says when each kill started and how each container ended (exit code, the runtime's finish
//! time), since the pod and its containers are gone once the manifest is removed.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::jiff::Timestamp;
use support::{Node, container_status};

const IMAGE: &str = "docker.io/library/busybox:1.36";

/// A pod whose container `name` traps SIGTERM (touching `<out>/<name>-term`) and goes on;
/// `pre_stop` is an optional preStop exec script.
fn ignoring_pod(name: &str, out: &Path, grace: u32, pre_stop: Option<&str>) -> String {
    let lifecycle = pre_stop
        .map(|script| {
            format!("    lifecycle:\n      preStop:\n        exec:\n          command: [sh, -c, {script:?}]\n")
        })
        .unwrap_or_default();
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: {grace}
  containers:
  - name: {name}
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "trap 'touch /out/{name}-term' TERM; touch /out/{name}-started; while true; do sleep 1; done"]
    volumeMounts: [{{name: out, mountPath: /out}}]
{lifecycle}  volumes:
  - {{name: out, hostPath: {{path: {out}, type: DirectoryOrCreate}}}}
"#,
        out = out.display()
    )
}

fn mtime(p: &Path) -> Option<Timestamp> {
    let t = std::fs::metadata(p).ok()?.modified().ok()?;
    let d = t.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    Timestamp::from_nanosecond(i128::try_from(d.as_nanos()).ok()?).ok()
}

fn secs(from: Timestamp, to: Timestamp) -> f64 {
    (to.as_nanosecond() - from.as_nanosecond()) as f64 / 1e9
}

/// The value of `key` in a log line: klog's text (`key=value`, quotes stripped) or JSON.
fn field(line: &str, key: &str) -> Option<String> {
    if line.starts_with('{') {
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        return match &value[key] {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
    }
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    let rest = &line[start..];
    Some(
        rest.split_whitespace()
            .next()
            .unwrap_or_default()
            .trim_matches('"')
            .to_owned(),
    )
}

/// When the kill of container `name` started: the time of the JSON log line (klog's text
/// header has local time without a year), so the kubelet runs with `--logging-format=json`.
fn kill_started(log: &str, name: &str) -> Option<Timestamp> {
    let line = log.lines().find(|l| {
        l.contains("killing container") && field(l, "container").as_deref() == Some(name)
    })?;
    let millis = serde_json::from_str::<serde_json::Value>(line).ok()?["ts"].as_f64()?;
    Timestamp::from_nanosecond((millis * 1e6) as i128).ok()
}

/// Exit code and finish time of container `name` as the kubelet logged them.
fn stopped(log: &str, name: &str) -> Option<(i32, Timestamp)> {
    let line = log.lines().find(|l| {
        l.contains("container stopped") && field(l, "container").as_deref() == Some(name)
    })?;
    Some((
        field(line, "exit_code")?.parse().ok()?,
        field(line, "finished_at")?.parse().ok()?,
    ))
}

fn out_dir(node: &Node) -> PathBuf {
    let out = node.dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("out dir");
    out
}

#[test]
fn sigterm_ignoring_container_is_killed_after_the_grace_period_and_pre_stop_runs_first() {
    let mut node = Node::new("termination");
    node.extra_args.push("--logging-format=json".into());
    node.start_kubelet();
    let out = out_dir(&node);
    node.write_manifest("stubborn.yaml", &ignoring_pod("stubborn", &out, 5, None));
    node.write_manifest(
        "hooked.yaml",
        &ignoring_pod(
            "hooked",
            &out,
            5,
            Some("touch /out/prestop-start; sleep 3; touch /out/prestop-end"),
        ),
    );
    for name in ["stubborn", "hooked"] {
        node.wait_for(Duration::from_secs(20), "both containers running", |n| {
            let pod = n.pod(name)?;
            container_status(&pod, name)?["state"]["running"]
                .is_object()
                .then_some(())?;
            out.join(format!("{name}-started")).exists().then_some(())
        });
    }
    node.remove_manifest("stubborn.yaml");
    node.remove_manifest("hooked.yaml");
    let log = node.wait_for(Duration::from_secs(20), "both containers stopped", |n| {
        let log = n.log();
        (stopped(&log, "stubborn").is_some() && stopped(&log, "hooked").is_some()).then_some(log)
    });

    // Without a hook: SIGTERM at once (the trap ran), SIGKILL when the 5 s are over.
    let start = kill_started(&log, "stubborn").expect("kill logged");
    let (code, finished) = stopped(&log, "stubborn").expect("stop logged");
    assert_eq!(code, 137, "killed by SIGKILL");
    let took = secs(start, finished);
    assert!(
        (3.5..=6.5).contains(&took),
        "killed {took:.2} s after the kill started"
    );
    let term = mtime(&out.join("stubborn-term")).expect("SIGTERM was delivered");
    assert!(secs(start, term) < 2.0, "SIGTERM right away");

    // With a 3 s preStop: the hook runs first, SIGTERM after it, SIGKILL still at 5 s.
    let start = kill_started(&log, "hooked").expect("kill logged");
    let (code, finished) = stopped(&log, "hooked").expect("stop logged");
    assert_eq!(code, 137);
    let took = secs(start, finished);
    assert!(
        (3.5..=6.5).contains(&took),
        "killed {took:.2} s after the kill started"
    );
    let hook_start = mtime(&out.join("prestop-start")).expect("preStop ran");
    let hook_end = mtime(&out.join("prestop-end")).expect("preStop finished");
    let term = mtime(&out.join("hooked-term")).expect("SIGTERM was delivered");
    assert!(secs(start, hook_start) < 1.5, "preStop starts the kill");
    assert!(
        secs(hook_start, hook_end) >= 2.9,
        "the hook slept its 3 s before SIGTERM"
    );
    assert!(
        term >= hook_end,
        "SIGTERM ({term}) only after the preStop hook ({hook_end})"
    );
    node.wait_for(Duration::from_secs(10), "pods gone", |n| {
        (n.pod("stubborn").is_none() && n.pod("hooked").is_none()).then_some(())
    });
}

#[test]
fn a_pod_removed_while_the_kubelet_was_down_still_runs_its_pre_stop_hook() {
    // Upstream restores the preStop handler from the container's annotations
    // (`restoreSpecsFromContainerLabels`) when it stops a container whose pod it no longer
    // knows.
    let mut node = Node::start("prestop-restart");
    let out = out_dir(&node);
    node.write_manifest(
        "gone.yaml",
        &ignoring_pod("gone", &out, 30, Some("touch /out/prestop-ran")),
    );
    node.wait_for(Duration::from_secs(20), "the container running", |n| {
        let pod = n.pod("gone")?;
        container_status(&pod, "gone")?["state"]["running"]
            .is_object()
            .then_some(())?;
        out.join("gone-started").exists().then_some(())
    });
    assert!(node.stop_kubelet().success());
    node.remove_manifest("gone.yaml");
    node.start_kubelet();
    node.wait_for(Duration::from_secs(30), "the orphan stopped", |n| {
        (n.running_tasks() == 0).then_some(())
    });
    let hook = mtime(&out.join("prestop-ran")).expect("the restored preStop hook ran");
    let term = mtime(&out.join("gone-term")).expect("SIGTERM was delivered");
    assert!(
        term >= hook,
        "SIGTERM ({term}) only after the preStop hook ({hook})"
    );
}

fn container(name: &str, script: &str, extra: &str) -> String {
    format!(
        "  - name: {name}\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, {script:?}]\n{extra}"
    )
}

fn pod(name: &str, spec: &str, containers: &[String]) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 2\n{spec}  containers:\n{}",
        containers.concat()
    )
}

fn terminated<'a>(pod: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    let t = &container_status(pod, name)?["state"]["terminated"];
    t.is_object().then_some(t)
}

#[test]
fn termination_messages_post_start_failures_and_active_deadlines_show_in_the_status() {
    let node = Node::start("termination-status");
    node.write_manifest(
        "msg.yaml",
        &pod(
            "msg",
            "  restartPolicy: Never\n",
            &[
                container("file", "echo -n bye > /dev/termination-log; exit 1", ""),
                container(
                    "custom",
                    "echo -n why > /tmp/reason; exit 0",
                    "    terminationMessagePath: /tmp/reason\n",
                ),
                container(
                    "logs",
                    "echo first; echo last words; exit 2",
                    "    terminationMessagePolicy: FallbackToLogsOnError\n",
                ),
            ],
        ),
    );
    node.write_manifest(
        "hook.yaml",
        &pod(
            "hook",
            "",
            &[container(
                "app",
                "exec sleep 3600",
                "    lifecycle:\n      postStart:\n        exec:\n          command: [sh, -c, 'echo nope >&2; exit 3']\n",
            )],
        ),
    );
    node.write_manifest(
        "deadline.yaml",
        &pod(
            "deadline",
            "  activeDeadlineSeconds: 4\n",
            &[container("app", "exec sleep 3600", "")],
        ),
    );

    let msg = node.wait_for(Duration::from_secs(30), "msg containers exited", |n| {
        let p = n.pod("msg")?;
        ["file", "custom", "logs"]
            .iter()
            .all(|c| terminated(&p, c).is_some())
            .then_some(p)
    });
    let message = |c: &str| {
        terminated(&msg, c).expect("terminated")["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(message("file"), "bye");
    assert_eq!(message("custom"), "why");
    assert_eq!(message("logs"), "first\nlast words\n");

    // The failing hook kills the container (exit 137) and it is started again.
    node.wait_for(
        Duration::from_secs(30),
        "the hooked container killed and restarted",
        |n| {
            let p = n.pod("hook")?;
            let c = container_status(&p, "app")?;
            (c["lastState"]["terminated"]["exitCode"] == 137 && c["restartCount"].as_i64()? >= 1)
                .then_some(())
        },
    );
    // The sync reports the failure with upstream's reason and message. (The status shows it
    // only until the next sync: there is no reason cache yet, so it is read from the log.)
    let log = node.log();
    // In the quoted `err="…"` field of klog's format, so the message's own quotes are escaped.
    let expected = r#"PostStartHookError: Exec lifecycle hook ([sh -c echo nope >&2; exit 3]) for Container \"app\" in Pod \"hook-it-node_default("#;
    let line = log
        .lines()
        .find(|l| l.contains(expected))
        .unwrap_or_else(|| panic!("no PostStartHookError in the log:\n{log}"));
    assert!(line.contains("exited with 3: nope"), "{line}");

    let failed = node.wait_for(Duration::from_secs(30), "deadline exceeded", |n| {
        let p = n.pod("deadline")?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    assert_eq!(failed["status"]["reason"], "DeadlineExceeded");
    assert_eq!(
        failed["status"]["message"],
        "Pod was active on the node longer than the specified deadline"
    );
    let start: Timestamp = failed["status"]["startTime"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("startTime");
    let now = kubelet_core::time::now();
    assert!(secs(start, now) >= 4.0, "not before the deadline");
    node.wait_for(
        Duration::from_secs(20),
        "the deadline pod's container stopped",
        |n| {
            let p = n.pod("deadline")?;
            terminated(&p, "app").map(|_| ())
        },
    );
    // It stays that way.
    std::thread::sleep(Duration::from_secs(2));
    let p = node.listed_pod("deadline");
    assert_eq!(p["status"]["phase"], "Failed");
    assert_eq!(p["status"]["reason"], "DeadlineExceeded");
}

/// The runtime half of a shortened grace period: the pod worker cancels a kill in progress
/// and kills again with the shorter period; containerd must then SIGKILL at the new deadline,
/// not the first one. Driven through `RemoteRuntime` directly (static pods cannot be given a
/// deletion grace period).
#[test]
fn a_cancelled_kill_followed_by_a_shorter_one_ends_at_the_shorter_deadline() {
    use std::sync::Arc;

    use kubelet_core::PodExt;
    use kubelet_core::backoff::Backoff;
    use kubelet_core::runtime::{ContainerState, Runtime, RuntimeHelper};
    use kubelet_core::testing::{FakeRuntimeHelper, pod_with};

    let node = Node::new("termination-shorten");
    let endpoint = node.testbed.endpoint();
    let logs = node.dir.join("kubelet").join("logs");
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    rt.block_on(async {
        let runtime = kubelet_cri::connect(
            &endpoint,
            kubelet_cri::Options::default()
                .with_pod_logs_dir(&logs)
                .with_node_name(support::NODE),
        )
        .expect("connect");
        let mut pod = pod_with("shorten", "Always", &["app"]);
        if let Some(spec) = pod.spec.as_mut() {
            spec.termination_grace_period_seconds = Some(60);
            let c = &mut spec.containers[0];
            c.image = Some(IMAGE.into());
            c.image_pull_policy = Some("IfNotPresent".into());
            c.command = Some(vec![
                "sh".into(),
                "-c".into(),
                "trap '' TERM; while true; do sleep 1; done".into(),
            ]);
        }
        let helper: Arc<dyn RuntimeHelper> = Arc::new(FakeRuntimeHelper);
        let backoff = Backoff::crash_loop_default();
        let status = |runtime: &kubelet_cri::RemoteRuntime| {
            let runtime = runtime.clone();
            let pod = pod.clone();
            async move {
                runtime
                    .get_pod_status(&pod.uid(), pod.name_or_empty(), pod.namespace_or_default())
                    .await
                    .expect("status")
            }
        };
        let result = runtime
            .sync_pod(&pod, &status(&runtime).await, helper, &backoff)
            .await
            .expect("sync");
        assert!(result.is_ok(), "{result:?}");
        let running = status(&runtime).await.to_running_pod();

        // A 60 s kill, cancelled after 1 s (as the pod worker does on a shorter grace period).
        let long = runtime.kill_pod(Some(&pod), &running, None);
        assert!(
            tokio::time::timeout(Duration::from_secs(1), long)
                .await
                .is_err(),
            "the 60 s kill is still waiting"
        );
        let start = kubelet_core::time::now();
        runtime
            .kill_pod(Some(&pod), &running, Some(3))
            .await
            .expect("short kill");
        let after = status(&runtime).await;
        let app = after.container("app").expect("app");
        assert_eq!(app.state, ContainerState::Exited);
        assert_eq!(app.exit_code, 137);
        // The container's own end, not the sandbox teardown that follows it.
        let took = secs(start, app.finished_at.expect("finished"));
        assert!(
            (2.0..=4.5).contains(&took),
            "killed {took:.2} s after the 3 s kill started"
        );
        runtime
            .remove_pod(&after.to_running_pod())
            .await
            .expect("remove");
    });
}
