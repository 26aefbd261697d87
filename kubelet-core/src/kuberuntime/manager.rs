//! [`KubeRuntimeManager`]: the kubelet's [`Runtime`] over any [`RuntimeService`].
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/kuberuntime_manager.go`
//! (`kubeGenericRuntimeManager`: `Version`, `Status`, `GetPods`, `GetPodStatus`, `SyncPod`,
//! `KillPod`). The sync steps live in [`super::actions`] (what to do) and the private
//! `sync`/`kill` modules (doing it).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;

use super::api::{ContainerFilter, PodSandboxFilter, StreamRequest};
use super::convert;
use super::dns::ClusterDns;
use super::labels::pod_uid_selector;
use super::observed_exits::ObservedExits;
use super::pull_backoff::ImagePullBackoff;
use super::service::RuntimeService;
use crate::backoff::Backoff;
use crate::events::{EventRecorder, NoopRecorder};
use crate::lifecycle::{CommandRunner, ExecSleepHandlerRunner, HandlerRunner};
use crate::metrics::KubeletMetrics;
use crate::pod::{PodExt, PodUid};
use crate::runtime::{
    ContainerLog, ContainerState, Error, ExecResult, ObservedExit, PodStatus, PodSyncResult,
    Result, RunningPod, Runtime, RuntimeHelper, RuntimeStatus, SandboxState, SandboxStatus,
    StreamOptions, Version,
};
use crate::runtimeclass::RuntimeClassSource;

/// Settings of a [`KubeRuntimeManager`] (the runtime-agnostic ones; a backend has its own).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Root of the pod log directories (upstream `--pod-logs-dir`, default `/var/log/pods`).
    pub pod_logs_dir: PathBuf,
    /// Where each started container gets a symlink to its log,
    /// `<pod>_<namespace>_<container>-<id>.log`, removed with the container (upstream's
    /// `/var/log/containers`, for log shippers); `None`: no symlinks.
    pub container_log_links_dir: Option<PathBuf>,
    /// The kubelet's root directory (`--root-dir`): termination message files live under
    /// `<root>/pods/<uid>/containers/<name>/`. `None`: no termination message file is mounted.
    pub root_dir: Option<PathBuf>,
    /// The host resolv.conf: the base of every pod's DNS config, all of it for `Default`
    /// pods (upstream `--resolv-conf`, default `/etc/resolv.conf`; empty for none).
    pub resolv_conf: PathBuf,
    /// This node's name.
    pub node_name: String,
    /// Cluster DNS servers and domain (upstream `--cluster-dns`, `--cluster-domain`).
    pub cluster_dns: ClusterDns,
    /// Node IPs: the localhost nameserver of `Default` pods when `resolv_conf` is empty, and
    /// the pod IPs of a runtime without sandboxes.
    pub node_ips: Vec<String>,
    /// The sysctls a sandbox may get: the safe set plus `--allowed-unsafe-sysctls` (the
    /// kubelet's admission already refused others; this guards other callers).
    pub sysctls: crate::sysctl::Allowlist,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            container_log_links_dir: Some(PathBuf::from("/var/log/containers")),
            root_dir: None,
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            node_name: String::new(),
            cluster_dns: ClusterDns::default(),
            node_ips: Vec::new(),
            sysctls: crate::sysctl::Allowlist::default(),
        }
    }
}

impl Options {
    /// Sets [`Options::pod_logs_dir`].
    #[must_use]
    pub fn with_pod_logs_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.pod_logs_dir = dir.into();
        self
    }

    /// Sets [`Options::container_log_links_dir`].
    #[must_use]
    pub fn with_container_log_links_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.container_log_links_dir = dir;
        self
    }

    /// Sets [`Options::root_dir`].
    #[must_use]
    pub fn with_root_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.root_dir = Some(dir.into());
        self
    }

    /// Sets [`Options::resolv_conf`].
    #[must_use]
    pub fn with_resolv_conf(mut self, path: impl Into<PathBuf>) -> Self {
        self.resolv_conf = path.into();
        self
    }

    /// Sets [`Options::node_name`].
    #[must_use]
    pub fn with_node_name(mut self, name: impl Into<String>) -> Self {
        self.node_name = name.into();
        self
    }

    /// Sets [`Options::cluster_dns`].
    #[must_use]
    pub fn with_cluster_dns(mut self, dns: ClusterDns) -> Self {
        self.cluster_dns = dns;
        self
    }

    /// Sets [`Options::node_ips`].
    #[must_use]
    pub fn with_node_ips(mut self, ips: Vec<String>) -> Self {
        self.node_ips = ips;
        self
    }

    /// Sets [`Options::sysctls`].
    #[must_use]
    pub fn with_sysctls(mut self, allowlist: crate::sysctl::Allowlist) -> Self {
        self.sysctls = allowlist;
        self
    }
}

/// The pod engine: a [`Runtime`] over a container-level [`RuntimeService`] (upstream
/// `kubeGenericRuntimeManager`). Cheap to clone; clones share the backend and the state
/// (image pull backoff, preStop hooks in progress).
#[doc(alias = "kubeGenericRuntimeManager")]
pub struct KubeRuntimeManager<S> {
    pub(super) service: Arc<S>,
    pub(super) opts: Arc<Options>,
    /// Liveness and startup results: a failed container is killed and restarted.
    pub(super) probes: Option<crate::probe::Results>,
    /// Image pull backoff windows (`ErrImagePull`, then `ImagePullBackOff`).
    pub(super) image_backoff: Arc<ImagePullBackoff>,
    /// Containers whose preStop hook has been started by a kill that has not finished.
    pub(super) pre_stop_started: Arc<Mutex<HashSet<String>>>,
    /// Runs postStart and preStop hooks.
    pub(super) hooks: Arc<dyn HandlerRunner>,
    /// Where pull, create, start, kill, back-off and hook events go.
    pub(super) events: Arc<dyn EventRecorder>,
    /// Where pod and container starts are counted (`kubelet_started_*`).
    pub(super) metrics: KubeletMetrics,
    /// Exits the runtime's events reported before its status shows them.
    pub(super) observed_exits: Arc<ObservedExits>,
    /// The node's credential provider plugins, asked after the pull secrets.
    pub(super) credential_providers: Option<Arc<crate::credentialprovider::CredentialProviders>>,
    /// RuntimeClasses for `runtimeClassName`; `None`: every pod gets the default handler.
    pub(super) runtime_classes: Option<Arc<dyn RuntimeClassSource>>,
}

impl<S> Clone for KubeRuntimeManager<S> {
    fn clone(&self) -> Self {
        Self {
            service: self.service.clone(),
            opts: self.opts.clone(),
            probes: self.probes.clone(),
            image_backoff: self.image_backoff.clone(),
            pre_stop_started: self.pre_stop_started.clone(),
            hooks: self.hooks.clone(),
            events: self.events.clone(),
            metrics: self.metrics.clone(),
            observed_exits: self.observed_exits.clone(),
            credential_providers: self.credential_providers.clone(),
            runtime_classes: self.runtime_classes.clone(),
        }
    }
}

impl<S> std::fmt::Debug for KubeRuntimeManager<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeRuntimeManager")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl<S: RuntimeService> KubeRuntimeManager<S> {
    /// The engine over `service`, with upstream's image pull backoff, no probe results, the
    /// [`ExecSleepHandlerRunner`] for hooks (httpGet hooks fail; see
    /// [`KubeRuntimeManager::with_handler_runner`]) and no events (see
    /// [`KubeRuntimeManager::with_event_recorder`]).
    pub fn new(service: S, opts: Options) -> Self {
        Self {
            service: Arc::new(service),
            opts: Arc::new(opts),
            probes: None,
            image_backoff: Arc::default(),
            pre_stop_started: Arc::default(),
            hooks: Arc::new(ExecSleepHandlerRunner),
            events: Arc::new(NoopRecorder),
            metrics: KubeletMetrics::default(),
            observed_exits: Arc::default(),
            credential_providers: None,
            runtime_classes: None,
        }
    }

    /// Resolves pods' `runtimeClassName` to the runtime handler of their sandbox through
    /// `classes` (upstream's RuntimeClass manager, which exists only with an API client);
    /// without it `runtimeClassName` is not looked up and every sandbox gets the runtime's
    /// default handler, as upstream's standalone kubelet.
    #[must_use]
    pub fn with_runtime_classes(mut self, classes: Arc<dyn RuntimeClassSource>) -> Self {
        self.runtime_classes = Some(classes);
        self
    }

    /// Records the engine's events (`Pulling`, `Pulled`, `Created`, `Started`, `Killing`,
    /// `BackOff`, `Failed`, hook failures) with `recorder`, as upstream's runtime manager does.
    #[must_use]
    pub fn with_event_recorder(mut self, recorder: Arc<dyn EventRecorder>) -> Self {
        self.events = recorder;
        self
    }

    /// Counts pod and container starts in `metrics` (`kubelet_started_pods_total`,
    /// `kubelet_started_containers_total` and their `_errors_total`), as upstream's
    /// `SyncPod` does.
    #[must_use]
    pub fn with_metrics(mut self, metrics: KubeletMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Makes `sync_pod` restart containers whose liveness or startup probe failed (the
    /// probe manager writes these results).
    #[must_use]
    pub fn with_probe_results(mut self, results: crate::probe::Results) -> Self {
        self.probes = Some(results);
        self
    }

    /// Uses `backoff` for image pulls instead of upstream's 10 s doubling to 300 s.
    #[must_use]
    pub fn with_image_pull_backoff(mut self, backoff: ImagePullBackoff) -> Self {
        self.image_backoff = Arc::new(backoff);
        self
    }

    /// Pulls also with the credentials of the node's credential provider plugins
    /// (`--image-credential-provider-config`), after the pod's pull secrets'.
    #[must_use]
    pub fn with_credential_providers(
        mut self,
        providers: Arc<crate::credentialprovider::CredentialProviders>,
    ) -> Self {
        self.credential_providers = Some(providers);
        self
    }

    /// Runs postStart and preStop hooks with `runner` (e.g. `kubelet-probe`'s, which adds
    /// httpGet hooks).
    #[must_use]
    pub fn with_handler_runner(mut self, runner: Arc<dyn HandlerRunner>) -> Self {
        self.hooks = runner;
        self
    }

    /// The options this engine was built with.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// The backend.
    pub fn service(&self) -> &S {
        &self.service
    }

    /// The one sandbox of a pod on a runtime without sandboxes: always ready, ID = pod UID,
    /// IPs = the node's.
    fn implicit_sandbox(&self, uid: &PodUid) -> SandboxStatus {
        SandboxStatus {
            id: uid.as_str().to_owned(),
            state: SandboxState::Ready,
            attempt: 0,
            created_at: None,
            ips: self.opts.node_ips.clone(),
            host_network: false,
        }
    }

    /// Status of one pod's sandboxes and containers (see [`Runtime::get_pod_status`]).
    pub(super) async fn pod_status(
        &self,
        uid: &PodUid,
        name: &str,
        namespace: &str,
    ) -> Result<PodStatus> {
        let sandbox_filter = PodSandboxFilter {
            state: None,
            label_selector: pod_uid_selector(uid),
        };
        let container_filter = ContainerFilter {
            state: None,
            label_selector: pod_uid_selector(uid),
        };
        let (mut sandboxes, containers) = tokio::try_join!(
            async {
                if self.service.has_sandboxes() {
                    self.service.list_pod_sandbox(&sandbox_filter).await
                } else {
                    Ok(Vec::new())
                }
            },
            self.service.list_containers(&container_filter),
        )?;
        sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));

        let mut status = PodStatus {
            uid: uid.clone(),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            ..Default::default()
        };
        if !self.service.has_sandboxes() {
            let sandbox = self.implicit_sandbox(uid);
            status.ips = sandbox.ips.clone();
            status.sandboxes.push(sandbox);
        }
        // The newest sandbox's status and every container's are independent: one round
        // trip for all of them.
        let (newest, statuses) = tokio::join!(
            async {
                match sandboxes.first() {
                    Some(s) => Some(self.service.pod_sandbox_status(&s.id).await),
                    None => None,
                }
            },
            join_all(
                containers
                    .iter()
                    .map(|c| self.service.container_status(&c.id)),
            ),
        );
        match newest {
            Some(Ok(st)) => {
                let st = convert::sandbox_status(st);
                if st.state == SandboxState::Ready {
                    status.ips = st.ips.clone();
                }
                status.sandboxes.push(st);
            }
            // Removed between the list and the status call: as if never listed.
            Some(Err(Error::NotFound(_))) | None => {}
            Some(Err(e)) => return Err(e),
        }
        // Older sandboxes only matter for their state and attempt, which the list has.
        status.sandboxes.extend(
            sandboxes
                .iter()
                .skip(1)
                .map(convert::sandbox_status_from_list),
        );

        for st in statuses {
            match st {
                Ok(mut st) => {
                    self.observed_exits.apply(&mut st);
                    let mut converted = convert::container_status(&st);
                    if converted.state == ContainerState::Exited
                        && let Some(message) = super::termination::termination_message(
                            &st,
                            converted.exit_code,
                            &converted.reason,
                        )
                        .await
                    {
                        if !converted.message.is_empty() {
                            converted.message.push_str(": ");
                        }
                        converted.message.push_str(&message);
                    }
                    status.containers.push(converted);
                }
                Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        status.containers.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.restart_count.cmp(&a.restart_count))
        });
        Ok(status)
    }
}

#[async_trait]
impl<S: RuntimeService> Runtime for KubeRuntimeManager<S> {
    async fn version(&self) -> Result<Version> {
        self.service.version().await
    }

    async fn status(&self) -> Result<RuntimeStatus> {
        self.service.status().await
    }

    async fn get_pods(&self, all: bool) -> Result<Vec<RunningPod>> {
        let (sandbox_state, container_state) = if all {
            (None, None)
        } else {
            (Some(SandboxState::Ready), Some(ContainerState::Running))
        };
        let sandbox_filter = PodSandboxFilter {
            state: sandbox_state,
            ..Default::default()
        };
        let container_filter = ContainerFilter {
            state: container_state,
            ..Default::default()
        };
        // A runtime without sandboxes lists none: its pods are their containers, and one
        // whose containers all stopped is stopped.
        let (sandboxes, mut containers) = tokio::try_join!(
            async {
                if self.service.has_sandboxes() {
                    self.service.list_pod_sandbox(&sandbox_filter).await
                } else {
                    Ok(Vec::new())
                }
            },
            self.service.list_containers(&container_filter),
        )?;
        self.observed_exits.apply_to_list(&mut containers, !all);
        Ok(convert::group_pods(sandboxes, containers))
    }

    async fn get_pod_status(&self, uid: &PodUid, name: &str, namespace: &str) -> Result<PodStatus> {
        self.pod_status(uid, name, namespace).await
    }

    fn observe_exit(&self, exit: ObservedExit) {
        self.observed_exits.note(exit);
    }

    async fn sync_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        helper: Arc<dyn RuntimeHelper>,
        backoff: &Backoff,
    ) -> Result<PodSyncResult> {
        self.sync(pod, status, helper.as_ref(), backoff).await
    }

    async fn kill_pod<'a>(
        &self,
        pod: Option<&'a Pod>,
        running: &RunningPod,
        grace_period_seconds: Option<i64>,
    ) -> Result<()> {
        self.kill(pod, running, grace_period_seconds).await
    }

    async fn delete_container(&self, id: &str) -> Result<()> {
        self.remove_container_and_log(id).await
    }

    async fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
        max_output: usize,
    ) -> Result<ExecResult> {
        self.service
            .exec_sync(container_id, cmd, timeout, max_output)
            .await
    }

    async fn remove_pod(&self, running: &RunningPod) -> Result<()> {
        self.remove(running).await
    }

    async fn garbage_collect(
        &self,
        policy: crate::container_gc::Policy,
        all_sources_ready: bool,
        evict_non_deleted_pods: bool,
        pods: Arc<dyn crate::container_gc::PodStateProvider>,
    ) -> Result<()> {
        self.collect_garbage(
            policy,
            all_sources_ready,
            evict_non_deleted_pods,
            pods.as_ref(),
        )
        .await
    }

    async fn get_exec(
        &self,
        container_id: &str,
        cmd: &[String],
        streams: StreamOptions,
    ) -> Result<String> {
        self.service
            .stream_url(&StreamRequest::Exec {
                container_id: container_id.to_owned(),
                cmd: cmd.to_vec(),
                tty: streams.tty,
                stdin: streams.stdin,
                stdout: streams.stdout,
                stderr: streams.stderr,
            })
            .await
    }

    async fn begin_exec_session(
        &self,
        container_id: &str,
        cmd: &[String],
    ) -> Box<dyn crate::runtime::ExecSession> {
        self.service.begin_exec_session(container_id, cmd).await
    }

    async fn get_attach(&self, container_id: &str, streams: StreamOptions) -> Result<String> {
        self.service
            .stream_url(&StreamRequest::Attach {
                container_id: container_id.to_owned(),
                tty: streams.tty,
                stdin: streams.stdin,
                stdout: streams.stdout,
                stderr: streams.stderr,
            })
            .await
    }

    async fn get_port_forward(&self, sandbox_id: &str, ports: &[i32]) -> Result<String> {
        self.service
            .stream_url(&StreamRequest::PortForward {
                sandbox_id: sandbox_id.to_owned(),
                ports: ports.to_vec(),
            })
            .await
    }

    async fn list_images(&self) -> Result<Vec<super::api::Image>> {
        self.service.list_images().await
    }

    async fn remove_image(&self, image: &str) -> Result<()> {
        self.service.remove_image(image).await
    }

    async fn container_log(&self, container_id: &str) -> Result<ContainerLog> {
        let status = self.service.container_status(container_id).await?;
        Ok(ContainerLog {
            path: PathBuf::from(status.log_path),
            running: status.state == ContainerState::Running,
        })
    }

    async fn reopen_container_log(&self, container_id: &str) -> Result<()> {
        self.service.reopen_container_log(container_id).await
    }
}

/// Hooks exec in the container through the backend and find the pod IPs in its status.
#[async_trait]
impl<S: RuntimeService> CommandRunner for KubeRuntimeManager<S> {
    async fn run_in_container(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecResult> {
        self.service
            .exec_sync(container_id, cmd, timeout, usize::MAX)
            .await
    }

    async fn pod_ips(&self, pod: &Pod) -> Result<Vec<String>> {
        let status = self
            .pod_status(&pod.uid(), pod.name_or_empty(), pod.namespace_or_default())
            .await?;
        Ok(status.ips)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kuberuntime::MockRuntimeService;

    #[test]
    fn options_defaults_and_setters() {
        let o = Options::default();
        assert_eq!(o.pod_logs_dir, PathBuf::from("/var/log/pods"));
        assert_eq!(o.resolv_conf, PathBuf::from("/etc/resolv.conf"));
        let o = o.with_node_name("node-1").with_root_dir("/var/lib/kubelet");
        assert_eq!(o.node_name, "node-1");
        assert_eq!(
            o.root_dir.as_deref(),
            Some(std::path::Path::new("/var/lib/kubelet"))
        );
    }

    #[tokio::test]
    async fn a_runtime_without_sandboxes_gets_one_ready_sandbox_per_pod() {
        let mut service = MockRuntimeService::new();
        service.expect_has_sandboxes().return_const(false);
        service.expect_list_pod_sandbox().never();
        service
            .expect_list_containers()
            .returning(|_| Ok(Vec::new()));
        let engine = KubeRuntimeManager::new(
            service,
            Options::default().with_node_ips(vec!["192.0.2.7".into()]),
        );
        let uid = PodUid::from("uid-web");
        let status = engine
            .get_pod_status(&uid, "web", "default")
            .await
            .expect("status");
        assert_eq!(status.ips, ["192.0.2.7"]);
        assert_eq!(status.sandboxes.len(), 1);
        assert_eq!(status.sandboxes[0].id, "uid-web");
        assert_eq!(status.sandboxes[0].state, SandboxState::Ready);
        let pod = crate::testing::pod("web");
        let actions = super::super::actions::compute_pod_actions_for(&pod, &status, None, false);
        assert!(!actions.create_sandbox && !actions.kill_pod, "{actions:?}");
        assert_eq!(actions.sandbox_id.as_deref(), Some("uid-web"));
        assert_eq!(actions.containers_to_start, [0]);
        assert!(engine.get_pods(true).await.expect("pods").is_empty());
    }

    #[tokio::test]
    async fn a_stopped_container_s_observed_exit_is_forgotten() {
        let mut service = MockRuntimeService::new();
        service.expect_container_status().returning(|id| {
            Ok(crate::kuberuntime::api::ContainerStatus {
                id: id.into(),
                state: ContainerState::Running,
                ..Default::default()
            })
        });
        service.expect_stop_container().returning(|_, _| Ok(()));
        service.expect_stop_pod_sandbox().returning(|_| Ok(()));
        let engine = KubeRuntimeManager::new(service, Options::default());
        for id in ["stopped", "other"] {
            engine.observe_exit(ObservedExit {
                container_id: id.into(),
                exit_code: 137,
                finished_at: None,
                oom_killed: false,
            });
        }
        let running = RunningPod {
            uid: PodUid::from("uid-web"),
            name: "web".into(),
            containers: vec![crate::runtime::ContainerSummary {
                id: "stopped".into(),
                name: "app".into(),
                state: ContainerState::Running,
                ..Default::default()
            }],
            ..Default::default()
        };
        engine
            .kill_pod(None, &running, Some(0))
            .await
            .expect("kill");
        // The runtime shows the stopped container exited now: only the other exit waits.
        assert_eq!(engine.observed_exits.len(), 1);
    }
}
