//! Graceful node shutdown: while the node runs, the kubelet holds a systemd-logind inhibitor
//! *delay* lock; when logind announces a shutdown (`PrepareForShutdown(true)`), the kubelet
//! marks itself shutting down (the Node goes `NotReady`, new pods are refused), terminates
//! the pods group by group of priority, each with its reduced grace period, and then releases
//! the lock so the shutdown goes on.
//!
//! Mirrors upstream `pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go` (`managerImpl`:
//! `start`, `processShutdownEvent`, `migrateConfig`, `groupByPriority`, `Admit`,
//! `ShutdownStatus`) over the [`Inhibitor`] contract of `nodeshutdown/systemd/inhibit_linux.go`
//! (`dbusInhibiter`), which `kubelet-bin` implements over D-Bus. Not mirrored: the state file
//! and the `graceful_shutdown_{start,end}_time_seconds` metrics, and the SIGUSR1 trigger.
//!
//! Pods are ended through [`PodTerminator`] (upstream `TerminatePodAbnormallyAndWait`):
//! `Failed` with reason [`REASON`] and [`MESSAGE`], the `DisruptionTarget` condition, their
//! containers killed with the group's grace period (or the pod's own when shorter; preStop
//! hooks run within it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use tokio::sync::{Mutex, Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::events::{EventRecorder, EventType, node_ref};
use crate::eviction::{ActivePods, PodTerminator, TerminatePodOptions};
use crate::kubelet::admit::{PodAdmitAttributes, PodAdmitHandler, PodAdmitResult};
use crate::pod::PodExt;

#[cfg(test)]
mod tests;

/// The pod status reason of a pod ended by a node shutdown (upstream `nodeShutdownReason`).
pub const REASON: &str = "Terminated";
/// The pod status message of a pod ended by a node shutdown (upstream `nodeShutdownMessage`).
pub const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// The reason a pod is refused while the node shuts down (upstream
/// `nodeShutdownNotAdmittedReason`).
pub const NOT_ADMITTED_REASON: &str = "NodeShutdown";
/// The message a pod is refused with while the node shuts down (upstream
/// `nodeShutdownNotAdmittedMessage`).
pub const NOT_ADMITTED_MESSAGE: &str = "Pod was rejected as the node is shutting down.";
/// The Node's `Ready` error while shutting down (upstream `ShutdownStatus`).
pub const SHUTTING_DOWN: &str = "node is shutting down";
/// The node event's reason (upstream `events.NodeShutdown`).
pub const EVENT_REASON: &str = crate::events::reasons::NODE_SHUTDOWN;
/// How long after a lost connection to logind the watch starts again (upstream
/// `dbusReconnectPeriod`).
pub const RECONNECT_PERIOD: Duration = Duration::from_secs(1);
/// The `DisruptionTarget` condition's reason (upstream `PodReasonTerminationByKubelet`).
const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";
/// Upstream `scheduling.DefaultPriorityWhenNoDefaultClassExists`.
pub const DEFAULT_PRIORITY: i32 = 0;
/// Upstream `scheduling.SystemCriticalPriority`.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// Why the node shutdown manager cannot work; each names the setting or the call at fault.
/// [`Error::Inhibitor`] is retried when the connection to logind is lost after a start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A grace period that is negative, or a critical-pods period longer than the whole.
    #[error("invalid {field}: {why}")]
    InvalidConfig {
        /// The `KubeletConfiguration` field, e.g. `shutdownGracePeriodCriticalPods`.
        field: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// logind (or the bus) refused or failed a call.
    #[error("{op}: {source}")]
    Inhibitor {
        /// The call, e.g. `failed creating systemd inhibitor`.
        op: &'static str,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// logind's `InhibitDelayMaxUSec` stays below the requested total after the override.
    #[error(
        "node shutdown manager was unable to update logind InhibitDelayMaxSec to {requested:?} (ShutdownGracePeriod), current value of InhibitDelayMaxSec ({current:?}) is less than requested ShutdownGracePeriod"
    )]
    InhibitDelayTooShort {
        /// The sum of the grace periods.
        requested: Duration,
        /// logind's maximum delay after the override.
        current: Duration,
    },
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A held inhibitor lock (logind's file descriptor); dropping it releases the lock (upstream
/// `ReleaseInhibitLock` closes the descriptor).
pub struct InhibitLock(#[allow(dead_code)] Box<dyn Send + Sync>);

impl InhibitLock {
    /// Wraps what keeps the lock held (the descriptor logind returned).
    pub fn new(held: impl Send + Sync + 'static) -> Self {
        Self(Box::new(held))
    }
}

impl std::fmt::Debug for InhibitLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InhibitLock")
    }
}

/// systemd-logind's inhibitor interface as the manager uses it (upstream `dbusInhibiter`);
/// `kubelet-bin` implements it over D-Bus, tests with a fake.
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait Inhibitor: Send + Sync + 'static {
    /// logind's `InhibitDelayMaxUSec`: the longest a delay lock may hold a shutdown.
    async fn current_inhibit_delay(&self) -> Result<Duration>;
    /// Takes a `shutdown` inhibitor lock in `delay` mode (upstream `InhibitShutdown`).
    async fn inhibit_shutdown(&self) -> Result<InhibitLock>;
    /// Raises logind's `InhibitDelayMaxSec` to `delay` (upstream writes a logind.conf.d
    /// drop-in).
    async fn override_inhibit_delay(&self, delay: Duration) -> Result<()>;
    /// Makes logind read its configuration again (upstream: SIGHUP through systemd).
    async fn reload_logind_conf(&self) -> Result<()>;
    /// `PrepareForShutdown` signals from now on: `true` when a shutdown starts, `false` when
    /// it was cancelled; the channel closes when the connection to logind is lost.
    async fn monitor_shutdown(&self) -> Result<mpsc::Receiver<bool>>;
}

/// One entry of `shutdownGracePeriodByPodPriority`: pods with at least this priority (up to
/// the next entry's) get this many seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GracePeriodByPriority {
    /// The lowest priority of the group.
    pub priority: i32,
    /// The group's shutdown grace period.
    pub shutdown_grace_period_seconds: i64,
}

/// The manager's settings (upstream `nodeshutdown.Config`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// `shutdownGracePeriod`: the whole time the shutdown may be delayed.
    pub shutdown_grace_period: Duration,
    /// `shutdownGracePeriodCriticalPods`: the part of it kept for critical pods.
    pub shutdown_grace_period_critical_pods: Duration,
    /// `shutdownGracePeriodByPodPriority`: used instead of the two above when not empty.
    pub shutdown_grace_period_by_pod_priority: Vec<GracePeriodByPriority>,
}

impl Config {
    /// The groups, by priority from low to high (upstream `NewManager` with
    /// `migrateConfig`); empty when graceful shutdown is off. Errors name the field.
    pub fn groups(&self) -> Result<Vec<GracePeriodByPriority>> {
        if self.shutdown_grace_period_critical_pods > self.shutdown_grace_period {
            return Err(Error::InvalidConfig {
                field: "shutdownGracePeriodCriticalPods",
                why: format!(
                    "{:?} must not exceed shutdownGracePeriod ({:?})",
                    self.shutdown_grace_period_critical_pods, self.shutdown_grace_period
                ),
            });
        }
        if let Some(bad) = self
            .shutdown_grace_period_by_pod_priority
            .iter()
            .find(|p| p.shutdown_grace_period_seconds < 0)
        {
            return Err(Error::InvalidConfig {
                field: "shutdownGracePeriodByPodPriority",
                why: format!(
                    "shutdownGracePeriodSeconds {} of priority {} is negative",
                    bad.shutdown_grace_period_seconds, bad.priority
                ),
            });
        }
        let mut groups = if self.shutdown_grace_period_by_pod_priority.is_empty() {
            migrate_config(
                self.shutdown_grace_period,
                self.shutdown_grace_period_critical_pods,
            )
        } else {
            self.shutdown_grace_period_by_pod_priority.clone()
        };
        groups.sort_by_key(|g| g.priority);
        Ok(groups)
    }
}

/// `shutdownGracePeriod` and `shutdownGracePeriodCriticalPods` as two priority groups
/// (upstream `migrateConfig`): regular pods get the difference, critical pods the rest.
#[doc(alias = "migrateConfig")]
pub fn migrate_config(grace: Duration, critical: Duration) -> Vec<GracePeriodByPriority> {
    if grace.is_zero() || critical > grace {
        return Vec::new();
    }
    let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    vec![
        GracePeriodByPriority {
            priority: DEFAULT_PRIORITY,
            shutdown_grace_period_seconds: secs(grace - critical),
        },
        GracePeriodByPriority {
            priority: SYSTEM_CRITICAL_PRIORITY,
            shutdown_grace_period_seconds: secs(critical),
        },
    ]
}

/// Pods sorted into the groups (sorted by priority, low first) by `spec.priority`
/// (upstream `groupByPriority`): a pod goes to the highest group whose priority is not above
/// its own; below the lowest group, to the lowest.
#[doc(alias = "groupByPriority")]
pub fn group_by_priority(
    groups: &[GracePeriodByPriority],
    pods: Vec<Pod>,
) -> Vec<(GracePeriodByPriority, Vec<Pod>)> {
    let mut out: Vec<(GracePeriodByPriority, Vec<Pod>)> =
        groups.iter().map(|g| (*g, Vec::new())).collect();
    if out.is_empty() {
        return out;
    }
    for pod in pods {
        let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        let index = out
            .iter()
            .rposition(|(g, _)| g.priority <= priority)
            .unwrap_or(0);
        out[index].1.push(pod);
    }
    out
}

/// Whether the node is shutting down now; cheap to clone. The admit handler that refuses
/// new pods meanwhile (upstream `managerImpl.Admit`) and the source of the Node's `Ready`
/// error (upstream `ShutdownStatus`).
#[derive(Clone, Debug, Default)]
pub struct ShutdownState {
    shutting_down: Arc<AtomicBool>,
    changed: Arc<Notify>,
}

impl ShutdownState {
    /// `true` between `PrepareForShutdown(true)` and a cancellation.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Upstream `ShutdownStatus`: the error the Node's `Ready` condition shows.
    pub fn status(&self) -> Option<&'static str> {
        self.is_shutting_down().then_some(SHUTTING_DOWN)
    }

    /// Resolves after the state changed (once per change, for one waiter: the node status
    /// loop, which writes the Node at once, as upstream's `syncNodeStatus`).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    fn set(&self, shutting_down: bool) {
        if self.shutting_down.swap(shutting_down, Ordering::SeqCst) != shutting_down {
            self.changed.notify_one();
        }
    }
}

impl PodAdmitHandler for ShutdownState {
    fn admit(&self, _attrs: &PodAdmitAttributes<'_>) -> PodAdmitResult {
        if self.is_shutting_down() {
            PodAdmitResult::reject(NOT_ADMITTED_REASON, NOT_ADMITTED_MESSAGE)
        } else {
            PodAdmitResult::admit()
        }
    }
}

/// The node shutdown manager (upstream `managerImpl`). Build it with [`Manager::new`], hand
/// its [`ShutdownState`] to admission and the node status, then [`run`](Manager::run) it.
pub struct Manager {
    groups: Vec<GracePeriodByPriority>,
    inhibitor: Arc<dyn Inhibitor>,
    terminator: Arc<dyn PodTerminator>,
    active_pods: ActivePods,
    events: Arc<dyn EventRecorder>,
    node_name: String,
    state: ShutdownState,
    lock: Mutex<Option<InhibitLock>>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("groups", &self.groups)
            .field("node_name", &self.node_name)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager for `config`; `None` when graceful shutdown is off (every grace period
    /// zero: "node shutdown will be immediate").
    pub fn new(
        config: &Config,
        inhibitor: Arc<dyn Inhibitor>,
        terminator: Arc<dyn PodTerminator>,
        active_pods: ActivePods,
    ) -> Result<Option<Self>> {
        let groups = config.groups()?;
        if groups.is_empty() {
            tracing::info!("no graceful configuration specified, node shutdown will be immediate");
            return Ok(None);
        }
        tracing::info!(?groups, "creating node shutdown manager");
        Ok(Some(Self {
            groups,
            inhibitor,
            terminator,
            active_pods,
            events: Arc::new(crate::events::LogRecorder),
            node_name: String::new(),
            state: ShutdownState::default(),
            lock: Mutex::new(None),
        }))
    }

    /// Shares `state` (made before the manager, e.g. for an admit chain) instead of its own.
    #[must_use]
    pub fn with_state(mut self, state: ShutdownState) -> Self {
        self.state = state;
        self
    }

    /// Records the node events (`Shutdown`) with `recorder` on Node `node_name`.
    #[must_use]
    pub fn with_events(mut self, recorder: Arc<dyn EventRecorder>, node_name: &str) -> Self {
        self.events = recorder;
        self.node_name = node_name.to_owned();
        self
    }

    /// Whether the node is shutting down: the admit handler and the `Ready` input.
    pub fn state(&self) -> ShutdownState {
        self.state.clone()
    }

    /// The sum of the grace periods: what logind must allow a delay lock (upstream
    /// `periodRequested`).
    pub fn period_requested(&self) -> Duration {
        let secs: i64 = self
            .groups
            .iter()
            .map(|g| g.shutdown_grace_period_seconds.max(0))
            .sum();
        Duration::from_secs(u64::try_from(secs).unwrap_or(0))
    }

    /// Checks logind's maximum delay (raising it when too short), takes the lock and
    /// subscribes to `PrepareForShutdown` (upstream `start`).
    async fn start(&self) -> Result<mpsc::Receiver<bool>> {
        let current = self.inhibitor.current_inhibit_delay().await?;
        let requested = self.period_requested();
        if requested > current {
            self.inhibitor.override_inhibit_delay(requested).await?;
            self.inhibitor.reload_logind_conf().await?;
            let updated = self.inhibitor.current_inhibit_delay().await?;
            if requested > updated {
                return Err(Error::InhibitDelayTooShort {
                    requested,
                    current: updated,
                });
            }
        }
        self.acquire_inhibit_lock().await?;
        match self.inhibitor.monitor_shutdown().await {
            Ok(events) => Ok(events),
            Err(e) => {
                self.lock.lock().await.take();
                Err(e)
            }
        }
    }

    async fn acquire_inhibit_lock(&self) -> Result<()> {
        let lock = self.inhibitor.inhibit_shutdown().await?;
        // The new lock is held before the old one is released.
        let old = self.lock.lock().await.replace(lock);
        drop(old);
        Ok(())
    }

    /// `true` while the manager holds logind's delay lock.
    pub async fn holds_lock(&self) -> bool {
        self.lock.lock().await.is_some()
    }

    /// Watches for shutdowns until `token` is cancelled (upstream `Start`). The first start
    /// failing is returned (upstream logs it and gives up on graceful shutdown); a connection
    /// lost later is made again every [`RECONNECT_PERIOD`].
    pub async fn run(self: Arc<Self>, token: CancellationToken) -> Result<()> {
        let mut events = self.start().await?;
        loop {
            let event = tokio::select! {
                biased;
                () = token.cancelled() => return Ok(()),
                event = events.recv() => event,
            };
            match event {
                Some(shutting_down) => self.handle(shutting_down).await,
                None => {
                    tracing::error!("ended watching the node for shutdown events");
                    events = loop {
                        tokio::select! {
                            biased;
                            () = token.cancelled() => return Ok(()),
                            () = tokio::time::sleep(RECONNECT_PERIOD) => {}
                        }
                        tracing::debug!("restarting watch for node shutdown events");
                        match self.start().await {
                            Ok(events) => break events,
                            Err(e) => {
                                tracing::error!(error = %e, "unable to watch the node for shutdown events");
                            }
                        }
                    };
                }
            }
        }
    }

    /// One `PrepareForShutdown` signal.
    async fn handle(&self, shutting_down: bool) {
        tracing::info!(
            shutting_down,
            "shutdown manager detected new shutdown event"
        );
        let message = if shutting_down {
            "Shutdown manager detected shutdown event"
        } else {
            "Shutdown manager detected shutdown cancellation"
        };
        self.events.event(
            &node_ref(&self.node_name),
            EventType::Normal,
            EVENT_REASON,
            message,
        );
        self.state.set(shutting_down);
        if shutting_down {
            self.process_shutdown_event().await;
        } else if let Err(e) = self.acquire_inhibit_lock().await {
            tracing::warn!(error = %e, "failed to take the inhibitor lock again");
        }
    }

    /// Terminates the active pods group by group, each group for at most its grace period,
    /// then releases the lock (upstream `processShutdownEvent`).
    pub async fn process_shutdown_event(&self) {
        tracing::info!("shutdown manager processing shutdown event");
        let pods = (self.active_pods)();
        for (group, pods) in group_by_priority(&self.groups, pods) {
            if pods.is_empty() {
                continue;
            }
            let grace = group.shutdown_grace_period_seconds;
            let kills = pods.iter().map(|pod| self.terminate(pod, grace));
            let period = Duration::from_secs(u64::try_from(grace).unwrap_or(0));
            if tokio::time::timeout(period, futures::future::join_all(kills))
                .await
                .is_err()
            {
                tracing::info!(
                    grace_period = grace,
                    priority = group.priority,
                    "shutdown manager pod killing time out"
                );
            }
        }
        self.lock.lock().await.take();
        tracing::info!(
            "shutdown manager completed processing shutdown event, node will shutdown shortly"
        );
    }

    async fn terminate(&self, pod: &Pod, group_grace: i64) {
        let own = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds);
        let grace = match own {
            Some(own) if own <= group_grace => own,
            _ => group_grace,
        };
        tracing::info!(pod = %pod.full_name(), grace_period = grace, "shutdown manager killing pod with gracePeriod");
        let options = TerminatePodOptions {
            grace_period_override: grace,
            reason: REASON.to_owned(),
            message: MESSAGE.to_owned(),
            conditions: vec![PodCondition {
                type_: "DisruptionTarget".into(),
                status: "True".into(),
                reason: Some(TERMINATION_BY_KUBELET.into()),
                message: Some(MESSAGE.into()),
                ..Default::default()
            }],
        };
        match self
            .terminator
            .terminate_pod_abnormally_and_wait(pod, options)
            .await
        {
            Ok(()) => {
                tracing::info!(pod = %pod.full_name(), "shutdown manager finished killing pod")
            }
            Err(e) => {
                tracing::info!(pod = %pod.full_name(), error = %e, "shutdown manager failed killing pod");
            }
        }
    }
}
