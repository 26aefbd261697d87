//! The sync loop, pod workers and pod syncer together, on the fake runtime, assembled by
//! [`KubeletBuilder`] as every node is.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::*;
use crate::cache::PodCache;
use crate::config::{ChannelSource, ChannelSourceSender, Operation};
use crate::pleg::{Event, EventType};
use crate::runtime::{ContainerState, RuntimeStatus};
use crate::testing::{FakePleg, FakeRuntime, FakeStatusManager, FakeVolumeManager, pod, pod_with};

struct Node {
    runtime: FakeRuntime,
    status: FakeStatusManager,
    volumes: FakeVolumeManager,
    pods: ChannelSourceSender,
    events: mpsc::Sender<Event>,
    health: sync_loop::Health,
    token: CancellationToken,
    probe_results: crate::probe::Results,
    cgroups: crate::cm::FakePodContainerManager,
    recorder: crate::testing::CollectingRecorder,
    kubelet: Kubelet,
    _root: tempfile::TempDir,
}

/// Records the probe manager calls of the syncer and housekeeping.
#[derive(Default)]
struct CountingProbes {
    calls: std::sync::Mutex<Vec<&'static str>>,
}

impl CountingProbes {
    fn count(&self, what: &str) -> usize {
        self.calls
            .lock()
            .map(|c| c.iter().filter(|c| **c == what).count())
            .unwrap_or_default()
    }

    fn push(&self, what: &'static str) {
        if let Ok(mut c) = self.calls.lock() {
            c.push(what);
        }
    }
}

impl ProbeManager for CountingProbes {
    fn add_pod(&self, _pod: &Pod) {
        self.push("add");
    }
    fn stop_liveness_and_startup(&self, _pod: &Pod) {
        self.push("stop");
    }
    fn remove_pod(&self, _pod: &Pod) {
        self.push("remove");
    }
    fn cleanup_pods(&self, _desired: &HashSet<PodUid>) {
        self.push("cleanup");
    }
}

async fn node() -> Node {
    node_with(
        Arc::new(crate::probe::NoProbes),
        FakeRuntime::new(),
        AdmitChain::default(),
    )
    .await
}

/// A node over `runtime` (scripted before the kubelet's first runtime check), `probes` and
/// the admit handlers of `admit`. Housekeeping waits for the test's first `SET`.
async fn node_with(probes: Arc<dyn ProbeManager>, runtime: FakeRuntime, admit: AdmitChain) -> Node {
    node_built(probes, runtime, |b| b.admit_chain(admit)).await
}

/// A node over `runtime` and `probes`, with `customize` applied to its builder.
async fn node_built(
    probes: Arc<dyn ProbeManager>,
    runtime: FakeRuntime,
    customize: impl FnOnce(KubeletBuilder) -> KubeletBuilder,
) -> Node {
    let recorder = crate::testing::CollectingRecorder::default();
    let runtime = runtime.with_event_recorder(Arc::new(recorder.clone()));
    let root = tempfile::tempdir().expect("tempdir");
    let status = FakeStatusManager::default();
    let volumes = FakeVolumeManager::default();
    let cache = PodCache::new();
    let rt: Arc<dyn Runtime> = Arc::new(runtime.clone());
    let pleg: Arc<dyn crate::pleg::Pleg> = Arc::new(FakePleg::new(rt.clone(), cache.clone()));
    let vm: Arc<dyn VolumeManager> = Arc::new(volumes.clone());
    let cgroups = crate::cm::FakePodContainerManager::new();
    let managers = Managers {
        runtime: rt,
        volumes: vm.clone(),
        status: Arc::new(status.clone()),
        pleg,
        cache,
        helper: Arc::new(KubeletRuntimeHelper::new(vm).with_cgroups(Arc::new(cgroups.clone()))),
        probes,
        cgroups: Arc::new(cgroups.clone()),
    };
    let (probe_results, probe_updates) = crate::probe::Results::new();
    let (events, events_rx) = mpsc::channel(16);
    let (source, pods) = ChannelSource::new(crate::config::FILE_SOURCE);
    let token = CancellationToken::new();
    let builder = KubeletBuilder::new(managers, events_rx, probe_updates)
        .source(Box::new(source))
        .root_dir(root.path())
        .node_ips(vec!["192.0.2.1".into()])
        .event_recorder(Arc::new(recorder.clone()));
    let mut kubelet = customize(builder).build(&TaskTracker::new(), &token);
    kubelet.spawn().await;
    Node {
        runtime,
        status,
        volumes,
        pods,
        events,
        health: kubelet.health().clone(),
        token,
        probe_results,
        cgroups,
        recorder,
        kubelet: kubelet.kubelet().clone(),
        _root: root,
    }
}

impl Node {
    async fn send(&self, op: Operation, pods: Vec<Pod>) {
        self.pods.send(op, pods).await.expect("node running");
    }
}

/// Polls `cond` while the (paused) clock advances in small steps; fails after `limit`.
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

fn running(rt: &FakeRuntime, uid: &PodUid, name: &str) -> Option<(String, u32)> {
    rt.running_pods()
        .into_iter()
        .find(|p| &p.uid == uid)?
        .containers
        .into_iter()
        .filter(|c| c.name == name && c.state == ContainerState::Running)
        .map(|c| (c.id, 0))
        .next()
}

#[tokio::test(start_paused = true)]
async fn probe_manager_follows_the_pod_and_probe_updates_sync_it() {
    let probes = Arc::new(CountingProbes::default());
    let n = node_with(probes.clone(), FakeRuntime::new(), AdmitChain::default()).await;
    let p = pod("probed");
    n.send(Operation::Add, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "running", || {
        running(&n.runtime, &p.uid(), "app").is_some()
    })
    .await;
    assert!(probes.count("add") >= 1);
    // Let the pod settle, then a readiness change triggers a sync (add_pod runs on each sync)
    // long before the 10 s resync.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = probes.count("add");
    let (id, _) = running(&n.runtime, &p.uid(), "app").expect("running");
    n.probe_results
        .readiness
        .set(&id, crate::probe::ProbeResult::Success, &p.uid());
    eventually(
        Duration::from_millis(100),
        "a sync after the probe update",
        || probes.count("add") > before,
    )
    .await;
    // A liveness success is no reason to sync.
    let before = probes.count("add");
    n.probe_results
        .liveness
        .set(&id, crate::probe::ProbeResult::Success, &p.uid());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(probes.count("add"), before);
    n.send(Operation::Remove, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "probes removed", || {
        probes.count("remove") >= 1 && probes.count("stop") >= 1
    })
    .await;
    n.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn pod_cgroup_lives_from_before_the_sandbox_until_the_containers_are_gone() {
    let n = node().await;
    let p = pod("cg");
    n.send(Operation::Add, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "running", || {
        running(&n.runtime, &p.uid(), "app").is_some()
    })
    .await;
    assert_eq!(n.cgroups.created(), [p.uid()]);
    assert!(n.cgroups.destroyed().is_empty());
    assert!(
        n.cgroups.qos_updates() >= 1,
        "QoS cgroups sized before the pod cgroup"
    );
    n.send(Operation::Remove, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "cgroup removed", || {
        !n.cgroups.exists(&p.uid())
    })
    .await;
    assert!(running(&n.runtime, &p.uid(), "app").is_none());
    assert_eq!(n.cgroups.destroyed(), [p.uid()]);
    n.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn housekeeping_removes_cgroups_of_pods_nobody_knows() {
    use crate::cm::PodContainerManager;
    let n = node().await;
    let ghost = pod("ghost");
    n.cgroups.ensure_exists(&ghost).expect("fake");
    let p = pod("kept");
    n.send(Operation::Add, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "running", || {
        running(&n.runtime, &p.uid(), "app").is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        n.cgroups.exists(&ghost.uid()),
        "removed before sources were ready"
    );
    // The source's first snapshot (the same pods): sources are ready.
    n.send(Operation::Set, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "orphaned cgroup removed", || {
        !n.cgroups.exists(&ghost.uid())
    })
    .await;
    assert!(n.cgroups.exists(&p.uid()), "a desired pod keeps its cgroup");
    n.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn added_pod_runs_without_waiting_for_a_tick() {
    let n = node().await;
    let p = pod("web");
    let start = tokio::time::Instant::now();
    n.send(Operation::Add, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "pod running", || {
        n.status.phase(&p.uid()).as_deref() == Some("Running")
    })
    .await;
    // Only the runtime's first status check (at t=0) precedes the start: no relist or sync tick.
    assert!(
        start.elapsed() < Duration::from_millis(100),
        "took {:?}",
        start.elapsed()
    );
    assert!(running(&n.runtime, &p.uid(), "app").is_some());
    let app: Vec<_> = n
        .recorder
        .for_field("spec.containers{app}")
        .into_iter()
        .map(|(reason, _)| reason)
        .collect();
    assert_eq!(app, ["Pulling", "Pulled", "Created", "Started"]);
    assert!(n.recorder.has("Created", "Created container app"));
    assert!(n.recorder.has("Started", "Started container app"));
    n.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn pod_past_its_active_deadline_fails_on_the_next_tick() {
    let n = node().await;
    let mut p = pod("deadline");
    if let Some(s) = p.spec.as_mut() {
        s.active_deadline_seconds = Some(30);
    }
    n.send(Operation::Add, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "running", || {
        running(&n.runtime, &p.uid(), "app").is_some()
    })
    .await;
    let start = tokio::time::Instant::now();
    // The pod has been active for a minute as far as the wall clock goes.
    n.status.set_start_time(
        &p.uid(),
        crate::time::now() - k8s_openapi::jiff::SignedDuration::from_secs(60),
    );
    eventually(Duration::from_secs(5), "killed for its deadline", || {
        running(&n.runtime, &p.uid(), "app").is_none()
    })
    .await;
    assert!(
        start.elapsed() <= Duration::from_secs(2),
        "the sync tick, not the 60 s resync, noticed it: {:?}",
        start.elapsed()
    );
    assert_eq!(n.status.phase(&p.uid()).as_deref(), Some("Failed"));
    assert_eq!(
        n.status.reason(&p.uid()).as_deref(),
        Some(crate::active_deadline::REASON)
    );
    n.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn removed_pod_is_killed_removed_and_unmounted() {
    let n = node().await;
    let p = pod("gone");
    n.send(Operation::Add, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "running", || {
        running(&n.runtime, &p.uid(), "app").is_some()
    })
    .await;
    n.send(Operation::Remove, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "removed from runtime", || {
        n.runtime.running_pods().is_empty()
    })
    .await;
    eventually(Duration::from_secs(30), "volumes torn down", || {
        n.volumes.unmounted().contains(&p.uid())
    })
    .await;
    n.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn deleted_pod_is_killed_with_its_deletion_grace_and_reclaimed_last() {
    let n = node().await;
    let p = pod("deleted");
    n.send(Operation::Add, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "running", || {
        running(&n.runtime, &p.uid(), "app").is_some()
    })
    .await;
    let mut deleted = p.clone();
    deleted.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(crate::time::now()),
    );
    deleted.metadata.deletion_grace_period_seconds = Some(5);
    n.send(Operation::Delete, vec![deleted]).await;
    eventually(Duration::from_secs(30), "resources reclaimed", || {
        n.status.reclaimed().contains(&p.uid())
    })
    .await;
    // Killed with the deletion's grace period; volumes went before the reclaim was told.
    let stops: Vec<i64> = n
        .runtime
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            crate::testing::Call::StopContainer(_, grace) => Some(grace),
            _ => None,
        })
        .collect();
    assert_eq!(stops, [5]);
    assert!(n.volumes.unmounted().contains(&p.uid()));
    assert_eq!(n.status.reclaimed(), [p.uid()]);
    n.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn exited_container_is_restarted_on_pleg_event() {
    let n = node().await;
    let p = pod("crash");
    n.send(Operation::Add, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "running", || {
        running(&n.runtime, &p.uid(), "app").is_some()
    })
    .await;
    assert!(n.runtime.exit_container(&p.uid(), "app", 1));
    n.events
        .send(Event {
            id: p.uid(),
            kind: EventType::ContainerDied,
            container_id: None,
        })
        .await
        .expect("send");
    eventually(Duration::from_secs(30), "restarted", || {
        n.runtime.container_count(&p.uid()) == 2
    })
    .await;
    assert!(running(&n.runtime, &p.uid(), "app").is_some());
    n.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn run_once_pod_succeeds_and_keeps_its_exited_container() {
    let n = node().await;
    let p = pod_with("once", "Never", &["app"]);
    n.send(Operation::Add, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "running", || {
        running(&n.runtime, &p.uid(), "app").is_some()
    })
    .await;
    n.runtime.exit_container(&p.uid(), "app", 0);
    n.events
        .send(Event {
            id: p.uid(),
            kind: EventType::ContainerDied,
            container_id: None,
        })
        .await
        .expect("send");
    eventually(Duration::from_secs(30), "succeeded", || {
        n.status.phase(&p.uid()).as_deref() == Some("Succeeded")
    })
    .await;
    // Terminated but still desired: the exited container stays (exit code survives restarts).
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(n.runtime.container_count(&p.uid()), 1);
    n.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn changed_spec_replaces_the_container() {
    let n = node().await;
    let p = pod("edit");
    n.send(Operation::Add, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "running", || {
        running(&n.runtime, &p.uid(), "app").is_some()
    })
    .await;
    let before = running(&n.runtime, &p.uid(), "app");
    let mut p2 = p.clone();
    if let Some(spec) = p2.spec.as_mut() {
        spec.containers[0].image = Some("busybox:2".into());
    }
    n.send(Operation::Update, vec![p2.clone()]).await;
    eventually(Duration::from_secs(30), "replaced", || {
        let now = running(&n.runtime, &p.uid(), "app");
        now.is_some() && now != before
    })
    .await;
    n.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn orphan_runtime_pod_is_killed_once_sources_ready() {
    let n = node().await;
    // Put a pod in the runtime directly, bypassing config.
    let orphan = pod("stray");
    let helper: Arc<dyn crate::runtime::RuntimeHelper> =
        Arc::new(crate::testing::FakeRuntimeHelper);
    n.runtime
        .sync_pod(
            &orphan,
            &Default::default(),
            helper,
            &Backoff::crash_loop_default(),
        )
        .await
        .expect("sync");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        running(&n.runtime, &orphan.uid(), "app").is_some(),
        "killed before sources were ready"
    );
    // Make the kill fail for a while so housekeeping sees the orphan still running.
    n.runtime.fail(
        "kill_pod",
        crate::runtime::Error::Unavailable("slow".into()),
    );
    n.send(Operation::Set, vec![]).await;
    eventually(Duration::from_secs(30), "a housekeeping pass", || {
        n.volumes.last_active().is_some()
    })
    .await;
    let active = n.volumes.last_active().expect("pass");
    assert!(
        active.contains(&orphan.uid()),
        "a running orphan's volumes are kept until it is stopped"
    );
    n.runtime.clear_failure("kill_pod");
    eventually(Duration::from_secs(60), "orphan removed", || {
        n.runtime.running_pods().is_empty()
    })
    .await;
    n.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn runtime_outage_blocks_syncing_and_health_then_converges() {
    let runtime = FakeRuntime::new();
    runtime.set_down(true);
    let n = node_with(
        Arc::new(crate::probe::NoProbes),
        runtime,
        AdmitChain::default(),
    )
    .await;
    let p = pod("later");
    n.send(Operation::Add, vec![p.clone()]).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(n.health.check().is_err());
    assert!(n.runtime.running_pods().is_empty());
    n.runtime.set_down(false);
    n.runtime.set_runtime_status(RuntimeStatus {
        runtime_ready: true,
        network_ready: true,
        message: String::new(),
        handlers: Vec::new(),
    });
    eventually(Duration::from_secs(60), "running after outage", || {
        running(&n.runtime, &p.uid(), "app").is_some()
    })
    .await;
    assert!(n.health.check().is_ok());
    // Exactly one sandbox: nothing was duplicated by retries.
    let pods = n.runtime.running_pods();
    assert_eq!(pods[0].sandboxes.len(), 1);
    n.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn pods_with_unsafe_sysctls_are_rejected_and_never_started() {
    let n = node().await;
    let mut bad = pod("sysctl");
    bad.spec.as_mut().expect("spec").security_context =
        Some(k8s_openapi::api::core::v1::PodSecurityContext {
            sysctls: Some(vec![k8s_openapi::api::core::v1::Sysctl {
                name: "net.core.somaxconn".into(),
                value: "1024".into(),
            }]),
            ..Default::default()
        });
    let good = pod("good");
    n.send(Operation::Add, vec![bad.clone(), good.clone()])
        .await;
    eventually(Duration::from_secs(30), "the good pod runs", || {
        running(&n.runtime, &good.uid(), "app").is_some()
    })
    .await;
    let status = n
        .status
        .pod_status(&bad.uid())
        .expect("rejected pod has a status");
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(status.reason.as_deref(), Some("SysctlForbidden"));
    assert_eq!(
        status.message.as_deref(),
        Some("Pod was rejected: forbidden sysctl: \"net.core.somaxconn\" not allowlisted")
    );
    let rejected = n
        .recorder
        .events()
        .into_iter()
        .find(|e| e.reason == "SysctlForbidden")
        .expect("a rejection event");
    assert_eq!(rejected.event_type, crate::events::EventType::Warning);
    assert_eq!(rejected.object.uid, bad.metadata.uid);
    assert_eq!(
        rejected.message,
        "forbidden sysctl: \"net.core.somaxconn\" not allowlisted"
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(
        n.runtime.running_pods().iter().all(|p| p.uid != bad.uid()),
        "the rejected pod never reaches the runtime"
    );
    n.token.cancel();
}

/// Refuses every pod named `refused`, as an agent refuses pods it cannot run.
struct RefuseByName;

impl PodAdmitHandler for RefuseByName {
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> PodAdmitResult {
        if attrs.pod.metadata.name.as_deref() == Some("refused") {
            PodAdmitResult::reject("UnsupportedPod", "this agent runs no such pod")
        } else {
            PodAdmitResult::admit()
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_custom_admit_handler_fails_the_pod_and_the_runtime_never_sees_it() {
    let chain = AdmitChain::default().with(Arc::new(RefuseByName));
    let n = node_with(Arc::new(crate::probe::NoProbes), FakeRuntime::new(), chain).await;
    let (bad, good) = (pod("refused"), pod("welcome"));
    n.send(Operation::Add, vec![bad.clone(), good.clone()])
        .await;
    eventually(Duration::from_secs(30), "the admitted pod runs", || {
        running(&n.runtime, &good.uid(), "app").is_some()
    })
    .await;
    let status = n
        .status
        .pod_status(&bad.uid())
        .expect("rejected pod status");
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(status.reason.as_deref(), Some("UnsupportedPod"));
    assert_eq!(
        status.message.as_deref(),
        Some("Pod was rejected: this agent runs no such pod")
    );
    // Sync ticks, resyncs and housekeeping come and go; the runtime is never asked to run it.
    n.send(Operation::Set, vec![bad.clone(), good.clone()])
        .await;
    tokio::time::sleep(Duration::from_secs(90)).await;
    let for_bad: Vec<_> = n
        .runtime
        .calls()
        .into_iter()
        .filter(|c| {
            matches!(c, crate::testing::Call::RunSandbox(u) | crate::testing::Call::StartContainer(u, _) if *u == bad.uid())
        })
        .collect();
    assert!(for_bad.is_empty(), "{for_bad:?}");
    assert!(
        n.runtime
            .calls()
            .contains(&crate::testing::Call::RunSandbox(good.uid())),
        "the call log records sandboxes"
    );
    n.token.cancel();
}

mod container_gc;
mod mirror_pods;

/// Records `register_pod`/`unregister_pod` calls as `("register", uid)`.
#[derive(Clone, Default)]
struct RegisteringObjects {
    calls: Arc<std::sync::Mutex<Vec<(&'static str, String)>>>,
}

impl RegisteringObjects {
    fn count(&self, what: &str) -> usize {
        self.calls
            .lock()
            .map(|c| c.iter().filter(|(w, _)| *w == what).count())
            .unwrap_or_default()
    }

    fn push(&self, what: &'static str, pod: &Pod) {
        if let Ok(mut c) = self.calls.lock() {
            c.push((what, pod.uid().to_string()));
        }
    }
}

#[async_trait]
impl crate::objects::ObjectSource for RegisteringObjects {
    fn register_pod(&self, pod: &Pod) {
        self.push("register", pod);
    }
    fn unregister_pod(&self, pod: &Pod) {
        self.push("unregister", pod);
    }
    async fn config_map(
        &self,
        _: &str,
        _: &str,
    ) -> crate::objects::Result<Option<k8s_openapi::api::core::v1::ConfigMap>> {
        Ok(None)
    }
    async fn secret(
        &self,
        _: &str,
        _: &str,
    ) -> crate::objects::Result<Option<k8s_openapi::api::core::v1::Secret>> {
        Ok(None)
    }
    async fn service_account_token(
        &self,
        _: &crate::objects::TokenRequest,
    ) -> crate::objects::Result<Option<crate::objects::ServiceAccountToken>> {
        Ok(None)
    }
}

#[tokio::test(start_paused = true)]
async fn synced_pods_are_registered_with_the_object_source_until_terminated() {
    let objects = RegisteringObjects::default();
    let source = objects.clone();
    let n = node_built(
        Arc::new(crate::probe::NoProbes),
        FakeRuntime::new(),
        move |b| b.object_source(Arc::new(source)),
    )
    .await;
    let p = pod("refs");
    n.send(Operation::Add, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "running", || {
        running(&n.runtime, &p.uid(), "app").is_some()
    })
    .await;
    assert!(objects.count("register") >= 1, "registered before it ran");
    assert_eq!(objects.count("unregister"), 0);
    n.send(Operation::Remove, vec![p.clone()]).await;
    eventually(Duration::from_secs(30), "unregistered", || {
        objects.count("unregister") == 1
    })
    .await;
    assert!(
        n.volumes.unmounted().contains(&p.uid()),
        "unregistered after the volumes were torn down"
    );
    let calls = objects.calls.lock().map(|c| c.clone()).unwrap_or_default();
    assert_eq!(calls.last().map(|(w, _)| *w), Some("unregister"));
    n.token.cancel();
}
mod eviction;
