//! The node builder: one way to assemble a whole node from its parts, with the default
//! where one exists (upstream `NewMainKubelet` in `pkg/kubelet/kubelet.go` and `RunKubelet`
//! in `cmd/kubelet/app/server.go`).
//!
//! | part | default | option |
//! |---|---|---|
//! | runtime | — (required) | [`NodeBuilder::new`] |
//! | pod sources | none | [`pod_manifest_path`](NodeBuilder::pod_manifest_path), [`source`](NodeBuilder::source) |
//! | PLEG | `kubelet_pleg::GenericPleg` over the runtime | [`pleg_config`](NodeBuilder::pleg_config), [`evented_pleg`](NodeBuilder::evented_pleg) |
//! | status manager | `kubelet_status::LocalStatusManager` | [`status_manager`](NodeBuilder::status_manager) |
//! | volumes | `kubelet_volumes::DefaultVolumeManager` under the root dir | [`volume_manager`](NodeBuilder::volume_manager) |
//! | objects (configMaps, secrets, tokens) | `InMemoryObjectSource` (empty); in cluster mode watches of the objects the pods reference ([`ApiObjectSource`](crate::cluster::objects::ApiObjectSource)) with tokens from the TokenRequest API ([`ApiTokenSource`](crate::cluster::ApiTokenSource)) | [`object_source`](NodeBuilder::object_source) |
//! | probes | `kubelet_probe::Manager` | [`no_probes`](NodeBuilder::no_probes) |
//! | admission | the sysctl check, then predicates (resource fit, node affinity, host ports…) against the standalone node | [`admit_handler`](NodeBuilder::admit_handler) |
//! | node object | a standalone node from the machine's capacity | [`node_provider`](NodeBuilder::node_provider) |
//! | mirror pods | none | [`mirror_client`](NodeBuilder::mirror_client) |
//! | cgroups | `cm::Noop` | [`cgroups`](NodeBuilder::cgroups) |
//! | cluster mode | standalone | [`cluster`](NodeBuilder::cluster) |
//! | services (service-link env vars) | none; in cluster mode a watch of all Services ([`ApiServiceLister`](crate::cluster::ApiServiceLister)) | — |
//! | events | `events::LogRecorder` (log lines); in cluster mode the API server's ([`ApiEventRecorder`](crate::cluster::events::ApiEventRecorder)) | [`event_recorder`](NodeBuilder::event_recorder) |
//! | metrics | a new `KubeletMetrics`, served on the secure port's `/metrics` | [`metrics`](NodeBuilder::metrics) |
//! | stall watchdog | on, 5 s ([`kubelet_core::watchdog`]; `/healthz` fails while a worker is stuck) | [`stall_watchdog`](NodeBuilder::stall_watchdog), [`no_stall_watchdog`](NodeBuilder::no_stall_watchdog) |
//! | container GC (dead containers, dead sandboxes, pod log directories) | upstream's policy every minute ([`kubelet_core::container_gc`]) | [`container_gc`](NodeBuilder::container_gc), [`no_container_gc`](NodeBuilder::no_container_gc) |
//! | image GC (unused images, least recently used first, over the high threshold of the image filesystem) | none (it needs the image filesystem's usage) | [`image_gc`](NodeBuilder::image_gc), [`image_gc_period`](NodeBuilder::image_gc_period), [`pod_infra_container_image`](NodeBuilder::pod_infra_container_image) |
//! | stats (`/stats/summary`, `/metrics/resource`, `/metrics/cadvisor`) | none | [`stats_provider`](NodeBuilder::stats_provider) |
//! | eviction manager (pressure conditions, eviction, local storage limits) | none | [`eviction`](NodeBuilder::eviction), [`eviction_reclaim`](NodeBuilder::eviction_reclaim) |
//! | graceful node shutdown (logind delay lock, pods terminated by priority) | off | [`node_shutdown`](NodeBuilder::node_shutdown), [`shutdown_inhibitor`](NodeBuilder::shutdown_inhibitor) |
//! | endpoints | none | [`healthz_addr`](NodeBuilder::healthz_addr), [`read_only_addr`](NodeBuilder::read_only_addr), [`secure_server`](NodeBuilder::secure_server) |
//!
//! The core wiring (pod config, pod workers, sync loop…) is
//! [`kubelet_core::kubelet::KubeletBuilder`]; this module adds the implementations that live
//! outside `kubelet-core` and the HTTP endpoints.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kubelet_core::cache::PodCache;
use kubelet_core::cm::PodContainerManager;
use kubelet_core::config::{FileSource, PodSource};
use kubelet_core::envvars::ServiceLister;
use kubelet_core::events::{self, EventRecorder, EventType};
use kubelet_core::eviction::{ContainerGC, ImageGC};
use kubelet_core::kubelet::env::EnvSource;
use kubelet_core::kubelet::{
    KubeletBuilder, KubeletRuntimeHelper, Managers, MirrorClient, NodeProvider, PodAdmitHandler,
    sync_loop,
};
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::objects::{InMemoryObjectSource, ObjectSource, WithTokens};
use kubelet_core::pleg::Pleg;
use kubelet_core::probe::{self, ProbeManager};
use kubelet_core::resources::NodeAllocatable;
use kubelet_core::runtime::Runtime;
use kubelet_core::stats::{PodStatsProvider, SummaryProvider};
use kubelet_core::status::StatusManager;
use kubelet_core::volume::VolumeManager;
use kubelet_status::LocalStatusManager;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cluster::{Cluster, ClusterOptions};
use crate::server::{self, ServerState};

/// Any error a runtime constructor returns.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a node could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The root directory could not be created.
    #[error("creating the root directory {path}: {source}")]
    RootDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Node registration or node status failed.
    #[error(transparent)]
    NodeStatus(#[from] crate::cluster::node_status::Error),
    /// The runtime constructor failed.
    #[error("building the container runtime: {0}")]
    Runtime(#[source] BoxError),
    /// An endpoint could not listen on its address.
    #[error("binding the {name} server to {addr}: {source}")]
    Bind {
        /// Which server (`healthz`, `read-only`).
        name: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Cluster mode could not start (kubeconfig, API client).
    #[error(transparent)]
    Cluster(#[from] crate::cluster::Error),
    /// The secure port could not be set up (TLS files, authentication, authorization).
    #[error(transparent)]
    Server(#[from] server::Error),
    /// The container log rotation policy is invalid.
    #[error(transparent)]
    LogRotation(#[from] kubelet_core::logs::rotation::Error),
    /// The stall watchdog's thread could not start.
    #[error(transparent)]
    Watchdog(#[from] kubelet_core::watchdog::Error),
    /// The image GC policy is invalid.
    #[error(transparent)]
    ImageGc(#[from] kubelet_core::image_gc::Error),
}

/// What the runtime constructor gets (see [`NodeBuilder::new`]).
#[derive(Clone, Debug)]
pub struct RuntimeContext {
    /// The probe results the runtime reads to restart containers whose liveness or startup
    /// probe failed (e.g. `RemoteRuntime::with_probe_results`).
    pub probe_results: probe::Results,
    /// The node's name.
    pub node_name: String,
    /// The node's IPs.
    pub node_ips: Vec<String>,
    /// The kubelet's root directory.
    pub root_dir: PathBuf,
    /// Where the runtime records its events (e.g. `RemoteRuntime::with_event_recorder`).
    pub event_recorder: Arc<dyn EventRecorder>,
    /// Where the runtime records its calls (e.g. `kubelet_cri::connect_with_metrics`).
    pub metrics: KubeletMetrics,
    /// The cluster's RuntimeClasses in cluster mode (e.g.
    /// `RemoteRuntime::with_runtime_classes`); `None` standalone, where upstream does not
    /// look `runtimeClassName` up.
    pub runtime_classes: Option<Arc<dyn kubelet_core::runtimeclass::RuntimeClassSource>>,
}

type RuntimeConstructor =
    Box<dyn FnOnce(&RuntimeContext) -> Result<Arc<dyn Runtime>, BoxError> + Send>;

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Assembles a node (see the [module docs](self) for the parts and their defaults).
pub struct NodeBuilder {
    runtime: RuntimeConstructor,
    node_name: String,
    max_pods: u32,
    node_ips: Vec<String>,
    root_dir: PathBuf,
    pod_manifest_path: Option<PathBuf>,
    file_check_frequency: Duration,
    sources: Vec<Box<dyn PodSource>>,
    admit: Vec<Arc<dyn PodAdmitHandler>>,
    sysctls: Option<kubelet_core::sysctl::Allowlist>,
    nodes: Option<Arc<dyn NodeProvider>>,
    mirror: Option<Arc<dyn MirrorClient>>,
    cgroups: Arc<dyn PodContainerManager>,
    status: Option<Arc<dyn StatusManager>>,
    volumes: Option<Arc<dyn VolumeManager>>,
    objects: Option<Arc<dyn ObjectSource>>,
    probes: bool,
    pleg: kubelet_pleg::Config,
    #[cfg(feature = "containerd")]
    evented_pleg: Option<crate::pleg::Choice>,
    cluster_domain: String,
    crash_loop_backoff: Option<(Duration, Duration)>,
    sync_loop: sync_loop::Config,
    healthz_addr: Option<SocketAddr>,
    read_only_addr: Option<SocketAddr>,
    secure: Option<server::SecureOptions>,
    container_logs: Option<(kubelet_core::logs::rotation::Policy, Duration)>,
    stats: Option<Arc<dyn SummaryProvider>>,
    eviction: Option<kubelet_core::eviction::Config>,
    eviction_reclaim: Option<(Arc<dyn ImageGC>, Arc<dyn ContainerGC>)>,
    node_shutdown: Option<kubelet_core::nodeshutdown::Config>,
    shutdown_inhibitor: Option<Arc<dyn kubelet_core::nodeshutdown::Inhibitor>>,
    drain_timeout: Duration,
    stall_watchdog: Option<kubelet_core::watchdog::Config>,
    container_gc: Option<(kubelet_core::container_gc::Policy, Duration)>,
    image_gc: Option<(kubelet_core::image_gc::Policy, Arc<dyn PodStatsProvider>)>,
    image_gc_period: Duration,
    pod_infra_container_image: String,
    cluster: Option<ClusterOptions>,
    events: Option<Arc<dyn EventRecorder>>,
    metrics: KubeletMetrics,
}

impl std::fmt::Debug for NodeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBuilder")
            .field("node_name", &self.node_name)
            .field("root_dir", &self.root_dir)
            .field("pod_manifest_path", &self.pod_manifest_path)
            .field("sources", &self.sources.len())
            .field("admit_handlers", &self.admit.len())
            .field("healthz_addr", &self.healthz_addr)
            .field("read_only_addr", &self.read_only_addr)
            .field("secure", &self.secure.as_ref().map(|s| s.addr))
            .field("cluster", &self.cluster.is_some())
            .finish_non_exhaustive()
    }
}

/// The OS hostname, lowercased (the node name when none is given, as upstream).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_lowercase())
        .unwrap_or_else(|_| "localhost".into())
}

impl NodeBuilder {
    /// A node whose container runtime `runtime` builds once the probe results exist.
    ///
    /// Defaults: node name [`hostname`], root directory `/var/lib/kubelet`, no node IPs, no
    /// pod source, no endpoints, and the defaults of the [module docs](self).
    pub fn new<F, R, E>(runtime: F) -> Self
    where
        F: FnOnce(&RuntimeContext) -> Result<R, E> + Send + 'static,
        R: Runtime,
        E: Into<BoxError>,
    {
        Self::with_runtime_constructor(Box::new(move |ctx| match runtime(ctx) {
            Ok(runtime) => Ok(Arc::new(runtime) as Arc<dyn Runtime>),
            Err(e) => Err(e.into()),
        }))
    }

    /// A node over a runtime that needs nothing from the node, shared with the caller (e.g.
    /// a fake whose state a test inspects).
    pub fn with_runtime(runtime: Arc<dyn Runtime>) -> Self {
        Self::with_runtime_constructor(Box::new(move |_| Ok(runtime)))
    }

    fn with_runtime_constructor(runtime: RuntimeConstructor) -> Self {
        Self {
            runtime,
            node_name: hostname(),
            max_pods: kubelet_core::kubelet::node::DEFAULT_MAX_PODS,
            node_ips: Vec::new(),
            root_dir: PathBuf::from("/var/lib/kubelet"),
            pod_manifest_path: None,
            file_check_frequency: kubelet_core::config::file::DEFAULT_CHECK_FREQUENCY,
            sources: Vec::new(),
            admit: Vec::new(),
            sysctls: None,
            nodes: None,
            mirror: None,
            cgroups: Arc::new(kubelet_core::cm::Noop::default()),
            status: None,
            volumes: None,
            objects: None,
            probes: true,
            pleg: kubelet_pleg::Config::default(),
            #[cfg(feature = "containerd")]
            evented_pleg: None,
            cluster_domain: String::new(),
            crash_loop_backoff: None,
            sync_loop: sync_loop::Config::default(),
            healthz_addr: None,
            read_only_addr: None,
            secure: None,
            container_logs: None,
            stats: None,
            eviction: None,
            eviction_reclaim: None,
            node_shutdown: None,
            shutdown_inhibitor: None,
            drain_timeout: Duration::from_secs(10),
            stall_watchdog: Some(kubelet_core::watchdog::Config::default()),
            container_gc: Some((
                kubelet_core::container_gc::Policy::default(),
                kubelet_core::container_gc::CONTAINER_GC_PERIOD,
            )),
            image_gc: None,
            image_gc_period: kubelet_core::image_gc::IMAGE_GC_PERIOD,
            pod_infra_container_image: String::new(),
            cluster: None,
            events: None,
            metrics: KubeletMetrics::default(),
        }
    }

    /// Where the node records its metrics (default: a new set): the PLEG, the runtime (through
    /// [`RuntimeContext::metrics`]) and the pod workers record into it, and the secure port
    /// serves it on `/metrics` and `/metrics/probes`. A test passes a clone and reads values.
    pub fn metrics(mut self, metrics: KubeletMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Where the Node object comes from, for predicate admission and as mirror pods' owner
    /// (default: a standalone node with this machine's cpu and memory; in cluster mode the
    /// Node as the API server has it).
    pub fn node_provider(mut self, nodes: Arc<dyn NodeProvider>) -> Self {
        self.nodes = Some(nodes);
        self
    }

    /// Creates and deletes static pods' mirror pods in the API server (default: none).
    pub fn mirror_client(mut self, mirror: Arc<dyn MirrorClient>) -> Self {
        self.mirror = Some(mirror);
        self
    }

    /// The node's name (static pods get `-<node name>` appended).
    pub fn node_name(mut self, name: impl Into<String>) -> Self {
        self.node_name = name.into();
        self
    }

    /// How many pods the standalone node admits (`--max-pods`, default 110); in cluster mode
    /// the Node's `pods` capacity, which the node status sets from the same flag, counts.
    pub fn max_pods(mut self, max_pods: u32) -> Self {
        self.max_pods = max_pods;
        self
    }

    /// The node's IPs (pods' `status.hostIPs`, host-network pods' IPs, the pod IPs of a
    /// runtime without sandboxes). Default: the first global IPv4 address of the interface
    /// that carries the default route, as upstream chooses without `--node-ip`.
    pub fn node_ips(mut self, ips: Vec<String>) -> Self {
        self.node_ips = ips;
        self
    }

    /// The kubelet's root directory; `<root>/pods` is created at build (mode 0750).
    pub fn root_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.root_dir = dir.into();
        self
    }

    /// Static pods from the manifests in this directory (or file).
    pub fn pod_manifest_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.pod_manifest_path = Some(path.into());
        self
    }

    /// How often the manifest path is rescanned besides inotify (default
    /// [`DEFAULT_CHECK_FREQUENCY`](kubelet_core::config::file::DEFAULT_CHECK_FREQUENCY)).
    pub fn file_check_frequency(mut self, every: Duration) -> Self {
        self.file_check_frequency = every;
        self
    }

    /// Adds a pod source.
    pub fn source(mut self, source: Box<dyn PodSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// The sysctls pods may set: the safe ones plus `--allowed-unsafe-sysctls` (default: the
    /// safe ones). Give the runtime the same list (`kubelet_cri::Options::with_sysctls`).
    pub fn sysctl_allowlist(mut self, allowlist: kubelet_core::sysctl::Allowlist) -> Self {
        self.sysctls = Some(allowlist);
        self
    }

    /// Appends an admit handler, asked after the sysctl check and earlier handlers.
    pub fn admit_handler(mut self, handler: Arc<dyn PodAdmitHandler>) -> Self {
        self.admit.push(handler);
        self
    }

    /// The pod cgroup manager (default `cm::Noop`, no pod cgroups).
    pub fn cgroups(mut self, cgroups: Arc<dyn PodContainerManager>) -> Self {
        self.cgroups = cgroups;
        self
    }

    /// Replaces the default `LocalStatusManager` (which reads readiness from the probe
    /// manager).
    pub fn status_manager(mut self, status: Arc<dyn StatusManager>) -> Self {
        self.status = Some(status);
        self
    }

    /// Replaces the default `DefaultVolumeManager` under the root directory.
    pub fn volume_manager(mut self, volumes: Arc<dyn VolumeManager>) -> Self {
        self.volumes = Some(volumes);
        self
    }

    /// Where configMaps, secrets and service-account tokens come from (default: an empty
    /// in-memory source; in cluster mode an
    /// [`ApiObjectSource`](crate::cluster::objects::ApiObjectSource) over the main client,
    /// with tokens from the API server). Every synced pod is registered with it.
    pub fn object_source(mut self, objects: Arc<dyn ObjectSource>) -> Self {
        self.objects = Some(objects);
        self
    }

    /// Where the node's events go (default: `LogRecorder`, log lines; in cluster mode an
    /// [`ApiEventRecorder`](crate::cluster::events::ApiEventRecorder) writing core/v1
    /// Events). The runtime gets it in [`RuntimeContext::event_recorder`].
    pub fn event_recorder(mut self, recorder: Arc<dyn EventRecorder>) -> Self {
        self.events = Some(recorder);
        self
    }

    /// Runs no probes (`probe::NoProbes`): containers are ready once started.
    pub fn no_probes(mut self) -> Self {
        self.probes = false;
        self
    }

    /// The generic PLEG's periods.
    pub fn pleg_config(mut self, config: kubelet_pleg::Config) -> Self {
        self.pleg = config;
        self
    }

    /// Chooses the PLEG at start: containerd's events when `choice.evented` and the runtime
    /// is containerd, the generic relisting PLEG otherwise.
    #[cfg(feature = "containerd")]
    pub fn evented_pleg(mut self, choice: crate::pleg::Choice) -> Self {
        self.evented_pleg = Some(choice);
        self
    }

    /// The cluster domain of the pods' `/etc/hosts` FQDN entries (default none).
    pub fn cluster_domain(mut self, domain: impl Into<String>) -> Self {
        self.cluster_domain = domain.into();
        self
    }

    /// CrashLoopBackOff's first window and its cap (default 10 s and 5 min).
    pub fn crash_loop_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.crash_loop_backoff = Some((initial, max));
        self
    }

    /// How often every pod is resynced (upstream `--sync-frequency`, default 1 min).
    pub fn sync_frequency(mut self, every: Duration) -> Self {
        self.sync_loop.resync_interval = every;
        self
    }

    /// Serves `/healthz`, `/healthz/ping` and `/healthz/syncloop` here (port 0: any port,
    /// see [`Node::healthz_addr`]).
    pub fn healthz_addr(mut self, addr: SocketAddr) -> Self {
        self.healthz_addr = Some(addr);
        self
    }

    /// Serves the read-only endpoints (`/pods`, `/runningpods/`, the health checks) here
    /// (port 0: any port, see [`Node::read_only_addr`]).
    pub fn read_only_addr(mut self, addr: SocketAddr) -> Self {
        self.read_only_addr = Some(addr);
        self
    }

    /// Serves the secure (HTTPS) endpoints with these options: TLS, authentication and
    /// authorization in front of `/pods`, `/runningpods/`, `/healthz`, `/configz`,
    /// `/metrics` and `/metrics/probes` (see [`metrics`](Self::metrics)) (upstream
    /// port 10250; port 0: any port, see [`Node::secure_addr`]). Webhook authentication or
    /// authorization needs [`cluster`](Self::cluster) mode: its main API client creates the
    /// reviews.
    pub fn secure_server(mut self, options: server::SecureOptions) -> Self {
        self.secure = Some(options);
        self
    }

    /// Rotates the logs of running containers with `policy`, checking every `interval`
    /// (upstream's container log manager: `containerLogMaxSize`, `containerLogMaxFiles`,
    /// `containerLogMonitorInterval`; see [`kubelet_core::logs::rotation`]). Default: no
    /// rotation (the `kubelet` binary turns it on with upstream's 10Mi, 5 files, 10 s).
    pub fn container_log_rotation(
        mut self,
        policy: kubelet_core::logs::rotation::Policy,
        interval: Duration,
    ) -> Self {
        self.container_logs = Some((policy, interval));
        self
    }

    /// Serves `/stats/summary`, `/metrics/resource` and `/metrics/cadvisor` on the secure
    /// port from `stats` (e.g. a [`kubelet_core::stats::Summarizer`] over a
    /// [`kubelet_core::stats::cri::CriStatsProvider`]; default none: those paths are 404).
    pub fn stats_provider(mut self, stats: Arc<dyn SummaryProvider>) -> Self {
        self.stats = Some(stats);
        self
    }

    /// Runs the eviction manager with `config` over the [stats
    /// provider](Self::stats_provider) (without one there is nothing to watch and no manager
    /// runs): pods are evicted under memory, disk or PID pressure and past their local
    /// storage limits, new pods refused under pressure, and in cluster mode the Node's
    /// `MemoryPressure`, `DiskPressure` and `PIDPressure` conditions follow it.
    pub fn eviction(mut self, config: kubelet_core::eviction::Config) -> Self {
        self.eviction = Some(config);
        self
    }

    /// Graceful node shutdown with `config` (`shutdownGracePeriod`,
    /// `shutdownGracePeriodCriticalPods`, `shutdownGracePeriodByPodPriority`): the kubelet
    /// holds a logind delay lock and, when the node shuts down, terminates its pods group by
    /// group of priority within those periods; the Node turns `NotReady` and new pods are
    /// refused meanwhile. Off when every period is zero (the default). logind is reached on
    /// the system bus (`DBUS_SYSTEM_BUS_ADDRESS`) unless
    /// [`shutdown_inhibitor`](Self::shutdown_inhibitor) replaces it.
    pub fn node_shutdown(mut self, config: kubelet_core::nodeshutdown::Config) -> Self {
        self.node_shutdown = Some(config);
        self
    }

    /// What [`node_shutdown`](Self::node_shutdown) takes its lock from and hears shutdowns
    /// from (default: [`crate::logind::DbusLogind`] on the system bus).
    pub fn shutdown_inhibitor(
        mut self,
        inhibitor: Arc<dyn kubelet_core::nodeshutdown::Inhibitor>,
    ) -> Self {
        self.shutdown_inhibitor = Some(inhibitor);
        self
    }

    /// What the eviction manager deletes under disk pressure before it evicts pods (default:
    /// the node's image GC, when [`image_gc`](Self::image_gc) is set, and its container GC,
    /// when on): unused images and dead containers.
    pub fn eviction_reclaim(
        mut self,
        images: Arc<dyn ImageGC>,
        containers: Arc<dyn ContainerGC>,
    ) -> Self {
        self.eviction_reclaim = Some((images, containers));
        self
    }

    /// How long [`Node::stop`] waits for every task to end (default 10 s).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Watches the async runtime's workers with these settings (default: on, 5 s): when one
    /// is stuck (a blocking call on an async worker) the node logs an error with every
    /// thread's state and `/healthz` fails until it moves again (see
    /// [`kubelet_core::watchdog`]).
    pub fn stall_watchdog(mut self, config: kubelet_core::watchdog::Config) -> Self {
        self.stall_watchdog = Some(config);
        self
    }

    /// Runs no stall watchdog.
    pub fn no_stall_watchdog(mut self) -> Self {
        self.stall_watchdog = None;
        self
    }

    /// Collects dead containers under `policy`, dead sandboxes and the log directories of
    /// deleted pods every `period` (default: upstream's policy every
    /// [`CONTAINER_GC_PERIOD`](kubelet_core::container_gc::CONTAINER_GC_PERIOD); see
    /// [`kubelet_core::container_gc`]).
    pub fn container_gc(
        mut self,
        policy: kubelet_core::container_gc::Policy,
        period: Duration,
    ) -> Self {
        self.container_gc = Some((policy, period));
        self
    }

    /// Collects no dead containers: every exited container stays until its pod is removed.
    pub fn no_container_gc(mut self) -> Self {
        self.container_gc = None;
        self
    }

    /// Collects unused images under `policy` (see [`kubelet_core::image_gc`]), reading the
    /// image filesystem's usage from `image_fs` (e.g. the
    /// [`CriStatsProvider`](kubelet_core::stats::cri::CriStatsProvider) of the stats
    /// endpoints). Default: no image GC.
    pub fn image_gc(
        mut self,
        policy: kubelet_core::image_gc::Policy,
        image_fs: Arc<dyn PodStatsProvider>,
    ) -> Self {
        self.image_gc = Some((policy, image_fs));
        self
    }

    /// How often images are collected (default
    /// [`IMAGE_GC_PERIOD`](kubelet_core::image_gc::IMAGE_GC_PERIOD), 5 min).
    pub fn image_gc_period(mut self, period: Duration) -> Self {
        self.image_gc_period = period;
        self
    }

    /// The sandbox image, which image GC never removes even when the runtime does not pin
    /// it (upstream `--pod-infra-container-image`; default none).
    pub fn pod_infra_container_image(mut self, image: impl Into<String>) -> Self {
        self.pod_infra_container_image = image.into();
        self
    }

    /// Joins a cluster: pods also come from the API server (source `api`), and the node
    /// keeps its Lease (see [`cluster`](crate::cluster)). Default: standalone.
    pub fn cluster(mut self, options: ClusterOptions) -> Self {
        self.cluster = Some(options);
        self
    }

    /// Builds the node: creates the root directory, the runtime and every manager, and
    /// binds the endpoints. Nothing runs until [`Node::spawn`] or [`Node::run_until`].
    pub async fn build(mut self) -> Result<Node, Error> {
        if self.node_ips.is_empty() {
            self.node_ips = address::detect_node_ips();
        }
        // Upstream `setupDataDirs`: the root and pods directories are 0750.
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o750)
            .create(self.root_dir.join("pods"))
            .map_err(|source| Error::RootDir {
                path: self.root_dir.clone(),
                source,
            })?;
        let mut cluster = self
            .cluster
            .take()
            .map(|mut options| {
                options.fill_node_status(&self.node_name, &self.node_ips, &self.root_dir);
                options.metrics = self.metrics.clone();
                Cluster::new(options, self.node_name.clone())
            })
            .transpose()?;
        // Upstream sets up TLS and the auth of the secure port before anything starts.
        let secure = self
            .secure
            .as_ref()
            .map(|opts| {
                let reviews = cluster.as_ref().map(|c| {
                    Arc::new(c.clients.client.clone()) as Arc<dyn server::webhook::Reviews>
                });
                let ips: Vec<std::net::IpAddr> = self
                    .node_ips
                    .iter()
                    .filter_map(|ip| ip.parse().ok())
                    .collect();
                server::Secure::new(opts, &self.node_name, &ips, reviews).map(|s| (opts.addr, s))
            })
            .transpose()?;
        if let (Some(cluster), Some((_, secure))) = (cluster.as_mut(), secure.as_ref()) {
            cluster.set_serving_certificate(secure.serving.clone());
        }
        let token = CancellationToken::new();
        let tracker = TaskTracker::new();
        let events: Arc<dyn EventRecorder> = match (self.events.take(), &cluster) {
            (Some(recorder), _) => recorder,
            (None, Some(cluster)) => {
                // Upstream gives events a client of their own: the unlimited heartbeat
                // client plus the writer's event rate limit.
                let (recorder, writer) = crate::cluster::events::ApiEventRecorder::new(
                    cluster.clients.heartbeat.clone(),
                    self.node_name.clone(),
                    crate::cluster::events::Settings::default()
                        .with_limits(cluster.options.event_limits),
                );
                tracker.spawn(writer.run(token.child_token()));
                Arc::new(recorder)
            }
            (None, None) => Arc::new(events::LogRecorder),
        };
        if let Some(cluster) = cluster.as_mut() {
            cluster.set_event_recorder(events.clone());
        }

        let (probe_results, probe_updates) = probe::Results::new();
        let runtime = (self.runtime)(&RuntimeContext {
            probe_results: probe_results.clone(),
            node_name: self.node_name.clone(),
            node_ips: self.node_ips.clone(),
            root_dir: self.root_dir.clone(),
            event_recorder: events.clone(),
            metrics: self.metrics.clone(),
            runtime_classes: cluster.as_mut().map(|c| {
                Arc::new(c.runtime_classes())
                    as Arc<dyn kubelet_core::runtimeclass::RuntimeClassSource>
            }),
        })
        .map_err(Error::Runtime)?;
        self.metrics.set_node_name(&self.node_name);
        // Upstream `NewMainKubelet`: `kubelet_cgroup_version` of the host (a one-time read
        // of /proc/self/mountinfo).
        if let Ok(layout) = kubelet_core::cm::cgroupfs::Layout::detect() {
            self.metrics.set_cgroup_version(layout.version());
        }
        if let Some((policy, interval)) = self.container_logs {
            let manager =
                kubelet_core::logs::rotation::ContainerLogManager::new(runtime.clone(), policy)?
                    .monitor_interval(interval);
            tracker.spawn(manager.run(token.child_token()));
        }
        // The eviction manager's node-level reclaim, unless given: these collectors.
        let deferred_containers =
            Arc::new(kubelet_core::container_gc::DeferredContainerGc::default());
        let mut reclaim_images: Arc<dyn ImageGC> = Arc::new(kubelet_core::eviction::NoReclaim);
        if let Some((policy, image_fs)) = self.image_gc.take() {
            let gc = kubelet_core::image_gc::ImageGcManager::new(
                runtime.clone(),
                image_fs,
                policy,
                events.clone(),
                events::node_ref(&self.node_name),
            )?
            .with_sandbox_image(self.pod_infra_container_image.clone())
            .with_metrics(self.metrics.clone());
            reclaim_images = Arc::new(gc.clone());
            tracker.spawn(gc.run(self.image_gc_period, token.child_token()));
        }
        // Upstream `BirthCry`.
        events.event(
            &events::node_ref(&self.node_name),
            EventType::Normal,
            events::reasons::STARTING_KUBELET,
            "Starting kubelet.",
        );
        let cache = PodCache::new();
        let (generic_pleg, pleg_events) = kubelet_pleg::GenericPleg::with_metrics(
            runtime.clone(),
            cache.clone(),
            self.pleg,
            self.metrics.clone(),
        );
        let pleg: Arc<dyn Pleg> = Arc::new(generic_pleg.clone());
        #[cfg(feature = "containerd")]
        let pleg_task: Task = match self.evented_pleg {
            Some(choice) => Box::pin(crate::pleg::run(
                choice,
                runtime.clone(),
                generic_pleg,
                token.child_token(),
            )),
            None => Box::pin(generic_pleg.run(token.child_token())),
        };
        #[cfg(not(feature = "containerd"))]
        let pleg_task: Task = Box::pin(generic_pleg.run(token.child_token()));

        let (probes, local_status): (Arc<dyn ProbeManager>, LocalStatusManager) = if self.probes {
            let manager = kubelet_probe::Manager::new(
                runtime.clone(),
                cache.clone(),
                probe_results,
                token.child_token(),
            )
            .with_host_ips(self.node_ips.clone())
            .with_event_recorder(events.clone())
            .with_metrics(self.metrics.clone());
            let status = LocalStatusManager::new().with_probe_results(Arc::new(manager.clone()));
            (Arc::new(manager), status)
        } else {
            (Arc::new(probe::NoProbes), LocalStatusManager::new())
        };
        let (status, local_status) = match self.status {
            Some(status) => (status, None),
            None => {
                let local = Arc::new(local_status);
                tracker.spawn(learn_runtime_name(
                    runtime.clone(),
                    local.clone(),
                    token.child_token(),
                ));
                (local.clone() as Arc<dyn StatusManager>, Some(local))
            }
        };
        let allocatable = NodeAllocatable::detect();
        let mut api_objects = None;
        let objects: Arc<dyn ObjectSource> = match (self.objects.take(), &cluster) {
            (Some(objects), _) => objects,
            (None, Some(cluster)) => {
                let source = Arc::new(cluster.object_source(&tracker, &token));
                api_objects = Some(source.clone());
                Arc::new(WithTokens::new(source, Arc::new(cluster.token_source())))
            }
            (None, None) => Arc::new(InMemoryObjectSource::new()),
        };
        let services = cluster
            .as_mut()
            .map(|c| Arc::new(c.service_lister()) as Arc<dyn ServiceLister>);
        let volumes = self.volumes.unwrap_or_else(|| {
            Arc::new(
                kubelet_volumes::DefaultVolumeManager::new(self.root_dir.clone())
                    .with_object_source(objects.clone())
                    .with_node_allocatable(allocatable),
            )
        });
        let helper = KubeletRuntimeHelper::new(volumes.clone())
            .with_env_source(EnvSource {
                node_name: self.node_name.clone(),
                host_ips: self.node_ips.clone(),
                allocatable,
                objects: objects.clone(),
                services,
            })
            .with_cgroups(self.cgroups.clone())
            .with_hosts_file(self.root_dir.clone(), self.cluster_domain);
        let managers = Managers {
            runtime: runtime.clone(),
            volumes,
            status: status.clone(),
            pleg,
            cache,
            helper: Arc::new(helper),
            probes,
            cgroups: self.cgroups,
        };

        let mut kubelet = KubeletBuilder::new(managers, pleg_events, probe_updates)
            .node_name(self.node_name.clone())
            .max_pods(self.max_pods)
            .root_dir(self.root_dir)
            .node_ips(self.node_ips)
            .sync_loop_config(self.sync_loop)
            .metrics(self.metrics.clone())
            .object_source(objects)
            .event_recorder(events);
        if let Some((initial, max)) = self.crash_loop_backoff {
            kubelet = kubelet.crash_loop_backoff(initial, max);
        }
        if let Some((policy, period)) = self.container_gc {
            kubelet = kubelet.container_gc(policy, period);
        }
        if let Some(cluster) = &mut cluster {
            // Cluster mode: the Node from the API server, and mirror pods in it.
            if self.nodes.is_none() {
                let fallback = cluster.initial_node();
                self.nodes = Some(Arc::new(cluster.node_provider(fallback)));
            }
            if self.mirror.is_none() {
                self.mirror = Some(Arc::new(cluster.mirror_client()));
            }
        }
        if let Some(nodes) = self.nodes {
            kubelet = kubelet.node_provider(nodes);
        }
        if let Some(mirror) = self.mirror {
            kubelet = kubelet.mirror_client(mirror);
        }
        if let Some(path) = self.pod_manifest_path {
            kubelet = kubelet.source(Box::new(
                FileSource::new(path, self.node_name).check_frequency(self.file_check_frequency),
            ));
        }
        if let Some(cluster) = &cluster {
            kubelet = kubelet.source(Box::new(cluster.pod_source()));
        }
        for source in self.sources {
            kubelet = kubelet.source(source);
        }
        for handler in self.admit {
            kubelet = kubelet.admit_handler(handler);
        }
        if let Some(allowlist) = self.sysctls {
            kubelet = kubelet.sysctl_allowlist(allowlist);
        }
        match (self.eviction, &self.stats) {
            (Some(config), Some(stats)) => {
                let (images, containers) = self.eviction_reclaim.unwrap_or_else(|| {
                    (
                        reclaim_images,
                        deferred_containers.clone() as Arc<dyn ContainerGC>,
                    )
                });
                let options = kubelet_core::eviction::Options::new(config, stats.clone())
                    .with_reclaim(images, containers);
                kubelet = kubelet.eviction(options);
            }
            (Some(_), None) => {
                tracing::warn!("eviction configured without a stats provider: no eviction manager");
            }
            (None, _) => {}
        }
        if let Some(config) = self.node_shutdown.filter(|c| *c != Default::default()) {
            let inhibitor = self
                .shutdown_inhibitor
                .unwrap_or_else(|| Arc::new(crate::logind::DbusLogind::new(None)));
            kubelet = kubelet.node_shutdown(config, inhibitor);
        }
        let service = kubelet.build(&tracker, &token);
        if let Some(gc) = service.container_gc() {
            deferred_containers.set(gc.clone());
        }
        if let Some(source) = api_objects {
            // A changed ConfigMap or Secret is written to the volumes of the pods that use it
            // at their next sync: ask for it now rather than at the periodic resync.
            let workers = service.kubelet().workers().clone();
            source.set_change_handler(move |uids| {
                for uid in uids {
                    workers.resync(&kubelet_core::PodUid::from(uid.as_str()));
                }
            });
        }

        let watchdog = self
            .stall_watchdog
            .map(|config| {
                kubelet_core::watchdog::Watchdog::start(&tokio::runtime::Handle::current(), config)
            })
            .transpose()?;
        let state = ServerState {
            pod_manager: service.pod_manager().clone(),
            status: status.clone(),
            runtime: runtime.clone(),
            syncloop: service.health().clone(),
            metrics: Arc::new(server::metrics::Registries::new(&self.metrics)),
            stall: watchdog
                .as_ref()
                .map(kubelet_core::watchdog::Watchdog::health)
                .unwrap_or_default(),
            stats: self.stats,
        };
        let mut servers = Vec::new();
        if let Some(addr) = self.healthz_addr {
            servers.push(bind("healthz", addr, server::healthz_router(state.clone())).await?);
        }
        if let Some(addr) = self.read_only_addr {
            servers.push(bind("read-only", addr, server::read_only_router(state.clone())).await?);
        }
        if let Some((addr, secure)) = secure {
            servers.push(
                bind("secure", addr, secure.router(state))
                    .await?
                    .with_tls(secure.tls),
            );
        }
        Ok(Node {
            service,
            runtime,
            status,
            local_status,
            pleg_task: Some(pleg_task),
            servers,
            drain_timeout: self.drain_timeout,
            cluster,
            _watchdog: watchdog,
        })
    }
}

/// Tells the status manager the runtime's name, the prefix of container IDs in pod statuses
/// (upstream's `ContainerID.Type` comes from the runtime's `Version`); retried every second
/// while the runtime is down.
async fn learn_runtime_name(
    runtime: Arc<dyn Runtime>,
    status: Arc<LocalStatusManager>,
    token: CancellationToken,
) {
    loop {
        match runtime.version().await {
            Ok(version) => {
                tracing::info!(runtime = %version.runtime_name, version = %version.runtime_version, "container runtime");
                status.set_runtime_name(version.runtime_name);
                return;
            }
            Err(e) => tracing::debug!(error = %e, "runtime version not known yet"),
        }
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

mod address;
mod handle;
#[cfg(test)]
mod tests;

pub use handle::Node;
use handle::bind;
