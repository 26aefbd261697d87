//! The probe manager (upstream `pkg/kubelet/prober/prober_manager.go`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use kubelet_core::PodUid;
use kubelet_core::cache::PodCache;
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::pod::PodExt;
use kubelet_core::probe::{
    ProbeKind, ProbeManager, ProbeResult, ProbeResults, ProbeState, Results,
};
use kubelet_core::runtime::Runtime;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::worker::{Env, Worker};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    pod: PodUid,
    container: String,
    kind: ProbeKind,
}

struct Handle {
    stop: CancellationToken,
    /// Runs the worker's probe at once (upstream `worker.manualTriggerCh`).
    trigger: Arc<Notify>,
    generation: u64,
}

struct Inner {
    env: Arc<Env>,
    results: Results,
    token: CancellationToken,
    workers: Mutex<(u64, HashMap<Key, Handle>)>,
}

/// The probe manager: one worker task per container and probe type, started by
/// [`ProbeManager::add_pod`] and stopped with the pod. Cheap to clone.
///
/// Workers read container states and pod IPs from the PLEG's [`PodCache`], run probes through
/// the [`Runtime`] (exec) or the network (httpGet, tcpSocket, grpc), and record transitions in
/// the [`Results`] managers, whose channel the sync loop consumes.
#[derive(Clone)]
pub struct Manager {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("workers", &self.worker_count())
            .finish_non_exhaustive()
    }
}

fn strip_runtime(container_id: &str) -> &str {
    container_id
        .split_once("://")
        .map_or(container_id, |(_, id)| id)
}

impl Manager {
    /// A manager with no workers. Workers stop when `token` is cancelled. Must be called
    /// within a Tokio runtime (workers are spawned on it).
    pub fn new(
        runtime: Arc<dyn Runtime>,
        cache: PodCache,
        results: Results,
        token: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                env: Arc::new(Env {
                    runtime,
                    cache,
                    startup: results.startup.clone(),
                    manager_start: Instant::now(),
                    host_ips: Vec::new(),
                    events: Arc::new(kubelet_core::events::NoopRecorder),
                    metrics: KubeletMetrics::default(),
                }),
                results,
                token,
                workers: Mutex::new((0, HashMap::new())),
            }),
        }
    }

    /// Sets the node's IPs, the default probe host of `hostNetwork` pods (upstream probes the
    /// pod IP, which is the node's IP for them). Call before adding pods.
    #[must_use]
    pub fn with_host_ips(mut self, ips: Vec<String>) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => {
                let mut env = (*inner.env).clone();
                env.host_ips = ips;
                inner.env = Arc::new(env);
            }
            None => tracing::warn!("probe manager already shared: host IPs ignored"),
        }
        self
    }

    /// Records each failed or errored probe as an `Unhealthy` event with `recorder`
    /// (upstream `prober.recordContainerEvent`). Call before adding pods.
    #[must_use]
    pub fn with_event_recorder(
        mut self,
        recorder: Arc<dyn kubelet_core::events::EventRecorder>,
    ) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => {
                let mut env = (*inner.env).clone();
                env.events = recorder;
                inner.env = Arc::new(env);
            }
            None => tracing::warn!("probe manager already shared: event recorder ignored"),
        }
        self
    }

    /// Counts each probe's result in `metrics` (`prober_probe_total`, served on
    /// `/metrics/probes`), as upstream's workers. Call before adding pods.
    #[must_use]
    pub fn with_metrics(mut self, metrics: KubeletMetrics) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => {
                let mut env = (*inner.env).clone();
                env.metrics = metrics;
                inner.env = Arc::new(env);
            }
            None => tracing::warn!("probe manager already shared: metrics ignored"),
        }
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, HashMap<Key, Handle>)> {
        self.inner.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many workers run.
    pub fn worker_count(&self) -> usize {
        self.lock().1.len()
    }

    fn has_worker(&self, pod: &PodUid, container: &str, kind: ProbeKind) -> bool {
        self.lock().1.contains_key(&Key {
            pod: pod.clone(),
            container: container.to_owned(),
            kind,
        })
    }

    /// Asks the worker, if there is one, to probe at once instead of at its next period
    /// (upstream's non-blocking send on `manualTriggerCh`).
    fn trigger(&self, pod: &PodUid, container: &str, kind: ProbeKind) {
        let key = Key {
            pod: pod.clone(),
            container: container.to_owned(),
            kind,
        };
        if let Some(handle) = self.lock().1.get(&key) {
            debug!(pod = %pod, container, %kind, "triggering a probe run");
            handle.trigger.notify_one();
        }
    }

    fn start_worker(&self, pod: &Pod, container: &Container, kind: ProbeKind, probe: &Probe) {
        let key = Key {
            pod: pod.uid(),
            container: container.name.clone(),
            kind,
        };
        let mut guard = self.lock();
        if guard.1.contains_key(&key) {
            return;
        }
        guard.0 += 1;
        let generation = guard.0;
        let stop = self.inner.token.child_token();
        let trigger = Arc::new(Notify::new());
        guard.1.insert(
            key.clone(),
            Handle {
                stop: stop.clone(),
                trigger: trigger.clone(),
                generation,
            },
        );
        drop(guard);
        debug!(pod = %pod.full_name(), container = %container.name, %kind, "starting probe worker");
        let worker = Worker::new(
            kind,
            key.pod.clone(),
            pod.full_name(),
            pod.restart_policy() == "Never",
            pod.host_network(),
            container.clone(),
            probe.clone(),
            container.startup_probe.is_some(),
            self.inner.results.of(kind).clone(),
            self.inner.env.clone(),
            kubelet_core::events::container_ref(pod, container),
        );
        let this = self.clone();
        tokio::spawn(async move {
            worker.run(stop, trigger).await;
            let mut guard = this.lock();
            if guard
                .1
                .get(&key)
                .is_some_and(|h| h.generation == generation)
            {
                guard.1.remove(&key);
            }
        });
    }

    fn stop_where(&self, pred: impl Fn(&Key) -> bool) {
        let mut guard = self.lock();
        guard.1.retain(|k, h| {
            if pred(k) {
                h.stop.cancel();
                false
            } else {
                true
            }
        });
    }

    fn state(&self, kind: ProbeKind, pod: &PodUid, container: &str, id: &str) -> ProbeState {
        match self.inner.results.of(kind).get(strip_runtime(id)) {
            Some(ProbeResult::Success) => ProbeState::Success,
            Some(ProbeResult::Failure) => ProbeState::Failure,
            Some(ProbeResult::Unknown) => ProbeState::Pending,
            None if self.has_worker(pod, container, kind) => ProbeState::Pending,
            None => ProbeState::NoProbe,
        }
    }
}

/// Containers that get probes: app containers and restartable init containers (sidecars).
fn probed_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.init_containers()
        .iter()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .chain(pod.containers())
}

impl ProbeManager for Manager {
    fn add_pod(&self, pod: &Pod) {
        for c in probed_containers(pod) {
            for (kind, probe) in [
                (ProbeKind::Startup, &c.startup_probe),
                (ProbeKind::Readiness, &c.readiness_probe),
                (ProbeKind::Liveness, &c.liveness_probe),
            ] {
                if let Some(probe) = probe {
                    self.start_worker(pod, c, kind, probe);
                }
            }
        }
    }

    fn stop_liveness_and_startup(&self, pod: &Pod) {
        let uid = pod.uid();
        self.stop_where(|k| k.pod == uid && k.kind != ProbeKind::Readiness);
    }

    fn remove_pod(&self, pod: &Pod) {
        let uid = pod.uid();
        self.stop_where(|k| k.pod == uid);
    }

    fn cleanup_pods(&self, desired: &HashSet<PodUid>) {
        self.stop_where(|k| !desired.contains(&k.pod));
    }
}

impl ProbeResults for Manager {
    fn startup(&self, pod: &PodUid, container: &str, container_id: &str) -> ProbeState {
        self.state(ProbeKind::Startup, pod, container, container_id)
    }

    /// Status generation asks only for started containers; one that is not ready yet (no
    /// result, or a failure) gets its readiness probe run at once rather than at the next
    /// period, so a container becomes ready right after its startup probe succeeds (upstream
    /// `UpdatePodStatus`, which does the same).
    fn readiness(&self, pod: &PodUid, container: &str, container_id: &str) -> ProbeState {
        let state = self.state(ProbeKind::Readiness, pod, container, container_id);
        if matches!(state, ProbeState::Pending | ProbeState::Failure) {
            self.trigger(pod, container, ProbeKind::Readiness);
        }
        state
    }
}

#[cfg(test)]
mod tests;
