//! A stateful in-memory [`Runtime`] (upstream `pkg/kubelet/container/testing/fake_runtime.go`):
//! the production pod engine ([`KubeRuntimeManager`]) over a [`FakeRuntimeService`], so
//! tests of the pod workers, the sync loop, the PLEG and the probes run the real pod logic
//! (sandboxes, init containers, restart rules, crash-loop backoff, graceful kills).
//!
//! It records the calls a test asserts on (the [`Runtime`] calls, and the backend calls that
//! create, start and stop things), can be scripted to fail [`Runtime`] calls or to make
//! containers exit, and gives the backend ([`FakeRuntime::service`]) for finer scripting.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;

use super::fake_service::{FakeRuntimeService, ServiceCall, clone_error};
use crate::backoff::Backoff;
use crate::kuberuntime::api::ContainerFilter;
use crate::kuberuntime::{KubeRuntimeManager, Options, convert};
use crate::pod::PodUid;
use crate::runtime::{
    Error, ExecResult, ObservedExit, PodStatus, PodSyncResult, Result, RunningPod, Runtime,
    RuntimeHelper, RuntimeStatus, StreamOptions, Version,
};

/// One call made to the fake, for assertions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// `version`.
    Version,
    /// `status`.
    Status,
    /// `get_pods`.
    GetPods,
    /// `get_pod_status` for a pod UID.
    GetPodStatus(PodUid),
    /// A sandbox was created for a pod UID.
    RunSandbox(PodUid),
    /// A container was started: pod UID and container name.
    StartContainer(PodUid, String),
    /// A container was stopped: container ID and grace period.
    StopContainer(String, i64),
    /// A sandbox was stopped.
    StopSandbox(String),
    /// A pod's objects were removed.
    RemovePod(PodUid),
    /// A command was run in a container (`exec_sync`, probes and hooks): container ID and
    /// command.
    ExecSync(String, Vec<String>),
}

impl Call {
    /// The call a backend call is recorded as, if it is one a test asserts on.
    fn from_service(call: ServiceCall) -> Option<Call> {
        Some(match call {
            ServiceCall::RunPodSandbox { pod_uid, .. } => Call::RunSandbox(pod_uid),
            ServiceCall::StartContainer { pod_uid, name, .. } => {
                Call::StartContainer(pod_uid, name)
            }
            ServiceCall::StopContainer {
                id,
                timeout_seconds,
            } => Call::StopContainer(id, timeout_seconds),
            ServiceCall::StopPodSandbox(id) => Call::StopSandbox(id),
            ServiceCall::ExecSync { id, cmd } => Call::ExecSync(id, cmd),
            _ => return None,
        })
    }
}

#[derive(Debug, Default)]
struct State {
    calls: Vec<Call>,
    fail: std::collections::HashMap<&'static str, Error>,
    down: bool,
}

/// The engine's pod log directory, a fresh temporary directory removed with the last clone.
#[derive(Debug)]
struct PodLogsDir(PathBuf);

impl PodLogsDir {
    fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("kubelet-fake-runtime-{}-{n}", std::process::id());
        Self(std::env::temp_dir().join(name))
    }
}

impl Drop for PodLogsDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A stateful fake runtime: the pod engine over a [`FakeRuntimeService`]. Cheap to clone;
/// clones share state.
#[derive(Clone, Debug)]
pub struct FakeRuntime {
    engine: KubeRuntimeManager<FakeRuntimeService>,
    service: FakeRuntimeService,
    state: Arc<Mutex<State>>,
    _logs: Arc<PodLogsDir>,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeRuntime {
    /// An empty, ready runtime.
    pub fn new() -> Self {
        let logs = PodLogsDir::new();
        let service = FakeRuntimeService::new();
        let options = Options::default()
            .with_pod_logs_dir(&logs.0)
            .with_resolv_conf("")
            .with_node_name("fake-node");
        Self {
            engine: KubeRuntimeManager::new(service.clone(), options),
            service,
            state: Arc::default(),
            _logs: Arc::new(logs),
        }
    }

    /// Records the engine's events with `recorder` (e.g. a
    /// [`CollectingRecorder`](super::CollectingRecorder)).
    #[must_use]
    pub fn with_event_recorder(mut self, recorder: Arc<dyn crate::events::EventRecorder>) -> Self {
        self.engine = self.engine.with_event_recorder(recorder);
        self
    }

    /// Counts the engine's pod and container starts in `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: crate::metrics::KubeletMetrics) -> Self {
        self.engine = self.engine.with_metrics(metrics);
        self
    }

    /// The backend under the engine, to script what [`FakeRuntime`] has no shortcut for.
    pub fn service(&self) -> &FakeRuntimeService {
        &self.service
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        let mut st = self.lock();
        self.absorb_service_calls(&mut st);
        st.calls.clone()
    }

    /// Forgets recorded calls.
    pub fn clear_calls(&self) {
        let mut st = self.lock();
        self.service.clear_calls();
        st.calls.clear();
    }

    /// Makes every later call of `op` (a [`Runtime`] method name such as `"sync_pod"`) fail
    /// with `err` until [`FakeRuntime::clear_failure`].
    pub fn fail(&self, op: &'static str, err: Error) {
        self.lock().fail.insert(op, err);
    }

    /// Stops failing `op`.
    pub fn clear_failure(&self, op: &'static str) {
        self.lock().fail.remove(op);
    }

    /// Simulates the runtime being down (every call is `Unavailable`) or back up.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
        self.service.set_down(down);
    }

    /// Sets what `status` reports.
    pub fn set_runtime_status(&self, status: RuntimeStatus) {
        self.service.set_runtime_status(status);
    }

    /// Makes the running container `name` of pod `uid` exit with `code`. Returns `false` when
    /// there is no such running container.
    pub fn exit_container(&self, uid: &PodUid, name: &str, code: i32) -> bool {
        self.service.exit_pod_container(uid, name, code)
    }

    /// The pods the fake holds, as `get_pods(true)` would list them (whether or not the
    /// runtime is down).
    pub fn running_pods(&self) -> Vec<RunningPod> {
        let sandboxes = self
            .service
            .sandboxes()
            .iter()
            .map(|s| s.to_pod_sandbox())
            .collect();
        let containers = self.service.containers().list(&ContainerFilter::default());
        convert::group_pods(sandboxes, containers)
    }

    /// Number of containers ever started for the pod (all instances, including exited).
    pub fn container_count(&self, uid: &PodUid) -> usize {
        self.service.started_count(uid)
    }

    /// Scripts what `exec_sync` in container `id` returns (default: exit code 0, no output).
    pub fn set_exec_result(&self, id: &str, result: ExecResult) {
        self.service.set_exec_result(id, result);
    }

    /// Moves the backend calls made so far into the log.
    fn absorb_service_calls(&self, st: &mut State) {
        let calls = self.service.take_calls();
        st.calls
            .extend(calls.into_iter().filter_map(Call::from_service));
    }

    /// Records `call` (after the backend calls made so far), then fails it if the runtime is
    /// down or a failure of `op` is scripted.
    fn enter(&self, op: &'static str, call: Option<Call>) -> Result<()> {
        let mut st = self.lock();
        self.absorb_service_calls(&mut st);
        st.calls.extend(call);
        if st.down {
            return Err(Error::Unavailable("fake runtime is down".into()));
        }
        match st.fail.get(op) {
            Some(e) => Err(clone_error(e)),
            None => Ok(()),
        }
    }

    /// Moves the backend calls an engine call made into the log, and returns its result.
    fn leave<T>(&self, result: Result<T>) -> Result<T> {
        let mut st = self.lock();
        self.absorb_service_calls(&mut st);
        result
    }
}

#[async_trait]
impl Runtime for FakeRuntime {
    async fn version(&self) -> Result<Version> {
        self.enter("version", Some(Call::Version))?;
        self.leave(self.engine.version().await)
    }

    async fn status(&self) -> Result<RuntimeStatus> {
        self.enter("status", Some(Call::Status))?;
        self.leave(self.engine.status().await)
    }

    async fn get_pods(&self, all: bool) -> Result<Vec<RunningPod>> {
        self.enter("get_pods", Some(Call::GetPods))?;
        self.leave(self.engine.get_pods(all).await)
    }

    async fn get_pod_status(&self, uid: &PodUid, name: &str, namespace: &str) -> Result<PodStatus> {
        self.enter("get_pod_status", Some(Call::GetPodStatus(uid.clone())))?;
        self.leave(self.engine.get_pod_status(uid, name, namespace).await)
    }

    fn observe_exit(&self, exit: ObservedExit) {
        self.engine.observe_exit(exit);
    }

    async fn sync_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        helper: Arc<dyn RuntimeHelper>,
        backoff: &Backoff,
    ) -> Result<PodSyncResult> {
        self.enter("sync_pod", None)?;
        self.leave(self.engine.sync_pod(pod, status, helper, backoff).await)
    }

    async fn kill_pod<'a>(
        &self,
        pod: Option<&'a Pod>,
        running: &RunningPod,
        grace_period_seconds: Option<i64>,
    ) -> Result<()> {
        self.enter("kill_pod", None)?;
        self.leave(
            self.engine
                .kill_pod(pod, running, grace_period_seconds)
                .await,
        )
    }

    async fn delete_container(&self, id: &str) -> Result<()> {
        self.enter("delete_container", None)?;
        self.leave(self.engine.delete_container(id).await)
    }

    async fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
        max_output: usize,
    ) -> Result<ExecResult> {
        if let Err(e) = self.enter("exec_sync", None) {
            let call = Call::ExecSync(container_id.to_owned(), cmd.to_vec());
            self.lock().calls.push(call);
            return Err(e);
        }
        self.leave(
            self.engine
                .exec_sync(container_id, cmd, timeout, max_output)
                .await,
        )
    }

    async fn remove_pod(&self, running: &RunningPod) -> Result<()> {
        self.enter("remove_pod", Some(Call::RemovePod(running.uid.clone())))?;
        self.leave(self.engine.remove_pod(running).await)
    }

    async fn garbage_collect(
        &self,
        policy: crate::container_gc::Policy,
        all_sources_ready: bool,
        evict_non_deleted_pods: bool,
        pods: Arc<dyn crate::container_gc::PodStateProvider>,
    ) -> Result<()> {
        self.enter("garbage_collect", None)?;
        self.leave(
            self.engine
                .garbage_collect(policy, all_sources_ready, evict_non_deleted_pods, pods)
                .await,
        )
    }

    async fn get_exec(
        &self,
        container_id: &str,
        cmd: &[String],
        streams: StreamOptions,
    ) -> Result<String> {
        self.enter("get_exec", None)?;
        self.leave(self.engine.get_exec(container_id, cmd, streams).await)
    }

    async fn get_attach(&self, container_id: &str, streams: StreamOptions) -> Result<String> {
        self.enter("get_attach", None)?;
        self.leave(self.engine.get_attach(container_id, streams).await)
    }

    async fn get_port_forward(&self, sandbox_id: &str, ports: &[i32]) -> Result<String> {
        self.enter("get_port_forward", None)?;
        self.leave(self.engine.get_port_forward(sandbox_id, ports).await)
    }

    async fn list_images(&self) -> Result<Vec<crate::kuberuntime::api::Image>> {
        self.enter("list_images", None)?;
        self.leave(self.engine.list_images().await)
    }

    async fn remove_image(&self, image: &str) -> Result<()> {
        self.enter("remove_image", None)?;
        self.leave(self.engine.remove_image(image).await)
    }

    async fn container_log(&self, container_id: &str) -> Result<crate::runtime::ContainerLog> {
        self.enter("container_log", None)?;
        self.leave(self.engine.container_log(container_id).await)
    }

    async fn reopen_container_log(&self, container_id: &str) -> Result<()> {
        self.enter("reopen_container_log", None)?;
        self.leave(self.engine.reopen_container_log(container_id).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::PodExt;
    use crate::runtime::ContainerState;
    use crate::testing::{FakeRuntimeHelper, pod};

    async fn sync(rt: &FakeRuntime, p: &Pod) -> PodSyncResult {
        let status = rt
            .get_pod_status(&p.uid(), "web", "default")
            .await
            .expect("status");
        let backoff = Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
        rt.sync_pod(p, &status, Arc::new(FakeRuntimeHelper), &backoff)
            .await
            .expect("sync")
    }

    #[tokio::test(start_paused = true)]
    async fn the_engine_runs_a_pod_on_the_fake_backend_and_the_calls_are_logged() {
        let rt = FakeRuntime::new();
        let p = pod("web");
        let result = sync(&rt, &p).await;
        assert_eq!(result.started, ["app"]);
        assert_eq!(
            rt.calls(),
            [
                Call::GetPodStatus(p.uid()),
                Call::RunSandbox(p.uid()),
                Call::StartContainer(p.uid(), "app".into()),
            ]
        );
        let pods = rt.running_pods();
        assert_eq!((pods.len(), pods[0].name.as_str()), (1, "web"));
        assert_eq!(pods[0].containers[0].state, ContainerState::Running);
        assert_eq!(rt.container_count(&p.uid()), 1);

        assert!(rt.exit_container(&p.uid(), "app", 1));
        assert!(!rt.exit_container(&p.uid(), "app", 1), "no longer running");
        rt.clear_calls();
        let running = rt.get_pods(true).await.expect("pods").remove(0);
        rt.kill_pod(Some(&p), &running, Some(5))
            .await
            .expect("killed");
        assert!(
            rt.calls()
                .contains(&Call::StopSandbox(running.sandboxes[0].id.clone()))
        );
        rt.remove_pod(&running).await.expect("removed");
        assert!(rt.running_pods().is_empty());
    }

    /// Ephemeral containers join a running pod once, in their target's process namespace;
    /// a missing target is upstream's `CreateContainerConfigError`; none is ever restarted.
    #[tokio::test(start_paused = true)]
    async fn ephemeral_containers_start_once_next_to_their_target() {
        use k8s_openapi::api::core::v1::EphemeralContainer;
        let metrics = crate::metrics::KubeletMetrics::default();
        let rt = FakeRuntime::new().with_metrics(metrics.clone());
        let mut p = pod("web");
        sync(&rt, &p).await;
        let debug = |name: &str, target: &str| EphemeralContainer {
            name: name.into(),
            image: Some("busybox".into()),
            target_container_name: Some(target.into()),
            ..Default::default()
        };
        p.spec.as_mut().expect("spec").ephemeral_containers =
            Some(vec![debug("debugger", "app"), debug("ghost", "missing")]);
        let result = sync(&rt, &p).await;
        assert_eq!(result.started, ["debugger"]);
        assert_eq!(result.container_errors.len(), 1);
        assert_eq!(result.container_errors[0].container, "ghost");
        assert_eq!(
            result.container_errors[0].reason,
            "CreateContainerConfigError"
        );
        assert_eq!(
            result.container_errors[0].message,
            "unable to find target container missing"
        );
        assert_eq!(metrics.started_containers_total("ephemeral_container"), 2);
        let pods = rt.running_pods();
        let id_of = |name: &str| {
            pods[0]
                .containers
                .iter()
                .find(|c| c.name == name)
                .map(|c| c.id.clone())
                .expect(name)
        };
        assert_eq!(
            rt.service().target_of(&id_of("debugger")),
            Some(id_of("app"))
        );

        // Exited with a failure under `restartPolicy: Always`: still not restarted, and the
        // pod's app container is left alone.
        p.spec.as_mut().expect("spec").ephemeral_containers = Some(vec![debug("debugger", "app")]);
        assert!(rt.exit_container(&p.uid(), "debugger", 1));
        let result = sync(&rt, &p).await;
        assert!(result.started.is_empty(), "{result:?}");
        assert!(!result.changed, "{result:?}");
        assert_eq!(rt.container_count(&p.uid()), 2);
    }

    /// Upstream's `kubelet_started_pods_total`, `kubelet_started_containers_total` and their
    /// errors: every sandbox creation, every container start past the restart backoff.
    #[tokio::test(start_paused = true)]
    async fn the_engine_counts_pod_and_container_starts_and_their_errors() {
        use crate::testing::ServiceOp;
        let metrics = crate::metrics::KubeletMetrics::default();
        let rt = FakeRuntime::new().with_metrics(metrics.clone());
        let p = pod("web");
        sync(&rt, &p).await;
        assert_eq!(metrics.started_pods.get(), 1);
        assert_eq!(metrics.started_pods_errors.get(), 0);
        assert_eq!(metrics.started_containers_total("container"), 1);
        // The first restart is immediate, the next one is refused by the back-off: not a start.
        let backoff = Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
        for _ in 0..2 {
            assert!(rt.exit_container(&p.uid(), "app", 1));
            let status = rt
                .get_pod_status(&p.uid(), "web", "default")
                .await
                .expect("status");
            rt.sync_pod(&p, &status, Arc::new(FakeRuntimeHelper), &backoff)
                .await
                .expect("sync");
        }
        assert_eq!(metrics.started_containers_total("container"), 2);
        assert_eq!(metrics.started_containers_total("init_container"), 0);

        let db = pod("db");
        rt.service().fail_next(
            ServiceOp::CreateContainer,
            1,
            Error::Runtime {
                op: "CreateContainer",
                message: "no space left".into(),
            },
        );
        let status = rt
            .get_pod_status(&db.uid(), "db", "default")
            .await
            .expect("status");
        rt.sync_pod(&db, &status, Arc::new(FakeRuntimeHelper), &backoff)
            .await
            .expect("sync");
        assert_eq!(metrics.started_pods.get(), 2);
        assert_eq!(metrics.started_containers_total("container"), 3);
        assert_eq!(
            metrics.started_containers_errors_total("container", "CreateContainerError"),
            1
        );

        let broken = pod("broken");
        rt.service().fail_next(
            ServiceOp::RunPodSandbox,
            1,
            Error::Runtime {
                op: "RunPodSandbox",
                message: "cni failed".into(),
            },
        );
        let status = rt
            .get_pod_status(&broken.uid(), "broken", "default")
            .await
            .expect("status");
        let _ = rt
            .sync_pod(&broken, &status, Arc::new(FakeRuntimeHelper), &backoff)
            .await;
        assert_eq!(metrics.started_pods.get(), 3);
        assert_eq!(metrics.started_pods_errors.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_engine_records_upstreams_events_for_a_start_a_crash_loop_and_a_kill() {
        use crate::events::reasons;
        use crate::testing::CollectingRecorder;
        let events = CollectingRecorder::default();
        let rt = FakeRuntime::new().with_event_recorder(Arc::new(events.clone()));
        let p = pod("web");
        let backoff = Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
        let status = rt
            .get_pod_status(&p.uid(), "web", "default")
            .await
            .expect("status");
        rt.sync_pod(&p, &status, Arc::new(FakeRuntimeHelper), &backoff)
            .await
            .expect("sync");
        let app = events.for_field("spec.containers{app}");
        let reasons: Vec<&str> = app.iter().map(|(r, _)| r.as_str()).collect();
        assert!(
            reasons
                == [
                    reasons::PULLING_IMAGE,
                    reasons::PULLED_IMAGE,
                    reasons::CREATED_CONTAINER,
                    reasons::STARTED_CONTAINER
                ]
                || reasons
                    == [
                        reasons::PULLED_IMAGE,
                        reasons::CREATED_CONTAINER,
                        reasons::STARTED_CONTAINER
                    ],
            "{app:?}"
        );
        assert!(events.has(reasons::CREATED_CONTAINER, "Created container app"));
        assert!(events.has(reasons::STARTED_CONTAINER, "Started container app"));
        let created = events
            .events()
            .into_iter()
            .find(|e| e.reason == reasons::CREATED_CONTAINER)
            .expect("created");
        assert_eq!(created.object.uid, p.metadata.uid);
        assert_eq!(created.object.kind.as_deref(), Some("Pod"));

        let running = rt.get_pods(true).await.expect("pods").remove(0);
        rt.kill_pod(Some(&p), &running, Some(5))
            .await
            .expect("killed");
        assert!(events.has(reasons::KILLING_CONTAINER, "Stopping container app"));

        // Another pod's container keeps exiting: the first restart is immediate, the next is
        // inside the back-off window.
        let db = pod("db");
        for exit in [false, true, true] {
            if exit {
                assert!(rt.exit_container(&db.uid(), "app", 1));
            }
            let status = rt
                .get_pod_status(&db.uid(), "db", "default")
                .await
                .expect("status");
            rt.sync_pod(&db, &status, Arc::new(FakeRuntimeHelper), &backoff)
                .await
                .expect("sync");
        }
        let message = format!(
            "Back-off restarting failed container app in pod db_default({})",
            db.uid()
        );
        assert!(
            events.has(reasons::BACK_OFF_START_CONTAINER, &message),
            "{:?}",
            events.reasons()
        );
        assert!(events.has(
            reasons::PULLED_IMAGE,
            "Container image \"busybox:1.36\" already present on machine"
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn scripted_failures_and_a_down_runtime_fail_runtime_calls() {
        let rt = FakeRuntime::new();
        rt.fail("get_pods", Error::Unavailable("boom".into()));
        assert!(rt.get_pods(true).await.is_err());
        assert_eq!(rt.calls(), [Call::GetPods], "failed calls are logged");
        rt.clear_failure("get_pods");
        assert!(rt.get_pods(true).await.is_ok());

        rt.set_down(true);
        assert!(matches!(rt.version().await, Err(Error::Unavailable(_))));
        let cmd = vec!["true".to_owned()];
        assert!(rt.exec_sync("c1", &cmd, Duration::ZERO, 10).await.is_err());
        assert_eq!(
            rt.calls().last(),
            Some(&Call::ExecSync("c1".into(), cmd.clone()))
        );
        rt.set_down(false);
        assert_eq!(rt.version().await.expect("up").runtime_name, "fake");

        rt.set_exec_result(
            "c1",
            ExecResult {
                exit_code: 3,
                ..Default::default()
            },
        );
        let result = rt.exec_sync("c1", &cmd, Duration::ZERO, 10).await;
        assert_eq!(result.expect("scripted").exit_code, 3);
    }
}
