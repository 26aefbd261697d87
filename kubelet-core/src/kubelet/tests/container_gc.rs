//! Container garbage collection in the assembled kubelet: a crash-looping pod keeps its
//! running container and one dead one; a removed pod loses everything, its log directory
//! included; the pod states the collector reads follow the pod workers.

use super::*;
use crate::container_gc::{self, PodStateProvider};

const GC_PERIOD: Duration = Duration::from_secs(5);

async fn gc_node() -> Node {
    node_built(Arc::new(crate::probe::NoProbes), FakeRuntime::new(), |b| {
        b.container_gc(container_gc::Policy::default(), GC_PERIOD)
            .crash_loop_backoff(Duration::from_millis(100), Duration::from_millis(100))
    })
    .await
}

/// Containers of the pod the runtime holds now.
fn present(rt: &FakeRuntime, uid: &PodUid) -> usize {
    rt.running_pods()
        .iter()
        .filter(|p| &p.uid == uid)
        .map(|p| p.containers.len())
        .sum()
}

async fn crash(n: &Node, p: &Pod) {
    assert!(n.runtime.exit_container(&p.uid(), "app", 1));
    n.events
        .send(Event {
            id: p.uid(),
            kind: EventType::ContainerDied,
            container_id: None,
        })
        .await
        .expect("send");
}

#[tokio::test(start_paused = true)]
async fn a_crash_looping_pod_keeps_its_running_container_and_one_dead_one() {
    let n = gc_node().await;
    let p = pod("crash");
    n.send(Operation::Set, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "running", || {
        running(&n.runtime, &p.uid(), "app").is_some()
    })
    .await;
    for restarts in 1..=4 {
        crash(&n, &p).await;
        eventually(Duration::from_secs(60), "restarted", || {
            running(&n.runtime, &p.uid(), "app").is_some()
                && n.runtime.container_count(&p.uid()) > restarts
        })
        .await;
    }
    assert_eq!(n.runtime.container_count(&p.uid()), 5, "started");
    eventually(Duration::from_secs(30), "collected", || {
        present(&n.runtime, &p.uid()) == 2
    })
    .await;
    // Periods later it is still the running one and the newest dead one.
    tokio::time::sleep(GC_PERIOD * 2).await;
    assert_eq!(present(&n.runtime, &p.uid()), 2);
    assert!(running(&n.runtime, &p.uid(), "app").is_some());
    n.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn the_pod_states_follow_the_workers() {
    let n = node().await;
    let p = pod("web");
    let uid = p.uid();
    let states = n.kubelet.clone();
    // Before any source was seen nothing is gone.
    assert!(!states.should_pod_content_be_removed(&PodUid::from("never-seen")));
    n.send(Operation::Set, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "running", || {
        running(&n.runtime, &uid, "app").is_some()
    })
    .await;
    assert!(!states.should_pod_content_be_removed(&uid));
    assert!(!states.should_pod_runtime_be_removed(&uid));
    // Never seen, no source wants it, every source seen: gone.
    assert!(states.should_pod_content_be_removed(&PodUid::from("never-seen")));
    assert!(states.should_pod_runtime_be_removed(&PodUid::from("never-seen")));
    n.send(Operation::Set, vec![]).await;
    eventually(Duration::from_secs(60), "content may go", || {
        states.should_pod_content_be_removed(&uid)
    })
    .await;
    assert!(states.should_pod_runtime_be_removed(&uid));
    n.token.cancel();
}
