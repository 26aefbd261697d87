//! The local status manager (upstream `pkg/kubelet/status/status_manager.go`, without the API
//! syncer).
//!
//! [`LocalStatusManager`] keeps one versioned status per pod. Versions start at 1 and grow by
//! one on every stored change; storing an unchanged status keeps the version. Pods never leave
//! a terminal phase, and containers that terminated for good stay terminated.
//!
//! That holds within one *run* of a pod UID. [`StatusManager::terminate_pod`] is a run's last
//! word (the pod workers write nothing of it afterwards), so a status generated or stored
//! after it belongs to a new run of the same UID: a static pod whose manifest came back with
//! the same content (issue 18). The new run starts from nothing, as a new pod does: no
//! terminal phase, start time, conditions or container states are carried over, and its
//! version continues from the old one's so an API syncer sees the change. Upstream mostly
//! gets there by never marking static pods finished nor terminal in `TerminatePod` (TODO
//! #116484) and by dropping the statuses of pods gone from the config at housekeeping; a
//! static pod back before that housekeeping pass keeps its `Failed` phase there. An API syncer
//! (upstream `syncBatch`) can [`subscribe`](LocalStatusManager::subscribe) to changes and read
//! [`all_statuses`](LocalStatusManager::all_statuses), comparing versions with what it sent.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStatus, Pod, PodCondition, PodStatus as ApiPodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubelet_core::runtime::PodStatus;
use kubelet_core::status::{StatusInputs, StatusManager, is_terminal_phase};
use kubelet_core::{PodExt, PodUid};
use tokio::sync::watch;

use crate::conditions::{CONTAINERS_READY, DISRUPTION_TARGET, OWNED_BY_KUBELET, READY};
use crate::containers::{is_terminated, terminated};
use crate::generate::{self, DEFAULT_RUNTIME_NAME, Options, truncate_to_second};
use crate::probes::{NoProbes, ProbeResults};
use crate::reason;

/// Upstream `MaxPodTerminationMessageLogLength`: the termination messages of all containers
/// of a pod together are cut to this many bytes.
const MAX_POD_TERMINATION_MESSAGE_LENGTH: usize = 1024 * 12;

/// A stored status with its version (upstream `versionedPodStatus`).
#[derive(Clone, Debug, PartialEq)]
pub struct VersionedStatus {
    /// The status.
    pub status: ApiPodStatus,
    /// Grows by one on every change, starting at 1.
    pub version: u64,
    /// Pod name, for the API syncer.
    pub pod_name: String,
    /// Pod namespace, for the API syncer.
    pub pod_namespace: String,
    /// `true` once [`StatusManager::terminate_pod`] ran: the pod's containers are stopped for
    /// good.
    pub pod_is_finished: bool,
    /// `true` once [`StatusManager::pod_resources_reclaimed`] ran for this run: volumes and
    /// cgroups are released too, and the API object may be deleted.
    pub pod_resources_reclaimed: bool,
}

/// One stored change, as sent to [`LocalStatusManager::subscribe`]rs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusChange {
    /// The pod whose status changed.
    pub uid: PodUid,
    /// Its new version.
    pub version: u64,
}

/// The default [`StatusManager`]: statuses in memory, changes announced on a `watch` channel.
///
/// Container IDs are `<runtime name>://<id>`, the runtime name being the runtime's
/// `version().runtime_name` (upstream `kubecontainer.ContainerID{Type: runtimeName}`): tell
/// it with [`with_runtime_name`](Self::with_runtime_name) when building the manager, or with
/// [`set_runtime_name`](Self::set_runtime_name) once the runtime has answered. Until then it
/// is [`DEFAULT_RUNTIME_NAME`].
pub struct LocalStatusManager {
    /// Boxed, so that the slots the map keeps when empty stay small
    /// ([`kubelet_core::collections`]).
    statuses: Mutex<HashMap<PodUid, Box<VersionedStatus>>>,
    changes: watch::Sender<Option<StatusChange>>,
    runtime_name: RwLock<Arc<str>>,
    probes: Arc<dyn ProbeResults>,
}

impl fmt::Debug for LocalStatusManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalStatusManager")
            .field("runtime_name", &self.runtime_name())
            .field("pods", &self.lock().len())
            .finish_non_exhaustive()
    }
}

impl Default for LocalStatusManager {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalStatusManager {
    /// An empty manager: container IDs as `containerd://<id>` until told the runtime's name,
    /// no probes.
    pub fn new() -> Self {
        Self {
            statuses: Mutex::new(HashMap::new()),
            changes: watch::Sender::new(None),
            runtime_name: RwLock::new(Arc::from(DEFAULT_RUNTIME_NAME)),
            probes: Arc::new(NoProbes),
        }
    }

    /// The runtime type name for container IDs, `<runtime_name>://<id>`: the runtime's
    /// `version().runtime_name`. An empty name keeps the current one.
    #[must_use]
    pub fn with_runtime_name(self, runtime_name: impl Into<String>) -> Self {
        self.set_runtime_name(runtime_name);
        self
    }

    /// Sets the runtime type name of the container IDs generated from now on (for a node that
    /// learns it after the manager is built, when the runtime first answers `version()`). An
    /// empty name keeps the current one. Stored statuses are not rewritten: the next sync of
    /// each pod generates its status again.
    pub fn set_runtime_name(&self, runtime_name: impl Into<String>) {
        let runtime_name = runtime_name.into();
        if runtime_name.is_empty() {
            return;
        }
        *self
            .runtime_name
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::from(runtime_name);
    }

    /// The runtime type name used in container IDs now.
    pub fn runtime_name(&self) -> Arc<str> {
        self.runtime_name
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Where container readiness and startup come from (a probe manager).
    #[must_use]
    pub fn with_probe_results(self, probes: Arc<dyn ProbeResults>) -> Self {
        Self { probes, ..self }
    }

    /// Changes of stored statuses. The receiver sees the latest change only: a syncer that
    /// wakes up should compare the versions of [`all_statuses`](Self::all_statuses) with the
    /// versions it has sent, as upstream `syncBatch` does.
    pub fn subscribe(&self) -> watch::Receiver<Option<StatusChange>> {
        self.changes.subscribe()
    }

    /// Every stored status, by pod UID (for an API syncer and the `/pods` endpoint).
    pub fn all_statuses(&self) -> BTreeMap<PodUid, VersionedStatus> {
        self.lock()
            .iter()
            .map(|(uid, s)| (uid.clone(), VersionedStatus::clone(s)))
            .collect()
    }

    /// The stored status of one pod, with its version.
    pub fn versioned_status(&self, uid: &PodUid) -> Option<VersionedStatus> {
        self.lock().get(uid).map(|s| VersionedStatus::clone(s))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<PodUid, Box<VersionedStatus>>> {
        self.statuses.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stored status of the pod's current run: `None` when there is none or the stored
    /// one ended its run (see the module docs).
    fn current_run<'a>(
        statuses: &'a HashMap<PodUid, Box<VersionedStatus>>,
        uid: &PodUid,
    ) -> Option<&'a VersionedStatus> {
        statuses
            .get(uid)
            .map(|s| &**s)
            .filter(|s| !s.pod_is_finished)
    }

    /// Upstream `updateStatusInternal`.
    fn update(
        &self,
        statuses: &mut HashMap<PodUid, Box<VersionedStatus>>,
        pod: &Pod,
        mut status: ApiPodStatus,
        force: bool,
        finished: bool,
    ) {
        let uid = pod.uid();
        let previous_version = statuses.get(&uid).map_or(0, |c| c.version);
        // `terminate_pod` ends a run for good; any other write after it starts a new one.
        let cached = if finished {
            statuses.get(&uid).map(|s| &**s)
        } else {
            Self::current_run(statuses, &uid)
        };
        let empty = ApiPodStatus::default();
        let old = cached
            .map(|c| &c.status)
            .or(pod.status.as_ref())
            .unwrap_or(&empty);
        let now = truncate_to_second(kubelet_core::time::now());

        keep_terminal_states(pod, old, &mut status);
        for c in status.conditions.iter_mut().flatten() {
            if OWNED_BY_KUBELET.contains(&c.type_.as_str()) || c.type_ == DISRUPTION_TARGET {
                update_last_transition_time(c, old, now);
            }
        }
        status.start_time = old
            .start_time
            .clone()
            .or(status.start_time)
            .or(Some(Time(now)));
        normalize(pod, &mut status);

        if let Some(c) = cached
            && c.status == status
            && c.pod_is_finished == finished
            && !force
        {
            tracing::trace!(pod = %pod.full_name(), "ignoring same status");
            return;
        }
        let version = previous_version + 1;
        let pod_resources_reclaimed = finished
            && statuses
                .get(&uid)
                .is_some_and(|c| c.pod_resources_reclaimed);
        statuses.insert(
            uid.clone(),
            Box::new(VersionedStatus {
                status,
                version,
                pod_name: pod.name_or_empty().to_owned(),
                pod_namespace: pod.namespace_or_default().to_owned(),
                pod_is_finished: finished,
                pod_resources_reclaimed,
            }),
        );
        self.changes
            .send_replace(Some(StatusChange { uid, version }));
    }
}

impl StatusManager for LocalStatusManager {
    fn generate<'a>(
        &self,
        pod: &Pod,
        runtime: &PodStatus,
        inputs: &StatusInputs<'a>,
    ) -> ApiPodStatus {
        let old = Self::current_run(&self.lock(), &pod.uid()).map(|s| s.status.clone());
        let runtime_name = self.runtime_name();
        let options = Options::new()
            .runtime_name(&runtime_name)
            .probes(self.probes.as_ref());
        generate::generate_api_pod_status_with(pod, runtime, inputs, old.as_ref(), &options)
    }

    fn set_pod_status(&self, pod: &Pod, status: ApiPodStatus) {
        let mut statuses = self.lock();
        // As upstream, a pod being deleted always gets a new version so the syncer acts.
        self.update(&mut statuses, pod, status, pod.is_being_deleted(), false);
    }

    fn pod_status(&self, uid: &PodUid) -> Option<ApiPodStatus> {
        self.lock().get(uid).map(|s| s.status.clone())
    }

    fn terminate_pod(&self, pod: &Pod) {
        let mut statuses = self.lock();
        let mut status = statuses
            .get(&pod.uid())
            .map(|c| c.status.clone())
            .or_else(|| pod.status.clone())
            .unwrap_or_default();
        let unknown = || {
            terminated(
                reason::CONTAINER_STATUS_UNKNOWN,
                "The container could not be located when the pod was terminated",
                137,
            )
        };
        if has_pod_initialized(pod, &status) {
            for c in status.container_statuses.iter_mut().flatten() {
                if !is_terminated(c) {
                    c.state = Some(unknown());
                }
            }
        }
        if let Some(init) = status.init_container_statuses.as_mut() {
            let attempted = initialized_containers(init);
            for c in &mut init[..attempted] {
                if !is_terminated(c) {
                    c.state = Some(unknown());
                }
            }
        }
        if !is_terminal_phase(&status) {
            status.phase = Some(crate::phase::FAILED.to_owned());
        }
        self.update(&mut statuses, pod, status, true, true);
    }

    fn remove_orphaned_statuses(&self, keep: &HashSet<PodUid>) {
        let mut statuses = self.lock();
        statuses.retain(|uid, _| keep.contains(uid));
        kubelet_core::collections::shrink_when_sparse(&mut statuses);
    }

    /// Marks the stored status reclaimed under a new version, so that an API syncer looks at
    /// the pod again and may delete its API object.
    fn pod_resources_reclaimed(&self, pod: &Pod) {
        let uid = pod.uid();
        let mut statuses = self.lock();
        let Some(entry) = statuses.get_mut(&uid) else {
            return;
        };
        if entry.pod_resources_reclaimed {
            return;
        }
        entry.pod_resources_reclaimed = true;
        entry.version += 1;
        let version = entry.version;
        drop(statuses);
        self.changes
            .send_replace(Some(StatusChange { uid, version }));
    }
}

fn is_sidecar(pod: &Pod, name: &str) -> bool {
    pod.init_containers()
        .iter()
        .any(|c| c.name == name && kubelet_core::container::is_restartable_init_container(c))
}

/// A pod in a terminal phase stays there; a container that terminated and will not be
/// restarted (terminal pod, or per the restart policy) stays terminated. Upstream drops such
/// updates entirely (`checkContainerStateTransition`); here only the offending container
/// statuses and the phase are kept from `old`.
fn keep_terminal_states(pod: &Pod, old: &ApiPodStatus, new: &mut ApiPodStatus) {
    let old_terminal = is_terminal_phase(old);
    if old_terminal && new.phase != old.phase {
        tracing::warn!(pod = %pod.full_name(), from = ?old.phase, to = ?new.phase, "pod attempted to leave a terminal phase");
        new.phase = old.phase.clone();
        new.reason = new.reason.take().or_else(|| old.reason.clone());
        new.message = new.message.take().or_else(|| old.message.clone());
    }
    let policy = pod.restart_policy();
    let final_exit =
        |code: i32| old_terminal || policy == "Never" || (policy == "OnFailure" && code == 0);
    let pairs = [
        (&old.container_statuses, &mut new.container_statuses),
        (
            &old.init_container_statuses,
            &mut new.init_container_statuses,
        ),
    ];
    for (old_list, new_list) in pairs {
        for n in new_list.iter_mut().flatten() {
            let Some(o) = old_list.iter().flatten().find(|o| o.name == n.name) else {
                continue;
            };
            // A sidecar is always allowed to restart while the pod runs.
            if !old_terminal && is_sidecar(pod, &n.name) {
                continue;
            }
            let exit = o
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(|t| t.exit_code);
            if let Some(code) = exit
                && !is_terminated(n)
                && final_exit(code)
            {
                tracing::warn!(pod = %pod.full_name(), container = %n.name, "terminated container attempted illegal transition to non-terminated state");
                *n = o.clone();
            }
        }
    }
    if is_terminal_phase(new) {
        let phase = new.phase.clone().unwrap_or_default();
        for c in new.conditions.iter_mut().flatten() {
            if (c.type_ == READY || c.type_ == CONTAINERS_READY) && c.status == "True" {
                let replacement = crate::conditions::terminal_phase_condition(&c.type_, &phase);
                *c = PodCondition {
                    last_transition_time: None,
                    ..replacement
                };
            }
        }
    }
}

/// Keeps the transition time of a condition whose status did not change (upstream
/// `updateLastTransitionTime`); a changed one keeps its own time, or gets `now`.
fn update_last_transition_time(
    c: &mut PodCondition,
    old: &ApiPodStatus,
    now: k8s_openapi::jiff::Timestamp,
) {
    let previous = old.conditions.iter().flatten().find(|o| o.type_ == c.type_);
    c.last_transition_time = match previous {
        Some(o) if o.status == c.status && o.last_transition_time.is_some() => {
            o.last_transition_time.clone()
        }
        _ => c.last_transition_time.take().or(Some(Time(now))),
    };
}

/// Upstream `hasPodInitialized`, over the status being terminated.
fn has_pod_initialized(pod: &Pod, status: &ApiPodStatus) -> bool {
    if pod.init_containers().is_empty() {
        return true;
    }
    let waiting = |s: &ContainerStatus| s.state.as_ref().is_some_and(|st| st.waiting.is_some());
    let last_terminated = |s: &ContainerStatus| {
        s.last_state
            .as_ref()
            .is_some_and(|st| st.terminated.is_some())
    };
    if status
        .container_statuses
        .iter()
        .flatten()
        .any(|s| last_terminated(s) || !waiting(s))
    {
        return true;
    }
    status
        .init_container_statuses
        .as_deref()
        .and_then(<[ContainerStatus]>::last)
        .is_some_and(|last| {
            let succeeded = |st: &Option<ContainerState>| {
                st.as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .is_some_and(|t| t.exit_code == 0)
            };
            succeeded(&last.last_state) || succeeded(&last.state)
        })
}

/// How many leading init containers have attempted to start: all but the trailing ones that
/// are waiting without a previous termination, and at least one (upstream
/// `initializedContainers`).
fn initialized_containers(init: &[ContainerStatus]) -> usize {
    let attempted = |s: &ContainerStatus| {
        s.state.as_ref().is_none_or(|st| st.waiting.is_none())
            || s.last_state
                .as_ref()
                .is_some_and(|st| st.terminated.is_some())
    };
    init.iter()
        .rposition(attempted)
        .map_or(init.len().min(1), |i| i + 1)
}

/// Whole-second timestamps, bounded termination messages and a stable order of container
/// statuses, so a status compares equal to itself after an API round trip (upstream
/// `normalizeStatus`).
fn normalize(pod: &Pod, status: &mut ApiPodStatus) {
    let containers = pod.containers().len() + pod.init_containers().len();
    let bytes_per_status = MAX_POD_TERMINATION_MESSAGE_LENGTH / containers.max(1);
    let time = |t: &mut Option<Time>| {
        if let Some(Time(ts)) = t {
            *ts = truncate_to_second(*ts);
        }
    };
    let state = |s: &mut Option<ContainerState>| {
        let Some(s) = s else { return };
        if let Some(r) = s.running.as_mut() {
            time(&mut r.started_at);
        }
        if let Some(t) = s.terminated.as_mut() {
            time(&mut t.started_at);
            time(&mut t.finished_at);
            if let Some(m) = t.message.as_mut() {
                truncate_at_char_boundary(m, bytes_per_status);
            }
        }
    };
    time(&mut status.start_time);
    for c in status.conditions.iter_mut().flatten() {
        time(&mut c.last_probe_time);
        time(&mut c.last_transition_time);
    }
    for c in status
        .container_statuses
        .iter_mut()
        .flatten()
        .chain(status.init_container_statuses.iter_mut().flatten())
    {
        state(&mut c.state);
        state(&mut c.last_state);
    }
    if let Some(list) = status.container_statuses.as_mut() {
        list.sort_by(|a, b| a.name.cmp(&b.name));
    }
    if let Some(list) = status.init_container_statuses.as_mut() {
        let order = |name: &str| {
            pod.init_containers()
                .iter()
                .position(|c| c.name == name)
                .unwrap_or(usize::MAX)
        };
        list.sort_by_key(|s| order(&s.name));
    }
}

fn truncate_at_char_boundary(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
}
