//! Issue 18 acceptance against a real containerd: static pods whose manifests are moved out of
//! `--pod-manifest-path` and back (the documented way to restart a static pod) run again, on
//! new containers, round after round; so does a manifest whose content goes A → B → A. The
//! same content gives the same UID, so every round is a new run of a UID the kubelet already
//! terminated.
//!
//! Round timings are printed (`--nocapture`) for the record; nothing asserts on them.

use crate::support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::{Node, container_status, phase, uid};

/// Pods moved out and back together.
const PODS: usize = 30;

/// Rounds of move-out / move-back after the first start.
const ROUNDS: usize = 4;

/// Generous: 30 sandboxes on a loaded 2-core machine.
const LIMIT: Duration = Duration::from_secs(240);

/// A pod whose one container sleeps for `seconds` and ignores SIGTERM (PID 1), so a kill
/// takes the 1 s grace period and ends in SIGKILL (exit 137), as in the issue.
fn sleeper(name: &str, seconds: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    \
         image: docker.io/library/busybox:1.36\n    imagePullPolicy: IfNotPresent\n    \
         command: [\"sleep\", \"{seconds}\"]\n"
    )
}

/// What `/pods` says of one running pod.
#[derive(Clone, Debug)]
struct Run {
    uid: String,
    container: String,
    restarts: i64,
}

/// The pod `name` if it is `Running` with its `app` container running in a container other
/// than `previous`.
fn running_anew(node: &Node, name: &str, previous: Option<&Run>) -> Option<Run> {
    let pod = node.pod(name)?;
    let app = container_status(&pod, "app")?;
    let container = app["containerID"].as_str()?.to_owned();
    let fresh = previous.is_none_or(|p| p.container != container);
    (phase(&pod) == "Running" && app["state"]["running"].is_object() && fresh).then(|| Run {
        uid: uid(&pod),
        container,
        restarts: app["restartCount"].as_i64().unwrap_or(-1),
    })
}

/// Waits until every pod of `names` runs anew (see [`running_anew`]).
fn wait_all_running_anew(
    node: &Node,
    names: &[String],
    previous: &HashMap<String, Run>,
    what: &str,
) -> HashMap<String, Run> {
    node.wait_for(LIMIT, what, |n| {
        names
            .iter()
            .map(|name| running_anew(n, name, previous.get(name)).map(|r| (name.clone(), r)))
            .collect()
    })
}

/// Moves manifest files between the manifest directory and a directory beside it, with
/// `rename` as `mv` does.
struct Mover {
    manifests: PathBuf,
    parked: PathBuf,
}

impl Mover {
    fn new(node: &Node) -> Self {
        let parked = node.dir.join("parked");
        let _ = std::fs::remove_dir_all(&parked);
        std::fs::create_dir_all(&parked).expect("parked dir");
        Self {
            manifests: node.manifests.clone(),
            parked,
        }
    }

    fn move_out(&self, files: &[String]) {
        for f in files {
            std::fs::rename(self.manifests.join(f), self.parked.join(f)).expect("move out");
        }
    }

    fn move_back(&self, files: &[String]) {
        for f in files {
            std::fs::rename(self.parked.join(f), self.manifests.join(f)).expect("move back");
        }
    }
}

/// How many containers (pause containers included) containerd holds.
fn containers(node: &Node) -> usize {
    node.testbed
        .ctr(&["containers", "ls", "-q"])
        .expect("ctr containers ls")
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

fn none_listed(node: &Node, names: &[String]) -> Option<()> {
    let pods = node.pods()?;
    let full: Vec<String> = names
        .iter()
        .map(|n| format!("{n}-{}", support::NODE))
        .collect();
    pods.iter()
        .all(|p| !full.iter().any(|f| p["metadata"]["name"] == f.as_str()))
        .then_some(())
}

#[test]
fn static_pods_moved_out_and_back_run_again_every_round() {
    let node = Node::start("readd");
    let names: Vec<String> = (0..PODS).map(|i| format!("s{i:02}")).collect();
    let files: Vec<String> = names.iter().map(|n| format!("{n}.yaml")).collect();
    let mover = Mover::new(&node);

    let start = Instant::now();
    for (name, file) in names.iter().zip(&files) {
        node.write_manifest(file, &sleeper(name, 3600));
    }
    let mut runs = wait_all_running_anew(&node, &names, &HashMap::new(), "first start");
    let first = start.elapsed();
    eprintln!("round 0 (first start): all {PODS} Running after {first:?}");
    let uids: HashMap<String, String> = runs
        .iter()
        .map(|(n, r)| (n.clone(), r.uid.clone()))
        .collect();

    for round in 1..=ROUNDS {
        // Odd rounds wait until the old run is gone entirely (its containers removed); even
        // rounds bring the manifests back as soon as the pods left `/pods`, while their
        // containers are still being killed.
        let wait_for_teardown = round % 2 == 1;
        let out = Instant::now();
        mover.move_out(&files);
        node.wait_for(LIMIT, "pods gone from /pods", |n| none_listed(n, &names));
        let unlisted = out.elapsed();
        let mut torn_down = None;
        if wait_for_teardown {
            node.wait_for(LIMIT, "every container removed", |n| {
                (containers(n) == 0).then_some(())
            });
            torn_down = Some(out.elapsed());
        }
        let tasks_left = node.running_tasks();
        let back = Instant::now();
        mover.move_back(&files);
        let next = wait_all_running_anew(
            &node,
            &names,
            &runs,
            &format!("round {round}: all Running on new containers"),
        );
        let up = back.elapsed();
        for (name, run) in &next {
            assert_eq!(&run.uid, &uids[name], "same content, same UID");
            assert_eq!(
                run.restarts, 0,
                "{name}: a new run, not a container restart"
            );
        }
        let mut restarts: Vec<i64> = next.values().map(|r| r.restarts).collect();
        restarts.sort_unstable();
        restarts.dedup();
        eprintln!(
            "round {round}: moved out -> unlisted after {unlisted:?}, all removed after \
             {torn_down:?} ({tasks_left} tasks still running at move-back); moved back -> \
             all {PODS} Running on new containers after {up:?} (first start took {first:?}); \
             restartCounts {restarts:?}"
        );
        runs = next;
    }
    assert_eq!(
        node.running_tasks(),
        2 * PODS,
        "one app and one pause container per pod, nothing left over"
    );
}

#[test]
fn manifest_content_flipped_a_b_a_runs_each_time() {
    let node = Node::start("flip");
    let a = sleeper("flip", 3600);
    let b = sleeper("flip", 3601);
    node.write_manifest("flip.yaml", &a);
    let mut last_a = node.wait_for(LIMIT, "A running", |n| running_anew(n, "flip", None));
    let mut last_b: Option<Run> = None;
    for round in 1..=ROUNDS {
        let t = Instant::now();
        node.write_manifest("flip.yaml", &b);
        let run_b = node.wait_for(LIMIT, "B running", |n| {
            running_anew(n, "flip", Some(&last_a)).filter(|r| r.uid != last_a.uid)
        });
        if let Some(prev) = &last_b {
            assert_eq!(run_b.uid, prev.uid, "B's content, B's UID");
            assert_ne!(run_b.container, prev.container, "new containers for B");
        }
        let to_b = t.elapsed();
        let t = Instant::now();
        node.write_manifest("flip.yaml", &a);
        let run_a = node.wait_for(LIMIT, "A running again", |n| {
            running_anew(n, "flip", Some(&last_a)).filter(|r| r.uid == last_a.uid)
        });
        eprintln!(
            "flip round {round}: A -> B Running after {to_b:?}, B -> A Running after {:?} \
             (A restartCount {})",
            t.elapsed(),
            run_a.restarts
        );
        assert_eq!(run_a.restarts, 0, "a new run of A, not a container restart");
        node.wait_for(LIMIT, "B's containers gone", |n| {
            n.runtime_containers(&run_b.uid).is_empty().then_some(())
        });
        last_a = run_a;
        last_b = Some(run_b);
    }
}

#[test]
fn static_pod_moved_back_after_a_kubelet_restart_runs_again() {
    let mut node = Node::start("readd-restart");
    let mover = Mover::new(&node);
    let files = ["r.yaml".to_owned()];
    node.write_manifest("r.yaml", &sleeper("r", 3600));
    let before = node.wait_for(LIMIT, "running", |n| running_anew(n, "r", None));
    mover.move_out(&files);
    node.wait_for(LIMIT, "containers removed", |n| {
        n.runtime_containers(&before.uid).is_empty().then_some(())
    });
    assert!(node.stop_kubelet().success());
    node.start_kubelet();
    node.wait_for(LIMIT, "kubelet serving", |n| n.pods());
    mover.move_back(&files);
    let after = node.wait_for(LIMIT, "running again", |n| {
        running_anew(n, "r", Some(&before))
    });
    assert_eq!(after.uid, before.uid);
    assert_eq!(after.restarts, 0, "a new run on a clean runtime");
}
