//! The body of a pod sync: the kubelet's [`PodSyncer`] (upstream `SyncPod`,
//! `SyncTerminatingPod`, `SyncTerminatingRuntimePod` and `SyncTerminatedPod` in
//! `pkg/kubelet/kubelet.go`).

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use tracing::{debug, info};

use crate::backoff::Backoff;
use crate::cache::PodCache;
use crate::cm::PodContainerManager;
use crate::cm::helpers::{burstable_cpu_milli, milli_cpu_to_shares};
use crate::events::{EventRecorder, EventType, NoopRecorder, pod_ref, reasons as events};
use crate::metrics::KubeletMetrics;
use crate::objects::{InMemoryObjectSource, ObjectSource};
use crate::pleg::Pleg;
use crate::pod::{PodExt, PodUid};
use crate::pod_manager::PodManager;
use crate::probe::ProbeManager;
use crate::runtime::{
    ContainerState, PodStatus, PodSyncResult, RunningPod, Runtime, RuntimeHelper,
};
use crate::start_path;
use crate::status::{StatusInputs, StatusManager, is_terminal_phase};
use crate::sync::{Error, PodSyncer, Result, SyncPodType};
use crate::volume::VolumeManager;

use super::mirror::{self, MirrorClient};
use super::node::NodeProvider;
use super::reason_cache::ReasonCache;
use super::runtime_state::RuntimeState;

/// Grace period for runtime pods that have no config (upstream: 1 s in `HandlePodCleanups`).
pub const ORPHAN_GRACE_PERIOD_SECONDS: i64 = 1;

/// The managers a [`KubeletPodSyncer`] drives.
#[derive(Clone)]
pub struct Managers {
    /// The container runtime.
    pub runtime: Arc<dyn Runtime>,
    /// The volume manager.
    pub volumes: Arc<dyn VolumeManager>,
    /// The status manager.
    pub status: Arc<dyn StatusManager>,
    /// The PLEG (for on-demand relists).
    pub pleg: Arc<dyn Pleg>,
    /// The pod status cache the PLEG writes.
    pub cache: PodCache,
    /// Callbacks for the runtime (env, mounts, log dir).
    pub helper: Arc<dyn RuntimeHelper>,
    /// The probe manager (`probe::NoProbes` for none).
    pub probes: Arc<dyn ProbeManager>,
    /// Pod cgroups (`cm::Noop` for none).
    pub cgroups: Arc<dyn PodContainerManager>,
}

/// The kubelet's pod syncer.
pub struct KubeletPodSyncer {
    managers: Managers,
    pod_manager: PodManager,
    runtime_state: RuntimeState,
    crash_backoff: Arc<Backoff>,
    root_dir: PathBuf,
    host_ips: Vec<String>,
    reasons: ReasonCache,
    mirror: Option<(Arc<dyn MirrorClient>, Arc<dyn NodeProvider>)>,
    events: Arc<dyn EventRecorder>,
    objects: Arc<dyn ObjectSource>,
    metrics: KubeletMetrics,
}

/// How long after the kubelet first saw `pod` (its `kubernetes.io/config.seen` annotation) it
/// started running: `Some` only when this status is the first `Running` one after `Pending`
/// or none (upstream `SyncPod`, `kubelet_pod_start_duration_seconds`).
fn pod_start_duration(
    pod: &Pod,
    previous: Option<&k8s_openapi::api::core::v1::PodStatus>,
    status: &k8s_openapi::api::core::v1::PodStatus,
) -> Option<std::time::Duration> {
    let phase = |s: &k8s_openapi::api::core::v1::PodStatus| s.phase.clone().unwrap_or_default();
    let was_pending = previous.is_none_or(|p| matches!(phase(p).as_str(), "" | "Pending"));
    if !was_pending || phase(status) != "Running" {
        return None;
    }
    let seen: k8s_openapi::jiff::Timestamp = pod
        .metadata
        .annotations
        .as_ref()?
        .get(crate::config::CONFIG_SEEN_ANNOTATION)?
        .parse()
        .ok()?;
    let since = k8s_openapi::jiff::Timestamp::now().duration_since(seen);
    std::time::Duration::try_from(since).ok()
}

impl std::fmt::Debug for KubeletPodSyncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletPodSyncer")
            .field("root_dir", &self.root_dir)
            .finish_non_exhaustive()
    }
}

impl KubeletPodSyncer {
    /// A syncer over `managers`. `root_dir` holds per-pod directories
    /// (`<root>/pods/<uid>`), `host_ips` are reported as `status.hostIPs`.
    pub fn new(
        managers: Managers,
        pod_manager: PodManager,
        runtime_state: RuntimeState,
        crash_backoff: Arc<Backoff>,
        root_dir: PathBuf,
        host_ips: Vec<String>,
    ) -> Self {
        Self {
            managers,
            pod_manager,
            runtime_state,
            crash_backoff,
            root_dir,
            host_ips,
            reasons: ReasonCache::default(),
            mirror: None,
            events: Arc::new(NoopRecorder),
            objects: Arc::new(InMemoryObjectSource::new()),
            metrics: KubeletMetrics::default(),
        }
    }

    /// Registers each synced pod with `objects` and unregisters it once terminated (upstream
    /// `secretManager`/`configMapManager` `RegisterPod`/`UnregisterPod`; default: an empty
    /// in-memory source, which needs neither).
    #[must_use]
    pub fn with_object_source(mut self, objects: Arc<dyn ObjectSource>) -> Self {
        self.objects = objects;
        self
    }

    /// This syncer with static pods' mirror pods reconciled through `client` (owned by
    /// `nodes`' node) at each sync; without it, or with [`NoMirrorPods`](super::NoMirrorPods), there are none.
    pub fn with_mirror_pods(
        mut self,
        client: Arc<dyn MirrorClient>,
        nodes: Arc<dyn NodeProvider>,
    ) -> Self {
        self.mirror = Some((client, nodes));
        self
    }

    async fn reconcile_mirror_pod(&self, pod: &Pod) {
        if let Some((client, nodes)) = &self.mirror {
            let mirror_pod = self.pod_manager.mirror_pod_by_pod(pod);
            mirror::reconcile(client.as_ref(), nodes.as_ref(), pod, mirror_pod.as_ref()).await;
        }
    }

    /// Records the sync's pod events (`FailedMount`, `FailedCreatePodContainer`, `Failed`
    /// for data directories) with `recorder`, as upstream's `syncPod` does (default: none).
    #[must_use]
    pub fn with_event_recorder(mut self, recorder: Arc<dyn EventRecorder>) -> Self {
        self.events = recorder;
        self
    }

    /// Records `kubelet_pod_start_duration_seconds` in `metrics` (default: a set nobody
    /// reads).
    #[must_use]
    pub fn with_metrics(mut self, metrics: KubeletMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    fn inputs<'a>(&'a self, sync_result: Option<&'a PodSyncResult>) -> StatusInputs<'a> {
        StatusInputs {
            sync_result,
            host_ips: &self.host_ips,
            ..Default::default()
        }
    }

    /// Generates and stores the status; returns `true` when it is terminal.
    fn record_status(&self, pod: &Pod, runtime: &PodStatus, inputs: &StatusInputs<'_>) -> bool {
        let status = self.managers.status.generate(pod, runtime, inputs);
        let previous = self.managers.status.pod_status(&pod.uid());
        if let Some(since) = pod_start_duration(pod, previous.as_ref(), &status) {
            self.metrics.record_pod_start(since);
        }
        let terminal = is_terminal_phase(&status);
        self.managers.status.set_pod_status(pod, status);
        terminal
    }

    async fn refresh(
        &self,
        pod_uid: &PodUid,
        name: &str,
        namespace: &str,
        fallback: &PodStatus,
    ) -> Arc<PodStatus> {
        match self
            .managers
            .pleg
            .relist_pod(pod_uid, name, namespace)
            .await
        {
            Ok(()) => self
                .managers
                .cache
                .get(pod_uid)
                .map(|(s, _)| s)
                .unwrap_or_else(|| Arc::new(fallback.clone())),
            Err(e) => {
                debug!(pod = %pod_uid, error = %e, "on-demand relist failed; using the previous status");
                Arc::new(fallback.clone())
            }
        }
    }

    async fn make_pod_dirs(&self, uid: &PodUid) -> Result<()> {
        let dir = self.root_dir.join("pods").join(uid.as_str());
        for sub in ["volumes", "plugins", "containers"] {
            // Upstream `makePodDataDirs`: 0750, so other host users cannot reach secrets.
            tokio::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(dir.join(sub))
                .await
                .map_err(|e| Error::Other(format!("creating {}: {e}", dir.join(sub).display())))?;
        }
        Ok(())
    }
}

/// Creates the pod's cgroup, first sizing the QoS cgroups for it when it is new (upstream
/// `SyncPod`). Blocks on the cgroup filesystem.
fn ensure_pod_cgroup(
    cgroups: &dyn PodContainerManager,
    pod_manager: &PodManager,
    pod: &Pod,
) -> crate::cm::Result<()> {
    if !cgroups.pod_cgroup_exists(pod) {
        let shares = burstable_cpu_shares_of(pod_manager, Some(pod));
        if let Err(e) = cgroups.update_qos_cgroups(shares) {
            tracing::warn!(error = %e, "updating the QoS cgroups");
        }
    }
    cgroups.ensure_exists(pod)
}

/// The cpu shares of the `burstable` QoS cgroup for the pod manager's pods and `unlisted`
/// when the pod manager does not have it yet (counted once either way). Summed under the pod
/// manager's lock: a copy of every pod per new pod made a burst of N pods copy N × N of them
/// (issue 17).
pub(super) fn burstable_cpu_shares_of(pod_manager: &PodManager, unlisted: Option<&Pod>) -> u64 {
    let unlisted = unlisted
        .filter(|pod| !pod_manager.contains(&pod.uid()))
        .map_or(0, burstable_cpu_milli);
    let listed: i64 = pod_manager
        .filter_map(|pod| Some(burstable_cpu_milli(pod)))
        .iter()
        .sum();
    milli_cpu_to_shares(listed + unlisted)
}

/// Logs how each container that was running before a kill ended (exit code and the
/// runtime's finish time), as the last word on it once the pod is gone.
fn log_stopped_containers(pod: &Pod, before: &PodStatus, after: &PodStatus) {
    for c in after.containers.iter().filter(|c| {
        c.state == ContainerState::Exited
            && before
                .containers
                .iter()
                .any(|b| b.id == c.id && b.state != ContainerState::Exited)
    }) {
        info!(
            pod = %pod.full_name(),
            container = %c.name,
            exit_code = c.exit_code,
            reason = %c.reason,
            finished_at = %c.finished_at.map(|t| t.to_string()).unwrap_or_default(),
            "container stopped"
        );
    }
}

#[async_trait]
impl PodSyncer for KubeletPodSyncer {
    async fn sync_pod(&self, kind: SyncPodType, pod: &Pod, status: &PodStatus) -> Result<bool> {
        let uid = pod.uid();
        debug!(pod = %pod.full_name(), ?kind, "sync pod");
        let step = |step: &'static str| {
            crate::start_step!(step, pod = %pod.full_name());
        };
        step(start_path::SYNC_START);
        let reasons = self.reasons.as_result(&uid);
        if self.record_status(pod, status, &self.inputs(reasons.as_ref())) {
            // Terminal: what `/pods` serves now says so (the end of G3's exit path).
            step(start_path::STATUS_STORED);
            return Ok(true);
        }
        if !pod.host_network()
            && let Some(e) = self.runtime_state.network_errors()
        {
            return Err(Error::Other(format!("network is not ready: {e}")));
        }
        // Upstream: the kubelet knows the secrets and configMaps the pod references before
        // anything of the pod reads them.
        self.objects.register_pod(pod);
        // Upstream creates the pod cgroup before anything else of the pod, after sizing the
        // QoS cgroups for it.
        let ensured = {
            let (cgroups, pod_manager, pod) = (
                Arc::clone(&self.managers.cgroups),
                self.pod_manager.clone(),
                pod.clone(),
            );
            crate::blocking::unblock(move || {
                ensure_pod_cgroup(cgroups.as_ref(), &pod_manager, &pod).map_err(|e| e.to_string())
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()))
        };
        ensured.map_err(|e| {
            self.events.event(
                &pod_ref(pod),
                EventType::Warning,
                events::FAILED_TO_CREATE_POD_CONTAINER,
                &format!("unable to ensure pod container exists: {e}"),
            );
            Error::Other(format!(
                "failed to ensure that the pod cgroups exist and are correctly applied: {e}"
            ))
        })?;
        step(start_path::POD_CGROUP);
        // Upstream `tryReconcileMirrorPods`, between the pod cgroup and the pod directories.
        self.reconcile_mirror_pod(pod).await;
        if let Err(e) = self.make_pod_dirs(&uid).await {
            self.events.event(
                &pod_ref(pod),
                EventType::Warning,
                events::FAILED_TO_MAKE_POD_DATA_DIRECTORIES,
                &format!("error making pod data directories: {e}"),
            );
            return Err(e);
        }
        step(start_path::POD_DIRS);
        if let Err(e) = self.managers.volumes.wait_for_attach_and_mount(pod).await {
            self.events.event(
                &pod_ref(pod),
                EventType::Warning,
                events::FAILED_MOUNT_VOLUME,
                &format!("Unable to attach or mount volumes: {e}"),
            );
            let message = format!("unable to attach or mount volumes: {e}");
            let inputs = StatusInputs {
                pod_condition: Some(("FailedMount", &message)),
                ..self.inputs(None)
            };
            self.record_status(pod, status, &inputs);
            return Err(e.into());
        }
        step(start_path::VOLUMES);
        self.managers.probes.add_pod(pod);
        let result = self
            .managers
            .runtime
            .sync_pod(
                pod,
                status,
                self.managers.helper.clone(),
                &self.crash_backoff,
            )
            .await?;
        step(start_path::RUNTIME_SYNCED);
        let fresh = if result.changed || !result.is_ok() {
            self.refresh(
                &uid,
                pod.name_or_empty(),
                pod.namespace_or_default(),
                status,
            )
            .await
        } else {
            Arc::new(status.clone())
        };
        self.reasons.update(&uid, &result);
        let reasons = self.reasons.as_result(&uid);
        let terminal = self.record_status(pod, &fresh, &self.inputs(reasons.as_ref()));
        step(start_path::STATUS_STORED);
        if terminal {
            return Ok(true);
        }
        if let Some(e) = result.pod_error {
            return Err(Error::Other(e));
        }
        if !result.container_errors.is_empty() {
            let errs: Vec<String> = result
                .container_errors
                .iter()
                .map(|e| format!("{}: {}: {}", e.container, e.reason, e.message))
                .collect();
            let message = errs.join("; ");
            // A backoff window decides when to try again (upstream MinBackoffExpiration).
            return Err(match result.retry_after {
                Some(retry_after) => Error::Backoff {
                    message,
                    retry_after,
                },
                None => Error::Other(message),
            });
        }
        Ok(false)
    }

    async fn sync_terminating_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        grace: Option<i64>,
    ) -> Result<()> {
        let uid = pod.uid();
        info!(pod = %pod.full_name(), grace_period_seconds = ?grace, "killing pod");
        let inputs = StatusInputs {
            terminating: true,
            ..self.inputs(None)
        };
        self.record_status(pod, status, &inputs);
        self.managers.probes.stop_liveness_and_startup(pod);
        self.managers
            .runtime
            .kill_pod(Some(pod), &status.to_running_pod(), grace)
            .await?;
        let fresh = self
            .refresh(
                &uid,
                pod.name_or_empty(),
                pod.namespace_or_default(),
                status,
            )
            .await;
        if fresh
            .containers
            .iter()
            .any(|c| c.state == ContainerState::Running)
        {
            return Err(Error::Other(
                "containers are still running after kill".into(),
            ));
        }
        log_stopped_containers(pod, status, &fresh);
        self.record_status(pod, &fresh, &inputs);
        self.managers.status.terminate_pod(pod);
        Ok(())
    }

    async fn sync_terminating_runtime_pod(&self, running: &RunningPod) -> Result<()> {
        info!(pod = %running.uid, name = %running.name, namespace = %running.namespace, "killing runtime pod with no config");
        self.managers
            .runtime
            .kill_pod(None, running, Some(ORPHAN_GRACE_PERIOD_SECONDS))
            .await?;
        self.managers.runtime.remove_pod(running).await?;
        self.managers.cache.delete(&running.uid);
        Ok(())
    }

    async fn sync_terminated_pod(&self, pod: &Pod, status: &PodStatus) -> Result<()> {
        let uid = pod.uid();
        self.reasons.remove(&uid);
        self.managers.probes.remove_pod(pod);
        self.managers.volumes.unmount_pod(&uid).await?;
        // After the volumes are torn down nothing reads the pod's objects any more.
        self.objects.unregister_pod(pod);
        if !self.pod_manager.contains(&uid) {
            // Gone from the config: nothing will read its exit codes any more.
            self.managers
                .runtime
                .remove_pod(&status.to_running_pod())
                .await?;
            self.managers.cache.delete(&uid);
            let dir = self.root_dir.join("pods").join(uid.as_str());
            if let Err(e) = tokio::fs::remove_dir_all(&dir).await
                && e.kind() != std::io::ErrorKind::NotFound
            {
                return Err(Error::Other(format!("removing {}: {e}", dir.display())));
            }
        }
        // No container of the pod runs any more: its cgroup goes (upstream
        // SyncTerminatedPod).
        let cgroups = Arc::clone(&self.managers.cgroups);
        let destroy_uid = uid.clone();
        crate::blocking::unblock(move || cgroups.destroy(&destroy_uid).map_err(|e| e.to_string()))
            .await
            .unwrap_or_else(|e| Err(e.to_string()))
            .map_err(|e| Error::Other(format!("removing the pod cgroup: {e}")))?;
        // Everything of the pod is released: its API object may go.
        self.managers.status.pod_resources_reclaimed(pod);
        Ok(())
    }
}

#[cfg(test)]
mod pod_start_tests {
    use k8s_openapi::api::core::v1::PodStatus as ApiPodStatus;

    use super::*;

    fn phase(p: &str) -> ApiPodStatus {
        ApiPodStatus {
            phase: Some(p.into()),
            ..Default::default()
        }
    }

    fn seen_ago(secs: i64) -> Pod {
        let mut p = crate::testing::pod("web");
        let seen = k8s_openapi::jiff::Timestamp::now()
            - k8s_openapi::jiff::SignedDuration::from_secs(secs);
        p.metadata.annotations = Some(
            [(
                crate::config::CONFIG_SEEN_ANNOTATION.to_owned(),
                seen.to_string(),
            )]
            .into(),
        );
        p
    }

    #[test]
    fn observed_once_when_the_pod_first_runs() {
        let p = seen_ago(3);
        let since = pod_start_duration(&p, Some(&phase("Pending")), &phase("Running"))
            .expect("pending to running");
        assert!((3..5).contains(&since.as_secs()), "{since:?}");
        assert!(pod_start_duration(&p, None, &phase("Running")).is_some());
        assert!(pod_start_duration(&p, Some(&phase("Running")), &phase("Running")).is_none());
        assert!(pod_start_duration(&p, Some(&phase("Pending")), &phase("Pending")).is_none());
        assert!(pod_start_duration(&p, Some(&phase("Pending")), &phase("Succeeded")).is_none());
        let unseen = crate::testing::pod("web");
        assert!(pod_start_duration(&unseen, None, &phase("Running")).is_none());
    }
}

#[cfg(test)]
mod pod_cgroup_tests {
    use mockall::predicate::eq;

    use super::*;
    use crate::cm::MockPodContainerManager;
    use crate::pod_manager::PodManager;
    use crate::testing::container_with_resources as container;

    fn burstable(name: &str, cpu: &str) -> Pod {
        let mut pod = crate::testing::pod(name);
        if let Some(spec) = pod.spec.as_mut() {
            spec.containers = vec![container("app", &[("cpu", cpu)], &[])];
        }
        pod.metadata.uid = Some(format!("uid-{name}"));
        pod
    }

    /// The QoS cgroups are sized for the listed pods plus the new one, counted once.
    fn shares_when_created(listed: &[Pod], new: &Pod) -> u64 {
        let pod_manager = PodManager::new();
        for pod in listed {
            pod_manager.add_pod(pod.clone());
        }
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut cgroups = MockPodContainerManager::new();
        cgroups.expect_pod_cgroup_exists().return_const(false);
        cgroups.expect_update_qos_cgroups().times(1).returning({
            let seen = seen.clone();
            move |shares| {
                seen.lock().expect("shares").push(shares);
                Ok(())
            }
        });
        cgroups
            .expect_ensure_exists()
            .with(eq(new.clone()))
            .times(1)
            .returning(|_| Ok(()));
        ensure_pod_cgroup(&cgroups, &pod_manager, new).expect("created");
        seen.lock().expect("shares")[0]
    }

    #[test]
    fn a_new_pod_sizes_the_qos_cgroups_for_every_pod_with_itself_once() {
        let (a, b) = (burstable("a", "100m"), burstable("b", "200m"));
        let guaranteed = {
            let mut p = crate::testing::pod("g");
            if let Some(spec) = p.spec.as_mut() {
                spec.containers = vec![container("app", &[], &[("cpu", "1"), ("memory", "1Gi")])];
            }
            p.metadata.uid = Some("uid-g".into());
            p
        };
        // 300 millicores of Burstable requests either way: 300 × 1024 / 1000 shares.
        assert_eq!(
            shares_when_created(&[a.clone(), guaranteed.clone()], &b),
            307
        );
        assert_eq!(shares_when_created(&[a, b.clone(), guaranteed], &b), 307);
    }
}
