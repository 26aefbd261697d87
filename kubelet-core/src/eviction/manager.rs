//! The eviction manager's control loop (upstream `managerImpl.synchronize`, `evictPod`,
//! `reclaimNodeLevelResources` and `Start` in `pkg/kubelet/eviction/eviction_manager.go`).
//!
//! Every monitoring interval: read the summary, find the thresholds met (and those still
//! short of their minimum reclaim), report the pressure conditions (kept for the pressure
//! transition period after they were last seen), evict pods over their local storage
//! limits, then, for the most urgent threshold whose grace period has passed (memory
//! first), reclaim at node level and, if that was not enough, evict ONE pod: the first of
//! the ranking that is not critical. After an eviction the next round starts at once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::api::{NodeCondition, Signal, Threshold};
use super::observations::{self as obs, Observations};
use super::rank::{self, StatsByUid};
use super::reclaim::{ContainerGC, ImageGC, NoReclaim, Reclaim, reclaim_for};
use super::{
    Config, IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS, PodTerminator, Pressure, REASON,
    TerminatePodOptions, local_storage,
};
use crate::PodExt;
use crate::events::{EventRecorder, EventType, LogRecorder, node_ref, pod_ref};
use crate::metrics::KubeletMetrics;
use crate::pod_resources::is_critical_pod;
use crate::stats::SummaryProvider;

/// The node's active pods (upstream `ActivePodsFunc`).
pub type ActivePods = Arc<dyn Fn() -> Vec<Pod> + Send + Sync>;

/// Upstream's `DisruptionTarget` reason for pods the kubelet terminates.
const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";

/// The eviction manager (upstream `managerImpl`).
pub struct Manager {
    config: Config,
    summary: Arc<dyn SummaryProvider>,
    terminator: Arc<dyn PodTerminator>,
    active_pods: ActivePods,
    image_gc: Arc<dyn ImageGC>,
    container_gc: Arc<dyn ContainerGC>,
    events: Arc<dyn EventRecorder>,
    metrics: KubeletMetrics,
    node_name: String,
    pressure: Pressure,
    dedicated_image_fs: Option<bool>,
    thresholds_first_observed_at: HashMap<usize, Instant>,
    node_conditions_last_observed_at: BTreeMap<NodeCondition, Instant>,
    thresholds_met: BTreeSet<usize>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("config", &self.config)
            .field("pressure", &self.pressure)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager enforcing `config` on the pods `active_pods` lists, reading `summary` and
    /// evicting through `terminator`; no node-level reclaim and log-line events until set.
    pub fn new(
        config: Config,
        summary: Arc<dyn SummaryProvider>,
        terminator: Arc<dyn PodTerminator>,
        active_pods: ActivePods,
    ) -> Self {
        Self {
            config,
            summary,
            terminator,
            active_pods,
            image_gc: Arc::new(NoReclaim),
            container_gc: Arc::new(NoReclaim),
            events: Arc::new(LogRecorder),
            metrics: KubeletMetrics::default(),
            node_name: String::new(),
            pressure: Pressure::default(),
            dedicated_image_fs: None,
            thresholds_first_observed_at: HashMap::new(),
            node_conditions_last_observed_at: BTreeMap::new(),
            thresholds_met: BTreeSet::new(),
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

    /// Records `EvictionThresholdMet` on node `node_name` and `Evicted` on pods.
    #[must_use]
    pub fn with_event_recorder(
        mut self,
        recorder: Arc<dyn EventRecorder>,
        node_name: impl Into<String>,
    ) -> Self {
        self.events = recorder;
        self.node_name = node_name.into();
        self
    }

    /// Counts evictions in `metrics` (`kubelet_evictions`).
    #[must_use]
    pub fn with_metrics(mut self, metrics: KubeletMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Reports conditions into `pressure` (e.g. one the admit chain already holds).
    #[must_use]
    pub fn with_pressure(mut self, pressure: Pressure) -> Self {
        self.pressure = pressure;
        self
    }

    /// The node's pressure as this manager reports it.
    pub fn pressure(&self) -> Pressure {
        self.pressure.clone()
    }

    /// Runs [`synchronize`](Self::synchronize) every monitoring interval, or at once after
    /// an eviction (upstream `Start`), until `token` is cancelled.
    pub async fn run(mut self, token: CancellationToken) {
        info!(thresholds = self.config.thresholds.len(), interval = ?self.config.monitoring_interval, "eviction manager started");
        loop {
            let evicted = tokio::select! {
                biased;
                () = token.cancelled() => return,
                evicted = self.synchronize() => evicted,
            };
            if !evicted.is_empty() {
                info!(pods = ?evicted.iter().map(PodExt::full_name).collect::<Vec<_>>(), "eviction manager: pods evicted, waiting for pod to be cleaned up");
                tokio::select! {
                    biased;
                    () = token.cancelled() => return,
                    () = self.wait_for_pods_cleanup(&evicted) => {}
                }
                continue;
            }
            tokio::select! {
                biased;
                () = token.cancelled() => return,
                () = tokio::time::sleep(self.config.monitoring_interval) => {}
            }
        }
    }

    /// Waits until every pod of `pods` is cleaned up, at most
    /// [`POD_CLEANUP_TIMEOUT`](super::POD_CLEANUP_TIMEOUT) (upstream `waitForPodsCleanup`).
    async fn wait_for_pods_cleanup(&self, pods: &[Pod]) {
        let deadline = Instant::now() + super::POD_CLEANUP_TIMEOUT;
        loop {
            tokio::time::sleep(super::POD_CLEANUP_POLL).await;
            if pods.iter().all(|p| self.terminator.pod_cleaned_up(p)) {
                info!("eviction manager: pods successfully cleaned up");
                return;
            }
            if Instant::now() >= deadline {
                info!("eviction manager: timed out waiting for pods to be cleaned up");
                return;
            }
        }
    }

    /// One round; returns the pods it evicted (upstream `synchronize`).
    pub async fn synchronize(&mut self) -> Vec<Pod> {
        if self.config.thresholds.is_empty() && !self.config.local_storage_capacity_isolation {
            return Vec::new();
        }
        let active = (self.active_pods)();
        let summary = match self.summary.get().await {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "eviction manager: failed to get summary stats");
                return Vec::new();
            }
        };
        let dedicated_image_fs = *self
            .dedicated_image_fs
            .get_or_insert_with(|| obs::has_dedicated_image_fs(&summary));
        let observations = obs::make_signal_observations(&summary);
        let stats: StatsByUid = summary
            .pods
            .into_iter()
            .map(|p| (p.pod_ref.uid.clone(), p))
            .collect();
        let thresholds = &self.config.thresholds;
        let mut met = obs::thresholds_met(thresholds, 0..thresholds.len(), &observations, false);
        let unresolved = obs::thresholds_met(
            thresholds,
            self.thresholds_met.iter().copied(),
            &observations,
            true,
        );
        met.extend(unresolved);
        let now = Instant::now();
        let first_observed =
            obs::thresholds_first_observed_at(&met, &self.thresholds_first_observed_at, now);
        let observed_conditions = obs::node_conditions(thresholds, &met);
        let last_observed = obs::node_conditions_last_observed_at(
            &observed_conditions,
            &self.node_conditions_last_observed_at,
            now,
        );
        let conditions = obs::node_conditions_observed_since(
            &last_observed,
            self.config.pressure_transition_period,
            now,
        );
        let met_grace = obs::thresholds_met_grace_period(thresholds, &first_observed, now);
        self.pressure.set(conditions);
        self.thresholds_first_observed_at = first_observed;
        self.node_conditions_last_observed_at = last_observed;
        self.thresholds_met.clone_from(&met_grace);

        if self.config.local_storage_capacity_isolation {
            let evicted = self
                .local_storage_eviction(&active, &stats, dedicated_image_fs)
                .await;
            if !evicted.is_empty() {
                return evicted;
            }
        }
        // Memory first (upstream `byEvictionPriority`).
        let mut to_reclaim: Vec<&Threshold> = met_grace
            .iter()
            .filter_map(|i| thresholds.get(*i))
            .collect();
        to_reclaim.sort_by_key(|t| {
            !matches!(
                t.signal,
                Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable
            )
        });
        let Some(threshold) = to_reclaim.first().copied().cloned() else {
            debug!("eviction manager: no resources are starved");
            return Vec::new();
        };
        let resource = threshold.signal.resource();
        info!(resource, "eviction manager: attempting to reclaim");
        self.events.event(
            &node_ref(&self.node_name),
            EventType::Warning,
            "EvictionThresholdMet",
            &format!("Attempting to reclaim {resource}"),
        );
        if self
            .reclaim_node_level_resources(threshold.signal, dedicated_image_fs)
            .await
        {
            info!(
                resource,
                "eviction manager: able to reduce resource pressure without evicting pods"
            );
            return Vec::new();
        }
        if active.is_empty() {
            warn!(
                "eviction manager: eviction thresholds have been met, but no pods are active to evict"
            );
            return Vec::new();
        }
        let mut ranked = active;
        rank::rank(threshold.signal, &mut ranked, &stats, dedicated_image_fs);
        debug!(pods = ?ranked.iter().map(PodExt::full_name).collect::<Vec<_>>(), "eviction manager: pods ranked for eviction");
        let grace = if threshold.is_hard() {
            IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS
        } else {
            self.config.max_pod_grace_period_seconds
        };
        for pod in ranked {
            let message =
                rank::eviction_message(resource, &pod, &stats, &to_reclaim, &observations);
            let condition = PodCondition {
                type_: "DisruptionTarget".into(),
                status: "True".into(),
                reason: Some(TERMINATION_BY_KUBELET.into()),
                message: Some(message.clone()),
                ..Default::default()
            };
            if self.evict_pod(&pod, grace, &message, vec![condition]).await {
                self.metrics.record_eviction(threshold.signal.as_str());
                return vec![pod];
            }
        }
        info!("eviction manager: unable to evict any pods from the node");
        Vec::new()
    }

    async fn local_storage_eviction(
        &self,
        pods: &[Pod],
        stats: &StatsByUid,
        dedicated_image_fs: bool,
    ) -> Vec<Pod> {
        let mut evicted = Vec::new();
        for pod in pods {
            let Some(pod_stats) = stats.get(pod.uid().as_str()) else {
                continue;
            };
            if let Some(violation) =
                local_storage::local_storage_violation(pod, pod_stats, dedicated_image_fs)
                && self
                    .evict_pod(
                        pod,
                        IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS,
                        &violation.message,
                        Vec::new(),
                    )
                    .await
            {
                self.metrics.record_eviction(violation.signal);
                evicted.push(pod.clone());
            }
        }
        evicted
    }

    /// `true` when reclaiming at node level brought every threshold back (upstream
    /// `reclaimNodeLevelResources`).
    async fn reclaim_node_level_resources(&self, signal: Signal, dedicated_image_fs: bool) -> bool {
        if reclaim_for(signal, dedicated_image_fs) == Reclaim::Nothing {
            return false;
        }
        if let Err(e) = self.container_gc.delete_all_unused_containers().await {
            info!(error = %e, "eviction manager: unexpected error when deleting unused containers");
        }
        if let Err(e) = self.image_gc.delete_unused_images().await {
            info!(error = %e, "eviction manager: unexpected error when deleting unused images");
        }
        let summary = match self.summary.get().await {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "eviction manager: failed to get summary stats after resource reclaim");
                return false;
            }
        };
        let observations: Observations = obs::make_signal_observations(&summary);
        let thresholds = &self.config.thresholds;
        obs::thresholds_met(thresholds, 0..thresholds.len(), &observations, true).is_empty()
    }

    /// Evicts `pod` unless it is critical; `true` when it was asked to go (upstream
    /// `evictPod`).
    async fn evict_pod(
        &self,
        pod: &Pod,
        grace_period_override: i64,
        message: &str,
        conditions: Vec<PodCondition>,
    ) -> bool {
        if is_critical_pod(pod) {
            warn!(pod = %pod.full_name(), "eviction manager: cannot evict a critical pod");
            return false;
        }
        self.events
            .event(&pod_ref(pod), EventType::Warning, REASON, message);
        info!(pod = %pod.full_name(), uid = %pod.uid(), message, "evicting pod");
        let options = TerminatePodOptions {
            grace_period_override,
            reason: REASON.to_owned(),
            message: message.to_owned(),
            conditions,
        };
        match self
            .terminator
            .terminate_pod_abnormally_and_wait(pod, options)
            .await
        {
            Ok(()) => {
                info!(pod = %pod.full_name(), "eviction manager: pod is evicted successfully")
            }
            Err(e) => {
                warn!(pod = %pod.full_name(), error = %e, "eviction manager: pod failed to evict")
            }
        }
        true
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
