//! A static pod whose manifest goes away and comes back with the same content (hence the same
//! UID) runs again, on the fake runtime with everything else as the binary wires it: the pod
//! config merger, the sync loop, the pod workers, the kubelet's pod syncer and the real
//! [`LocalStatusManager`] (issue 18).
//!
//! One test per timing of the return: while the old run is still terminating, just after it
//! terminated, after housekeeping forgot the UID, and after a kubelet restart; and one for a
//! manifest whose content goes A → B → A. In each, the new run gets new containers and its
//! status starts over (never the old run's terminal phase).

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use kubelet_core::cache::PodCache;
use kubelet_core::config::{
    ChannelSource, ChannelSourceSender, FILE_SOURCE, Operation, static_pod,
};
use kubelet_core::kubelet::{self, KubeletBuilder, KubeletRuntimeHelper, KubeletService, Managers};
use kubelet_core::pod_workers;
use kubelet_core::runtime::{ContainerState, PodStatus, Runtime};
use kubelet_core::status::{StatusInputs, StatusManager, is_terminal_phase};
use kubelet_core::testing::{FakePleg, FakeRuntime, FakeVolumeManager};
use kubelet_core::volume::VolumeManager;
use kubelet_core::{PodExt, PodUid};
use kubelet_status::LocalStatusManager;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const NODE: &str = "node-a";

/// A static pod as the file source reads it from `<dir>/<name>.yaml`; `args` is the content
/// that decides the UID.
fn manifest(name: &str, args: &str) -> Pod {
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    \
         image: busybox:1.36\n    command: [sleep, \"{args}\"]\n"
    );
    let path = Path::new("/etc/kubernetes/manifests").join(format!("{name}.yaml"));
    static_pod::decode(yaml.as_bytes(), &path, NODE).expect("valid manifest")
}

/// Which phase every stored status write left for each pod, in order; `terminate_pod` writes
/// are marked so a test can tell the old run's last word from the new run's first.
#[derive(Default)]
struct Journal {
    entries: Mutex<Vec<(PodUid, Write)>>,
}

#[derive(Clone, Debug, PartialEq)]
enum Write {
    Set(Option<String>),
    Terminated(Option<String>),
}

impl Journal {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(PodUid, Write)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn of(&self, uid: &PodUid) -> Vec<Write> {
        self.lock()
            .iter()
            .filter(|(u, _)| u == uid)
            .map(|(_, w)| w.clone())
            .collect()
    }

    /// Phases stored for `uid` after its last `terminate_pod` (the current run).
    fn current_run(&self, uid: &PodUid) -> Vec<Option<String>> {
        let all = self.of(uid);
        let start = all
            .iter()
            .rposition(|w| matches!(w, Write::Terminated(_)))
            .map_or(0, |i| i + 1);
        all[start..]
            .iter()
            .map(|w| match w {
                Write::Set(p) | Write::Terminated(p) => p.clone(),
            })
            .collect()
    }
}

/// The real status manager, with every write journaled.
struct JournaledStatus {
    inner: Arc<LocalStatusManager>,
    journal: Arc<Journal>,
}

impl StatusManager for JournaledStatus {
    fn generate<'a>(
        &self,
        pod: &Pod,
        runtime: &PodStatus,
        inputs: &StatusInputs<'a>,
    ) -> ApiPodStatus {
        self.inner.generate(pod, runtime, inputs)
    }

    fn set_pod_status(&self, pod: &Pod, status: ApiPodStatus) {
        self.inner.set_pod_status(pod, status);
        let phase = self.inner.pod_status(&pod.uid()).and_then(|s| s.phase);
        self.journal.lock().push((pod.uid(), Write::Set(phase)));
    }

    fn pod_status(&self, uid: &PodUid) -> Option<ApiPodStatus> {
        self.inner.pod_status(uid)
    }

    fn terminate_pod(&self, pod: &Pod) {
        self.inner.terminate_pod(pod);
        let phase = self.inner.pod_status(&pod.uid()).and_then(|s| s.phase);
        self.journal
            .lock()
            .push((pod.uid(), Write::Terminated(phase)));
    }

    fn remove_orphaned_statuses(&self, keep: &HashSet<PodUid>) {
        self.inner.remove_orphaned_statuses(keep);
    }
}

/// One kubelet process over a runtime that outlives it.
struct Node {
    runtime: FakeRuntime,
    status: Arc<LocalStatusManager>,
    journal: Arc<Journal>,
    kubelet: KubeletService,
    files: ChannelSourceSender,
    _root: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kubelet.token().cancel();
    }
}

impl Node {
    /// A kubelet started on `runtime`, assembled by the core [`KubeletBuilder`] as the binary's
    /// node builder does; housekeeping every `housekeeping_period`.
    async fn start(runtime: FakeRuntime, housekeeping_period: Duration) -> Self {
        let root = tempfile::tempdir().expect("tempdir");
        let rt: Arc<dyn Runtime> = Arc::new(runtime.clone());
        let cache = PodCache::new();
        let pleg: Arc<dyn kubelet_core::pleg::Pleg> =
            Arc::new(FakePleg::new(rt.clone(), cache.clone()));
        let status = Arc::new(LocalStatusManager::new());
        let journal = Arc::new(Journal::default());
        let volumes: Arc<dyn VolumeManager> = Arc::new(FakeVolumeManager::default());
        let managers = Managers {
            runtime: rt,
            volumes: volumes.clone(),
            status: Arc::new(JournaledStatus {
                inner: status.clone(),
                journal: journal.clone(),
            }),
            pleg,
            cache,
            helper: Arc::new(KubeletRuntimeHelper::new(volumes)),
            probes: Arc::new(kubelet_core::probe::NoProbes),
            cgroups: Arc::new(kubelet_core::cm::Noop::default()),
        };
        let (source, files) = ChannelSource::new(FILE_SOURCE);
        let (_pleg_events_tx, pleg_events) = mpsc::channel(1);
        let (_probe_results, probe_updates) = kubelet_core::probe::Results::new();
        let mut kubelet = KubeletBuilder::new(managers, pleg_events, probe_updates)
            .source(Box::new(source))
            // The static pods carry `spec.nodeName`; predicate admission checks it.
            .node_name(NODE)
            .root_dir(root.path())
            .node_ips(vec!["192.0.2.1".into()])
            .sync_loop_config(kubelet::sync_loop::Config {
                housekeeping_period,
                ..Default::default()
            })
            .build(&TaskTracker::new(), &CancellationToken::new());
        kubelet.spawn().await;
        Self {
            runtime,
            status,
            journal,
            kubelet,
            files,
            _root: root,
        }
    }

    /// The file source's snapshot: exactly `pods` are in the manifest directory.
    async fn manifests(&self, pods: &[&Pod]) {
        self.files
            .send(Operation::Set, pods.iter().map(|p| (*p).clone()).collect())
            .await
            .expect("config merger running");
    }

    fn phase(&self, uid: &PodUid) -> Option<String> {
        self.status.pod_status(uid).and_then(|s| s.phase)
    }

    /// The running `app` container of `uid`, if any.
    fn running_app(&self, uid: &PodUid) -> Option<(String, u32)> {
        self.runtime
            .running_pods()
            .into_iter()
            .find(|p| &p.uid == uid)?
            .containers
            .into_iter()
            .find(|c| c.name == "app" && c.state == ContainerState::Running)
            .map(|c| (c.id, 0))
    }

    /// Waits until the pod runs (runtime and status) in a container other than `previous`,
    /// and returns its container ID and the restart count its status reports.
    async fn wait_running(&self, uid: &PodUid, previous: Option<&str>) -> (String, i32) {
        eventually(
            Duration::from_secs(60),
            "pod running in a new container",
            || {
                self.running_app(uid)
                    .is_some_and(|(id, _)| Some(id.as_str()) != previous)
                    && self.phase(uid).as_deref() == Some("Running")
            },
        )
        .await;
        let (id, _) = self.running_app(uid).expect("running");
        let restarts = self
            .status
            .pod_status(uid)
            .and_then(|s| s.container_statuses)
            .and_then(|c| c.into_iter().find(|c| c.name == "app"))
            .map_or(-1, |c| c.restart_count);
        (id, restarts)
    }

    async fn wait_stopped(&self, uid: &PodUid) {
        eventually(Duration::from_secs(60), "pod stopped", || {
            self.running_app(uid).is_none()
        })
        .await;
    }

    /// Asserts the current run of `uid` went `Pending` → `Running`, never showing a terminal
    /// phase.
    fn assert_fresh_run(&self, uid: &PodUid) {
        let run = self.journal.current_run(uid);
        assert!(
            run.iter().all(|p| !is_terminal(p.as_deref())),
            "the new run inherited a terminal phase: {run:?} (all writes: {:?})",
            self.journal.of(uid)
        );
        assert_eq!(run.first().cloned().flatten().as_deref(), Some("Pending"));
        assert_eq!(run.last().cloned().flatten().as_deref(), Some("Running"));
        let status = self.status.pod_status(uid).expect("status");
        assert!(!is_terminal_phase(&status), "{status:?}");
    }

    async fn stop(self) -> FakeRuntime {
        self.kubelet.stop(Duration::from_secs(10)).await;
        self.runtime.clone()
    }
}

fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Failed" | "Succeeded"))
}

/// Polls `cond` while the paused clock advances in 10 ms steps; fails after `limit`.
async fn eventually(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Housekeeping that never comes back after its first pass (at start): the UID stays known.
const NO_HOUSEKEEPING: Duration = Duration::from_secs(24 * 3600);

#[tokio::test(start_paused = true)]
async fn readded_while_the_old_run_is_still_terminating_runs_again() {
    let n = Node::start(FakeRuntime::new(), NO_HOUSEKEEPING).await;
    let p = manifest("web", "3600");
    let uid = p.uid();
    n.manifests(&[&p]).await;
    let (first, _) = n.wait_running(&uid, None).await;

    // The kill fails for now: the old run stays in its termination.
    n.runtime.fail(
        "kill_pod",
        kubelet_core::runtime::Error::Unavailable("slow".into()),
    );
    n.manifests(&[]).await;
    eventually(Duration::from_secs(5), "termination started", || {
        n.kubelet.kubelet().workers().is_termination_requested(&uid)
    })
    .await;
    n.manifests(&[&p]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(n.running_app(&uid).is_some(), "still terminating");
    n.runtime.clear_failure("kill_pod");

    let (_, restarts) = n.wait_running(&uid, Some(&first)).await;
    assert_eq!(
        restarts, 0,
        "the new run starts without the old run's containers"
    );
    n.assert_fresh_run(&uid);
    n.stop().await;
}

#[tokio::test(start_paused = true)]
async fn readded_just_after_the_old_run_terminated_runs_again() {
    let n = Node::start(FakeRuntime::new(), NO_HOUSEKEEPING).await;
    let p = manifest("web", "3600");
    let uid = p.uid();
    n.manifests(&[&p]).await;
    let (first, _) = n.wait_running(&uid, None).await;

    n.manifests(&[]).await;
    eventually(Duration::from_secs(60), "old run finished", || {
        n.kubelet.kubelet().workers().phase(&uid) == Some(pod_workers::WorkerPhase::Finished)
    })
    .await;
    assert_eq!(
        n.phase(&uid).as_deref(),
        Some("Failed"),
        "the old run's end"
    );
    n.manifests(&[&p]).await;

    n.wait_running(&uid, Some(&first)).await;
    n.assert_fresh_run(&uid);
    n.stop().await;
}

#[tokio::test(start_paused = true)]
async fn readded_after_housekeeping_forgot_the_uid_runs_again() {
    let n = Node::start(FakeRuntime::new(), Duration::from_secs(2)).await;
    let p = manifest("web", "3600");
    let uid = p.uid();
    n.manifests(&[&p]).await;
    let (first, _) = n.wait_running(&uid, None).await;

    n.manifests(&[]).await;
    eventually(Duration::from_secs(60), "UID forgotten", || {
        n.kubelet.kubelet().workers().phase(&uid).is_none() && n.status.pod_status(&uid).is_none()
    })
    .await;
    n.manifests(&[&p]).await;

    let (_, restarts) = n.wait_running(&uid, Some(&first)).await;
    assert_eq!(restarts, 0, "the old run's containers were removed with it");
    n.assert_fresh_run(&uid);
    n.stop().await;
}

#[tokio::test(start_paused = true)]
async fn readded_after_a_kubelet_restart_runs_again() {
    let n = Node::start(FakeRuntime::new(), Duration::from_secs(2)).await;
    let p = manifest("web", "3600");
    let uid = p.uid();
    n.manifests(&[&p]).await;
    let (first, _) = n.wait_running(&uid, None).await;
    n.manifests(&[]).await;
    eventually(Duration::from_secs(60), "old run removed", || {
        n.runtime.running_pods().iter().all(|r| r.uid != uid)
    })
    .await;
    let runtime = n.stop().await;

    let n = Node::start(runtime, Duration::from_secs(2)).await;
    n.manifests(&[&p]).await;
    let (_, restarts) = n.wait_running(&uid, Some(&first)).await;
    assert_eq!(restarts, 0);
    n.assert_fresh_run(&uid);
    n.stop().await;
}

#[tokio::test(start_paused = true)]
async fn content_flipped_a_b_a_runs_each_time() {
    let n = Node::start(FakeRuntime::new(), NO_HOUSEKEEPING).await;
    let a = manifest("web", "3600");
    let b = manifest("web", "3601");
    assert_ne!(a.uid(), b.uid(), "content decides the UID");
    n.manifests(&[&a]).await;
    let (mut last_a, _) = n.wait_running(&a.uid(), None).await;
    let mut last_b: Option<String> = None;
    for _ in 0..3 {
        n.manifests(&[&b]).await;
        last_b = Some(n.wait_running(&b.uid(), last_b.as_deref()).await.0);
        n.wait_stopped(&a.uid()).await;
        n.assert_fresh_run(&b.uid());
        n.manifests(&[&a]).await;
        let (id, restarts) = n.wait_running(&a.uid(), Some(&last_a)).await;
        assert_eq!(restarts, 0, "A's new run starts without its old containers");
        last_a = id;
        n.wait_stopped(&b.uid()).await;
        n.assert_fresh_run(&a.uid());
    }
    n.stop().await;
}
