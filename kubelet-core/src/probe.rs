//! What the rest of the kubelet needs from container probes: the probe vocabulary, the results
//! managers whose updates the sync loop consumes, the [`ProbeManager`] trait the pod syncer
//! drives, and the [`ProbeResults`] reader status generation uses.
//!
//! Mirrors upstream `pkg/kubelet/prober/results/results_manager.go` and the `prober.Manager`
//! interface of `pkg/kubelet/prober/prober_manager.go`. The implementation (workers and the
//! exec/httpGet/tcpSocket/grpc probers) is in `kubelet-probe`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;

use crate::pod::PodUid;

/// Which probe (upstream `probeType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// Restarts the container when it fails.
    Liveness,
    /// Gates the container's `ready` flag.
    Readiness,
    /// Gates liveness and readiness until it first succeeds.
    Startup,
}

impl ProbeKind {
    /// Upstream's name (`probeType.String`): `Liveness`, `Readiness`, `Startup`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of one probe (upstream `results.Result`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeResult {
    /// Not probed yet.
    Unknown,
    /// The probe passed.
    Success,
    /// The probe failed.
    Failure,
}

impl ProbeResult {
    /// `true` for [`ProbeResult::Success`].
    pub fn is_success(self) -> bool {
        self == ProbeResult::Success
    }
}

/// A change of one container's probe result (upstream `results.Update`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    /// Which probe changed.
    pub kind: ProbeKind,
    /// Runtime ID of the container instance (without the `<runtime>://` prefix).
    pub container_id: String,
    /// The new result.
    pub result: ProbeResult,
    /// The pod the container belongs to.
    pub pod_uid: PodUid,
}

/// Sending half of the probe update channel (one channel for the three kinds).
pub type UpdateSender = mpsc::UnboundedSender<Update>;
/// Receiving half of the probe update channel; the sync loop selects over it.
pub type UpdateReceiver = mpsc::UnboundedReceiver<Update>;

/// The results of one probe kind, by container ID (upstream `results.Manager`). Cheap to
/// clone; clones share the cache. [`ResultsManager::set`] sends an [`Update`] only when the
/// result changes, so the channel carries transitions, not probe runs.
#[doc(alias = "results.Manager")]
#[derive(Clone, Debug)]
pub struct ResultsManager {
    kind: ProbeKind,
    cache: Arc<RwLock<HashMap<String, ProbeResult>>>,
    updates: UpdateSender,
}

impl ResultsManager {
    /// An empty manager for `kind` that reports changes on `updates`.
    pub fn new(kind: ProbeKind, updates: UpdateSender) -> Self {
        Self {
            kind,
            cache: Arc::default(),
            updates,
        }
    }

    /// The probe kind this manager holds.
    pub fn kind(&self) -> ProbeKind {
        self.kind
    }

    /// The cached result for the container, if any.
    pub fn get(&self, container_id: &str) -> Option<ProbeResult> {
        self.cache
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(container_id)
            .copied()
    }

    /// Caches `result`; sends an update when it differs from the cached one.
    pub fn set(&self, container_id: &str, result: ProbeResult, pod_uid: &PodUid) {
        let prev = self
            .cache
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(container_id.to_owned(), result);
        if prev != Some(result) {
            // A closed channel means the sync loop is gone: nothing to notify.
            let _ = self.updates.send(Update {
                kind: self.kind,
                container_id: container_id.to_owned(),
                result,
                pod_uid: pod_uid.clone(),
            });
        }
    }

    /// Forgets the container's result.
    pub fn remove(&self, container_id: &str) {
        self.cache
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(container_id);
    }
}

/// The three results managers of a kubelet, sharing one update channel. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Results {
    /// Liveness results (read by the runtime to restart containers).
    pub liveness: ResultsManager,
    /// Readiness results.
    pub readiness: ResultsManager,
    /// Startup results (read by the runtime to restart containers whose startup failed).
    pub startup: ResultsManager,
}

impl Results {
    /// Empty managers and the receiver of their updates.
    pub fn new() -> (Self, UpdateReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self {
                liveness: ResultsManager::new(ProbeKind::Liveness, tx.clone()),
                readiness: ResultsManager::new(ProbeKind::Readiness, tx.clone()),
                startup: ResultsManager::new(ProbeKind::Startup, tx),
            },
            rx,
        )
    }

    /// The manager of `kind`.
    pub fn of(&self, kind: ProbeKind) -> &ResultsManager {
        match kind {
            ProbeKind::Liveness => &self.liveness,
            ProbeKind::Readiness => &self.readiness,
            ProbeKind::Startup => &self.startup,
        }
    }
}

/// The probe manager as the pod syncer and housekeeping drive it (upstream `prober.Manager`).
///
/// Every method is cheap and non-blocking: workers run on their own tasks.
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
pub trait ProbeManager: Send + Sync + 'static {
    /// Starts a worker for each probe of each container of the pod that has none yet.
    /// Called on every sync; idempotent.
    fn add_pod(&self, pod: &Pod);
    /// Stops the liveness and startup workers of a terminating pod; readiness goes on.
    fn stop_liveness_and_startup(&self, pod: &Pod);
    /// Stops every worker of the pod and forgets its results.
    fn remove_pod(&self, pod: &Pod);
    /// Stops the workers of every pod not in `desired` (housekeeping).
    fn cleanup_pods(&self, desired: &HashSet<PodUid>);
}

/// The state of one probe of one container instance, for status generation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProbeState {
    /// The container has no such probe: it counts as passing once the container runs.
    #[default]
    NoProbe,
    /// The container has the probe but it has not produced a result yet.
    Pending,
    /// The last result was a success.
    Success,
    /// The last result was a failure.
    Failure,
}

/// Latest probe results as status generation reads them (the `UpdatePodStatus` half of
/// upstream `prober.Manager`).
///
/// `container_id` is the API form `<runtime>://<id>`, so results of a previous instance of the
/// container never apply to a new one.
pub trait ProbeResults: Send + Sync {
    /// State of the startup probe of the container instance.
    fn startup(&self, pod: &PodUid, container: &str, container_id: &str) -> ProbeState;
    /// State of the readiness probe of the container instance. Status generation asks only
    /// for started containers; an implementation may run the probe at once when the answer
    /// is not [`ProbeState::Success`] (upstream `UpdatePodStatus` triggers the worker).
    fn readiness(&self, pod: &PodUid, container: &str, container_id: &str) -> ProbeState;
}

/// A kubelet without probes: no container has any, and the manager does nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProbes;

impl ProbeResults for NoProbes {
    fn startup(&self, _pod: &PodUid, _container: &str, _container_id: &str) -> ProbeState {
        ProbeState::NoProbe
    }

    fn readiness(&self, _pod: &PodUid, _container: &str, _container_id: &str) -> ProbeState {
        ProbeState::NoProbe
    }
}

impl ProbeManager for NoProbes {
    fn add_pod(&self, _pod: &Pod) {}
    fn stop_liveness_and_startup(&self, _pod: &Pod) {}
    fn remove_pod(&self, _pod: &Pod) {}
    fn cleanup_pods(&self, _desired: &HashSet<PodUid>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_reports_changes_only() {
        let (results, mut rx) = Results::new();
        let uid = PodUid::from("u");
        results.readiness.set("c1", ProbeResult::Failure, &uid);
        results.readiness.set("c1", ProbeResult::Failure, &uid);
        results.readiness.set("c1", ProbeResult::Success, &uid);
        let a = rx.try_recv().expect("first");
        assert_eq!(
            (a.kind, a.result),
            (ProbeKind::Readiness, ProbeResult::Failure)
        );
        assert_eq!(rx.try_recv().expect("second").result, ProbeResult::Success);
        assert!(rx.try_recv().is_err());
        assert_eq!(results.readiness.get("c1"), Some(ProbeResult::Success));
        results.readiness.remove("c1");
        assert_eq!(results.readiness.get("c1"), None);
        assert_eq!(results.liveness.get("c1"), None);
    }
}
