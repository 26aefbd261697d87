//! The event-driven PLEG against a real containerd 1.6: a container exiting on its own shows
//! as terminated in `/pods` long before the safety-net relist (or a resync) could have seen
//! it, and with containerd's event stream gone (containerd stopped and started again) the
//! kubelet falls back to relisting and loses no exit.

mod support;

use std::time::{Duration, Instant};

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
