//! Executing [`PodActions`]: the body of `sync_pod`.
//!
//! Mirrors upstream `SyncPod` of `pkg/kubelet/kuberuntime/kuberuntime_manager.go` (kill the
//! pod or unwanted containers, prune/purge init containers, create the sandbox, start the next
//! init container, start app containers) and `startContainer` of `kuberuntime_container.go`
//! (pull, create, start). Per-container failures become
//! [`ContainerSyncError`]s with upstream's waiting reasons; a sandbox failure is the
//! `pod_error`; a runtime that is down aborts the sync with [`Error::Unavailable`].

use std::collections::HashSet;
use std::path::PathBuf;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_core::backoff::Backoff;
use kubelet_core::kubelet::hosts::{kernel_hostname, pod_hostname_and_domain};
use kubelet_core::pod::PodExt;
use kubelet_core::runtime::{
    ContainerState, ContainerSyncError, Error, PodStatus, PodSyncResult, Result, RunningPod,
    RuntimeHelper,
};

use crate::actions::{PodActions, check_backoff, compute_pod_actions_with_probes};
use crate::container::{
    ContainerConfigInput, container_logs_dir, generate_container_config, restart_count_from_log_dir,
};
use crate::convert;
use crate::dns::pod_dns_config;
use crate::error::is_not_found;
use crate::image::{EnsureError, ensure_image_exists};
use crate::labels::{ContainerType, new_pod_annotations};
use crate::reasons::{CREATE_CONTAINER_CONFIG_ERROR, CREATE_CONTAINER_ERROR, RUN_CONTAINER_ERROR};
use crate::resources::{apply_to_sandbox, container_resources};
use crate::runtime::RemoteRuntime;
use crate::sandbox::{generate_pod_sandbox_config, host_dns_config, pod_logs_dir};

/// Why one container could not be started.
enum StartError {
    /// Report on the container and go on.
    Container(ContainerSyncError),
    /// The runtime is down: abort the sync.
    Down(Error),
}

fn container_error(container: &Container, reason: &str, message: String) -> StartError {
    StartError::Container(ContainerSyncError {
        container: container.name.clone(),
        reason: reason.to_owned(),
        message,
    })
}

fn classify(container: &Container, reason: &str, e: Error) -> StartError {
    match e {
        Error::Unavailable(_) => StartError::Down(e),
        e => container_error(container, reason, e.to_string()),
    }
}

/// The running part of a pod status (upstream `ConvertPodStatusToRunningPod`): running
/// containers and every sandbox.
fn running_pod_from_status(status: &PodStatus) -> RunningPod {
    let mut running = status.to_running_pod();
    running
        .containers
        .retain(|c| c.state == ContainerState::Running);
    running
}

/// What every container start of one sync shares.
struct StartContext<'a> {
    pod: &'a Pod,
    status: &'a PodStatus,
    helper: &'a dyn RuntimeHelper,
    backoff: &'a Backoff,
    sandbox_id: &'a str,
    sandbox_config: &'a cri::PodSandboxConfig,
    pod_ips: &'a [String],
}

impl RemoteRuntime {
    pub(crate) async fn sync(
        &self,
        pod: &Pod,
        status: &PodStatus,
        helper: &dyn RuntimeHelper,
        backoff: &Backoff,
    ) -> Result<PodSyncResult> {
        let actions = compute_pod_actions_with_probes(pod, status, self.probes.as_ref());
        tracing::debug!(pod = %pod.full_name(), ?actions, "computed pod actions");
        let mut result = PodSyncResult::default();

        if actions.kill_pod {
            let running = running_pod_from_status(status);
            let had_something = !running.is_empty_or_stopped();
            if let Err(e) = self.kill(Some(pod), &running, None).await {
                return fail_pod(result, "failed to kill pod", e);
            }
            result.changed |= had_something;
            if actions.create_sandbox {
                self.purge_init_containers(pod, status).await;
            }
        } else {
            for k in &actions.containers_to_kill {
                if let Err(e) = self
                    .kill_container(
                        Some(pod),
                        &k.id,
                        &k.name,
                        k.grace_period_seconds,
                        &k.message,
                    )
                    .await
                {
                    return fail_pod(result, &format!("failed to kill container {:?}", k.name), e);
                }
                result.changed = true;
            }
        }
        self.prune_init_containers(pod, status).await;

        if !actions.create_sandbox
            && actions.next_init_container_to_start.is_none()
            && actions.containers_to_start.is_empty()
        {
            return Ok(result);
        }

        let host_dns = if self.opts.resolv_conf.as_os_str().is_empty() {
            None
        } else {
            Some(host_dns_config(&self.opts.resolv_conf).await)
        };
        let dns = pod_dns_config(pod, host_dns, &self.opts.cluster_dns, &self.opts.node_ips);
        let mut sandbox_config = generate_pod_sandbox_config(pod, actions.attempt, &self.opts, dns);
        if !pod.host_network() {
            let fqdn = pod.spec.as_ref().and_then(|s| s.set_hostname_as_fqdn) == Some(true);
            match pod_hostname_and_domain(pod, &self.opts.cluster_dns.domain)
                .and_then(|(h, d)| kernel_hostname(&h, &d, fqdn))
            {
                Ok(h) => sandbox_config.hostname = h,
                Err(message) => {
                    let e = Error::InvalidSpec {
                        field: "spec.hostname".into(),
                        reason: message,
                    };
                    return fail_pod(result, "failed to create pod sandbox", e);
                }
            }
        }
        apply_to_sandbox(
            &mut sandbox_config,
            pod,
            &helper.get_pod_cgroup_parent(pod),
            self.opts.cfs_quota,
        );
        let mut pod_ips = status.ips.clone();
        let sandbox_id = if actions.create_sandbox {
            match self.create_sandbox(pod, &sandbox_config).await {
                Ok((id, ips)) => {
                    result.changed = true;
                    if !pod.host_network() {
                        pod_ips = ips;
                    }
                    id
                }
                Err(e) => return fail_pod(result, "failed to create pod sandbox", e),
            }
        } else {
            actions.sandbox_id.clone().unwrap_or_default()
        };

        let ctx = StartContext {
            pod,
            status,
            helper,
            backoff,
            sandbox_id: &sandbox_id,
            sandbox_config: &sandbox_config,
            pod_ips: &pod_ips,
        };
        self.start_containers(&ctx, &actions, &mut result).await?;
        Ok(result)
    }

    async fn start_containers(
        &self,
        ctx: &StartContext<'_>,
        actions: &PodActions,
        result: &mut PodSyncResult,
    ) -> Result<()> {
        if let Some(c) = actions
            .next_init_container_to_start
            .and_then(|i| ctx.pod.init_containers().get(i))
        {
            match self.start_container(ctx, c, ContainerType::Init).await {
                Ok(()) => result.changed = true,
                Err(StartError::Down(e)) => return Err(e),
                Err(StartError::Container(e)) => {
                    // The pod cannot initialize: do not start anything else.
                    result.container_errors.push(e);
                    return Ok(());
                }
            }
        }
        for c in actions
            .containers_to_start
            .iter()
            .filter_map(|&i| ctx.pod.containers().get(i))
        {
            match self.start_container(ctx, c, ContainerType::Regular).await {
                Ok(()) => result.changed = true,
                Err(StartError::Down(e)) => return Err(e),
                Err(StartError::Container(e)) => result.container_errors.push(e),
            }
        }
        Ok(())
    }

    /// Creates the pod's log directory and sandbox; returns its ID and pod IPs.
    async fn create_sandbox(
        &self,
        pod: &Pod,
        config: &cri::PodSandboxConfig,
    ) -> Result<(String, Vec<String>)> {
        let dir = pod_logs_dir(&self.opts.pod_logs_dir, pod);
        if let Err(e) = tokio::fs::create_dir_all(&dir).await {
            return Err(Error::Runtime {
                op: "RunPodSandbox",
                message: format!("create pod log directory {}: {e}", dir.display()),
            });
        }
        tracing::info!(pod = %pod.full_name(), attempt = config.metadata.as_ref().map_or(0, |m| m.attempt), "creating pod sandbox");
        let id = self.client.run_pod_sandbox(config.clone()).await?;
        let status = self.client.pod_sandbox_status(&id).await?;
        Ok((id, convert::sandbox_ips(&status)))
    }

    /// Pulls, creates and starts one container (upstream `startContainer`, without hooks).
    async fn start_container(
        &self,
        ctx: &StartContext<'_>,
        container: &Container,
        container_type: ContainerType,
    ) -> Result<(), StartError> {
        let pod = ctx.pod;
        if let Some(e) = check_backoff(pod, container, ctx.status, ctx.backoff) {
            return Err(StartError::Container(e));
        }
        let image_ref = ensure_image_exists(
            &self.client,
            container,
            &new_pod_annotations(pod),
            ctx.sandbox_config,
        )
        .await
        .map_err(|e| match e {
            EnsureError::Container { reason, message } => {
                container_error(container, reason, message)
            }
            EnsureError::Unavailable(e) => StartError::Down(e),
        })?;
        let opts = ctx
            .helper
            .generate_run_container_options(pod, container, ctx.pod_ips)
            .map_err(|message| {
                container_error(container, CREATE_CONTAINER_CONFIG_ERROR, message)
            })?;

        let logs_dir =
            container_logs_dir(&pod_logs_dir(&self.opts.pod_logs_dir, pod), &container.name);
        let restart_count = match ctx.status.container(&container.name) {
            Some(prev) => prev.restart_count.saturating_add(1),
            None => restart_count_in(logs_dir.clone()).await,
        };
        tokio::fs::create_dir_all(&logs_dir).await.map_err(|e| {
            container_error(
                container,
                CREATE_CONTAINER_CONFIG_ERROR,
                format!("create container log directory {}: {e}", logs_dir.display()),
            )
        })?;
        let mut config = generate_container_config(&ContainerConfigInput {
            pod,
            container,
            container_type,
            restart_count,
            image_ref: &image_ref,
            opts: &opts,
        });
        if let Some(linux) = config.linux.as_mut() {
            linux.resources = Some(container_resources(
                pod,
                container,
                self.opts.memory_capacity,
                self.opts.cfs_quota,
            ));
        }
        let res = config.linux.as_ref().and_then(|l| l.resources.as_ref());
        tracing::info!(
            pod = %pod.full_name(),
            container = %container.name,
            restart_count,
            cpu_shares = res.map(|r| r.cpu_shares),
            cpu_quota = res.map(|r| r.cpu_quota),
            memory_limit = res.map(|r| r.memory_limit_in_bytes),
            oom_score_adj = res.map(|r| r.oom_score_adj),
            cgroup_parent = ctx.sandbox_config.linux.as_ref().map(|l| l.cgroup_parent.as_str()),
            "creating container"
        );
        let id = self
            .client
            .create_container(ctx.sandbox_id, config, ctx.sandbox_config.clone())
            .await
            .map_err(|e| classify(container, CREATE_CONTAINER_ERROR, e))?;
        self.client
            .start_container(&id)
            .await
            .map_err(|e| classify(container, RUN_CONTAINER_ERROR, e))
    }

    /// Removes every instance of the pod's init containers, so that a new sandbox runs them
    /// from the start (upstream `purgeInitContainers`).
    async fn purge_init_containers(&self, pod: &Pod, status: &PodStatus) {
        let names: HashSet<&str> = pod
            .init_containers()
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        for c in status
            .containers
            .iter()
            .filter(|c| names.contains(c.name.as_str()))
        {
            self.remove_logged(&c.id, &c.name).await;
        }
    }

    /// Keeps only the newest exited instance of each init container (upstream
    /// `pruneInitContainersBeforeStart`).
    async fn prune_init_containers(&self, pod: &Pod, status: &PodStatus) {
        for init in pod.init_containers() {
            let mut dead: Vec<_> = status
                .containers
                .iter()
                .filter(|c| {
                    c.name == init.name
                        && matches!(c.state, ContainerState::Exited | ContainerState::Unknown)
                })
                .collect();
            dead.sort_by_key(|c| std::cmp::Reverse(c.created_at));
            for c in dead.iter().skip(1) {
                self.remove_logged(&c.id, &c.name).await;
            }
        }
    }

    async fn remove_logged(&self, id: &str, name: &str) {
        match self.client.remove_container(id).await {
            Err(e) if !is_not_found(&e) => {
                tracing::warn!(container = name, id, error = %e, "failed to remove init container");
            }
            _ => {}
        }
    }
}

/// Ends the sync with a pod-level failure; a runtime that is down is an `Err` instead.
fn fail_pod(mut result: PodSyncResult, what: &str, e: Error) -> Result<PodSyncResult> {
    if matches!(e, Error::Unavailable(_)) {
        return Err(e);
    }
    tracing::warn!(error = %e, "{what}");
    result.pod_error = Some(format!("{what}: {e}"));
    Ok(result)
}

async fn restart_count_in(dir: PathBuf) -> u32 {
    tokio::task::spawn_blocking(move || restart_count_from_log_dir(&dir))
        .await
        .unwrap_or(0)
}
