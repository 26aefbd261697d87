//! A stateful in-memory [`Runtime`] (upstream `pkg/kubelet/container/testing/fake_runtime.go`).
//!
//! It keeps sandboxes and containers per pod, applies the same restart rules as a real
//! runtime ([`should_container_be_restarted`], spec hash, crash-loop backoff), records every
//! call, and can be scripted to fail calls or to make containers exit.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;

use crate::backoff::Backoff;
use crate::container::{hash_container, should_container_be_restarted};
use crate::kuberuntime::actions::backoff_key;
use crate::pod::{PodExt, PodUid};
use crate::runtime::{
    ContainerState, ContainerStatus, ContainerSyncError, Error, ExecResult, PodStatus,
    PodSyncResult, Result, RunningPod, Runtime, RuntimeHelper, RuntimeStatus, SandboxState,
    SandboxStatus, Version,
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
    /// A command was run in a container (`exec_sync`): container ID and command.
    ExecSync(String, Vec<String>),
}

#[derive(Clone, Debug, Default)]
struct FakePod {
    name: String,
    namespace: String,
    sandboxes: Vec<SandboxStatus>,
    containers: Vec<ContainerStatus>,
}

#[derive(Debug, Default)]
struct State {
    pods: BTreeMap<PodUid, FakePod>,
    calls: Vec<Call>,
    fail: HashMap<&'static str, Error>,
    down: bool,
    next_id: u64,
    runtime_status: RuntimeStatus,
    exec: HashMap<String, ExecResult>,
}

/// A stateful fake runtime. Cheap to clone; clones share state.
#[derive(Clone, Debug)]
pub struct FakeRuntime {
    state: Arc<Mutex<State>>,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new()
    }
}

fn clone_error(e: &Error) -> Error {
    match e {
        Error::Unavailable(m) => Error::Unavailable(m.clone()),
        Error::NotFound(m) => Error::NotFound(m.clone()),
        Error::InvalidSpec { field, reason } => Error::InvalidSpec {
            field: field.clone(),
            reason: reason.clone(),
        },
        Error::Runtime { op, message } => Error::Runtime {
            op,
            message: message.clone(),
        },
        Error::Unsupported(op) => Error::Unsupported(op),
    }
}

impl FakeRuntime {
    /// An empty, ready runtime.
    pub fn new() -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                runtime_status: RuntimeStatus {
                    runtime_ready: true,
                    network_ready: true,
                    message: String::new(),
                },
                ..Default::default()
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Forgets recorded calls.
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// Makes every later call of `op` (a method name such as `"sync_pod"`) fail with `err`
    /// until [`FakeRuntime::clear_failure`].
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
    }

    /// Sets what `status` reports.
    pub fn set_runtime_status(&self, status: RuntimeStatus) {
        self.lock().runtime_status = status;
    }

    /// Makes the running container `name` of pod `uid` exit with `code`. Returns `false` when
    /// there is no such running container.
    pub fn exit_container(&self, uid: &PodUid, name: &str, code: i32) -> bool {
        let mut st = self.lock();
        let Some(pod) = st.pods.get_mut(uid) else {
            return false;
        };
        let Some(c) = pod
            .containers
            .iter_mut()
            .find(|c| c.name == name && c.state == ContainerState::Running)
        else {
            return false;
        };
        c.state = ContainerState::Exited;
        c.exit_code = code;
        c.reason = if code == 0 { "Completed" } else { "Error" }.into();
        c.finished_at = Some(crate::time::now());
        true
    }

    /// The pods the fake holds, as `get_pods(true)` would list them.
    pub fn running_pods(&self) -> Vec<RunningPod> {
        let st = self.lock();
        st.pods.iter().map(|(uid, p)| to_running(uid, p)).collect()
    }

    /// Number of containers ever started for the pod (all instances, including exited).
    pub fn container_count(&self, uid: &PodUid) -> usize {
        self.lock().pods.get(uid).map_or(0, |p| p.containers.len())
    }

    /// Scripts what `exec_sync` in container `id` returns (default: exit code 0, no output).
    pub fn set_exec_result(&self, id: &str, result: ExecResult) {
        self.lock().exec.insert(id.to_owned(), result);
    }

    fn enter(&self, op: &'static str, call: Call) -> Result<std::sync::MutexGuard<'_, State>> {
        let mut st = self.lock();
        st.calls.push(call);
        if st.down {
            return Err(Error::Unavailable("fake runtime is down".into()));
        }
        if let Some(e) = st.fail.get(op) {
            return Err(clone_error(e));
        }
        Ok(st)
    }
}

fn to_running(uid: &PodUid, p: &FakePod) -> RunningPod {
    let mut running = to_status(uid, p).to_running_pod();
    let sandbox = p
        .sandboxes
        .first()
        .map(|s| s.id.clone())
        .unwrap_or_default();
    for c in &mut running.containers {
        c.sandbox_id = sandbox.clone();
    }
    running
}

fn to_status(uid: &PodUid, p: &FakePod) -> PodStatus {
    let mut containers = p.containers.clone();
    containers.reverse(); // newest first
    PodStatus {
        uid: uid.clone(),
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        ips: p
            .sandboxes
            .first()
            .map(|s| s.ips.clone())
            .unwrap_or_default(),
        sandboxes: p.sandboxes.clone(),
        containers,
    }
}

#[async_trait]
impl Runtime for FakeRuntime {
    async fn version(&self) -> Result<Version> {
        drop(self.enter("version", Call::Version)?);
        Ok(Version {
            runtime_name: "fake".into(),
            runtime_version: "0.1.0".into(),
            runtime_api_version: "v1".into(),
        })
    }

    async fn status(&self) -> Result<RuntimeStatus> {
        let st = self.enter("status", Call::Status)?;
        Ok(st.runtime_status.clone())
    }

    async fn get_pods(&self, all: bool) -> Result<Vec<RunningPod>> {
        let st = self.enter("get_pods", Call::GetPods)?;
        Ok(st
            .pods
            .iter()
            .map(|(uid, p)| to_running(uid, p))
            .filter(|p| all || !p.is_empty_or_stopped())
            .collect())
    }

    async fn get_pod_status(&self, uid: &PodUid, name: &str, namespace: &str) -> Result<PodStatus> {
        let st = self.enter("get_pod_status", Call::GetPodStatus(uid.clone()))?;
        Ok(match st.pods.get(uid) {
            Some(p) => to_status(uid, p),
            None => PodStatus {
                uid: uid.clone(),
                name: name.into(),
                namespace: namespace.into(),
                ..Default::default()
            },
        })
    }

    async fn sync_pod(
        &self,
        pod: &Pod,
        _status: &PodStatus,
        helper: Arc<dyn RuntimeHelper>,
        backoff: &Backoff,
    ) -> Result<PodSyncResult> {
        let uid = pod.uid();
        let mut result = PodSyncResult::default();
        let now = crate::time::now();
        let mut calls = Vec::new();
        // The helper is async: ask it without holding the state lock.
        let (next, ips) = {
            let mut st = self.enter("sync_pod", Call::GetPodStatus(uid.clone()))?;
            st.calls.pop();
            st.next_id += 1;
            let next = st.next_id;
            let entry = st.pods.entry(uid.clone()).or_insert_with(|| FakePod {
                name: pod.name_or_empty().into(),
                namespace: pod.namespace_or_default().into(),
                ..Default::default()
            });
            let ready = entry
                .sandboxes
                .first()
                .is_some_and(|s| s.state == SandboxState::Ready);
            if !ready {
                let attempt = entry.sandboxes.first().map_or(0, |s| s.attempt + 1);
                for c in &mut entry.containers {
                    c.state = ContainerState::Exited;
                }
                entry.sandboxes.insert(
                    0,
                    SandboxStatus {
                        id: format!("sandbox-{next}"),
                        state: SandboxState::Ready,
                        attempt,
                        created_at: Some(now),
                        ips: if pod.host_network() {
                            vec![]
                        } else {
                            vec![format!("10.0.{}.{}", next / 250, next % 250 + 1)]
                        },
                        host_network: pod.host_network(),
                    },
                );
                calls.push(Call::RunSandbox(uid.clone()));
                result.changed = true;
            }
            let ips = entry
                .sandboxes
                .first()
                .map(|s| s.ips.clone())
                .unwrap_or_default();
            (next, ips)
        };
        let mut options = HashMap::new();
        for spec in pod.containers() {
            let opts = helper.generate_run_container_options(pod, spec, &ips).await;
            options.insert(spec.name.clone(), opts);
        }
        let mut st = self.lock();
        let Some(entry) = st.pods.get_mut(&uid) else {
            return Ok(result);
        };
        let current = to_status(&uid, entry);
        for (i, spec) in pod.containers().iter().enumerate() {
            let hash = hash_container(spec);
            let prev = current.container(&spec.name);
            let hash_changed =
                prev.is_some_and(|p| p.state == ContainerState::Running && p.hash != hash);
            if !hash_changed && !should_container_be_restarted(spec, pod, &current) {
                continue;
            }
            if let Some(p) = prev.filter(|p| p.state == ContainerState::Exited) {
                let key = backoff_key(pod, spec);
                if let Some(left) = backoff.remaining(&key) {
                    result.container_errors.push(ContainerSyncError {
                        container: spec.name.clone(),
                        reason: "CrashLoopBackOff".into(),
                        message: format!(
                            "back-off {}s restarting failed container={} pod={}({})",
                            left.as_secs(),
                            spec.name,
                            pod.full_name(),
                            uid
                        ),
                    });
                    continue;
                }
                let _ = p;
                backoff.next(&key);
            }
            if let Some(Err(message)) = options.get(&spec.name) {
                result.container_errors.push(ContainerSyncError {
                    container: spec.name.clone(),
                    reason: "CreateContainerConfigError".into(),
                    message: message.clone(),
                });
                continue;
            }
            let restart_count = prev.map_or(0, |p| p.restart_count + 1);
            for c in entry.containers.iter_mut().filter(|c| c.name == spec.name) {
                if c.state == ContainerState::Running {
                    c.state = ContainerState::Exited;
                    c.exit_code = 137;
                    c.finished_at = Some(now);
                }
            }
            entry.containers.push(ContainerStatus {
                id: format!("container-{next}-{i}"),
                name: spec.name.clone(),
                state: ContainerState::Running,
                created_at: Some(now),
                started_at: Some(now),
                image: spec.image.clone().unwrap_or_default(),
                image_ref: format!("sha256:{:064x}", hash),
                restart_count,
                hash,
                ..Default::default()
            });
            calls.push(Call::StartContainer(uid.clone(), spec.name.clone()));
            result.started.push(spec.name.clone());
            result.changed = true;
        }
        st.calls.extend(calls);
        Ok(result)
    }

    async fn kill_pod<'a>(
        &self,
        pod: Option<&'a Pod>,
        running: &RunningPod,
        grace_period_seconds: Option<i64>,
    ) -> Result<()> {
        let grace = grace_period_seconds
            .or_else(|| pod.map(crate::pod::termination_grace_period_seconds))
            .unwrap_or(30);
        let mut st = self.enter("kill_pod", Call::GetPods)?;
        st.calls.pop();
        let mut calls = Vec::new();
        if let Some(p) = st.pods.get_mut(&running.uid) {
            let now = crate::time::now();
            for c in &mut p.containers {
                if c.state == ContainerState::Running {
                    c.state = ContainerState::Exited;
                    c.exit_code = 137;
                    c.reason = "Error".into();
                    c.finished_at = Some(now);
                    calls.push(Call::StopContainer(c.id.clone(), grace));
                }
            }
            for s in &mut p.sandboxes {
                if s.state == SandboxState::Ready {
                    s.state = SandboxState::NotReady;
                    calls.push(Call::StopSandbox(s.id.clone()));
                }
            }
        }
        st.calls.extend(calls);
        Ok(())
    }

    async fn delete_container(&self, id: &str) -> Result<()> {
        let mut st = self.enter("delete_container", Call::GetPods)?;
        st.calls.pop();
        for p in st.pods.values_mut() {
            p.containers.retain(|c| c.id != id);
        }
        Ok(())
    }

    async fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        _timeout: std::time::Duration,
        max_output: usize,
    ) -> Result<ExecResult> {
        let st = self.enter(
            "exec_sync",
            Call::ExecSync(container_id.to_owned(), cmd.to_vec()),
        )?;
        let mut r = st.exec.get(container_id).cloned().unwrap_or_default();
        r.stdout.truncate(max_output);
        r.stderr.truncate(max_output);
        Ok(r)
    }

    async fn remove_pod(&self, running: &RunningPod) -> Result<()> {
        let mut st = self.enter("remove_pod", Call::RemovePod(running.uid.clone()))?;
        st.pods.remove(&running.uid);
        Ok(())
    }
}
