//! The eviction manager: keeps the node from running out of memory, disk or process IDs by
//! evicting pods, reports the node's pressure conditions and refuses pods while under
//! pressure (upstream `pkg/kubelet/eviction/`: `eviction_manager.go`, `helpers.go`,
//! `types.go`, `api/types.go`).
//!
//! * [`api`]: signals, thresholds and the `--eviction-*` syntax.
//! * [`observations`]: the signals from the Summary API and the threshold bookkeeping.
//! * [`rank`]: which pod goes first, and the eviction message.
//! * [`local_storage`]: emptyDir `sizeLimit` and `ephemeral-storage` limits.
//! * [`reclaim`]: the container and image GC seam tried before pods are evicted.
//! * [`Manager`]: the control loop; [`Pressure`]: its conditions, shared with the node
//!   status, and its admit handler (upstream `Admit`).
//!
//! An evicted pod ends `Failed` with reason `Evicted` and upstream's message, through a
//! [`PodTerminator`] (the kubelet's pod workers). Critical pods (static, mirror, priority ≥
//! `system-cluster-critical`'s) are never evicted.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use kubelet_core::eviction::{Config, Manager, PodTerminator};
//! # fn f(summary: Arc<dyn kubelet_core::stats::SummaryProvider>, terminator: Arc<dyn PodTerminator>) {
//! let manager = Manager::new(Config::default(), summary, terminator, Arc::new(Vec::new));
//! let pressure = manager.pressure(); // for the node status and the admit chain
//! tokio::spawn(manager.run(tokio_util::sync::CancellationToken::new()));
//! # }
//! ```

pub mod api;
pub mod local_storage;
mod manager;
pub mod observations;
pub mod rank;
pub mod reclaim;

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, PodCondition, Taint};

pub use api::{NodeCondition, Signal, Threshold, ThresholdValue};
pub use manager::{ActivePods, Manager};
pub use reclaim::{ContainerGC, ImageGC, NoReclaim};

use crate::kubelet::admit::{PodAdmitAttributes, PodAdmitHandler, PodAdmitResult};
use crate::pod_resources::is_critical_pod;
use crate::qos::{BEST_EFFORT, pod_qos};
use crate::stats::SummaryProvider;

/// The pod status reason of an evicted pod, and of a pod refused under pressure.
pub const REASON: &str = "Evicted";
/// The grace period of a pod evicted for a hard threshold or a local storage limit (upstream
/// `immediateEvictionGracePeriodSeconds`).
pub const IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS: i64 = 1;
/// How long the manager waits for evicted pods to be cleaned up (upstream
/// `podCleanupTimeout`).
pub const POD_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often it looks meanwhile (upstream `podCleanupPollFreq`).
pub const POD_CLEANUP_POLL: Duration = Duration::from_secs(1);
/// Upstream `evictionMonitoringPeriod`.
pub const DEFAULT_MONITORING_INTERVAL: Duration = Duration::from_secs(10);
/// Upstream's default `evictionPressureTransitionPeriod`.
pub const DEFAULT_PRESSURE_TRANSITION_PERIOD: Duration = Duration::from_secs(300);
/// The taint a BestEffort pod may tolerate to be admitted under memory pressure.
const TAINT_NODE_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";

/// Why eviction settings are invalid; each names the statement at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A list entry without its separator.
    #[error("invalid statement {statement:?}: want <key>{separator}<value>")]
    InvalidStatement {
        /// The entry.
        statement: String,
        /// `<` or `=`.
        separator: char,
    },
    /// Not an eviction signal.
    #[error("unsupported eviction signal {0}")]
    UnsupportedSignal(String),
    /// A threshold that does not parse or is out of range.
    #[error("invalid eviction threshold {statement}: {why}")]
    InvalidThreshold {
        /// The statement, e.g. `memory.available<lots`.
        statement: String,
        /// What is wrong with it.
        why: String,
    },
    /// A minimum reclaim that does not parse or is out of range.
    #[error("invalid eviction minimum reclaim {statement}: {why}")]
    InvalidMinimumReclaim {
        /// The statement, e.g. `memory.available=-1`.
        statement: String,
        /// What is wrong with it.
        why: String,
    },
    /// A soft threshold without a grace period.
    #[error("grace period must be specified for the soft eviction threshold {0}")]
    MissingGracePeriod(String),
    /// The pod did not stop in time (the eviction stands; its worker goes on).
    #[error("timed out waiting for pod {0} to terminate")]
    TerminationTimeout(String),
}

/// How the manager works (upstream `eviction.Config`).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The hard and soft thresholds (see [`api::parse_threshold_config`]).
    pub thresholds: Vec<Threshold>,
    /// How long a pressure condition stays after it was last seen (upstream
    /// `evictionPressureTransitionPeriod`, 5m).
    pub pressure_transition_period: Duration,
    /// The grace period of pods evicted for a soft threshold (upstream
    /// `evictionMaxPodGracePeriod`, 0).
    pub max_pod_grace_period_seconds: i64,
    /// How often the manager looks (upstream `evictionMonitoringPeriod`, 10s).
    pub monitoring_interval: Duration,
    /// Enforce emptyDir `sizeLimit` and `ephemeral-storage` limits (upstream
    /// `localStorageCapacityIsolation`, on).
    pub local_storage_capacity_isolation: bool,
}

impl Default for Config {
    /// Upstream's defaults: the thresholds of [`api::DEFAULT_EVICTION_HARD`].
    fn default() -> Self {
        let thresholds = api::parse_threshold_config(
            &api::default_eviction_hard(),
            &Default::default(),
            &Default::default(),
            &Default::default(),
        )
        .unwrap_or_default();
        Self {
            thresholds,
            pressure_transition_period: DEFAULT_PRESSURE_TRANSITION_PERIOD,
            max_pod_grace_period_seconds: 0,
            monitoring_interval: DEFAULT_MONITORING_INTERVAL,
            local_storage_capacity_isolation: true,
        }
    }
}

/// An eviction manager's configuration and inputs, for
/// [`KubeletBuilder::eviction`](crate::kubelet::KubeletBuilder::eviction).
#[derive(Clone)]
pub struct Options {
    /// The thresholds and timings.
    pub config: Config,
    /// Where the signals and the pods' usage come from.
    pub summary: Arc<dyn SummaryProvider>,
    /// Deletes unused images under disk pressure (default [`NoReclaim`]).
    pub image_gc: Arc<dyn ImageGC>,
    /// Deletes dead containers under disk pressure (default [`NoReclaim`]).
    pub container_gc: Arc<dyn ContainerGC>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Options {
    /// `config` over `summary`, with no node-level reclaim.
    pub fn new(config: Config, summary: Arc<dyn SummaryProvider>) -> Self {
        Self {
            config,
            summary,
            image_gc: Arc::new(NoReclaim),
            container_gc: Arc::new(NoReclaim),
        }
    }

    /// Reclaims disk through `images` and `containers` before evicting pods.
    #[must_use]
    pub fn with_reclaim(
        mut self,
        images: Arc<dyn ImageGC>,
        containers: Arc<dyn ContainerGC>,
    ) -> Self {
        self.image_gc = images;
        self.container_gc = containers;
        self
    }
}

/// How a pod is terminated by the kubelet rather than by its spec (upstream
/// `kubetypes.TerminatePodOptions`).
#[derive(Clone, Debug, PartialEq)]
pub struct TerminatePodOptions {
    /// The grace period to kill with.
    pub grace_period_override: i64,
    /// The pod status reason, [`REASON`].
    pub reason: String,
    /// The pod status message.
    pub message: String,
    /// Conditions to set on the pod (`DisruptionTarget`).
    pub conditions: Vec<PodCondition>,
}

/// Ends pods before their time (upstream `PodTerminator`; the kubelet implements it over
/// its pod workers).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait PodTerminator: Send + Sync + 'static {
    /// Marks the pod `Failed` with the options' reason, message and conditions, kills it
    /// with their grace period and waits for its containers to stop, for a time
    /// proportional to the grace period (upstream `TerminatePodAbnormallyAndWait`).
    async fn terminate_pod_abnormally_and_wait(
        &self,
        pod: &Pod,
        options: TerminatePodOptions,
    ) -> Result<(), Error>;

    /// `true` once everything of the pod is released: containers, volumes, cgroup (upstream
    /// `PodCleanedUpFunc`, `podResourcesAreReclaimed`). The manager waits for it after an
    /// eviction before it looks again, so that the freed resources show.
    fn pod_cleaned_up(&self, pod: &Pod) -> bool;
}

/// The node's pressure conditions as the eviction manager last reported them; cheap to
/// clone. Also the manager's admit handler (upstream `managerImpl.Admit`).
#[derive(Clone, Debug, Default)]
pub struct Pressure {
    conditions: Arc<RwLock<BTreeSet<NodeCondition>>>,
}

impl Pressure {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeSet<NodeCondition>> {
        self.conditions.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the conditions, logging the ones that come and go.
    pub fn set(&self, conditions: BTreeSet<NodeCondition>) {
        let mut current = self.conditions.write().unwrap_or_else(|e| e.into_inner());
        for c in conditions.difference(&current) {
            tracing::warn!(condition = %c, "eviction manager: node condition observed");
        }
        for c in current.difference(&conditions) {
            tracing::info!(condition = %c, "eviction manager: node condition no longer observed");
        }
        *current = conditions;
    }

    /// The conditions now.
    pub fn conditions(&self) -> BTreeSet<NodeCondition> {
        self.read().clone()
    }

    /// `true` under `MemoryPressure` (upstream `IsUnderMemoryPressure`).
    pub fn is_under_memory_pressure(&self) -> bool {
        self.read().contains(&NodeCondition::MemoryPressure)
    }

    /// `true` under `DiskPressure` (upstream `IsUnderDiskPressure`).
    pub fn is_under_disk_pressure(&self) -> bool {
        self.read().contains(&NodeCondition::DiskPressure)
    }

    /// `true` under `PIDPressure` (upstream `IsUnderPIDPressure`).
    pub fn is_under_pid_pressure(&self) -> bool {
        self.read().contains(&NodeCondition::PidPressure)
    }
}

impl PodAdmitHandler for Pressure {
    /// Under pressure only critical pods are admitted, and under memory pressure alone also
    /// pods that are not BestEffort or that tolerate the memory-pressure taint; the others
    /// are refused with reason `Evicted` and `The node had condition: [<conditions>]. `.
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> PodAdmitResult {
        let conditions = self.conditions();
        if conditions.is_empty() || is_critical_pod(attrs.pod) {
            return PodAdmitResult::admit();
        }
        if conditions.len() == 1 && conditions.contains(&NodeCondition::MemoryPressure) {
            let taint = Taint {
                key: TAINT_NODE_MEMORY_PRESSURE.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            };
            let tolerations = attrs
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.as_deref())
                .unwrap_or_default();
            if pod_qos(attrs.pod) != BEST_EFFORT
                || crate::kubelet::predicate::tolerations_tolerate_taint(tolerations, &taint)
            {
                return PodAdmitResult::admit();
            }
        }
        let names: Vec<&str> = conditions.iter().map(|c| c.as_str()).collect();
        tracing::info!(pod = %crate::PodExt::full_name(attrs.pod), conditions = ?names, "failed to admit pod to node");
        PodAdmitResult::reject(
            REASON,
            format!("The node had condition: [{}]. ", names.join(" ")),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::testing::pod;

    fn admit(p: &Pressure, pod: &Pod) -> PodAdmitResult {
        p.admit(&PodAdmitAttributes {
            pod,
            other_pods: &[],
        })
    }

    #[test]
    fn memory_pressure_refuses_best_effort_pods_only() {
        let p = Pressure::default();
        let best_effort = pod("be");
        assert!(admit(&p, &best_effort).admit, "no pressure");
        p.set([NodeCondition::MemoryPressure].into());
        assert_eq!(
            admit(&p, &best_effort),
            PodAdmitResult::reject("Evicted", "The node had condition: [MemoryPressure]. ")
        );
        let mut burstable = pod("b");
        if let Some(s) = burstable.spec.as_mut() {
            let list: BTreeMap<String, Quantity> =
                [("memory".to_owned(), Quantity("1Mi".into()))].into();
            s.containers[0].resources = Some(ResourceRequirements {
                requests: Some(list),
                ..Default::default()
            });
        }
        assert!(admit(&p, &burstable).admit);
        let mut tolerating = pod("t");
        if let Some(s) = tolerating.spec.as_mut() {
            s.tolerations = Some(vec![Toleration {
                key: Some(TAINT_NODE_MEMORY_PRESSURE.into()),
                operator: Some("Exists".into()),
                ..Default::default()
            }]);
        }
        assert!(admit(&p, &tolerating).admit);
        p.set([NodeCondition::MemoryPressure, NodeCondition::DiskPressure].into());
        assert_eq!(
            admit(&p, &burstable).message,
            "The node had condition: [MemoryPressure DiskPressure]. "
        );
        let mut critical = pod("c");
        if let Some(s) = critical.spec.as_mut() {
            s.priority = Some(crate::pod_resources::SYSTEM_CRITICAL_PRIORITY);
        }
        assert!(admit(&p, &critical).admit);
        p.set(BTreeSet::new());
        assert!(admit(&p, &best_effort).admit, "pressure is over");
    }
}
