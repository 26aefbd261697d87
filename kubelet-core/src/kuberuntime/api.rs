//! The runtime API at CRI height, in core types: what a [`RuntimeService`] lists, reports and
//! is asked to create (upstream `runtimeapi` of `k8s.io/cri-api`, trimmed to what the kubelet
//! uses, with no protobuf).
//!
//! Labels and annotations are opaque to a backend: the pod engine writes them on every
//! sandbox and container it creates (upstream `kuberuntime/labels.go`) and reads them back to
//! group containers by pod, to find each container's spec hash and restart count, and to
//! restore a preStop hook of a pod it no longer knows. A backend must store them and return
//! them unchanged.
//!
//! [`RuntimeService`]: super::RuntimeService

use std::collections::HashMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Container as ContainerSpec, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::runtime::{ContainerState, Mount, SandboxState};

/// Labels or annotations of a runtime object.
pub type Labels = HashMap<String, String>;

/// One sandbox as `ListPodSandbox` returns it (CRI `PodSandbox`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSandbox {
    /// Runtime ID.
    pub id: String,
    /// Current state.
    pub state: SandboxState,
    /// Attempt number from the sandbox's metadata.
    pub attempt: u32,
    /// Creation time.
    pub created_at: Option<Timestamp>,
    /// Labels given at creation.
    pub labels: Labels,
    /// Annotations given at creation.
    pub annotations: Labels,
}

/// Full status of one sandbox (CRI `PodSandboxStatus`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSandboxStatus {
    /// Runtime ID.
    pub id: String,
    /// Current state.
    pub state: SandboxState,
    /// Attempt number.
    pub attempt: u32,
    /// Creation time.
    pub created_at: Option<Timestamp>,
    /// Pod IPs, primary first.
    pub ips: Vec<String>,
    /// `true` when the sandbox shares the node's network namespace.
    pub host_network: bool,
    /// Labels given at creation.
    pub labels: Labels,
    /// Annotations given at creation.
    pub annotations: Labels,
}

/// One container as `ListContainers` returns it (CRI `Container`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Container {
    /// Runtime ID.
    pub id: String,
    /// Sandbox the container belongs to.
    pub sandbox_id: String,
    /// Name from the container's metadata (the engine prefers its label).
    pub name: String,
    /// Image as the user specified it.
    pub image: String,
    /// Current state.
    pub state: ContainerState,
    /// Creation time.
    pub created_at: Option<Timestamp>,
    /// Labels given at creation.
    pub labels: Labels,
    /// Annotations given at creation.
    pub annotations: Labels,
}

/// Full status of one container (CRI `ContainerStatus`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerStatus {
    /// Runtime ID.
    pub id: String,
    /// Name from the container's metadata (the engine prefers its label).
    pub name: String,
    /// Current state.
    pub state: ContainerState,
    /// Creation time.
    pub created_at: Option<Timestamp>,
    /// Start time; `None` while only created.
    pub started_at: Option<Timestamp>,
    /// Exit time; `None` until exited.
    pub finished_at: Option<Timestamp>,
    /// Exit code (meaningful once exited).
    pub exit_code: i32,
    /// The runtime's short reason once exited, e.g. `Completed`, `Error`, `OOMKilled`.
    pub reason: String,
    /// The runtime's message once exited.
    pub message: String,
    /// Image as the user specified it.
    pub image: String,
    /// Resolved image reference (digest or ID).
    pub image_ref: String,
    /// Labels given at creation.
    pub labels: Labels,
    /// Annotations given at creation.
    pub annotations: Labels,
    /// Mounts as created: the engine reads the termination message file through them.
    pub mounts: Vec<Mount>,
    /// Absolute path of the container's log file; empty when it has none.
    pub log_path: String,
}

/// Which sandboxes `ListPodSandbox` returns (CRI `PodSandboxFilter`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSandboxFilter {
    /// Only sandboxes in this state.
    pub state: Option<SandboxState>,
    /// Only sandboxes carrying every one of these labels.
    pub label_selector: Labels,
}

/// Which containers `ListContainers` returns (CRI `ContainerFilter`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerFilter {
    /// Only containers in this state.
    pub state: Option<ContainerState>,
    /// Only containers carrying every one of these labels.
    pub label_selector: Labels,
}

/// DNS settings of a sandbox (CRI `DNSConfig`), as the engine computed them from the pod's
/// `dnsPolicy`/`dnsConfig`, the host resolv.conf and the cluster DNS settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsConfig {
    /// Nameservers.
    pub servers: Vec<String>,
    /// Search domains.
    pub searches: Vec<String>,
    /// resolv.conf options, e.g. `ndots:5`.
    pub options: Vec<String>,
}

/// What a backend needs to create a pod's sandbox (CRI `PodSandboxConfig`, with the parts a
/// backend derives from the pod itself — ports, namespaces, security context, overhead — left
/// to it).
#[derive(Clone, Debug)]
pub struct PodSandboxConfig<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// Attempt number: 0 for the pod's first sandbox, +1 for each re-creation.
    pub attempt: u32,
    /// The sandbox's hostname (empty with host networking: the node's).
    pub hostname: String,
    /// DNS settings.
    pub dns: DnsConfig,
    /// Directory of the pod's container logs (`<pod-logs-dir>/<ns>_<name>_<uid>`), created.
    pub log_directory: PathBuf,
    /// Parent cgroup of the pod (e.g. `/kubepods/burstable/pod<uid>`); empty lets the
    /// runtime choose.
    pub cgroup_parent: String,
    /// Labels to store on the sandbox.
    pub labels: Labels,
    /// Annotations to store on the sandbox.
    pub annotations: Labels,
    /// The CRI runtime handler of the pod's RuntimeClass (upstream `RunPodSandbox`'s
    /// `runtimeHandler`): empty for the runtime's default. Resolved when the sandbox is
    /// created, empty otherwise.
    pub runtime_handler: String,
}

/// Where the pod's first container of this kind runs (upstream `ContainerType`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ContainerType {
    /// An init container (including sidecars, `restartPolicy: Always`).
    Init,
    /// An app container.
    #[default]
    Regular,
    /// An ephemeral (debug) container added through the `pods/ephemeralcontainers`
    /// subresource: started once in a running pod, never restarted.
    Ephemeral,
}

impl ContainerType {
    /// The `container_type` label of upstream's container metrics (`init_container`,
    /// `container`).
    pub fn metric_label(self) -> &'static str {
        match self {
            ContainerType::Init => "init_container",
            ContainerType::Regular => "container",
            ContainerType::Ephemeral => "ephemeral_container",
        }
    }
}

/// What a backend needs to create one container (CRI `ContainerConfig`): the spec, and what
/// the engine resolved for it. A backend derives resources and security settings from
/// `pod` and `container` itself.
#[derive(Clone, Debug)]
pub struct ContainerConfig<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// The container's spec.
    pub container: &'a ContainerSpec,
    /// Init or app container.
    pub container_type: ContainerType,
    /// Attempt number: the container's restart count.
    pub attempt: u32,
    /// The image to run, as resolved by [`super::RuntimeService::image_status`] or
    /// [`super::RuntimeService::pull_image`].
    pub image_ref: &'a str,
    /// The image's user, for backends that check `runAsNonRoot` themselves.
    pub image_user: Option<&'a ImageUser>,
    /// `command` with `$(VAR)` references expanded (empty: the image's entrypoint).
    pub command: Vec<String>,
    /// `args` with `$(VAR)` references expanded (empty: the image's cmd).
    pub args: Vec<String>,
    /// Environment, in order, resolved and expanded.
    pub envs: Vec<(String, String)>,
    /// Mounts: volumes, `/etc/hosts`, the termination message file.
    pub mounts: Vec<Mount>,
    /// Working directory (empty: the image's).
    pub working_dir: String,
    /// Log file path relative to the sandbox's `log_directory` (`<name>/<restart>.log`).
    pub log_path: PathBuf,
    /// Labels to store on the container.
    pub labels: Labels,
    /// Annotations to store on the container.
    pub annotations: Labels,
    /// The sandbox the container joins.
    pub sandbox: &'a PodSandboxConfig<'a>,
    /// For an ephemeral container with `targetContainerName`: the runtime ID of the running
    /// target, whose process namespace it joins (CRI `NamespaceOption.pid = TARGET`,
    /// `target_id`) when the pod does not share one process namespace already.
    pub target_container_id: Option<&'a str>,
}

/// The user an image runs as (from its config), for `runAsNonRoot` checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageUser {
    /// Numeric UID, when the image names one.
    pub uid: Option<i64>,
    /// User name, when the image names one rather than a UID.
    pub username: String,
}

/// An image present on the node (CRI `Image`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    /// Image ID (what containers are created from).
    pub id: String,
    /// Tags.
    pub repo_tags: Vec<String>,
    /// Digests.
    pub repo_digests: Vec<String>,
    /// Size in bytes.
    pub size: u64,
    /// The user the image runs as.
    pub user: ImageUser,
    /// `true` when the runtime must never remove it (the sandbox image).
    pub pinned: bool,
}

/// Registry credentials for one pull (CRI `AuthConfig`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AuthConfig {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
    /// Base64 `user:password`, as docker config files carry it.
    pub auth: String,
    /// The registry these credentials are for.
    pub server_address: String,
    /// Identity token for the registry.
    pub identity_token: String,
    /// Registry bearer token.
    pub registry_token: String,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("server_address", &self.server_address)
            .finish_non_exhaustive()
    }
}

/// One `PullImage` request.
#[derive(Clone, Debug)]
pub struct PullImageRequest<'a> {
    /// The image reference to pull.
    pub image: &'a str,
    /// Credentials, if the pod has some for this registry.
    pub auth: Option<&'a AuthConfig>,
    /// The sandbox the image is pulled for.
    pub sandbox: &'a PodSandboxConfig<'a>,
}

/// A streaming request (`exec`, `attach`, `port-forward`) for the runtime's streaming server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamRequest {
    /// Run a command in a container.
    Exec {
        /// Container ID.
        container_id: String,
        /// Command and arguments.
        cmd: Vec<String>,
        /// Allocate a TTY.
        tty: bool,
        /// Stream stdin.
        stdin: bool,
        /// Stream stdout.
        stdout: bool,
        /// Stream stderr.
        stderr: bool,
    },
    /// Attach to a container's main process.
    Attach {
        /// Container ID.
        container_id: String,
        /// Allocate a TTY.
        tty: bool,
        /// Stream stdin.
        stdin: bool,
        /// Stream stdout.
        stdout: bool,
        /// Stream stderr.
        stderr: bool,
    },
    /// Forward ports of a sandbox.
    PortForward {
        /// Sandbox ID.
        sandbox_id: String,
        /// Ports to forward.
        ports: Vec<i32>,
    },
}

/// Resource usage of one container (CRI `ContainerStats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerStats {
    /// Container ID.
    pub id: String,
    /// When the numbers were read.
    pub timestamp: Option<Timestamp>,
    /// Cumulative CPU time in nanoseconds.
    pub cpu_usage_nanos: Option<u64>,
    /// Cores in use in billionths, when the runtime computes it (CRI `usage_nano_cores`).
    pub cpu_usage_nano_cores: Option<u64>,
    /// Memory working set in bytes.
    pub memory_working_set_bytes: Option<u64>,
    /// Memory in use, cache included, when the runtime reports it.
    pub memory_usage_bytes: Option<u64>,
    /// Anonymous memory, when the runtime reports it.
    pub memory_rss_bytes: Option<u64>,
    /// Bytes used on the writable layer.
    pub writable_layer_bytes: Option<u64>,
    /// Inodes used on the writable layer.
    pub writable_layer_inodes: Option<u64>,
}

/// Counters of one network interface (CRI `NetworkInterfaceUsage`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InterfaceUsage {
    /// The interface's name.
    pub name: String,
    /// Bytes received.
    pub rx_bytes: Option<u64>,
    /// Receive errors.
    pub rx_errors: Option<u64>,
    /// Bytes transmitted.
    pub tx_bytes: Option<u64>,
    /// Transmit errors.
    pub tx_errors: Option<u64>,
}

/// Network usage of a sandbox (CRI `NetworkUsage`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkUsage {
    /// When the numbers were read.
    pub timestamp: Option<Timestamp>,
    /// The default interface (`eth0`).
    pub default_interface: Option<InterfaceUsage>,
    /// Every interface.
    pub interfaces: Vec<InterfaceUsage>,
}

/// Resource usage of one sandbox (CRI `PodSandboxStats`, Linux part).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSandboxStats {
    /// Sandbox ID.
    pub id: String,
    /// Network usage of the sandbox's network namespace.
    pub network: Option<NetworkUsage>,
    /// When the CPU and memory numbers were read.
    pub timestamp: Option<Timestamp>,
    /// Cumulative CPU time of the pod in nanoseconds.
    pub cpu_usage_nanos: Option<u64>,
    /// Memory working set of the pod in bytes.
    pub memory_working_set_bytes: Option<u64>,
    /// Processes in the pod.
    pub process_count: Option<u64>,
}

/// Usage of a filesystem that holds images or container layers (CRI `FilesystemUsage`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilesystemUsage {
    /// Mount point of the filesystem.
    pub mountpoint: String,
    /// Bytes used.
    pub used_bytes: u64,
    /// Inodes used.
    pub inodes_used: u64,
}
