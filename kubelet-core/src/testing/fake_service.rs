//! [`FakeRuntimeService`]: a stateful in-memory [`RuntimeService`] (upstream
//! `cri-api/pkg/apis/testing/fake_runtime_service.go` and `fake_image_service.go`), so tests
//! run the real pod engine against a runtime they can script.
//!
//! It keeps sandboxes (IDs `sandbox-<n>`, pod IPs `10.0.x.y` unless host networking),
//! containers in a [`ContainerStore`] and images, and offers what a test needs to drive the
//! engine into every branch: scripted failures per operation (always, or the next N calls),
//! scripted container exits and sandbox deaths, scripted `exec_sync` results, images that are
//! present or fail to pull, a runtime that is down, and a log of every call.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;

use crate::kuberuntime::api::{
    Container, ContainerConfig, ContainerFilter, ContainerStatus, Image, PodSandbox,
    PodSandboxConfig, PodSandboxFilter, PodSandboxStatus, PullImageRequest, StreamRequest,
};
use crate::kuberuntime::store::labels_match;
use crate::kuberuntime::{ContainerRecord, ContainerStore, RuntimeService};
use crate::pod::{PodExt, PodUid};
use crate::runtime::{
    ContainerState, Error, ExecResult, Result, RuntimeStatus, SandboxState, Version,
};

/// What a pull without the credentials [`FakeRuntimeService::require_pull_credentials`] asks
/// for fails with (a registry's answer, as containerd reports it).
pub const UNAUTHORIZED: &str = "unexpected status code 401 Unauthorized";

/// The exit code a container stopped by the fake reports (killed: 128 + SIGKILL).
pub const STOPPED_EXIT_CODE: i32 = 137;

/// One [`RuntimeService`] operation, to script failures of and to filter the call log by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServiceOp {
    /// `version`.
    Version,
    /// `status`.
    Status,
    /// `run_pod_sandbox`.
    RunPodSandbox,
    /// `stop_pod_sandbox`.
    StopPodSandbox,
    /// `remove_pod_sandbox`.
    RemovePodSandbox,
    /// `pod_sandbox_status`.
    PodSandboxStatus,
    /// `list_pod_sandbox`.
    ListPodSandbox,
    /// `create_container`.
    CreateContainer,
    /// `start_container`.
    StartContainer,
    /// `stop_container`.
    StopContainer,
    /// `remove_container`.
    RemoveContainer,
    /// `list_containers`.
    ListContainers,
    /// `container_status`.
    ContainerStatus,
    /// `exec_sync`.
    ExecSync,
    /// `image_status`.
    ImageStatus,
    /// `pull_image`.
    PullImage,
    /// `list_images`.
    ListImages,
    /// `remove_image`.
    RemoveImage,
}

/// One call made to the fake, with the object it named, for assertions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceCall {
    /// `version`.
    Version,
    /// `status`.
    Status,
    /// `run_pod_sandbox` for a pod.
    RunPodSandbox {
        /// The pod's UID.
        pod_uid: PodUid,
        /// The sandbox attempt the engine asked for.
        attempt: u32,
    },
    /// `stop_pod_sandbox` of a sandbox ID.
    StopPodSandbox(String),
    /// `remove_pod_sandbox` of a sandbox ID.
    RemovePodSandbox(String),
    /// `pod_sandbox_status` of a sandbox ID.
    PodSandboxStatus(String),
    /// `list_pod_sandbox`.
    ListPodSandbox,
    /// `create_container` of a pod's container.
    CreateContainer {
        /// The pod's UID.
        pod_uid: PodUid,
        /// The container's name.
        name: String,
        /// The attempt (restart count) the engine asked for.
        attempt: u32,
    },
    /// `start_container`.
    StartContainer {
        /// The container's ID.
        id: String,
        /// Its pod's UID (empty for an unknown ID).
        pod_uid: PodUid,
        /// Its name (empty for an unknown ID).
        name: String,
    },
    /// `stop_container`.
    StopContainer {
        /// The container's ID.
        id: String,
        /// The grace period the engine gave.
        timeout_seconds: i64,
    },
    /// `remove_container` of a container ID.
    RemoveContainer(String),
    /// `list_containers`.
    ListContainers,
    /// `container_status` of a container ID.
    ContainerStatus(String),
    /// `exec_sync`.
    ExecSync {
        /// The container's ID.
        id: String,
        /// The command.
        cmd: Vec<String>,
    },
    /// `image_status` of an image reference.
    ImageStatus(String),
    /// `pull_image` of an image reference.
    PullImage(String),
    /// `list_images`.
    ListImages,
    /// `remove_image` of an image reference.
    RemoveImage(String),
}

impl ServiceCall {
    /// The operation this call was.
    pub fn op(&self) -> ServiceOp {
        match self {
            ServiceCall::Version => ServiceOp::Version,
            ServiceCall::Status => ServiceOp::Status,
            ServiceCall::RunPodSandbox { .. } => ServiceOp::RunPodSandbox,
            ServiceCall::StopPodSandbox(_) => ServiceOp::StopPodSandbox,
            ServiceCall::RemovePodSandbox(_) => ServiceOp::RemovePodSandbox,
            ServiceCall::PodSandboxStatus(_) => ServiceOp::PodSandboxStatus,
            ServiceCall::ListPodSandbox => ServiceOp::ListPodSandbox,
            ServiceCall::CreateContainer { .. } => ServiceOp::CreateContainer,
            ServiceCall::StartContainer { .. } => ServiceOp::StartContainer,
            ServiceCall::StopContainer { .. } => ServiceOp::StopContainer,
            ServiceCall::RemoveContainer(_) => ServiceOp::RemoveContainer,
            ServiceCall::ListContainers => ServiceOp::ListContainers,
            ServiceCall::ContainerStatus(_) => ServiceOp::ContainerStatus,
            ServiceCall::ExecSync { .. } => ServiceOp::ExecSync,
            ServiceCall::ImageStatus(_) => ServiceOp::ImageStatus,
            ServiceCall::PullImage(_) => ServiceOp::PullImage,
            ServiceCall::ListImages => ServiceOp::ListImages,
            ServiceCall::RemoveImage(_) => ServiceOp::RemoveImage,
        }
    }
}

/// One sandbox the fake holds, with the pod it was created for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeSandbox {
    /// The pod's UID.
    pub pod_uid: PodUid,
    /// The pod's name.
    pub pod_name: String,
    /// The pod's namespace.
    pub pod_namespace: String,
    /// What `pod_sandbox_status` reports.
    pub status: PodSandboxStatus,
    /// The runtime handler it was created with (empty: the default).
    pub runtime_handler: String,
}

impl FakeSandbox {
    /// The sandbox as `list_pod_sandbox` returns it.
    pub fn to_pod_sandbox(&self) -> PodSandbox {
        let s = &self.status;
        PodSandbox {
            id: s.id.clone(),
            state: s.state,
            attempt: s.attempt,
            created_at: s.created_at,
            labels: s.labels.clone(),
            annotations: s.annotations.clone(),
        }
    }
}

/// A copy of a runtime error (`runtime::Error` is not `Clone`), so one scripted failure can
/// fail many calls.
pub(crate) fn clone_error(e: &Error) -> Error {
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
        Error::RuntimeClass(e) => Error::RuntimeClass(e.clone()),
    }
}

#[derive(Debug)]
struct Failure {
    error: Error,
    /// Calls left to fail; `None`: every call until cleared.
    remaining: Option<usize>,
}

#[derive(Debug)]
struct State {
    sandboxes: BTreeMap<u64, FakeSandbox>,
    next_sandbox: u64,
    calls: Vec<ServiceCall>,
    failures: HashMap<ServiceOp, Failure>,
    down: bool,
    runtime_status: RuntimeStatus,
    exec_results: HashMap<String, ExecResult>,
    images: BTreeMap<String, Image>,
    pull_failures: HashMap<String, Error>,
    /// Images whose pulls need these credentials (`username`, `password`).
    pull_credentials: HashMap<String, (String, String)>,
    /// Every pull: the image and the user name of the credentials sent, if any.
    pulls: Vec<(String, Option<String>)>,
    /// Containers ever started, per pod.
    started: HashMap<PodUid, usize>,
    /// The streaming server `stream_url` answers with, if scripted.
    stream_server: Option<String>,
    /// Every `stream_url` request.
    stream_requests: Vec<StreamRequest>,
    /// Container ID → the target container ID it was created with (ephemeral containers).
    targets: HashMap<String, String>,
}

/// A stateful fake [`RuntimeService`] (see the module docs). Cheap to clone; clones share
/// state, so a test keeps one to script and inspect while the engine owns another.
#[derive(Clone, Debug)]
pub struct FakeRuntimeService {
    state: Arc<Mutex<State>>,
    containers: ContainerStore,
    has_sandboxes: bool,
}

impl Default for FakeRuntimeService {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeRuntimeService {
    /// An empty, ready runtime with sandboxes; every image pulls.
    pub fn new() -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                sandboxes: BTreeMap::new(),
                next_sandbox: 0,
                calls: Vec::new(),
                failures: HashMap::new(),
                down: false,
                runtime_status: RuntimeStatus {
                    runtime_ready: true,
                    network_ready: true,
                    message: String::new(),
                    handlers: Vec::new(),
                },
                exec_results: HashMap::new(),
                images: BTreeMap::new(),
                pull_failures: HashMap::new(),
                pull_credentials: HashMap::new(),
                pulls: Vec::new(),
                started: HashMap::new(),
                stream_server: None,
                stream_requests: Vec::new(),
                targets: HashMap::new(),
            })),
            containers: ContainerStore::new(),
            has_sandboxes: true,
        }
    }

    /// An empty runtime without sandboxes (`has_sandboxes() == false`): the sandbox calls
    /// behave as the trait's defaults, so the engine's implicit-sandbox path runs.
    pub fn without_sandboxes() -> Self {
        Self {
            has_sandboxes: false,
            ..Self::new()
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `call`, then fails it if the runtime is down or a failure is scripted for it.
    fn enter(&self, call: ServiceCall) -> Result<MutexGuard<'_, State>> {
        let op = call.op();
        let mut st = self.lock();
        st.calls.push(call);
        if st.down {
            return Err(Error::Unavailable("fake runtime service is down".into()));
        }
        if let Some(failure) = st.failures.get_mut(&op) {
            let error = clone_error(&failure.error);
            match &mut failure.remaining {
                None => {}
                Some(1) => {
                    st.failures.remove(&op);
                }
                Some(n) => *n -= 1,
            }
            return Err(error);
        }
        Ok(st)
    }

    /// The target container ID container `id` was created with (an ephemeral container's
    /// `targetContainerName`, resolved), if any.
    pub fn target_of(&self, id: &str) -> Option<String> {
        self.lock().targets.get(id).cloned()
    }

    /// The container records (the store behind the container calls), to inspect or to
    /// script exits with a custom reason (`mark_exited_with(id, 137, "OOMKilled", "")`).
    pub fn containers(&self) -> &ContainerStore {
        &self.containers
    }

    /// Every container record of pod `uid`, oldest first (including exited ones).
    pub fn containers_of(&self, uid: &PodUid) -> Vec<ContainerRecord> {
        self.containers
            .records()
            .into_iter()
            .filter(|r| &r.pod_uid == uid)
            .collect()
    }

    /// Every sandbox, oldest first.
    pub fn sandboxes(&self) -> Vec<FakeSandbox> {
        self.lock().sandboxes.values().cloned().collect()
    }

    /// Every call so far, in order (failed ones included).
    pub fn calls(&self) -> Vec<ServiceCall> {
        self.lock().calls.clone()
    }

    /// The calls of one operation so far, in order.
    pub fn calls_of(&self, op: ServiceOp) -> Vec<ServiceCall> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.op() == op)
            .cloned()
            .collect()
    }

    /// Every call since the last `take_calls` or `clear_calls`, in order; forgets them.
    pub fn take_calls(&self) -> Vec<ServiceCall> {
        std::mem::take(&mut self.lock().calls)
    }

    /// Number of containers of pod `uid` ever started (removed ones included).
    pub fn started_count(&self, uid: &PodUid) -> usize {
        self.lock().started.get(uid).copied().unwrap_or(0)
    }

    /// Forgets recorded calls.
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// Makes every later call of `op` fail with `error` until [`Self::clear_failure`].
    pub fn fail(&self, op: ServiceOp, error: Error) {
        self.lock().failures.insert(
            op,
            Failure {
                error,
                remaining: None,
            },
        );
    }

    /// Makes the next `times` calls of `op` fail with `error`; later calls succeed.
    pub fn fail_next(&self, op: ServiceOp, times: usize, error: Error) {
        let mut st = self.lock();
        if times == 0 {
            st.failures.remove(&op);
            return;
        }
        st.failures.insert(
            op,
            Failure {
                error,
                remaining: Some(times),
            },
        );
    }

    /// Stops failing `op`.
    pub fn clear_failure(&self, op: ServiceOp) {
        self.lock().failures.remove(&op);
    }

    /// Simulates the runtime being down (every call fails `Unavailable`) or back up.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    /// Sets what `status` reports.
    pub fn set_runtime_status(&self, status: RuntimeStatus) {
        self.lock().runtime_status = status;
    }

    /// Makes container `id` exit with `code` now (reason `Completed` or `Error`). `false`
    /// when it is unknown or already exited.
    pub fn exit_container(&self, id: &str, code: i32) -> bool {
        self.containers.mark_exited(id, code)
    }

    /// Makes the newest running container `name` of pod `uid` exit with `code` now. `false`
    /// when there is none.
    pub fn exit_pod_container(&self, uid: &PodUid, name: &str, code: i32) -> bool {
        let running = self
            .containers_of(uid)
            .into_iter()
            .rev()
            .find(|r| r.status.name == name && r.status.state == ContainerState::Running);
        running.is_some_and(|r| self.containers.mark_exited(r.id(), code))
    }

    /// Makes sandbox `id` die (state `NotReady`) without stopping its containers, as when
    /// its infrastructure fails. `false` when it is unknown.
    pub fn kill_sandbox(&self, id: &str) -> bool {
        let mut st = self.lock();
        let sandbox = st.sandboxes.values_mut().find(|s| s.status.id == id);
        sandbox
            .map(|s| s.status.state = SandboxState::NotReady)
            .is_some()
    }

    /// Scripts what `exec_sync` in container `id` returns (default: exit code 0, no
    /// output). Scripted results answer for any ID, known to the fake or not.
    pub fn set_exec_result(&self, id: &str, result: ExecResult) {
        self.lock().exec_results.insert(id.to_owned(), result);
    }

    /// Scripts `stream_url`: every request is answered with `<server>/<exec|attach|portforward>/<n>`
    /// (default: `Unsupported`, a runtime that cannot stream).
    pub fn set_stream_server(&self, server: &str) {
        self.lock().stream_server = Some(server.trim_end_matches('/').to_owned());
    }

    /// Every `stream_url` request so far.
    pub fn stream_requests(&self) -> Vec<StreamRequest> {
        self.lock().stream_requests.clone()
    }

    /// Makes `image` present, with ID `sha256:<n>`.
    pub fn add_image(&self, image: &str) {
        let mut st = self.lock();
        let id = format!("sha256:{:064x}", st.images.len() + 1);
        st.images.insert(
            image.to_owned(),
            Image {
                id,
                repo_tags: vec![image.to_owned()],
                ..Default::default()
            },
        );
    }

    /// `true` when `image` is present (added, or pulled).
    pub fn has_image(&self, image: &str) -> bool {
        self.lock().images.contains_key(image)
    }

    /// Makes every pull of `image` fail with `error` until [`Self::clear_pull_failure`].
    pub fn fail_pull(&self, image: &str, error: Error) {
        self.lock().pull_failures.insert(image.to_owned(), error);
    }

    /// Lets `image` pull again.
    pub fn clear_pull_failure(&self, image: &str) {
        self.lock().pull_failures.remove(image);
    }

    /// Makes `image` pull only with these credentials, as a registry with basic auth: other
    /// pulls fail with [`UNAUTHORIZED`] in the message.
    pub fn require_pull_credentials(&self, image: &str, username: &str, password: &str) {
        self.lock()
            .pull_credentials
            .insert(image.to_owned(), (username.to_owned(), password.to_owned()));
    }

    /// Every pull so far: the image and the user name of the credentials sent (`None`
    /// without credentials).
    pub fn pulls(&self) -> Vec<(String, Option<String>)> {
        self.lock().pulls.clone()
    }

    fn stop_sandbox_containers(&self, sandbox_id: &str) {
        for record in self.containers.records() {
            if record.sandbox_id == sandbox_id {
                self.containers.mark_exited(record.id(), STOPPED_EXIT_CODE);
            }
        }
    }
}

#[async_trait]
impl RuntimeService for FakeRuntimeService {
    async fn version(&self) -> Result<Version> {
        drop(self.enter(ServiceCall::Version)?);
        Ok(Version {
            runtime_name: "fake".into(),
            runtime_version: "0.1.0".into(),
            runtime_api_version: "v1".into(),
        })
    }

    async fn status(&self) -> Result<RuntimeStatus> {
        Ok(self.enter(ServiceCall::Status)?.runtime_status.clone())
    }

    fn has_sandboxes(&self) -> bool {
        self.has_sandboxes
    }

    async fn run_pod_sandbox<'a>(&self, config: &PodSandboxConfig<'a>) -> Result<String> {
        let pod = config.pod;
        let mut st = self.enter(ServiceCall::RunPodSandbox {
            pod_uid: pod.uid(),
            attempt: config.attempt,
        })?;
        if !self.has_sandboxes {
            return Err(Error::Unsupported("RunPodSandbox"));
        }
        st.next_sandbox += 1;
        let n = st.next_sandbox;
        let id = format!("sandbox-{n}");
        let ips = if pod.host_network() {
            Vec::new()
        } else {
            vec![format!("10.0.{}.{}", n / 250, n % 250 + 1)]
        };
        let sandbox = FakeSandbox {
            runtime_handler: config.runtime_handler.clone(),
            pod_uid: pod.uid(),
            pod_name: pod.name_or_empty().to_owned(),
            pod_namespace: pod.namespace_or_default().to_owned(),
            status: PodSandboxStatus {
                id: id.clone(),
                state: SandboxState::Ready,
                attempt: config.attempt,
                created_at: Some(crate::time::now()),
                ips,
                host_network: pod.host_network(),
                labels: config.labels.clone(),
                annotations: config.annotations.clone(),
            },
        };
        st.sandboxes.insert(n, sandbox);
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        let mut st = self.enter(ServiceCall::StopPodSandbox(id.to_owned()))?;
        if let Some(s) = st.sandboxes.values_mut().find(|s| s.status.id == id) {
            s.status.state = SandboxState::NotReady;
        }
        drop(st);
        // CRI: stopping a sandbox force-stops its containers; stopping twice succeeds.
        self.stop_sandbox_containers(id);
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        let mut st = self.enter(ServiceCall::RemovePodSandbox(id.to_owned()))?;
        st.sandboxes.retain(|_, s| s.status.id != id);
        drop(st);
        // CRI: removing a sandbox removes its containers; removing twice succeeds.
        for record in self.containers.records() {
            if record.sandbox_id == id {
                self.containers.remove(record.id());
            }
        }
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<PodSandboxStatus> {
        let st = self.enter(ServiceCall::PodSandboxStatus(id.to_owned()))?;
        st.sandboxes
            .values()
            .find(|s| s.status.id == id)
            .map(|s| s.status.clone())
            .ok_or_else(|| Error::NotFound(format!("pod sandbox {id}")))
    }

    async fn list_pod_sandbox(&self, filter: &PodSandboxFilter) -> Result<Vec<PodSandbox>> {
        let st = self.enter(ServiceCall::ListPodSandbox)?;
        Ok(st
            .sandboxes
            .values()
            .filter(|s| filter.state.is_none_or(|state| state == s.status.state))
            .filter(|s| labels_match(&s.status.labels, &filter.label_selector))
            .map(FakeSandbox::to_pod_sandbox)
            .collect())
    }

    async fn create_container<'a>(
        &self,
        sandbox_id: &str,
        config: &ContainerConfig<'a>,
    ) -> Result<String> {
        let st = self.enter(ServiceCall::CreateContainer {
            pod_uid: config.pod.uid(),
            name: config.container.name.clone(),
            attempt: config.attempt,
        })?;
        let known = st.sandboxes.values().any(|s| s.status.id == sandbox_id);
        drop(st);
        if self.has_sandboxes && !known {
            return Err(Error::NotFound(format!("pod sandbox {sandbox_id}")));
        }
        let id = self.containers.create(sandbox_id, config);
        if let Some(target) = config.target_container_id {
            self.lock().targets.insert(id.clone(), target.to_owned());
        }
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        let record = self.containers.get(id);
        let (pod_uid, name) = record
            .map(|r| (r.pod_uid, r.status.name))
            .unwrap_or_default();
        let mut st = self.enter(ServiceCall::StartContainer {
            id: id.to_owned(),
            pod_uid: pod_uid.clone(),
            name,
        })?;
        self.containers.start(id, ())?;
        *st.started.entry(pod_uid).or_default() += 1;
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()> {
        drop(self.enter(ServiceCall::StopContainer {
            id: id.to_owned(),
            timeout_seconds,
        })?);
        self.containers.status(id)?;
        self.containers.mark_exited(id, STOPPED_EXIT_CODE);
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        drop(self.enter(ServiceCall::RemoveContainer(id.to_owned()))?);
        self.containers.remove(id);
        Ok(())
    }

    async fn list_containers(&self, filter: &ContainerFilter) -> Result<Vec<Container>> {
        drop(self.enter(ServiceCall::ListContainers)?);
        Ok(self.containers.list(filter))
    }

    async fn container_status(&self, id: &str) -> Result<ContainerStatus> {
        drop(self.enter(ServiceCall::ContainerStatus(id.to_owned()))?);
        self.containers.status(id)
    }

    async fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        _timeout: Duration,
        max_output: usize,
    ) -> Result<ExecResult> {
        let st = self.enter(ServiceCall::ExecSync {
            id: container_id.to_owned(),
            cmd: cmd.to_vec(),
        })?;
        let mut result = st
            .exec_results
            .get(container_id)
            .cloned()
            .unwrap_or_default();
        result.stdout.truncate(max_output);
        result.stderr.truncate(max_output);
        Ok(result)
    }

    async fn stream_url(&self, request: &StreamRequest) -> Result<String> {
        let mut st = self.lock();
        let Some(server) = st.stream_server.clone() else {
            return Err(Error::Unsupported("streaming"));
        };
        st.stream_requests.push(request.clone());
        let kind = match request {
            StreamRequest::Exec { .. } => "exec",
            StreamRequest::Attach { .. } => "attach",
            StreamRequest::PortForward { .. } => "portforward",
        };
        Ok(format!("{server}/{kind}/{}", st.stream_requests.len()))
    }

    async fn image_status(&self, image: &str) -> Result<Option<Image>> {
        let st = self.enter(ServiceCall::ImageStatus(image.to_owned()))?;
        Ok(st.images.get(image).cloned())
    }

    async fn pull_image<'a>(&self, request: &PullImageRequest<'a>) -> Result<String> {
        let image = request.image;
        let mut st = self.enter(ServiceCall::PullImage(image.to_owned()))?;
        st.pulls
            .push((image.to_owned(), request.auth.map(|a| a.username.clone())));
        if let Some(error) = st.pull_failures.get(image) {
            return Err(clone_error(error));
        }
        if let Some((user, password)) = st.pull_credentials.get(image) {
            let sent = request.auth.map(|a| (&a.username, &a.password));
            if sent != Some((user, password)) {
                return Err(Error::Runtime {
                    op: "PullImage",
                    message: format!(
                        "failed to pull and unpack image {image:?}: failed to resolve \
                         reference {image:?}: {UNAUTHORIZED}"
                    ),
                });
            }
        }
        drop(st);
        if !self.has_image(image) {
            self.add_image(image);
        }
        let st = self.lock();
        Ok(st
            .images
            .get(image)
            .map(|i| i.id.clone())
            .unwrap_or_default())
    }

    async fn list_images(&self) -> Result<Vec<Image>> {
        Ok(self
            .enter(ServiceCall::ListImages)?
            .images
            .values()
            .cloned()
            .collect())
    }

    async fn remove_image(&self, image: &str) -> Result<()> {
        self.enter(ServiceCall::RemoveImage(image.to_owned()))?
            .images
            .remove(image);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::kuberuntime::api::{ContainerType, Labels};
    use crate::testing::{pod, pod_with};

    fn sandbox_config(pod: &Pod) -> PodSandboxConfig<'_> {
        PodSandboxConfig {
            pod,
            attempt: 0,
            hostname: pod.name_or_empty().to_owned(),
            dns: Default::default(),
            log_directory: PathBuf::from("/var/log/pods/x"),
            cgroup_parent: String::new(),
            labels: Labels::from([("io.kubernetes.pod.uid".into(), pod.uid().0)]),
            annotations: Labels::new(),
            runtime_handler: String::new(),
        }
    }

    fn container_config<'a>(
        sandbox: &'a PodSandboxConfig<'a>,
        index: usize,
    ) -> ContainerConfig<'a> {
        let container = &sandbox
            .pod
            .spec
            .as_ref()
            .expect("fixture has a spec")
            .containers[index];
        ContainerConfig {
            pod: sandbox.pod,
            container,
            container_type: ContainerType::Regular,
            attempt: 0,
            image_ref: "busybox",
            image_user: None,
            command: Vec::new(),
            args: Vec::new(),
            envs: Vec::new(),
            mounts: Vec::new(),
            working_dir: String::new(),
            log_path: PathBuf::from(format!("{}/0.log", container.name)),
            labels: Labels::from([("name".into(), container.name.clone())]),
            annotations: Labels::new(),
            sandbox,
            target_container_id: None,
        }
    }

    /// A fake holding one ready sandbox for `pod` and one running container per spec.
    async fn running(fake: &FakeRuntimeService, pod: &Pod) -> (String, Vec<String>) {
        let sandbox = sandbox_config(pod);
        let sandbox_id = fake.run_pod_sandbox(&sandbox).await.expect("sandbox runs");
        let mut ids = Vec::new();
        for i in 0..pod.spec.as_ref().expect("spec").containers.len() {
            let config = container_config(&sandbox, i);
            let id = fake
                .create_container(&sandbox_id, &config)
                .await
                .expect("create");
            fake.start_container(&id).await.expect("start");
            ids.push(id);
        }
        (sandbox_id, ids)
    }

    #[tokio::test]
    async fn sandboxes_and_containers_follow_the_cri_lifecycle() {
        let fake = FakeRuntimeService::new();
        let p = pod_with("web", "Always", &["a", "b"]);
        let (sandbox_id, ids) = running(&fake, &p).await;

        let status = fake.pod_sandbox_status(&sandbox_id).await.expect("known");
        assert_eq!(status.state, SandboxState::Ready);
        assert_eq!(status.ips, ["10.0.0.2"]);
        assert_eq!(status.labels["io.kubernetes.pod.uid"], "uid-web");
        let listed = fake
            .list_containers(&ContainerFilter::default())
            .await
            .expect("list");
        assert_eq!(
            listed.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(listed.iter().all(|c| c.state == ContainerState::Running));
        assert!(listed.iter().all(|c| c.sandbox_id == sandbox_id));

        fake.stop_container(&ids[0], 30).await.expect("stop");
        let a = fake.container_status(&ids[0]).await.expect("known");
        assert_eq!(
            (a.state, a.exit_code),
            (ContainerState::Exited, STOPPED_EXIT_CODE)
        );

        fake.stop_pod_sandbox(&sandbox_id)
            .await
            .expect("stop sandbox");
        let b = fake.container_status(&ids[1]).await.expect("known");
        assert_eq!(
            b.state,
            ContainerState::Exited,
            "stopping a sandbox stops its containers"
        );
        let ready = PodSandboxFilter {
            state: Some(SandboxState::Ready),
            ..Default::default()
        };
        assert!(
            fake.list_pod_sandbox(&ready)
                .await
                .expect("list")
                .is_empty()
        );

        fake.remove_pod_sandbox(&sandbox_id)
            .await
            .expect("remove sandbox");
        assert!(fake.sandboxes().is_empty());
        assert!(
            fake.containers_of(&p.uid()).is_empty(),
            "removing a sandbox removes its containers"
        );
        assert!(matches!(
            fake.pod_sandbox_status(&sandbox_id).await,
            Err(Error::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn host_network_sandboxes_have_no_ip_and_unknown_sandboxes_take_no_container() {
        let fake = FakeRuntimeService::new();
        let mut p = pod("host");
        p.spec.as_mut().expect("spec").host_network = Some(true);
        let sandbox = sandbox_config(&p);
        let id = fake.run_pod_sandbox(&sandbox).await.expect("runs");
        let status = fake.pod_sandbox_status(&id).await.expect("known");
        assert!(status.host_network);
        assert!(status.ips.is_empty());
        let config = container_config(&sandbox, 0);
        assert!(matches!(
            fake.create_container("sandbox-404", &config).await,
            Err(Error::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn without_sandboxes_containers_join_the_implicit_sandbox() {
        let fake = FakeRuntimeService::without_sandboxes();
        assert!(!fake.has_sandboxes());
        let p = pod("web");
        let sandbox = sandbox_config(&p);
        assert!(matches!(
            fake.run_pod_sandbox(&sandbox).await,
            Err(Error::Unsupported(_))
        ));
        let id = fake
            .create_container("uid-web", &container_config(&sandbox, 0))
            .await
            .expect("any sandbox ID is accepted");
        assert_eq!(fake.containers_of(&p.uid())[0].sandbox_id, "uid-web");
        assert_eq!(
            fake.container_status(&id).await.expect("known").state,
            ContainerState::Created
        );
    }

    #[tokio::test]
    async fn scripted_failures_fail_the_next_calls_or_every_call() {
        let fake = FakeRuntimeService::new();
        let p = pod("web");
        let sandbox = sandbox_config(&p);
        let sandbox_id = fake.run_pod_sandbox(&sandbox).await.expect("runs");
        let config = container_config(&sandbox, 0);

        fake.fail_next(
            ServiceOp::CreateContainer,
            2,
            Error::InvalidSpec {
                field: "spec.containers[0]".into(),
                reason: "bad".into(),
            },
        );
        for _ in 0..2 {
            assert!(matches!(
                fake.create_container(&sandbox_id, &config).await,
                Err(Error::InvalidSpec { .. })
            ));
        }
        let id = fake
            .create_container(&sandbox_id, &config)
            .await
            .expect("third call succeeds");
        assert_eq!(
            fake.calls_of(ServiceOp::CreateContainer).len(),
            3,
            "failed calls are logged"
        );

        fake.fail(ServiceOp::StartContainer, Error::Unavailable("boom".into()));
        for _ in 0..3 {
            assert!(fake.start_container(&id).await.is_err());
        }
        fake.clear_failure(ServiceOp::StartContainer);
        fake.start_container(&id)
            .await
            .expect("starts once cleared");

        fake.set_down(true);
        assert!(matches!(fake.version().await, Err(Error::Unavailable(_))));
        fake.set_down(false);
        assert_eq!(fake.version().await.expect("up").runtime_name, "fake");
    }

    #[tokio::test]
    async fn scripted_exits_and_sandbox_deaths() {
        let fake = FakeRuntimeService::new();
        let p = pod_with("web", "Always", &["a", "b"]);
        let (sandbox_id, ids) = running(&fake, &p).await;

        assert!(fake.exit_pod_container(&p.uid(), "a", 3));
        assert!(
            !fake.exit_pod_container(&p.uid(), "a", 3),
            "a is no longer running"
        );
        let a = fake.container_status(&ids[0]).await.expect("known");
        assert_eq!((a.exit_code, a.reason.as_str()), (3, "Error"));
        assert!(fake.exit_container(&ids[1], 0));
        let b = fake.container_status(&ids[1]).await.expect("known");
        assert_eq!((b.exit_code, b.reason.as_str()), (0, "Completed"));

        assert!(fake.kill_sandbox(&sandbox_id));
        let status = fake.pod_sandbox_status(&sandbox_id).await.expect("known");
        assert_eq!(status.state, SandboxState::NotReady);
    }

    #[tokio::test]
    async fn the_call_log_names_each_object() {
        let fake = FakeRuntimeService::new();
        let p = pod("web");
        let (sandbox_id, ids) = running(&fake, &p).await;
        fake.stop_container(&ids[0], 5).await.expect("stop");
        fake.remove_container(&ids[0]).await.expect("remove");
        assert_eq!(
            fake.calls(),
            [
                ServiceCall::RunPodSandbox {
                    pod_uid: p.uid(),
                    attempt: 0
                },
                ServiceCall::CreateContainer {
                    pod_uid: p.uid(),
                    name: "app".into(),
                    attempt: 0
                },
                ServiceCall::StartContainer {
                    id: ids[0].clone(),
                    pod_uid: p.uid(),
                    name: "app".into()
                },
                ServiceCall::StopContainer {
                    id: ids[0].clone(),
                    timeout_seconds: 5
                },
                ServiceCall::RemoveContainer(ids[0].clone()),
            ]
        );
        assert_eq!(fake.sandboxes()[0].status.id, sandbox_id);
        assert_eq!(
            fake.started_count(&p.uid()),
            1,
            "removed containers still count"
        );
        assert_eq!(fake.take_calls().len(), 5);
        assert!(fake.calls().is_empty());
        fake.version().await.expect("version");
        fake.clear_calls();
        assert!(fake.calls().is_empty());
    }

    #[tokio::test]
    async fn exec_results_are_scripted_and_capped() {
        let fake = FakeRuntimeService::new();
        let cmd = vec!["cat".to_owned()];
        let default = fake
            .exec_sync("c1", &cmd, Duration::ZERO, 10)
            .await
            .expect("exec");
        assert_eq!(default, ExecResult::default());
        fake.set_exec_result(
            "c1",
            ExecResult {
                exit_code: 1,
                stdout: b"0123456789abcdef".to_vec(),
                stderr: b"err".to_vec(),
                timed_out: false,
            },
        );
        let scripted = fake
            .exec_sync("c1", &cmd, Duration::ZERO, 4)
            .await
            .expect("exec");
        assert_eq!(scripted.exit_code, 1);
        assert_eq!(scripted.stdout, b"0123");
        assert_eq!(scripted.stderr, b"err");
        assert_eq!(
            fake.calls_of(ServiceOp::ExecSync)[0],
            ServiceCall::ExecSync {
                id: "c1".into(),
                cmd
            }
        );
    }

    #[tokio::test]
    async fn images_pull_unless_scripted_to_fail() {
        let fake = FakeRuntimeService::new();
        let p = pod("web");
        let sandbox = sandbox_config(&p);
        let pull = |image| PullImageRequest {
            image,
            auth: None,
            sandbox: &sandbox,
        };
        assert_eq!(fake.image_status("busybox").await.expect("status"), None);
        let image_ref = fake.pull_image(&pull("busybox")).await.expect("pulls");
        let present = fake
            .image_status("busybox")
            .await
            .expect("status")
            .expect("pulled");
        assert_eq!(present.id, image_ref);

        fake.fail_pull(
            "private/app",
            Error::Runtime {
                op: "PullImage",
                message: "unauthorized".into(),
            },
        );
        assert!(fake.pull_image(&pull("private/app")).await.is_err());
        assert!(!fake.has_image("private/app"));
        fake.clear_pull_failure("private/app");
        fake.pull_image(&pull("private/app"))
            .await
            .expect("pulls once cleared");

        fake.add_image("local/tool");
        assert_eq!(fake.list_images().await.expect("list").len(), 3);
        fake.remove_image("local/tool").await.expect("remove");
        assert!(!fake.has_image("local/tool"));
    }
}
