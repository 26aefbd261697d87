//! The fake runtime's state and the handle tests script it with.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_cri::v1 as cri;
use tonic::{Code, Status};

use kubelet_core::kuberuntime::labels::{CONTAINER_NAME_LABEL, POD_UID_LABEL};

/// One CRI call received by the fake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// CRI method name, e.g. `RunPodSandbox`.
    pub method: &'static str,
    /// The object the call names (sandbox or container ID, image reference), or empty.
    pub target: String,
}

/// A sandbox held by the fake.
#[derive(Clone, Debug, PartialEq)]
pub struct FakeSandbox {
    /// Sandbox ID.
    pub id: String,
    /// The config it was created with.
    pub config: cri::PodSandboxConfig,
    /// Current state.
    pub state: cri::PodSandboxState,
    /// Creation time, nanoseconds since the epoch.
    pub created_at: i64,
    /// Pod IP (empty for host-network sandboxes).
    pub ip: String,
    /// The `runtime_handler` of its `RunPodSandbox` (empty: the default).
    pub runtime_handler: String,
}

impl FakeSandbox {
    /// A label of the sandbox.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.config.labels.get(key).map(String::as_str)
    }
}

/// A container held by the fake.
#[derive(Clone, Debug, PartialEq)]
pub struct FakeContainer {
    /// Container ID.
    pub id: String,
    /// Sandbox it belongs to.
    pub sandbox_id: String,
    /// The config it was created with.
    pub config: cri::ContainerConfig,
    /// Image ID it was created from.
    pub image_ref: String,
    /// Current state.
    pub state: cri::ContainerState,
    /// Creation time, nanoseconds since the epoch.
    pub created_at: i64,
    /// Start time, or 0.
    pub started_at: i64,
    /// Exit time, or 0.
    pub finished_at: i64,
    /// Exit code once exited.
    pub exit_code: i32,
    /// Reason once exited (`Completed`, `Error`).
    pub reason: String,
    /// Message once exited.
    pub message: String,
    /// The timeout of the last `StopContainer` received.
    pub stop_timeout: Option<i64>,
    /// Absolute log path (sandbox log directory + config log path).
    pub log_path: String,
}

impl FakeContainer {
    /// The container name from its metadata.
    pub fn name(&self) -> &str {
        self.config
            .metadata
            .as_ref()
            .map_or("", |m| m.name.as_str())
    }

    /// A label of the container.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.config.labels.get(key).map(String::as_str)
    }

    /// An annotation of the container.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.config.annotations.get(key).map(String::as_str)
    }

    /// An environment variable of the container.
    pub fn env(&self, key: &str) -> Option<&str> {
        self.config
            .envs
            .iter()
            .find(|kv| kv.key == key)
            .map(|kv| kv.value.as_str())
    }
}

/// An image held by the fake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeImage {
    /// Image ID (`sha256:…`).
    pub id: String,
    /// References it is known by.
    pub repo_tags: Vec<String>,
}

/// One streaming request the fake answered with a URL.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamCall {
    /// `Exec`.
    Exec(cri::ExecRequest),
    /// `Attach`.
    Attach(cri::AttachRequest),
    /// `PortForward`.
    PortForward(cri::PortForwardRequest),
}

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) sandboxes: BTreeMap<String, FakeSandbox>,
    pub(crate) containers: BTreeMap<String, FakeContainer>,
    pub(crate) images: Vec<FakeImage>,
    pub(crate) unpullable: Vec<String>,
    /// References that pull only with these credentials (`username`, `password`).
    pub(crate) pull_credentials: HashMap<String, (String, String)>,
    /// The `auth` of every `PullImage`: reference and user name (`None` without auth).
    pub(crate) pull_auths: Vec<(String, Option<String>)>,
    pub(crate) calls: Vec<Call>,
    pub(crate) failures: HashMap<&'static str, (Code, String)>,
    pub(crate) hanging: HashSet<&'static str>,
    pub(crate) runtime_ready: bool,
    pub(crate) network_ready: bool,
    /// Commands received by `ExecSync`: container ID and command.
    pub(crate) execs: Vec<(String, Vec<String>)>,
    /// What every `ExecSync` answers: exit code and stderr.
    pub(crate) exec_result: (i32, String),
    /// `Exec`, `Attach` and `PortForward` requests, in order; the URL of the n-th (from 1)
    /// is `http://127.0.0.1:10010/<exec|attach|portforward>/<n>`.
    pub(crate) streams: Vec<StreamCall>,
    /// What `ListContainerStats` reports per container: CPU nanoseconds, working set bytes.
    pub(crate) usage: HashMap<String, (u64, u64)>,
    /// The runtime handlers besides the default: `None` accepts any and reports none in
    /// `Status` (containerd 1.6); `Some` refuses others as containerd does and reports these.
    pub(crate) runtime_handlers: Option<Vec<String>>,
    next_id: u64,
    last_time: i64,
}

impl State {
    pub(crate) fn next_id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}-{}", self.next_id)
    }

    pub(crate) fn next_ip(&mut self) -> String {
        self.next_id += 1;
        format!("10.88.{}.{}", self.next_id / 250, self.next_id % 250 + 1)
    }

    /// Wall-clock nanoseconds, strictly increasing so creation order is total.
    pub(crate) fn now(&mut self) -> i64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        self.last_time = wall.max(self.last_time + 1);
        self.last_time
    }

    pub(crate) fn find_image(&self, reference: &str) -> Option<&FakeImage> {
        self.images
            .iter()
            .find(|i| i.id == reference || i.repo_tags.iter().any(|t| t == reference))
    }

    pub(crate) fn exit(&mut self, id: &str, code: i32, reason: &str) -> bool {
        let now = self.now();
        match self.containers.get_mut(id) {
            Some(c) if c.state == cri::ContainerState::ContainerRunning => {
                c.state = cri::ContainerState::ContainerExited;
                c.exit_code = code;
                c.reason = reason.to_owned();
                c.finished_at = now;
                true
            }
            _ => false,
        }
    }
}

/// A deterministic image ID for a reference (FNV-1a 64, repeated to 64 hex digits).
pub(crate) fn image_id(reference: &str) -> String {
    let h = reference.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("sha256:{h:016x}{h:016x}{h:016x}{h:016x}")
}

/// Handle on the fake runtime's state: inspect what the client did, script failures, make
/// containers exit. Cheap to clone; clones share state.
#[derive(Clone, Debug)]
pub struct FakeCri {
    pub(crate) state: Arc<Mutex<State>>,
}

impl Default for FakeCri {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeCri {
    /// An empty, ready runtime without images (pulls of any reference succeed).
    pub fn new() -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                sandboxes: BTreeMap::new(),
                containers: BTreeMap::new(),
                images: Vec::new(),
                unpullable: Vec::new(),
                pull_credentials: HashMap::new(),
                pull_auths: Vec::new(),
                calls: Vec::new(),
                failures: HashMap::new(),
                hanging: HashSet::new(),
                runtime_ready: true,
                network_ready: true,
                execs: Vec::new(),
                exec_result: (0, String::new()),
                streams: Vec::new(),
                usage: HashMap::new(),
                runtime_handlers: None,
                next_id: 0,
                last_time: 0,
            })),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a test panicked mid-update; the data is plain.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a call; `true` when `method` is scripted to hang.
    pub(crate) fn record(&self, method: &'static str, target: &str) -> bool {
        let mut st = self.lock();
        st.calls.push(Call {
            method,
            target: target.to_owned(),
        });
        st.hanging.contains(method)
    }

    /// The state, or the scripted failure of `method`.
    pub(crate) fn check(&self, method: &'static str) -> Result<MutexGuard<'_, State>, Status> {
        let st = self.lock();
        if let Some((code, message)) = st.failures.get(method) {
            return Err(Status::new(*code, message.clone()));
        }
        Ok(st)
    }

    /// Makes every later `ExecSync` exit with `exit_code` and write `stderr`.
    pub fn set_exec_result(&self, exit_code: i32, stderr: impl Into<String>) {
        self.lock().exec_result = (exit_code, stderr.into());
    }

    /// Makes `ListContainerStats` report `cpu_nanos` of CPU time and `working_set_bytes` of
    /// memory for container `id` (others report zero).
    pub fn set_container_usage(&self, id: &str, cpu_nanos: u64, working_set_bytes: u64) {
        self.lock()
            .usage
            .insert(id.to_owned(), (cpu_nanos, working_set_bytes));
    }

    /// Every `ExecSync` so far: container ID and command.
    pub fn execs(&self) -> Vec<(String, Vec<String>)> {
        self.lock().execs.clone()
    }

    /// Every `Exec`, `Attach` and `PortForward` so far.
    pub fn streams(&self) -> Vec<StreamCall> {
        self.lock().streams.clone()
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The method names of every call so far, in order.
    pub fn methods(&self) -> Vec<&'static str> {
        self.lock().calls.iter().map(|c| c.method).collect()
    }

    /// How many times `method` was called.
    pub fn count(&self, method: &str) -> usize {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .count()
    }

    /// Forgets recorded calls.
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// Makes every later call of `method` (a CRI method name such as `"RunPodSandbox"`) fail
    /// with `code` and `message`, until [`FakeCri::clear_failure`].
    pub fn fail(&self, method: &'static str, code: Code, message: impl Into<String>) {
        self.lock().failures.insert(method, (code, message.into()));
    }

    /// Stops failing `method`.
    pub fn clear_failure(&self, method: &'static str) {
        self.lock().failures.remove(method);
    }

    /// Makes later calls of `method` never answer (a stuck runtime), until
    /// [`FakeCri::clear_hang`]; calls already hanging stay stuck until the client gives up.
    pub fn hang(&self, method: &'static str) {
        self.lock().hanging.insert(method);
    }

    /// Stops hanging `method`.
    pub fn clear_hang(&self, method: &'static str) {
        self.lock().hanging.remove(method);
    }

    /// Makes the runtime know only `handlers` besides the default (`""`): `RunPodSandbox`
    /// refuses any other with containerd's `no runtime for "<handler>" is configured`, and
    /// `Status` reports the default and these in `runtime_handlers`.
    pub fn set_runtime_handlers(&self, handlers: &[&str]) {
        self.lock().runtime_handlers = Some(handlers.iter().map(|h| (*h).to_owned()).collect());
    }

    /// Sets the `RuntimeReady` and `NetworkReady` conditions `Status` reports.
    pub fn set_conditions(&self, runtime_ready: bool, network_ready: bool) {
        let mut st = self.lock();
        st.runtime_ready = runtime_ready;
        st.network_ready = network_ready;
    }

    /// Adds an image known by `reference`; returns its ID.
    pub fn add_image(&self, reference: &str) -> String {
        let mut st = self.lock();
        if let Some(i) = st.find_image(reference) {
            return i.id.clone();
        }
        let id = image_id(reference);
        st.images.push(FakeImage {
            id: id.clone(),
            repo_tags: vec![reference.to_owned()],
        });
        id
    }

    /// Makes pulls of `reference` fail with `NotFound` (as a registry without the image).
    pub fn set_unpullable(&self, reference: &str) {
        self.lock().unpullable.push(reference.to_owned());
    }

    /// Makes `reference` pull only with these credentials, as a registry with basic auth:
    /// other pulls fail with `Unknown` and a 401 message like containerd's.
    pub fn require_pull_credentials(&self, reference: &str, username: &str, password: &str) {
        self.lock().pull_credentials.insert(
            reference.to_owned(),
            (username.to_owned(), password.to_owned()),
        );
    }

    /// Every `PullImage` so far: the reference and the user name of its `auth` (`None`
    /// without one).
    pub fn pull_auths(&self) -> Vec<(String, Option<String>)> {
        self.lock().pull_auths.clone()
    }

    /// The images the fake holds.
    pub fn images(&self) -> Vec<FakeImage> {
        self.lock().images.clone()
    }

    /// Every sandbox, by ID order.
    pub fn sandboxes(&self) -> Vec<FakeSandbox> {
        self.lock().sandboxes.values().cloned().collect()
    }

    /// Every container, by creation order.
    pub fn containers(&self) -> Vec<FakeContainer> {
        let mut v: Vec<_> = self.lock().containers.values().cloned().collect();
        v.sort_by_key(|c| c.created_at);
        v
    }

    /// Containers of pod `uid` called `name`, by creation order.
    pub fn containers_named(&self, uid: &str, name: &str) -> Vec<FakeContainer> {
        self.containers()
            .into_iter()
            .filter(|c| {
                c.label(POD_UID_LABEL) == Some(uid) && c.label(CONTAINER_NAME_LABEL) == Some(name)
            })
            .collect()
    }

    /// Makes the running container `id` exit with `code` (`Completed` for 0, else `Error`).
    /// Returns `false` when it is not running.
    pub fn exit_container(&self, id: &str, code: i32) -> bool {
        let reason = if code == 0 { "Completed" } else { "Error" };
        self.lock().exit(id, code, reason)
    }

    /// Makes the running container `name` of pod `uid` exit with `code`. Returns `false` when
    /// there is no such running container.
    pub fn exit_container_named(&self, uid: &str, name: &str, code: i32) -> bool {
        let running = self
            .containers_named(uid, name)
            .into_iter()
            .find(|c| c.state == cri::ContainerState::ContainerRunning);
        running.is_some_and(|c| self.exit_container(&c.id, code))
    }

    /// Marks a sandbox not ready, as when its pause process dies. Returns `false` when absent.
    pub fn kill_sandbox(&self, id: &str) -> bool {
        let mut st = self.lock();
        match st.sandboxes.get_mut(id) {
            Some(s) => {
                s.state = cri::PodSandboxState::SandboxNotready;
                true
            }
            None => false,
        }
    }
}
