//! Pod lifecycle acceptance against a real containerd: init containers in order, init
//! failures under `Never` and `Always`, CrashLoopBackOff timing, sidecars, image pull
//! failures. Each test runs its own containerd and kubelet with short backoff windows
//! (`crashLoopBackOff.maxContainerRestartPeriod` plus the hidden initial-window flags).

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Node, container_status, phase, uid};

const IMAGE: &str = "docker.io/library/busybox:1.36";

/// A node whose container restart windows go from `initial` doubling to `max`.
fn node_with_backoff(name: &str, initial: &str, max: &str, extra: &[&str]) -> Node {
    let mut node = Node::new(name);
    let config = node.dir.join("kubelet").join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncrashLoopBackOff:\n  maxContainerRestartPeriod: {max}\n\
             authentication:\n  webhook:\n    enabled: false\n  anonymous:\n    enabled: true\nauthorization:\n  mode: AlwaysAllow\n"
        ),
    )
    .expect("write config");
    node.extra_args = vec![
        "--config".into(),
        config.display().to_string(),
        "--experimental-crash-loop-initial-backoff".into(),
        initial.into(),
    ];
    node.extra_args
        .extend(extra.iter().map(|s| (*s).to_owned()));
    node.start_kubelet();
    node
}

/// A container entry (YAML flow style) running `script` in busybox.
fn container(name: &str, script: &str, extra: &str) -> String {
    format!(
        "  - {{name: {name}, image: {IMAGE}, imagePullPolicy: IfNotPresent, command: [sh, -c, {script:?}]{extra}}}\n"
    )
}

/// A directory on the host the test reads, mounted at `/out`.
fn out_dir(node: &Node, name: &str) -> PathBuf {
    let dir = node.dir.join("out").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("out dir");
    dir
}

fn init_status<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["status"]["initContainerStatuses"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

fn waiting_reason(c: &Value) -> &str {
    c["state"]["waiting"]["reason"].as_str().unwrap_or("")
}

fn waiting_message(c: &Value) -> &str {
    c["state"]["waiting"]["message"].as_str().unwrap_or("")
}

fn restarts(c: &Value) -> i64 {
    c["restartCount"].as_i64().unwrap_or(0)
}

/// `/proc/uptime` samples a container appended to `file` (seconds since boot, 10 ms steps).
fn uptimes(file: &Path) -> Vec<f64> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The CRI log of a container's first instance (`<pod log dir>/<container>/0.log`).
fn container_log(node: &Node, pod: &Value, name: &str, container: &str) -> String {
    let dir = node.dir.join("kubelet").join("logs").join(format!(
        "default_{name}-{}_{}",
        support::NODE,
        uid(pod)
    ));
    std::fs::read_to_string(dir.join(container).join("0.log")).unwrap_or_default()
}

#[test]
fn init_containers_run_in_order_and_failures_follow_restart_policy() {
    let node = node_with_backoff("lc-init", "1s", "4s", &[]);
    let shared = ", volumeMounts: [{name: shared, mountPath: /shared}]";

    // Acceptance 1: two init containers append to an emptyDir file in order; the app
    // prints it.
    let mut order = String::from(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: order\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes: [{name: shared, emptyDir: {}}]\n  initContainers:\n",
    );
    order.push_str(&container("init-a", "echo first >> /shared/order", shared));
    order.push_str(&container("init-b", "echo second >> /shared/order", shared));
    order.push_str("  containers:\n");
    order.push_str(&container("app", "cat /shared/order; sleep 3600", shared));
    node.write_manifest("order.yaml", &order);

    // Acceptance 2: a failing init container under Never fails the pod; under Always it
    // is retried with growing backoff.
    let failing = |name: &str, policy: &str, code: u8| {
        let mut y = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 1\n  initContainers:\n"
        );
        y.push_str(&container("setup", &format!("exit {code}"), ""));
        y.push_str("  containers:\n");
        y.push_str(&container("app", "sleep 3600", ""));
        y
    };
    node.write_manifest("never.yaml", &failing("init-never", "Never", 3));

    let pod = node.wait_for(Duration::from_secs(60), "order pod running", |n| {
        let pod = n.pod("order")?;
        let app = container_status(&pod, "app")?;
        (phase(&pod) == "Running" && app["state"]["running"].is_object()).then_some(pod)
    });
    for init in ["init-a", "init-b"] {
        let s = init_status(&pod, init).expect("init status");
        let t = &s["state"]["terminated"];
        assert_eq!(t["reason"], "Completed", "{init}: {s}");
        assert_eq!(t["exitCode"], 0, "{init}: {s}");
        assert_eq!(s["ready"], true, "{init}: {s}");
    }
    let log = node.wait_for(Duration::from_secs(10), "app log", |n| {
        let log = container_log(n, &pod, "order", "app");
        log.contains("second").then_some(log)
    });
    let (first, second) = (
        log.find("first").expect("first line"),
        log.find("second").expect("second line"),
    );
    assert!(first < second, "init containers ran out of order:\n{log}");

    let never = node.wait_for(Duration::from_secs(30), "init-never failed", |n| {
        let pod = n.pod("init-never")?;
        (phase(&pod) == "Failed").then_some(pod)
    });
    let setup = init_status(&never, "setup").expect("setup status");
    assert_eq!(setup["state"]["terminated"]["reason"], "Error", "{setup}");
    assert_eq!(setup["state"]["terminated"]["exitCode"], 3, "{setup}");
    assert_eq!(restarts(setup), 0, "{setup}");
    let app = container_status(&never, "app").expect("app status");
    assert!(
        app["state"]["running"].is_null() && app["state"]["terminated"].is_null(),
        "the app never ran: {app}"
    );

    // Under Always: restarts come at growing intervals (immediately, then 1 s, 2 s after
    // each exit), and between them the init container waits in CrashLoopBackOff.
    node.write_manifest("always.yaml", &failing("init-always", "Always", 1));
    let mut restart_seen_at: Vec<(i64, Instant)> = Vec::new();
    let mut backoff_messages: Vec<String> = Vec::new();
    node.wait_for(
        Duration::from_secs(40),
        "init-always restarted 3 times",
        |n| {
            let pod = n.pod("init-always")?;
            // "" before its first sync (no status yet), as upstream's /pods shows it.
            assert!(
                matches!(phase(&pod), "Pending" | ""),
                "an init container keeps failing: {pod}"
            );
            let setup = init_status(&pod, "setup")?.clone();
            let count = restarts(&setup);
            if restart_seen_at.last().is_none_or(|(c, _)| *c < count) {
                restart_seen_at.push((count, Instant::now()));
            }
            if waiting_reason(&setup) == "CrashLoopBackOff" {
                assert_eq!(setup["lastState"]["terminated"]["exitCode"], 1, "{setup}");
                let message = waiting_message(&setup).to_owned();
                if !backoff_messages.contains(&message) {
                    backoff_messages.push(message);
                }
            }
            (count >= 3).then_some(())
        },
    );
    assert!(
        backoff_messages.iter().any(|m| m.starts_with(
            "back-off 2s restarting failed container=setup pod=init-always-it-node_default("
        )),
        "{backoff_messages:?}"
    );
    let at = |count: i64| {
        restart_seen_at
            .iter()
            .find(|(c, _)| *c == count)
            .map(|(_, t)| *t)
            .unwrap_or_else(|| panic!("restart {count} not seen: {restart_seen_at:?}"))
    };
    let (first_gap, second_gap) = (at(2) - at(1), at(3) - at(2));
    assert!(
        second_gap > first_gap + Duration::from_millis(500),
        "backoff did not grow: {first_gap:?} then {second_gap:?}"
    );
}

#[test]
fn crash_loop_restarts_follow_the_doubling_backoff() {
    // Windows 100 ms doubling to 1.6 s, as the issue's acceptance asks. The evented PLEG
    // sees each exit at once, so each gap is the window plus the time to notice the exit and
    // create and start the container (about 80 ms here).
    let node = node_with_backoff("lc-crash", "100ms", "1600ms", &[]);
    let out = out_dir(&node, "crash");
    let mut y = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: crash\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes: [{{name: out, hostPath: {{path: {}, type: Directory}}}}]\n  containers:\n",
        out.display()
    );
    y.push_str(&container(
        "app",
        "cat /proc/uptime >> /out/starts; exit 1",
        ", volumeMounts: [{name: out, mountPath: /out}]",
    ));
    node.write_manifest("crash.yaml", &y);

    let mut counts: Vec<i64> = Vec::new();
    let mut windows: Vec<String> = Vec::new();
    node.wait_for(Duration::from_secs(60), "eight starts", |n| {
        if let Some(app) = n
            .pod("crash")
            .and_then(|p| container_status(&p, "app").cloned())
        {
            let count = restarts(&app);
            if counts.last() != Some(&count) {
                counts.push(count);
            }
            if waiting_reason(&app) == "CrashLoopBackOff" {
                assert_eq!(app["lastState"]["terminated"]["exitCode"], 1, "{app}");
                assert_eq!(app["lastState"]["terminated"]["reason"], "Error", "{app}");
                let window = waiting_message(&app)
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or("")
                    .to_owned();
                if windows.last() != Some(&window) {
                    windows.push(window);
                }
            }
        }
        (uptimes(&out.join("starts")).len() >= 8).then_some(())
    });
    let starts = uptimes(&out.join("starts"));
    let gaps: Vec<f64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    println!("crash loop gaps (s): {gaps:.2?}; windows seen: {windows:?}");
    // The first restart is immediate; then 0.1, 0.2, 0.4, 0.8, 1.6 and 1.6 s after each
    // exit. Never early (`/proc/uptime` has 10 ms steps); the upper tolerance covers noticing
    // the exit and starting the container on a loaded machine.
    assert!(gaps[0] < 3.0, "first restart should be immediate: {gaps:?}");
    for (gap, window) in gaps[1..].iter().zip([0.1, 0.2, 0.4, 0.8, 1.6, 1.6]) {
        assert!(
            *gap >= window - 0.03 && *gap <= window + 1.0,
            "gap {gap:.2}s for a {window}s window; gaps {gaps:?}"
        );
    }
    // each wait doubles until the cap: from 0.4 s on the doubling outgrows the start time
    assert!(
        gaps[3] < gaps[4] && gaps[4] < gaps[5],
        "waits should grow: {gaps:?}"
    );
    // restartCount went up by one each time, never skipping
    assert!(
        counts.windows(2).all(|w| w[1] == w[0] + 1),
        "restart counts seen: {counts:?}"
    );
    assert!(counts.last().is_some_and(|c| *c >= 6), "{counts:?}");
    // between restarts: CrashLoopBackOff with upstream's message and the doubling windows,
    // in order (the shortest may pass between two polls)
    let mut expected = ["400ms", "800ms", "1.6s"].into_iter().peekable();
    for w in &windows {
        if expected.peek() == Some(&w.as_str()) {
            expected.next();
        }
    }
    assert!(expected.peek().is_none(), "windows seen: {windows:?}");
}

#[test]
fn sidecar_starts_before_the_app_and_is_restarted_when_it_exits() {
    let node = node_with_backoff("lc-sidecar", "1s", "2s", &[]);
    let out = out_dir(&node, "sidecar");
    let mount = ", volumeMounts: [{name: out, mountPath: /out}]";
    let mut y = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sidecar\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n  volumes: [{{name: out, hostPath: {{path: {}, type: Directory}}}}]\n  initContainers:\n",
        out.display()
    );
    y.push_str(&container(
        "side",
        "cat /proc/uptime >> /out/side; sleep 2",
        &format!("{mount}, restartPolicy: Always"),
    ));
    y.push_str("  containers:\n");
    y.push_str(&container(
        "app",
        "cat /proc/uptime >> /out/app; sleep 3600",
        mount,
    ));
    node.write_manifest("sidecar.yaml", &y);

    // A sidecar with a startup probe holds back the next init container until it started.
    let mut gated = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: gated\nspec:\n  terminationGracePeriodSeconds: 1\n  volumes: [{{name: out, hostPath: {{path: {}, type: Directory}}}}]\n  initContainers:\n",
        out.display()
    );
    gated.push_str(&container(
        "side",
        "sleep 3; cat /proc/uptime >> /out/gated-side-up; touch /tmp/up; sleep 3600",
        &format!(
            "{mount}, restartPolicy: Always, startupProbe: {{exec: {{command: [test, -f, /tmp/up]}}, periodSeconds: 1, failureThreshold: 30}}"
        ),
    ));
    gated.push_str(&container(
        "init",
        "cat /proc/uptime >> /out/gated-init",
        mount,
    ));
    gated.push_str("  containers:\n");
    gated.push_str(&container("app", "sleep 3600", ""));
    node.write_manifest("gated.yaml", &gated);

    let pod = node.wait_for(
        Duration::from_secs(60),
        "sidecar restarted while the app runs",
        |n| {
            let pod = n.pod("sidecar")?;
            let side = init_status(&pod, "side")?;
            let app = container_status(&pod, "app")?;
            (uptimes(&out.join("side")).len() >= 2
                && restarts(side) >= 1
                && app["state"]["running"].is_object())
            .then_some(pod)
        },
    );
    let side_starts = uptimes(&out.join("side"));
    let app_starts = uptimes(&out.join("app"));
    assert_eq!(app_starts.len(), 1, "the app never restarted");
    assert!(
        side_starts[0] <= app_starts[0],
        "sidecar {side_starts:?} must start before the app {app_starts:?}"
    );
    assert_eq!(phase(&pod), "Running");
    let app = container_status(&pod, "app").expect("app");
    assert_eq!(restarts(app), 0, "{app}");
    // While it runs, the sidecar is started and ready (no probes), and counts toward the
    // pod's readiness.
    let ready = node.wait_for(Duration::from_secs(20), "sidecar running", |n| {
        let pod = n.pod("sidecar")?;
        let side = init_status(&pod, "side")?;
        side["state"]["running"].is_object().then(|| side.clone())
    });
    assert_eq!(ready["started"], true, "{ready}");
    assert_eq!(ready["ready"], true, "{ready}");

    let gated = node.wait_for(Duration::from_secs(40), "gated pod running", |n| {
        let pod = n.pod("gated")?;
        let app = container_status(&pod, "app")?;
        app["state"]["running"].is_object().then_some(pod)
    });
    let side_up = uptimes(&out.join("gated-side-up"));
    let init = uptimes(&out.join("gated-init"));
    assert!(
        side_up.len() == 1 && init.len() == 1 && side_up[0] <= init[0],
        "the init container ran at {init:?}, before the sidecar started at {side_up:?}"
    );
    let side = init_status(&gated, "side").expect("side");
    assert_eq!(side["started"], true, "{side}");
    assert_eq!(restarts(side), 0, "{side}");
}

#[test]
fn image_pull_failures_are_reported_with_upstream_reasons() {
    let node = node_with_backoff(
        "lc-image",
        "1s",
        "4s",
        &[
            "--experimental-image-pull-initial-backoff",
            "30s",
            "--experimental-image-pull-max-backoff",
            "60s",
        ],
    );
    let pod = |name: &str, image: &str, policy: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {{name: app, image: {image}, imagePullPolicy: {policy}, command: [sleep, '3600']}}\n"
        )
    };
    node.write_manifest(
        "never.yaml",
        &pod("never", "docker.io/library/absent:1", "Never"),
    );
    node.write_manifest(
        "unpullable.yaml",
        &pod("unpullable", "registry.invalid/nope:1", "IfNotPresent"),
    );

    let never = node.wait_for(Duration::from_secs(30), "ErrImageNeverPull", |n| {
        let pod = n.pod("never")?;
        let app = container_status(&pod, "app")?.clone();
        (waiting_reason(&app) == "ErrImageNeverPull").then_some(app)
    });
    assert_eq!(
        waiting_message(&never),
        "Container image \"docker.io/library/absent:1\" is not present with pull policy of Never"
    );

    let mut reasons: Vec<String> = Vec::new();
    let backoff = node.wait_for(Duration::from_secs(40), "ImagePullBackOff", |n| {
        let pod = n.pod("unpullable")?;
        assert_eq!(phase(&pod), "Pending");
        let app = container_status(&pod, "app")?.clone();
        let reason = waiting_reason(&app).to_owned();
        if reason == "ErrImagePull" {
            assert!(!waiting_message(&app).is_empty(), "{app}");
        }
        if reasons.last() != Some(&reason) {
            reasons.push(reason.clone());
        }
        (reason == "ImagePullBackOff").then_some(app)
    });
    // ErrImagePull shows only until the next sync (upstream too), which another event may
    // bring within milliseconds; when polling misses it, the kubelet's log must have it.
    let first_failure = reasons.iter().position(|r| r == "ErrImagePull");
    let backoff_at = reasons.iter().position(|r| r == "ImagePullBackOff");
    assert!(
        first_failure.is_none_or(|f| Some(f) < backoff_at),
        "ErrImagePull must come first: {reasons:?}"
    );
    assert!(
        first_failure.is_some()
            || node.log().contains(
                r#"ErrImagePull: failed to pull and unpack image \"registry.invalid/nope:1\""#
            ),
        "ErrImagePull neither in /pods ({reasons:?}) nor in the kubelet log"
    );
    assert!(
        waiting_message(&backoff)
            .starts_with("Back-off pulling image \"registry.invalid/nope:1\": ErrImagePull: "),
        "{backoff}"
    );
}
