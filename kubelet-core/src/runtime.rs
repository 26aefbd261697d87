//! The container runtime as the kubelet sees it: the [`Runtime`] trait and its view of pods.
//!
//! Mirrors upstream `pkg/kubelet/container/runtime.go` (`Runtime`, `Pod`, `PodStatus`,
//! `Status`, `RuntimeStatus`) with the CRI kept out: CRI types live only in `kubelet-cri`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::backoff::Backoff;
use crate::pod::PodUid;

pub mod exec_session;

pub use exec_session::{ClosedBy, ExecSession, NoopExecSession};

/// Errors from a [`Runtime`].
///
/// `Unavailable` is retryable (the runtime is down or restarting); the other variants are
/// about one request and are reported on the pod that caused them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The runtime could not be reached or is not ready. Retryable with backoff.
    #[error("container runtime unavailable: {0}")]
    Unavailable(String),
    /// The object the call names does not exist in the runtime.
    #[error("not found: {0}")]
    NotFound(String),
    /// The pod spec cannot be turned into a runtime request (names the field).
    #[error("invalid pod spec: {field}: {reason}")]
    InvalidSpec {
        /// The pod field that is wrong, e.g. `spec.containers[0].image`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The runtime does not implement this call (e.g. a runtime without images or exec).
    #[error("{0} is not supported by this runtime")]
    Unsupported(&'static str),
    /// The runtime answered with an error.
    #[error("runtime error in {op}: {message}")]
    Runtime {
        /// The runtime call, e.g. `RunPodSandbox`.
        op: &'static str,
        /// The runtime's message.
        message: String,
    },
    /// The pod's RuntimeClass could not be resolved to a runtime handler.
    #[error(transparent)]
    RuntimeClass(#[from] crate::runtimeclass::Error),
}

impl Error {
    /// `true` when retrying the same call later may succeed without any change on our side.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable(_) | Error::Runtime { .. })
    }
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The runtime's name and versions (CRI `Version`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    /// Runtime name, e.g. `containerd`.
    pub runtime_name: String,
    /// Runtime version, e.g. `1.6.20`.
    pub runtime_version: String,
    /// API version the runtime speaks, e.g. `v1`.
    pub runtime_api_version: String,
}

/// The runtime's readiness (CRI `Status`), upstream `RuntimeStatus`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeStatus {
    /// The `RuntimeReady` condition.
    pub runtime_ready: bool,
    /// The `NetworkReady` condition.
    pub network_ready: bool,
    /// Reasons and messages of conditions that are not met, for logs and health checks.
    pub message: String,
    /// The runtime handlers the runtime reports (CRI `StatusResponse.runtime_handlers`;
    /// empty from a runtime that reports none, e.g. containerd 1.6), for the Node's
    /// `status.runtimeHandlers`.
    #[serde(default)]
    pub handlers: Vec<RuntimeHandler>,
}

/// One runtime handler a runtime reports (upstream `kubecontainer.RuntimeHandler`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeHandler {
    /// The handler's name; empty for the default handler.
    pub name: String,
    /// It supports recursive read-only mounts.
    pub supports_recursive_read_only_mounts: bool,
    /// It supports user namespaces.
    pub supports_user_namespaces: bool,
}

/// State of a container in the runtime (upstream `ContainerState`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ContainerState {
    /// Created, never started.
    Created,
    /// Running.
    Running,
    /// Exited.
    Exited,
    /// Unknown to the runtime.
    #[default]
    Unknown,
}

/// State of a pod sandbox in the runtime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SandboxState {
    /// The sandbox is ready for containers.
    Ready,
    /// The sandbox is stopped or broken.
    #[default]
    NotReady,
}

/// One container as the runtime lists it (upstream `kubecontainer.Container`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSummary {
    /// Runtime ID of the container.
    pub id: String,
    /// Name from the pod spec (`io.kubernetes.container.name`).
    pub name: String,
    /// Image reference the container was created from.
    pub image: String,
    /// Spec hash stored on the container when it was created.
    pub hash: u64,
    /// Current state.
    pub state: ContainerState,
    /// Sandbox the container runs in.
    pub sandbox_id: String,
    /// When the container was created.
    pub created_at: Option<Timestamp>,
}

/// One sandbox as the runtime lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSummary {
    /// Runtime ID of the sandbox.
    pub id: String,
    /// Current state.
    pub state: SandboxState,
    /// Attempt number (incremented each time the sandbox is recreated).
    pub attempt: u32,
    /// When the sandbox was created.
    pub created_at: Option<Timestamp>,
}

/// A pod as the runtime knows it: sandboxes and containers grouped by pod UID
/// (upstream `kubecontainer.Pod`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningPod {
    /// Pod UID from the runtime objects' labels.
    pub uid: PodUid,
    /// Pod name from the labels.
    pub name: String,
    /// Pod namespace from the labels.
    pub namespace: String,
    /// Sandboxes of the pod, newest first.
    pub sandboxes: Vec<SandboxSummary>,
    /// Containers of the pod.
    pub containers: Vec<ContainerSummary>,
}

impl RunningPod {
    /// `true` when no container is running and no sandbox is ready.
    pub fn is_empty_or_stopped(&self) -> bool {
        self.containers
            .iter()
            .all(|c| c.state != ContainerState::Running)
            && self
                .sandboxes
                .iter()
                .all(|s| s.state != SandboxState::Ready)
    }
}

/// Full status of one container (upstream `kubecontainer.Status`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerStatus {
    /// Runtime ID.
    pub id: String,
    /// Name from the pod spec.
    pub name: String,
    /// Current state.
    pub state: ContainerState,
    /// Creation time.
    pub created_at: Option<Timestamp>,
    /// Start time (when running or exited after a start).
    pub started_at: Option<Timestamp>,
    /// Exit time.
    pub finished_at: Option<Timestamp>,
    /// Exit code (meaningful when exited).
    pub exit_code: i32,
    /// Runtime's short reason, e.g. `Completed`, `Error`, `OOMKilled`.
    pub reason: String,
    /// Runtime's message (e.g. the termination message).
    pub message: String,
    /// Image as requested.
    pub image: String,
    /// Resolved image reference (digest), upstream `ImageRef`.
    pub image_ref: String,
    /// Restart count stored on the container (`io.kubernetes.container.restartCount`).
    pub restart_count: u32,
    /// Spec hash stored on the container (`io.kubernetes.container.hash`).
    pub hash: u64,
}

/// Full status of one sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxStatus {
    /// Runtime ID.
    pub id: String,
    /// Current state.
    pub state: SandboxState,
    /// Attempt number.
    pub attempt: u32,
    /// Creation time.
    pub created_at: Option<Timestamp>,
    /// Pod IPs assigned to the sandbox (primary first).
    pub ips: Vec<String>,
    /// `true` when the sandbox uses the host network namespace.
    pub host_network: bool,
}

/// The runtime's full view of one pod (upstream `kubecontainer.PodStatus`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodStatus {
    /// Pod UID.
    pub uid: PodUid,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod IPs from the newest sandbox.
    pub ips: Vec<String>,
    /// Sandboxes, newest first.
    pub sandboxes: Vec<SandboxStatus>,
    /// Every container of the pod known to the runtime, newest first per name.
    pub containers: Vec<ContainerStatus>,
}

impl PodStatus {
    /// The newest status of the container called `name` (upstream `FindContainerStatusByName`).
    pub fn container(&self, name: &str) -> Option<&ContainerStatus> {
        self.containers
            .iter()
            .filter(|c| c.name == name)
            .max_by_key(|c| (c.restart_count, c.created_at))
    }

    /// The pod as a runtime listing would show it: every sandbox and every container
    /// (upstream `ConvertPodStatusToRunningPod` keeps only running containers; filter the
    /// result for that).
    pub fn to_running_pod(&self) -> RunningPod {
        RunningPod {
            uid: self.uid.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            sandboxes: self
                .sandboxes
                .iter()
                .map(|s| SandboxSummary {
                    id: s.id.clone(),
                    state: s.state,
                    attempt: s.attempt,
                    created_at: s.created_at,
                })
                .collect(),
            containers: self
                .containers
                .iter()
                .map(|c| ContainerSummary {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    image: c.image.clone(),
                    hash: c.hash,
                    state: c.state,
                    sandbox_id: String::new(),
                    created_at: c.created_at,
                })
                .collect(),
        }
    }

    /// `true` when at least one container of the pod is running.
    pub fn has_running_containers(&self) -> bool {
        self.containers
            .iter()
            .any(|c| c.state == ContainerState::Running)
    }
}

/// Per-container outcome of a [`Runtime::sync_pod`] step that failed, for the status
/// (upstream's `reasonCache`: `ErrImagePull`, `CreateContainerError`, `CrashLoopBackOff`, …).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSyncError {
    /// Container name.
    pub container: String,
    /// Waiting reason to report, e.g. `ErrImagePull`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// What [`Runtime::sync_pod`] did and what failed (upstream `PodSyncResult`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodSyncResult {
    /// Containers that could not be started, with the reason to report.
    pub container_errors: Vec<ContainerSyncError>,
    /// A pod-level failure (e.g. the sandbox could not be created).
    pub pod_error: Option<String>,
    /// `true` when the pod's runtime state changed (so the caller should refresh its cache).
    pub changed: bool,
    /// Containers started by this sync (their earlier start failures are over).
    pub started: Vec<String>,
    /// When some start was refused for a backoff (`CrashLoopBackOff`, `ImagePullBackOff`):
    /// the time until the earliest such window ends, so the pod can be synced again right
    /// then (upstream `BackoffError` / `MinBackoffExpiration`).
    pub retry_after: Option<std::time::Duration>,
}

impl PodSyncResult {
    /// Records a backoff that ends in `after`, keeping the earliest.
    pub fn retry_after(&mut self, after: std::time::Duration) {
        self.retry_after = Some(self.retry_after.map_or(after, |d| d.min(after)));
    }

    /// `true` when nothing failed.
    pub fn is_ok(&self) -> bool {
        self.container_errors.is_empty() && self.pod_error.is_none()
    }
}

/// A bind mount into a container (upstream `kubecontainer.Mount`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// Path on the host.
    pub host_path: PathBuf,
    /// Path in the container.
    pub container_path: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// How mounts made below this one propagate between host and container.
    pub propagation: MountPropagation,
}

/// Mount propagation of a container mount (upstream `runtimeapi.MountPropagation`, translated
/// from `volumeMounts[].mountPropagation` by `translateMountPropagation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[doc(alias = "MountPropagationMode")]
pub enum MountPropagation {
    /// No propagation either way (`None` in the pod spec; the default).
    #[default]
    Private,
    /// Mounts made on the host below the source appear in the container (`rslave`).
    HostToContainer,
    /// Mounts propagate both ways (`rshared`); privileged containers only.
    Bidirectional,
}

/// Per-container inputs the runtime cannot compute by itself
/// (upstream `kubecontainer.RunContainerOptions`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunContainerOptions {
    /// Environment variables, in order, already expanded.
    pub envs: Vec<(String, String)>,
    /// Mounts from the volume manager.
    pub mounts: Vec<Mount>,
    /// Hostname for the sandbox.
    pub hostname: String,
}

/// The outcome of [`Runtime::exec_sync`] (CRI `ExecSyncResponse`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecResult {
    /// Exit code of the command; meaningless when `timed_out`.
    pub exit_code: i32,
    /// Standard output, truncated to the limit the caller asked for.
    pub stdout: Vec<u8>,
    /// Standard error, truncated to the limit the caller asked for.
    pub stderr: Vec<u8>,
    /// The command did not finish within the timeout (the runtime killed it).
    pub timed_out: bool,
}

/// Why [`RuntimeHelper::generate_run_container_options`] failed; the message is the
/// container's `CreateContainerConfigError` message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunContainerOptionsError {
    /// An environment variable could not be resolved (a missing configMap, secret or field).
    #[error(transparent)]
    Env(#[from] crate::kubelet::env::Error),
    /// A volume the container mounts is not mounted.
    #[error("cannot find volume {volume:?} to mount into container {container:?}")]
    VolumeNotMounted {
        /// Volume name.
        volume: String,
        /// Container name.
        container: String,
    },
    /// A volume mount cannot be made (propagation, `subPath`).
    #[error("volume mount {volume:?} of container {container:?}: {reason}")]
    VolumeMount {
        /// Volume name.
        volume: String,
        /// Container name.
        container: String,
        /// What is wrong.
        reason: String,
    },
    /// The pod's hostname, subdomain or FQDN is invalid.
    #[error(transparent)]
    Hostname(#[from] crate::kubelet::hosts::Error),
    /// The pod's managed `/etc/hosts` could not be written.
    #[error("writing the pod's /etc/hosts in {}: {source}", dir.display())]
    HostsFile {
        /// The pod directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Any other reason (for helpers of other node agents).
    #[error("{0}")]
    Other(String),
}

/// Callbacks from the runtime into the kubelet while it syncs a pod
/// (upstream `kubecontainer.RuntimeHelper`).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait RuntimeHelper: Send + Sync {
    /// Environment (resolved and `$(VAR)`-expanded, in order), mounts and hostname for one
    /// container of the pod; `pod_ips` are the sandbox's IPs.
    ///
    /// An `Err` is a `CreateContainerConfigError` for that container.
    async fn generate_run_container_options(
        &self,
        pod: &Pod,
        container: &Container,
        pod_ips: &[String],
    ) -> std::result::Result<RunContainerOptions, RunContainerOptionsError>;

    /// The cgroup parent of the pod's sandbox (upstream `GetPodCgroupParent`), e.g.
    /// `/kubepods/burstable/pod<uid>`; empty lets the runtime choose.
    fn get_pod_cgroup_parent(&self, _pod: &Pod) -> String {
        String::new()
    }

    /// The pod's image pull secrets (upstream `getPullSecretsForPod`, which the Go kubelet
    /// passes to `SyncPod`): those that could be read, and the names of those that could
    /// not (the pull is tried anyway). Asked before each image pull; the default has none.
    async fn pull_secrets(&self, _pod: &Pod) -> PullSecrets {
        PullSecrets::default()
    }
}

/// A pod's image pull secrets, as [`RuntimeHelper::pull_secrets`] found them.
#[derive(Clone, Debug, Default)]
pub struct PullSecrets {
    /// The secrets that could be read, in the pod's order.
    pub secrets: Vec<k8s_openapi::api::core::v1::Secret>,
    /// Names of referenced secrets that could not be read (missing or unreadable).
    pub unavailable: Vec<String>,
}

/// A container's exit as the runtime's event stream reported it ([`Runtime::observe_exit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedExit {
    /// Runtime ID of the container.
    pub container_id: String,
    /// The main process's exit status.
    pub exit_code: i32,
    /// When it exited, as the runtime says.
    pub finished_at: Option<Timestamp>,
    /// The runtime reported an out-of-memory kill of the container before the exit.
    pub oom_killed: bool,
}

/// A container runtime (upstream `kubecontainer.Runtime`), implemented over CRI by
/// `kubelet-cri` and by `testing::FakeRuntime` (feature `test-util`) for tests.
///
/// All methods are cancel safe in the sense that dropping the future leaves the runtime in a
/// state that a later `sync_pod`/`kill_pod` converges from.
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait Runtime: Send + Sync + 'static {
    /// The runtime's name and versions.
    async fn version(&self) -> Result<Version>;

    /// The runtime's readiness conditions.
    async fn status(&self) -> Result<RuntimeStatus>;

    /// Every pod the runtime knows, grouped by pod UID. With `all == false`, only pods with a
    /// running container or a ready sandbox.
    async fn get_pods(&self, all: bool) -> Result<Vec<RunningPod>>;

    /// Full status of one pod: its sandboxes (with IPs) and containers.
    async fn get_pod_status(&self, uid: &PodUid, name: &str, namespace: &str) -> Result<PodStatus>;

    /// The runtime's own event stream reported that a container's main process exited,
    /// possibly before [`Runtime::get_pod_status`] shows it (containerd's CRI shows an exit
    /// only after it has deleted the task, tens of milliseconds later). A runtime may report
    /// the container exited from then on, as long as a status it reports never goes back to
    /// running. The default ignores it.
    fn observe_exit(&self, exit: ObservedExit) {
        let _ = exit;
    }

    /// Drives the pod towards its spec: (re)creates the sandbox if needed, kills containers
    /// whose spec changed, and starts containers that should run per restart policy.
    ///
    /// `status` is the runtime status the decision is based on; `backoff` holds per-container
    /// restart backoff. Per-container failures are reported in the result, not as `Err`;
    /// `Err` means the pod could not be synced at all (e.g. the runtime is down).
    async fn sync_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        helper: Arc<dyn RuntimeHelper>,
        backoff: &Backoff,
    ) -> Result<PodSyncResult>;

    /// Stops every container of the pod (with `grace_period_seconds`, or the spec's, or a
    /// default when `pod` is `None`), then stops its sandboxes (upstream `KillPod`). Stopped
    /// containers and sandboxes are kept, so exit codes survive; see [`Runtime::remove_pod`].
    async fn kill_pod<'a>(
        &self,
        pod: Option<&'a Pod>,
        running: &RunningPod,
        grace_period_seconds: Option<i64>,
    ) -> Result<()>;

    /// Removes one container.
    async fn delete_container(&self, id: &str) -> Result<()>;

    /// Removes every (stopped) container and sandbox of a pod that is gone from the config
    /// (upstream's garbage collection of deleted pods). `NotFound` counts as success.
    async fn remove_pod(&self, running: &RunningPod) -> Result<()>;

    /// Removes dead containers under `policy`, dead sandboxes and the log directories of
    /// pods that are gone (upstream `Runtime.GarbageCollect`, see [`crate::container_gc`]).
    /// `all_sources_ready`: every pod source has been seen, so a pod nobody wants is
    /// deleted; `evict_non_deleted_pods`: also remove everything of pods that are
    /// terminated but not deleted. Failures of single removals are logged, not returned; an
    /// `Err` means a listing failed. The default collects nothing.
    async fn garbage_collect(
        &self,
        policy: crate::container_gc::Policy,
        all_sources_ready: bool,
        evict_non_deleted_pods: bool,
        pods: Arc<dyn crate::container_gc::PodStateProvider>,
    ) -> Result<()> {
        let _ = (policy, all_sources_ready, evict_non_deleted_pods, pods);
        Ok(())
    }

    /// Runs `cmd` in a running container and waits for it, at most `timeout` (zero: no
    /// timeout), keeping at most `max_output` bytes of each of stdout and stderr
    /// (upstream `ExecSync`, used by exec probes). A command that outlives the timeout gives
    /// `Ok` with [`ExecResult::timed_out`]. The default implementation reports that the
    /// runtime cannot exec.
    async fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: std::time::Duration,
        max_output: usize,
    ) -> Result<ExecResult> {
        let _ = (container_id, cmd, timeout, max_output);
        Err(Error::Runtime {
            op: "ExecSync",
            message: "this runtime does not support exec".into(),
        })
    }

    /// The URL on the runtime's streaming server that serves an exec of `cmd` in a running
    /// container (upstream `StreamingRuntime.GetExec`); the kubelet proxies the client's
    /// upgrade request to it. The default reports that the runtime cannot stream.
    async fn get_exec(
        &self,
        container_id: &str,
        cmd: &[String],
        streams: StreamOptions,
    ) -> Result<String> {
        let _ = (container_id, cmd, streams);
        Err(Error::Unsupported("GetExec"))
    }

    /// Begins an exec session of `cmd` in the running container `container_id`, before the
    /// kubelet asks for its URL ([`Runtime::get_exec`]) and proxies the stream; the kubelet
    /// ends it when the stream closes, and the runtime then makes sure the exec's process is
    /// gone (see [`exec_session`]). Failures are the runtime's to log: they give a session
    /// that does nothing. The default does nothing (a runtime whose streaming server ends
    /// an exec with its stream, as upstream assumes).
    async fn begin_exec_session(&self, container_id: &str, cmd: &[String]) -> Box<dyn ExecSession> {
        let _ = (container_id, cmd);
        Box::new(NoopExecSession)
    }

    /// The URL on the runtime's streaming server that attaches to a running container's
    /// main process (upstream `StreamingRuntime.GetAttach`). The default reports that the
    /// runtime cannot stream.
    async fn get_attach(&self, container_id: &str, streams: StreamOptions) -> Result<String> {
        let _ = (container_id, streams);
        Err(Error::Unsupported("GetAttach"))
    }

    /// The URL on the runtime's streaming server that forwards `ports` of a pod sandbox
    /// (upstream `StreamingRuntime.GetPortForward`; the caller picks the pod's newest
    /// sandbox, as upstream `getSandboxIDByPodUID`). The default reports that the runtime
    /// cannot stream.
    async fn get_port_forward(&self, sandbox_id: &str, ports: &[i32]) -> Result<String> {
        let _ = (sandbox_id, ports);
        Err(Error::Unsupported("GetPortForward"))
    }

    /// The images on the node (upstream `ImageService.ListImages`, which the Go `Runtime`
    /// embeds; the node status reports them). The default implementation reports that the
    /// runtime cannot list images.
    async fn list_images(&self) -> Result<Vec<crate::kuberuntime::api::Image>> {
        Err(Error::Unsupported("ListImages"))
    }

    /// Removes an image by ID or reference (upstream `ImageService.RemoveImage`, used by
    /// image garbage collection). The default implementation reports that the runtime
    /// cannot remove images.
    async fn remove_image(&self, image: &str) -> Result<()> {
        let _ = image;
        Err(Error::Unsupported("RemoveImage"))
    }

    /// The log file of container `container_id` and whether the container still runs
    /// (upstream `GetContainerLogs` and `isContainerRunning` read both through the CRI
    /// `ContainerStatus`). The default implementation reports that the runtime keeps no
    /// container logs.
    async fn container_log(&self, container_id: &str) -> Result<ContainerLog> {
        let _ = container_id;
        Err(Error::Unsupported("ContainerStatus.LogPath"))
    }

    /// Asks the runtime to reopen the log file of container `container_id` after the
    /// kubelet renamed it (CRI `ReopenContainerLog`, used by log rotation). The default
    /// implementation reports that the runtime cannot.
    async fn reopen_container_log(&self, container_id: &str) -> Result<()> {
        let _ = container_id;
        Err(Error::Unsupported("ReopenContainerLog"))
    }
}

/// Where a container's log is and whether the container still writes it, as
/// [`Runtime::container_log`] reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerLog {
    /// Absolute path of the container's CRI log file (e.g.
    /// `/var/log/pods/<ns>_<pod>_<uid>/<container>/0.log`); empty when it has none.
    pub path: PathBuf,
    /// `true` while the container is running.
    pub running: bool,
}

/// The standard streams of an exec or attach session (upstream `remotecommand.Options`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    /// Stream stdin.
    pub stdin: bool,
    /// Stream stdout.
    pub stdout: bool,
    /// Stream stderr (never with `tty`: a terminal merges it into stdout).
    pub stderr: bool,
    /// Allocate a TTY.
    pub tty: bool,
}

/// Groups a flat container list by name, newest first; handy for implementations.
pub fn newest_by_name(containers: &[ContainerStatus]) -> HashMap<&str, &ContainerStatus> {
    let mut out: HashMap<&str, &ContainerStatus> = HashMap::new();
    for c in containers {
        match out.get(c.name.as_str()) {
            Some(prev)
                if (prev.restart_count, prev.created_at) >= (c.restart_count, c.created_at) => {}
            _ => {
                out.insert(c.name.as_str(), c);
            }
        }
    }
    out
}
