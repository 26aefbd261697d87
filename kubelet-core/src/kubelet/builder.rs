//! The core assembly of a kubelet (the part of upstream `NewMainKubelet` and
//! `Kubelet.Run` in `pkg/kubelet/kubelet.go` that wires core pieces only): pod config and its
//! sources, pod manager, pod workers over a [`KubeletPodSyncer`], runtime state, crash-loop
//! back-off, sources readiness, admission (the default chain plus
//! [`PredicateAdmitHandler`] against the [`NodeProvider`]'s node), mirror pods through a
//! [`MirrorClient`], the [`Kubelet`] and its [`sync_loop`].
//!
//! The managers come in as [`Managers`] (runtime, PLEG, status, volumes, probes, cgroups,
//! runtime helper) with the PLEG's event stream and the probe results' update stream;
//! running the PLEG and the probe workers is the caller's (they are not core types).
//! `kubelet-bin`'s node builder supplies the defaults and calls this.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use kubelet_core::kubelet::{KubeletBuilder, Managers};
//! # use kubelet_core::config::ChannelSource;
//! # use tokio_util::{sync::CancellationToken, task::TaskTracker};
//! # async fn demo(managers: Managers, pleg_events: tokio::sync::mpsc::Receiver<kubelet_core::pleg::Event>) {
//! let (_results, probe_updates) = kubelet_core::probe::Results::new();
//! let (source, pods) = ChannelSource::new("mine");
//! let (tracker, token) = (TaskTracker::new(), CancellationToken::new());
//! let mut kubelet = KubeletBuilder::new(managers, pleg_events, probe_updates)
//!     .source(Box::new(source))
//!     .build(&tracker, &token);
//! kubelet.spawn().await;
//! // … pods.send(Operation::Set, vec![…]) …
//! kubelet.stop(std::time::Duration::from_secs(10)).await;
//! # }
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::apparmor::Validator;
use crate::backoff::Backoff;
use crate::config::{PodConfig, PodSource};
use crate::container_gc::{self, ContainerGc};
use crate::events::{EventRecorder, NoopRecorder};
use crate::eviction;
use crate::metrics::KubeletMetrics;
use crate::nodeshutdown;
use crate::objects::ObjectSource;
use crate::pleg;
use crate::pod_manager::PodManager;
use crate::pod_workers::{self, PodWorkers};
use crate::probe;
use crate::sysctl::Allowlist;

use super::admit::{AdmitChain, AppArmorAdmitHandler, PodAdmitHandler, SysctlAdmitHandler};
use super::mirror::{MirrorClient, NoMirrorPods};
use super::node::{self, FixedNode, NodeProvider};
use super::predicate::PredicateAdmitHandler;
use super::{Kubelet, KubeletPodSyncer, Managers, RuntimeState, SourcesReady, sync_loop};

/// How often the runtime's status is checked (upstream: 5 s).
pub const RUNTIME_STATUS_PERIOD: Duration = Duration::from_secs(5);

/// Assembles a kubelet from its managers (see the [module docs](self)).
pub struct KubeletBuilder {
    managers: Managers,
    pleg_events: mpsc::Receiver<pleg::Event>,
    probe_updates: probe::UpdateReceiver,
    sources: Vec<Box<dyn PodSource>>,
    admit: AdmitChain,
    sysctls: Option<Allowlist>,
    apparmor: Option<Validator>,
    predicates: bool,
    node_name: String,
    max_pods: u32,
    nodes: Option<Arc<dyn NodeProvider>>,
    mirror: Arc<dyn MirrorClient>,
    root_dir: PathBuf,
    node_ips: Vec<String>,
    crash_loop_backoff: (Duration, Duration),
    sync_loop: sync_loop::Config,
    runtime_status_period: Duration,
    events: Arc<dyn EventRecorder>,
    metrics: KubeletMetrics,
    objects: Option<Arc<dyn ObjectSource>>,
    eviction: Option<eviction::Options>,
    container_gc: Option<(container_gc::Policy, Duration)>,
    node_shutdown: Option<(nodeshutdown::Config, Arc<dyn nodeshutdown::Inhibitor>)>,
}

impl std::fmt::Debug for KubeletBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletBuilder")
            .field("sources", &self.sources.len())
            .field("admit", &self.admit)
            .field("root_dir", &self.root_dir)
            .field("node_ips", &self.node_ips)
            .field("crash_loop_backoff", &self.crash_loop_backoff)
            .field("sync_loop", &self.sync_loop)
            .field("container_gc", &self.container_gc)
            .finish_non_exhaustive()
    }
}

impl KubeletBuilder {
    /// A kubelet over `managers`, fed by the PLEG's `pleg_events` and the probe results'
    /// `probe_updates`. Defaults: no pod source, the default [`AdmitChain`] (sysctls) then
    /// [`PredicateAdmitHandler`], a standalone node (see [`node_provider`](Self::node_provider)),
    /// no mirror pods, root directory `/var/lib/kubelet`, no node IPs, upstream's crash-loop
    /// back-off (10 s to 5 min), 1 min resync.
    pub fn new(
        managers: Managers,
        pleg_events: mpsc::Receiver<pleg::Event>,
        probe_updates: probe::UpdateReceiver,
    ) -> Self {
        let crash = Backoff::crash_loop_default();
        Self {
            managers,
            pleg_events,
            probe_updates,
            sources: Vec::new(),
            admit: AdmitChain::empty(),
            sysctls: Some(Allowlist::default()),
            apparmor: Some(Validator::detect()),
            predicates: true,
            node_name: String::new(),
            max_pods: node::DEFAULT_MAX_PODS,
            nodes: None,
            mirror: Arc::new(NoMirrorPods),
            root_dir: PathBuf::from("/var/lib/kubelet"),
            node_ips: Vec::new(),
            crash_loop_backoff: (crash.initial(), crash.max()),
            sync_loop: sync_loop::Config::default(),
            runtime_status_period: RUNTIME_STATUS_PERIOD,
            events: Arc::new(NoopRecorder),
            metrics: KubeletMetrics::default(),
            objects: None,
            eviction: None,
            container_gc: None,
            node_shutdown: None,
        }
    }

    /// Runs an eviction manager with `options` (upstream `evictionManager`): pods are
    /// evicted under resource pressure and past their local storage limits, and its admit
    /// handler (first in the chain after the sysctl check) refuses pods under pressure.
    /// Default: none.
    pub fn eviction(mut self, options: eviction::Options) -> Self {
        self.eviction = Some(options);
        self
    }

    /// Runs the node shutdown manager (upstream `shutdownManager`) with `config` over
    /// `inhibitor` (logind): pods are terminated with their reduced grace periods when the
    /// node shuts down, and new pods refused meanwhile. Off (the default) when every grace
    /// period of `config` is zero; an invalid `config` is logged and leaves it off (validate
    /// it with [`nodeshutdown::Config::groups`] first).
    pub fn node_shutdown(
        mut self,
        config: nodeshutdown::Config,
        inhibitor: Arc<dyn nodeshutdown::Inhibitor>,
    ) -> Self {
        self.node_shutdown = Some((config, inhibitor));
        self
    }

    /// Collects dead containers, dead sandboxes and the log directories of deleted pods
    /// under `policy` every `period` (upstream's container GC: [`container_gc::Policy`]'s
    /// default every [`container_gc::CONTAINER_GC_PERIOD`]); failures are recorded as
    /// `ContainerGCFailed` on the node. Default: no collection.
    pub fn container_gc(mut self, policy: container_gc::Policy, period: Duration) -> Self {
        self.container_gc = Some((policy, period));
        self
    }

    /// The object source the volumes and env read: each synced pod is registered with it
    /// and unregistered once terminated (default: none registered).
    pub fn object_source(mut self, objects: Arc<dyn ObjectSource>) -> Self {
        self.objects = Some(objects);
        self
    }

    /// Where the kubelet's pod events go (admission rejections, `FailedMount`, …; default:
    /// nowhere). The runtime records its own events: give it the same recorder.
    pub fn event_recorder(mut self, recorder: Arc<dyn EventRecorder>) -> Self {
        self.events = recorder;
        self
    }

    /// Where the pod workers and the syncer record their metrics
    /// (`kubelet_pod_worker_duration_seconds`, `kubelet_pod_start_duration_seconds`; default:
    /// a set nobody reads).
    pub fn metrics(mut self, metrics: KubeletMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Adds a pod source; housekeeping waits until every source has sent its first snapshot.
    pub fn source(mut self, source: Box<dyn PodSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// The sysctls pods may set: upstream's safe set plus the node's
    /// `--allowed-unsafe-sysctls` (default: the safe set). The sysctl check stays first in
    /// the chain (and is put back in front of a chain given to [`admit_chain`]).
    ///
    /// [`admit_chain`]: Self::admit_chain
    pub fn sysctl_allowlist(mut self, allowlist: Allowlist) -> Self {
        self.sysctls = Some(allowlist);
        self
    }

    /// How the AppArmor admit handler, asked after the predicates, judges this host (default
    /// [`Validator::detect`]); `None` leaves the check out.
    pub fn apparmor(mut self, validator: Option<Validator>) -> Self {
        self.apparmor = validator;
        self
    }

    /// Appends an admit handler to the chain (after the sysctl check).
    pub fn admit_handler(mut self, handler: Arc<dyn PodAdmitHandler>) -> Self {
        self.admit.push(handler);
        self
    }

    /// Replaces the whole admit chain, the sysctl check included; the
    /// [`PredicateAdmitHandler`] still comes last unless [`no_predicate_admission`] is set.
    ///
    /// [`no_predicate_admission`]: Self::no_predicate_admission
    pub fn admit_chain(mut self, chain: AdmitChain) -> Self {
        self.admit = chain;
        self.sysctls = None;
        self
    }

    /// Leaves out the [`PredicateAdmitHandler`] (resource fit, node affinity, host ports…).
    pub fn no_predicate_admission(mut self) -> Self {
        self.predicates = false;
        self
    }

    /// The node's name: that of the default standalone node (default: empty).
    pub fn node_name(mut self, name: impl Into<String>) -> Self {
        self.node_name = name.into();
        self
    }

    /// The `pods` capacity of the default standalone node (`--max-pods`; default
    /// [`node::DEFAULT_MAX_PODS`]); a [`node_provider`](Self::node_provider) brings its own.
    pub fn max_pods(mut self, max_pods: u32) -> Self {
        self.max_pods = max_pods;
        self
    }

    /// Where the node object comes from, for predicate admission and mirror pods' owner.
    /// Default: a [`FixedNode`] with [`node::standalone_node`] named
    /// [`node_name`](Self::node_name), with this machine's cpu and memory and
    /// [`max_pods`](Self::max_pods) pods.
    pub fn node_provider(mut self, nodes: Arc<dyn NodeProvider>) -> Self {
        self.nodes = Some(nodes);
        self
    }

    /// Creates and deletes static pods' mirror pods in the API server (default:
    /// [`NoMirrorPods`]).
    pub fn mirror_client(mut self, mirror: Arc<dyn MirrorClient>) -> Self {
        self.mirror = mirror;
        self
    }

    /// Where per-pod directories live (`<root>/pods/<uid>`).
    pub fn root_dir(mut self, root_dir: impl Into<PathBuf>) -> Self {
        self.root_dir = root_dir.into();
        self
    }

    /// The node's IPs, reported as each pod's `status.hostIPs`.
    pub fn node_ips(mut self, node_ips: Vec<String>) -> Self {
        self.node_ips = node_ips;
        self
    }

    /// CrashLoopBackOff's first window and its cap.
    pub fn crash_loop_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.crash_loop_backoff = (initial, max);
        self
    }

    /// The sync loop's periods; `resync_interval` is also the pod workers' resync period.
    pub fn sync_loop_config(mut self, config: sync_loop::Config) -> Self {
        self.sync_loop = config;
        self
    }

    /// How often the runtime's status is checked (default [`RUNTIME_STATUS_PERIOD`]).
    pub fn runtime_status_period(mut self, period: Duration) -> Self {
        self.runtime_status_period = period;
        self
    }

    /// Wires everything; pod workers run on `tracker` and stop with `token`. Nothing else
    /// runs until [`KubeletService::spawn`].
    pub fn build(mut self, tracker: &TaskTracker, token: &CancellationToken) -> KubeletService {
        let nodes = self.nodes.take().unwrap_or_else(|| {
            let machine = crate::resources::NodeAllocatable::detect();
            Arc::new(FixedNode::new(node::standalone_node(
                &self.node_name,
                node::machine_capacity(&machine, self.max_pods),
                node::default_labels(&self.node_name),
            )))
        });
        if let Some(allowlist) = self.sysctls.take() {
            self.admit
                .prepend(Arc::new(SysctlAdmitHandler::new(allowlist)));
        }
        let pressure = self.eviction.as_ref().map(|_| {
            let pressure = eviction::Pressure::default();
            self.admit.push(Arc::new(pressure.clone()));
            pressure
        });
        if self.predicates {
            self.admit
                .push(Arc::new(PredicateAdmitHandler::new(nodes.clone())));
        }
        if let Some(validator) = self.apparmor.take() {
            self.admit
                .push(Arc::new(AppArmorAdmitHandler::new(validator)));
        }
        let shutdown_state = self.node_shutdown.as_ref().map(|_| {
            let state = nodeshutdown::ShutdownState::default();
            self.admit.push(Arc::new(state.clone()));
            state
        });
        let (mut pod_config, updates) = PodConfig::new();
        let sources = self
            .sources
            .into_iter()
            .map(|source| {
                let tx = pod_config.channel(source.name());
                (source, tx)
            })
            .collect();
        let ready = pod_config.sources_ready();
        let sources_ready: SourcesReady = Arc::new(move || ready.seen_all_sources());
        let gc_sources_ready = sources_ready.clone();
        let pod_manager = PodManager::new();
        let runtime_state = RuntimeState::new(self.managers.pleg.clone());
        let crash_backoff = Arc::new(Backoff::new(
            self.crash_loop_backoff.0,
            self.crash_loop_backoff.1,
        ));
        let mut syncer = KubeletPodSyncer::new(
            self.managers.clone(),
            pod_manager.clone(),
            runtime_state.clone(),
            crash_backoff.clone(),
            self.root_dir,
            self.node_ips,
        )
        .with_mirror_pods(self.mirror.clone(), nodes)
        .with_event_recorder(self.events.clone())
        .with_metrics(self.metrics.clone());
        if let Some(objects) = self.objects {
            syncer = syncer.with_object_source(objects);
        }
        let syncer = Arc::new(syncer);
        let workers = PodWorkers::new(
            syncer,
            self.managers.pleg.clone(),
            self.managers.cache.clone(),
            pod_workers::Config {
                resync_interval: self.sync_loop.resync_interval,
                ..Default::default()
            },
            tracker.clone(),
            token.clone(),
        )
        .with_metrics(self.metrics.clone());
        let kubelet = Kubelet::new(
            pod_manager,
            workers,
            &self.managers,
            crash_backoff,
            sources_ready,
        )
        .with_admit_chain(self.admit)
        .with_mirror_client(self.mirror)
        .with_event_recorder(self.events.clone());
        let eviction_manager = self
            .eviction
            .zip(pressure.clone())
            .map(|(options, pressure)| {
                let active = kubelet.clone();
                eviction::Manager::new(
                    options.config,
                    options.summary,
                    Arc::new(kubelet.clone()),
                    Arc::new(move || active.active_pods()),
                )
                .with_reclaim(options.image_gc, options.container_gc)
                .with_event_recorder(self.events.clone(), self.node_name.clone())
                .with_metrics(self.metrics.clone())
                .with_pressure(pressure)
            });
        let node_shutdown = self.node_shutdown.zip(shutdown_state.clone()).and_then(
            |((config, inhibitor), state)| {
                let active = kubelet.clone();
                match nodeshutdown::Manager::new(
                    &config,
                    inhibitor,
                    Arc::new(kubelet.clone()),
                    Arc::new(move || active.active_pods()),
                ) {
                    Ok(manager) => manager.map(|m| {
                        m.with_state(state)
                            .with_events(self.events.clone(), &self.node_name)
                    }),
                    Err(e) => {
                        tracing::error!(error = %e, "no node shutdown manager");
                        None
                    }
                }
            },
        );
        let container_gc = self.container_gc.map(|(policy, period)| {
            let gc = ContainerGc::new(
                self.managers.runtime.clone(),
                policy,
                gc_sources_ready,
                Arc::new(kubelet.clone()),
            );
            (gc, period)
        });
        KubeletService {
            pressure,
            shutdown: node_shutdown.as_ref().map(|m| m.state()),
            health: sync_loop::Health::new(self.sync_loop.resync_interval),
            kubelet,
            managers: self.managers,
            runtime_state,
            tracker: tracker.clone(),
            token: token.clone(),
            pending: Some(Pending {
                pod_config,
                sources,
                channels: sync_loop::Channels {
                    updates,
                    pleg_events: self.pleg_events,
                    probe_updates: self.probe_updates,
                },
                sync_loop: self.sync_loop,
                runtime_status_period: self.runtime_status_period,
                eviction_manager,
                node_shutdown,
                events: self.events,
                node_name: self.node_name,
            }),
            container_gc,
        }
    }
}

/// What [`KubeletService::spawn`] starts.
struct Pending {
    pod_config: PodConfig,
    sources: Vec<(Box<dyn PodSource>, mpsc::Sender<crate::config::PodUpdate>)>,
    channels: sync_loop::Channels,
    sync_loop: sync_loop::Config,
    runtime_status_period: Duration,
    eviction_manager: Option<eviction::Manager>,
    node_shutdown: Option<nodeshutdown::Manager>,
    events: Arc<dyn EventRecorder>,
    node_name: String,
}

/// An assembled kubelet: spawn it, read its state, stop it.
pub struct KubeletService {
    kubelet: Kubelet,
    managers: Managers,
    runtime_state: RuntimeState,
    health: sync_loop::Health,
    tracker: TaskTracker,
    token: CancellationToken,
    pending: Option<Pending>,
    pressure: Option<eviction::Pressure>,
    shutdown: Option<nodeshutdown::ShutdownState>,
    container_gc: Option<(ContainerGc, Duration)>,
}

impl std::fmt::Debug for KubeletService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletService")
            .field("spawned", &self.pending.is_none())
            .finish_non_exhaustive()
    }
}

impl KubeletService {
    /// Checks the runtime once (the sync loop stays gated until it is up), then spawns the
    /// runtime status checker, the container garbage collector (if set), the pod sources, the pod config merger and the sync loop on
    /// the tracker. Calling it again does nothing.
    pub async fn spawn(&mut self) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        let runtime = self.managers.runtime.clone();
        self.runtime_state.update(runtime.as_ref()).await;
        self.tracker.spawn(self.runtime_state.clone().run(
            runtime,
            pending.runtime_status_period,
            self.token.child_token(),
        ));
        if let Some((gc, period)) = &self.container_gc {
            self.tracker.spawn(gc.clone().run(
                *period,
                pending.events,
                crate::events::node_ref(&pending.node_name),
                self.token.child_token(),
            ));
        }
        for (source, tx) in pending.sources {
            self.tracker.spawn(source.run(tx, self.token.child_token()));
        }
        self.tracker
            .spawn(pending.pod_config.run(self.token.child_token()));
        if let Some(manager) = pending.eviction_manager {
            self.tracker.spawn(manager.run(self.token.child_token()));
        }
        if let Some(manager) = pending.node_shutdown {
            let token = self.token.child_token();
            self.tracker.spawn(async move {
                // Upstream logs a failed start and goes on without graceful shutdown.
                if let Err(e) = Arc::new(manager).run(token).await {
                    tracing::error!(error = %e, "failed to start node shutdown manager");
                }
            });
        }
        self.tracker.spawn(sync_loop::run(
            Arc::new(self.kubelet.clone()),
            pending.channels,
            self.runtime_state.clone(),
            self.health.clone(),
            pending.sync_loop,
            self.token.child_token(),
        ));
    }

    /// Cancels every task of the tracker and waits up to `drain` for them to end; `false`
    /// when some did not. Pods keep running in the runtime, as upstream.
    pub async fn stop(&self, drain: Duration) -> bool {
        self.token.cancel();
        self.tracker.close();
        tokio::time::timeout(drain, self.tracker.wait())
            .await
            .is_ok()
    }

    /// The kubelet (the [`SyncHandler`](crate::sync::SyncHandler) the sync loop runs on).
    pub fn kubelet(&self) -> &Kubelet {
        &self.kubelet
    }

    /// The container garbage collector, when [`KubeletBuilder::container_gc`] set one (for
    /// the eviction manager's node-level reclaim:
    /// [`ContainerGc::delete_all_unused_containers`]).
    pub fn container_gc(&self) -> Option<&ContainerGc> {
        self.container_gc.as_ref().map(|(gc, _)| gc)
    }

    /// The desired pods.
    pub fn pod_manager(&self) -> &PodManager {
        self.kubelet.pod_manager()
    }

    /// The managers the kubelet was built over.
    pub fn managers(&self) -> &Managers {
        &self.managers
    }

    /// The runtime's health as the sync loop sees it.
    pub fn runtime_state(&self) -> &RuntimeState {
        &self.runtime_state
    }

    /// The sync loop's liveness, for `/healthz/syncloop`.
    pub fn health(&self) -> &sync_loop::Health {
        &self.health
    }

    /// The tracker every task runs on.
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// The node's pressure conditions, when an [eviction manager](KubeletBuilder::eviction)
    /// runs (for the node status).
    pub fn pressure(&self) -> Option<&eviction::Pressure> {
        self.pressure.as_ref()
    }

    /// Whether the node is shutting down, when a [node shutdown
    /// manager](KubeletBuilder::node_shutdown) runs (for the node status's `Ready`).
    pub fn node_shutdown(&self) -> Option<&nodeshutdown::ShutdownState> {
        self.shutdown.as_ref()
    }

    /// The token that stops every task.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}
