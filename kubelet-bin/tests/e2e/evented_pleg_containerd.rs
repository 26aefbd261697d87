//! The event-driven PLEG against a real containerd 1.6: a container exiting on its own shows
//! as terminated in `/pods` long before the safety-net relist (or a resync) could have seen
//! it, and with containerd's event stream gone (containerd stopped and started again) the
//! kubelet falls back to relisting and loses no exit.

use crate::support;

use std::time::{Duration, Instant};

use kubelet_core::runtime::{ContainerState, Runtime};
use support::{Node, container_status, pod_yaml};

/// Safety-net relist period and sync frequency: far longer than any wait below, so only an
/// event (or, while the stream is down, the 1 s fallback relist) can explain what is seen.
const SLOW: &str = "2m";

fn running(node: &Node, pod: &str) -> Option<()> {
    let pod = node.pod(pod)?;
    container_status(&pod, "main")?["state"]["running"]
        .is_object()
        .then_some(())
}

fn exit_code(node: &Node, pod: &str) -> Option<i64> {
    let pod = node.pod(pod)?;
    container_status(&pod, "main")?["state"]["terminated"]["exitCode"].as_i64()
}

fn log_count(node: &Node, needle: &str) -> usize {
    node.log().matches(needle).count()
}

const STREAM_UP: &str = "runtime event stream is up";
const STREAM_DOWN: &str = "runtime event stream is down";

#[test]
fn exits_are_seen_from_events_and_survive_a_broken_stream() {
    let mut node = Node::new("evented-pleg");
    node.extra_args = [
        "--evented-pleg-relist-period",
        SLOW,
        "--sync-frequency",
        SLOW,
    ]
    .map(String::from)
    .to_vec();
    node.start_kubelet();
    node.wait_for(Duration::from_secs(15), "the event stream up", |n| {
        (log_count(n, STREAM_UP) == 1).then_some(())
    });
    assert!(node.log().contains("pleg: evented (containerd events)"));

    // 1. An exit on its own, seen from the event.
    node.write_manifest(
        "job.yaml",
        &pod_yaml("job", "Never", &[("main", "sleep 3; exit 7")]),
    );
    node.wait_for(Duration::from_secs(15), "job running", |n| {
        running(n, "job")
    });
    let seen_running = Instant::now();
    let code = node.wait_for(Duration::from_secs(6), "job terminated", |n| {
        exit_code(n, "job")
    });
    assert_eq!(code, 7);
    assert_eq!(
        log_count(&node, STREAM_DOWN),
        0,
        "the stream stayed up, so no fast relist ran"
    );
    assert!(
        seen_running.elapsed() < Duration::from_secs(6),
        "a 3 s container took {:?} to show as terminated",
        seen_running.elapsed()
    );

    // 2. containerd goes away: the stream breaks, the kubelet relists; the container exits
    // while containerd is down, and the exit is still reported once it is back.
    node.write_manifest(
        "late.yaml",
        &pod_yaml("late", "Never", &[("main", "sleep 5; exit 5")]),
    );
    node.wait_for(Duration::from_secs(15), "late running", |n| {
        running(n, "late")
    });
    let late_running = Instant::now();
    node.testbed.stop().expect("stop containerd");
    node.wait_for(Duration::from_secs(5), "the stream seen down", |n| {
        (log_count(n, STREAM_DOWN) >= 1).then_some(())
    });
    std::thread::sleep(Duration::from_secs(6).saturating_sub(late_running.elapsed()));
    node.testbed.restart().expect("start containerd again");
    let code = node.wait_for(Duration::from_secs(10), "late terminated", |n| {
        exit_code(n, "late")
    });
    assert_eq!(code, 5);

    // 3. The kubelet subscribes again and exits are event-driven again.
    node.wait_for(Duration::from_secs(20), "the event stream up again", |n| {
        (log_count(n, STREAM_UP) >= 2).then_some(())
    });
    node.write_manifest(
        "again.yaml",
        &pod_yaml("again", "Never", &[("main", "sleep 2; exit 9")]),
    );
    node.wait_for(Duration::from_secs(15), "again running", |n| {
        running(n, "again")
    });
    let code = node.wait_for(Duration::from_secs(5), "again terminated", |n| {
        exit_code(n, "again")
    });
    assert_eq!(code, 9);
}

#[test]
fn evented_pleg_can_be_turned_off() {
    let mut node = Node::new("evented-pleg-off");
    node.extra_args = vec!["--evented-pleg=false".into()];
    node.start_kubelet();
    node.wait_for(Duration::from_secs(15), "the PLEG choice logged", |n| {
        n.log().contains("pleg: generic (relisting)").then_some(())
    });
    node.write_manifest("job.yaml", &pod_yaml("job", "Never", &[("main", "exit 4")]));
    let code = node.wait_for(Duration::from_secs(15), "job terminated", |n| {
        exit_code(n, "job")
    });
    assert_eq!(code, 4);
    assert_eq!(log_count(&node, STREAM_UP), 0);
}

/// A pod with one container `main` running `script` under a memory limit.
fn limited_pod(name: &str, memory: &str, script: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: Never\n  \
         containers:\n  - name: main\n    image: docker.io/library/busybox:1.36\n    \
         imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", {script:?}]\n    \
         resources: {{limits: {{memory: {memory}}}}}\n"
    )
}

/// containerd's CRI view of a pod's exited container `main`, read by a fresh engine (which
/// has observed no exit event) once containerd shows the exit (within 10 s): (exit code,
/// reason, message, finished at).
fn cri_view(node: &Node, uid: &str, name: &str) -> (i32, String, String, String) {
    let rt = tokio::runtime::Runtime::new().expect("tokio");
    rt.block_on(async {
        let runtime = kubelet_cri::connect(
            &node.testbed.endpoint(),
            kubelet_cri::Options::default().with_node_name(support::NODE),
        )
        .expect("connect");
        let deadline = Instant::now() + Duration::from_secs(10);
        let c = loop {
            let status = runtime
                .get_pod_status(&uid.into(), name, "default")
                .await
                .expect("status");
            let c = status.container("main").expect("container main").clone();
            if c.state == ContainerState::Exited {
                break c;
            }
            assert!(
                Instant::now() < deadline,
                "containerd never showed the exit: {c:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let at = c.finished_at.expect("finished_at");
        (
            c.exit_code,
            c.reason.clone(),
            c.message.clone(),
            at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        )
    })
}

/// An exit is shown from containerd's `/tasks/exit` event, before its CRI plugin shows it;
/// what `/pods` says is what containerd itself reports once it caught up: the exit code,
/// `Error` (or `Completed`), `OOMKilled` after the kernel's OOM kill, the termination
/// message and the exit time; and a container whose exit was seen early never shows as
/// running again.
#[test]
fn an_exit_from_events_says_what_containerd_says() {
    let node = Node::start("exit-details");
    node.write_manifest(
        "ends.yaml",
        &pod_yaml(
            "ends",
            "Never",
            &[("main", "sleep 1; echo bye > /dev/termination-log; exit 3")],
        ),
    );
    node.write_manifest(
        "hog.yaml",
        &limited_pod("hog", "24Mi", "sleep 1; head -c 200m /dev/zero | tail"),
    );
    node.write_manifest(
        "done.yaml",
        &pod_yaml("done", "Never", &[("main", "sleep 1")]),
    );
    for (pod, code, reason, message) in [
        ("ends", 3, "Error", "bye\n"),
        ("hog", 137, "OOMKilled", ""),
        ("done", 0, "Completed", ""),
    ] {
        let terminated = node.wait_for(Duration::from_secs(30), pod, |n| {
            let p = n.pod(pod)?;
            let t = container_status(&p, "main")?["state"]["terminated"].clone();
            t.is_object().then_some((t, support::uid(&p)))
        });
        let (t, uid) = terminated;
        assert_eq!(t["exitCode"], code, "{pod}: {t}");
        assert_eq!(t["reason"], reason, "{pod}: {t}");
        assert_eq!(
            t["message"].as_str().unwrap_or_default(),
            message,
            "{pod}: {t}"
        );
        let cri = cri_view(&node, &uid, pod);
        assert_eq!(
            (cri.0, cri.1.as_str(), cri.2.as_str()),
            (code, reason, message),
            "{pod}: containerd's own view"
        );
        assert_eq!(t["finishedAt"], cri.3, "{pod}: the exit time");
    }
}
