//! Executing [`PodActions`]: the body of `sync_pod`.
//!
//! Mirrors upstream `SyncPod` of `pkg/kubelet/kuberuntime/kuberuntime_manager.go` (kill the
//! pod or unwanted containers, prune/purge init containers, create the sandbox, start new
//! ephemeral containers, start the next init container, start app containers) and
//! `startContainer` of `kuberuntime_container.go` (pull, create, start, postStart hook; an
//! ephemeral container's target for `getTargetID`). Per-container failures become
//! [`ContainerSyncError`]s with upstream's waiting reasons; a sandbox failure is the
//! `pod_error`; a runtime that is down aborts the sync with [`Error::Unavailable`]. Events
//! are recorded where upstream records them (`SandboxChanged`, `FailedCreatePodSandBox`,
//! `BackOff`, `Failed` with `Error: …`, `Created`, `Started`, `FailedPostStartHook`).

use std::collections::HashSet;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::actions::{PodActions, check_backoff, compute_pod_actions_for};
use super::api::{ContainerConfig, ContainerType, PodSandboxConfig};
use super::container::{
    command_and_args, container_log_path, container_logs_dir, legacy_log_symlink, pod_logs_dir,
    restart_count_from_log_dir,
};
use super::dns::{host_dns_config, pod_dns_config};
use super::image::{EnsureError, ImageEvents, ensure_image_exists};
use super::labels::{
    new_container_annotations, new_container_labels, new_pod_annotations, new_pod_labels,
};
use super::manager::KubeRuntimeManager;
use super::reasons::{
    CREATE_CONTAINER_CONFIG_ERROR, CREATE_CONTAINER_ERROR, ERR_IMAGE_NEVER_PULL, ERR_IMAGE_PULL,
    FAILED_POST_START_HOOK, IMAGE_INSPECT_ERROR, IMAGE_PULL_BACK_OFF, INVALID_IMAGE_NAME,
    POST_START_HOOK_ERROR, RUN_CONTAINER_ERROR,
};
use super::security::{image_user, verify_run_as_non_root};
use super::service::RuntimeService;
use super::termination::{create_termination_log, termination_message_path};
use crate::backoff::Backoff;
use crate::container::{ephemeral_container_spec, is_restartable_init_container};
use crate::events::{EventType, container_ref, format_pod, pod_ref, reasons as events};
use crate::kubelet::hosts::{kernel_hostname, pod_hostname_and_domain};
use crate::lifecycle::HookTarget;
use crate::pod::PodExt;
use crate::runtime::{
    ContainerState, ContainerSyncError, Error, Mount, PodStatus, PodSyncResult, Result, RunningPod,
    RuntimeHelper,
};

/// Why one container could not be started.
enum StartError {
    /// Report on the container and go on.
    Container(ContainerSyncError),
    /// Inside a backoff window that ends after the duration: report on the container.
    Backoff(ContainerSyncError, std::time::Duration),
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
        // The backend could not turn the spec into a runtime object (upstream reports
        // `generateContainerConfig` failures as CreateContainerConfigError).
        Error::InvalidSpec { reason, .. } => {
            container_error(container, CREATE_CONTAINER_CONFIG_ERROR, reason)
        }
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
    sandbox_config: &'a PodSandboxConfig<'a>,
    pod_ips: &'a [String],
}

impl<S: RuntimeService> KubeRuntimeManager<S> {
    pub(crate) async fn sync(
        &self,
        pod: &Pod,
        status: &PodStatus,
        helper: &dyn RuntimeHelper,
        backoff: &Backoff,
    ) -> Result<PodSyncResult> {
        let actions = compute_pod_actions_for(
            pod,
            status,
            self.probes.as_ref(),
            self.service.has_sandboxes(),
        );
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
                        None,
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
            && actions.init_containers_to_start.is_empty()
            && actions.containers_to_start.is_empty()
            && actions.ephemeral_containers_to_start.is_empty()
        {
            return Ok(result);
        }

        if actions.create_sandbox
            && let Err(message) = self.opts.sysctls.validate(pod).map_err(|e| e.to_string())
        {
            // The kubelet rejects such a pod at admission; this guards other callers.
            tracing::warn!(pod = %pod.full_name(), reason = "SysctlForbidden", "{message}");
            result.pod_error = Some(message);
            return Ok(result);
        }
        let host_dns = if self.opts.resolv_conf.as_os_str().is_empty() {
            None
        } else {
            Some(host_dns_config(&self.opts.resolv_conf).await)
        };
        let dns = pod_dns_config(pod, host_dns, &self.opts.cluster_dns, &self.opts.node_ips);
        let hostname = if pod.host_network() {
            String::new()
        } else {
            let fqdn = pod.spec.as_ref().and_then(|s| s.set_hostname_as_fqdn) == Some(true);
            match pod_hostname_and_domain(pod, &self.opts.cluster_dns.domain)
                .and_then(|(h, d)| kernel_hostname(&h, &d, fqdn))
            {
                Ok(h) => h,
                Err(message) => {
                    let e = Error::InvalidSpec {
                        field: "spec.hostname".into(),
                        reason: message.to_string(),
                    };
                    return fail_pod(result, "failed to create pod sandbox", e);
                }
            }
        };
        let runtime_handler = if actions.create_sandbox {
            // Upstream `createPodSandbox`: a RuntimeClass that cannot be resolved fails the
            // sandbox like the runtime's own refusal (`FailedCreatePodSandBox`, retried).
            match crate::runtimeclass::runtime_handler(self.runtime_classes.as_deref(), pod) {
                Ok(handler) => handler,
                Err(e) => {
                    self.metrics.record_pod_started(true);
                    return self.sandbox_failed(pod, result, Error::from(e));
                }
            }
        } else {
            String::new()
        };
        let sandbox_config = PodSandboxConfig {
            runtime_handler,
            pod,
            attempt: actions.attempt,
            hostname,
            dns,
            log_directory: pod_logs_dir(&self.opts.pod_logs_dir, pod),
            cgroup_parent: helper.get_pod_cgroup_parent(pod),
            labels: new_pod_labels(pod),
            annotations: new_pod_annotations(pod),
        };
        let mut pod_ips = status.ips.clone();
        if actions.create_sandbox && actions.sandbox_id.is_some() {
            self.events.event(
                &pod_ref(pod),
                EventType::Normal,
                events::SANDBOX_CHANGED,
                "Pod sandbox changed, it will be killed and re-created.",
            );
        }
        let sandbox_id = if actions.create_sandbox {
            let created = self.create_sandbox(&sandbox_config).await;
            self.metrics.record_pod_started(created.is_err());
            match created {
                Ok((id, ips)) => {
                    result.changed = true;
                    if !pod.host_network() {
                        pod_ips = ips;
                    }
                    id
                }
                Err(e) => return self.sandbox_failed(pod, result, e),
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
        // Ephemeral containers first, so that a failing init container does not keep a
        // debugger out (upstream SyncPod step 5).
        for ec in actions
            .ephemeral_containers_to_start
            .iter()
            .filter_map(|&i| ctx.pod.ephemeral_containers().get(i))
        {
            let c = ephemeral_container_spec(ec);
            let target = ec
                .target_container_name
                .as_deref()
                .filter(|t| !t.is_empty());
            match self
                .start_container(ctx, &c, ContainerType::Ephemeral, target)
                .await
            {
                Ok(()) => {
                    result.changed = true;
                    result.started.push(c.name.clone());
                }
                Err(StartError::Down(e)) => return Err(e),
                Err(failed) => record(result, failed),
            }
        }
        for c in actions
            .init_containers_to_start
            .iter()
            .filter_map(|&i| ctx.pod.init_containers().get(i))
        {
            match self
                .start_container(ctx, c, ContainerType::Init, None)
                .await
            {
                Ok(()) => {
                    result.changed = true;
                    result.started.push(c.name.clone());
                }
                Err(StartError::Down(e)) => return Err(e),
                Err(failed) => {
                    record(result, failed);
                    // A sidecar that cannot start does not hold back the others; a regular
                    // init container that cannot start stops the pod's initialization.
                    if !is_restartable_init_container(c) {
                        return Ok(());
                    }
                }
            }
        }
        for c in actions
            .containers_to_start
            .iter()
            .filter_map(|&i| ctx.pod.containers().get(i))
        {
            match self
                .start_container(ctx, c, ContainerType::Regular, None)
                .await
            {
                Ok(()) => {
                    result.changed = true;
                    result.started.push(c.name.clone());
                }
                Err(StartError::Down(e)) => return Err(e),
                Err(failed) => record(result, failed),
            }
        }
        Ok(())
    }

    /// Creates the pod's log directory and sandbox; returns its ID and pod IPs.
    async fn create_sandbox(&self, config: &PodSandboxConfig<'_>) -> Result<(String, Vec<String>)> {
        let dir = &config.log_directory;
        if let Err(e) = tokio::fs::create_dir_all(dir).await {
            return Err(Error::Runtime {
                op: "RunPodSandbox",
                message: format!("create pod log directory {}: {e}", dir.display()),
            });
        }
        tracing::info!(pod = %config.pod.full_name(), attempt = config.attempt, "creating pod sandbox");
        let id = self.service.run_pod_sandbox(config).await?;
        let status = self.service.pod_sandbox_status(&id).await?;
        Ok((id, status.ips))
    }

    /// Pulls, creates and starts one container and runs its postStart hook (upstream
    /// `startContainer`); a failure before the hook is also recorded as a `Failed` event
    /// with `Error: <message>` (upstream `recordContainerEvent`). `target` is an ephemeral
    /// container's `targetContainerName`.
    async fn start_container(
        &self,
        ctx: &StartContext<'_>,
        container: &Container,
        container_type: ContainerType,
        target: Option<&str>,
    ) -> Result<(), StartError> {
        let reference = container_ref(ctx.pod, container);
        let result = self
            .create_and_start(ctx, container, container_type, target, &reference)
            .await;
        match &result {
            Err(StartError::Container(e)) if e.reason != POST_START_HOOK_ERROR => {
                self.events.event(
                    &reference,
                    EventType::Warning,
                    events::FAILED_TO_CREATE_CONTAINER,
                    &format!("Error: {}", failed_event_message(e)),
                );
            }
            Err(StartError::Backoff(e, _)) if e.reason == IMAGE_PULL_BACK_OFF => {
                self.events.event(
                    &reference,
                    EventType::Warning,
                    events::FAILED_TO_CREATE_CONTAINER,
                    &format!("Error: {}", e.reason),
                );
            }
            _ => {}
        }
        result
    }

    async fn create_and_start(
        &self,
        ctx: &StartContext<'_>,
        container: &Container,
        container_type: ContainerType,
        target: Option<&str>,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
    ) -> Result<(), StartError> {
        let pod = ctx.pod;
        if let Some(refused) =
            check_backoff(pod, container, ctx.status, ctx.backoff, crate::time::now())
        {
            self.events.event(
                reference,
                EventType::Warning,
                events::BACK_OFF_START_CONTAINER,
                &format!(
                    "Back-off restarting failed container {} in pod {}",
                    container.name,
                    format_pod(pod)
                ),
            );
            return Err(StartError::Backoff(refused.error, refused.retry_after));
        }
        // Upstream counts every start past the restart backoff, and each failure by its
        // reason; a runtime that is down aborts the sync uncounted as an error.
        let result = self
            .pull_create_start(ctx, container, container_type, target, reference)
            .await;
        let code = match &result {
            Err(StartError::Container(e) | StartError::Backoff(e, _)) => Some(e.reason.as_str()),
            _ => None,
        };
        self.metrics
            .record_container_started(container_type.metric_label(), code);
        result
    }

    /// Pulls the image, creates and starts the container and runs its postStart hook.
    async fn pull_create_start(
        &self,
        ctx: &StartContext<'_>,
        container: &Container,
        container_type: ContainerType,
        target: Option<&str>,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
    ) -> Result<(), StartError> {
        let pod = ctx.pod;
        let image_events = ImageEvents {
            recorder: self.events.as_ref(),
            object: reference,
        };
        let image_ref = ensure_image_exists(
            self.service.as_ref(),
            &self.image_backoff,
            pod,
            ctx.helper,
            container,
            ctx.sandbox_config,
            &image_events,
            self.credential_providers.as_deref(),
        )
        .await
        .map_err(|e| match e {
            EnsureError::Container { reason, message } => {
                container_error(container, reason, message)
            }
            EnsureError::Backoff {
                message,
                retry_after,
            } => StartError::Backoff(
                ContainerSyncError {
                    container: container.name.clone(),
                    reason: IMAGE_PULL_BACK_OFF.to_owned(),
                    message,
                },
                retry_after,
            ),
            EnsureError::Unavailable(e) => StartError::Down(e),
        })?;
        // Upstream `getTargetID`: the target must be running now.
        let target_id = match target {
            None => None,
            Some(name) => Some(
                ctx.status
                    .container(name)
                    .filter(|s| s.state == ContainerState::Running)
                    .map(|s| s.id.as_str())
                    .ok_or_else(|| {
                        container_error(
                            container,
                            CREATE_CONTAINER_CONFIG_ERROR,
                            format!("unable to find target container {name}"),
                        )
                    })?,
            ),
        };
        let mut opts = ctx
            .helper
            .generate_run_container_options(pod, container, ctx.pod_ips)
            .await
            .map_err(|e| {
                container_error(container, CREATE_CONTAINER_CONFIG_ERROR, e.to_string())
            })?;
        // Upstream `getImageUser` and `verifyRunAsNonRoot` in `generateContainerConfig`.
        let image = self
            .service
            .image_status(&image_ref)
            .await
            .map_err(|e| classify(container, CREATE_CONTAINER_CONFIG_ERROR, e))?;
        let user = image_user(image.as_ref());
        verify_run_as_non_root(pod, container, &user).map_err(|e| {
            container_error(container, CREATE_CONTAINER_CONFIG_ERROR, e.to_string())
        })?;
        opts.mounts
            .extend(self.termination_log_mount(pod, container).await);

        let logs_dir = container_logs_dir(&ctx.sandbox_config.log_directory, &container.name);
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
        let (command, args) = command_and_args(container, &opts.envs);
        let config = ContainerConfig {
            pod,
            container,
            container_type,
            attempt: restart_count,
            image_ref: &image_ref,
            image_user: Some(&user),
            command,
            args,
            envs: opts.envs,
            mounts: opts.mounts,
            working_dir: container.working_dir.clone().unwrap_or_default(),
            log_path: container_log_path(&container.name, restart_count),
            labels: new_container_labels(container, pod),
            annotations: new_container_annotations(container, pod, restart_count, container_type),
            sandbox: ctx.sandbox_config,
            target_container_id: target_id,
        };
        tracing::debug!(
            pod = %pod.full_name(),
            container = %container.name,
            restart_count,
            "starting container"
        );
        let id = self
            .service
            .create_container(ctx.sandbox_id, &config)
            .await
            .map_err(|e| classify(container, CREATE_CONTAINER_ERROR, e))?;
        self.events.event(
            reference,
            EventType::Normal,
            events::CREATED_CONTAINER,
            &format!("Created container {}", container.name),
        );
        self.service
            .start_container(&id)
            .await
            .map_err(|e| classify(container, RUN_CONTAINER_ERROR, e))?;
        self.link_container_log(
            pod,
            container,
            &id,
            &ctx.sandbox_config.log_directory,
            restart_count,
        )
        .await;
        self.events.event(
            reference,
            EventType::Normal,
            events::STARTED_CONTAINER,
            &format!("Started container {}", container.name),
        );
        self.run_post_start(pod, container, &id, reference).await
    }

    /// A sandbox that could not be made: upstream's `FailedCreatePodSandBox` event (not while
    /// the runtime is unavailable) and the pod's sync error.
    fn sandbox_failed(&self, pod: &Pod, result: PodSyncResult, e: Error) -> Result<PodSyncResult> {
        if !matches!(e, Error::Unavailable(_)) {
            self.events.event(
                &pod_ref(pod),
                EventType::Warning,
                events::FAILED_CREATE_POD_SANDBOX,
                &format!("Failed to create pod sandbox: {e}"),
            );
        }
        fail_pod(result, "failed to create pod sandbox", e)
    }

    /// The `/var/log/containers` symlink to a started container's log (upstream
    /// `startContainer`: made only when the log exists, so no dangling link; a failure is
    /// logged, the container keeps running).
    async fn link_container_log(
        &self,
        pod: &Pod,
        container: &Container,
        id: &str,
        pod_log_dir: &std::path::Path,
        restart_count: u32,
    ) {
        let Some(dir) = &self.opts.container_log_links_dir else {
            return;
        };
        let log = pod_log_dir.join(container_log_path(&container.name, restart_count));
        let link = legacy_log_symlink(
            dir,
            pod.name_or_empty(),
            pod.namespace_or_default(),
            &container.name,
            id,
        );
        if tokio::fs::metadata(&log).await.is_err() {
            return;
        }
        let made = async {
            tokio::fs::create_dir_all(dir).await?;
            tokio::fs::symlink(&log, &link).await
        };
        if let Err(e) = made.await {
            tracing::warn!(error = %e, path = %link.display(), "cannot create the container log symlink");
        }
    }

    /// A fresh termination message file mounted at the container's `terminationMessagePath`
    /// (upstream `makeMounts`); `None` (logged) when it cannot be created.
    async fn termination_log_mount(&self, pod: &Pod, container: &Container) -> Option<Mount> {
        let container_path = termination_message_path(container)?;
        let root = self.opts.root_dir.as_ref()?;
        let pod_dir = root.join("pods").join(pod.uid().as_str());
        match create_termination_log(&pod_dir, &container.name).await {
            Ok(host_path) => Some(Mount {
                host_path,
                container_path: container_path.to_owned(),
                read_only: false,
                ..Mount::default()
            }),
            Err(e) => {
                tracing::warn!(pod = %pod.full_name(), container = %container.name, error = %e, "failed to create the termination message file");
                None
            }
        }
    }

    /// Runs the container's postStart hook; a failing one kills the container (upstream
    /// `startContainer` step 4) and is reported as `PostStartHookError`.
    async fn run_post_start(
        &self,
        pod: &Pod,
        container: &Container,
        id: &str,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
    ) -> Result<(), StartError> {
        let Some(handler) = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref())
        else {
            return Ok(());
        };
        let target = HookTarget {
            pod,
            container,
            container_id: id,
        };
        let Err(error) = self.hooks.run(self, target, handler).await else {
            return Ok(());
        };
        let message = error.to_string();
        tracing::warn!(pod = %pod.full_name(), container = %container.name, %message, "postStart hook failed");
        self.events.event(
            reference,
            EventType::Warning,
            events::FAILED_POST_START_HOOK,
            &message,
        );
        if let Err(e) = self
            .kill_container(
                Some(pod),
                id,
                &container.name,
                None,
                FAILED_POST_START_HOOK,
                None,
            )
            .await
        {
            tracing::warn!(pod = %pod.full_name(), container = %container.name, error = %e, "failed to kill container after its postStart hook failed");
        }
        Err(container_error(container, POST_START_HOOK_ERROR, message))
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
        match self.service.remove_container(id).await {
            Err(e) if !matches!(e, Error::NotFound(_)) => {
                tracing::warn!(container = name, id, error = %e, "failed to remove init container");
            }
            _ => {}
        }
    }
}

/// What upstream's `Failed` event says after `Error: `: for image failures the error's name
/// (`ErrImagePull`, `InvalidImageName`, …), for the others the message.
fn failed_event_message(e: &ContainerSyncError) -> &str {
    match e.reason.as_str() {
        ERR_IMAGE_PULL | ERR_IMAGE_NEVER_PULL | INVALID_IMAGE_NAME | IMAGE_INSPECT_ERROR => {
            &e.reason
        }
        _ => &e.message,
    }
}

/// Adds a per-container failure to a sync result.
fn record(result: &mut PodSyncResult, failed: StartError) {
    match failed {
        StartError::Container(e) => result.container_errors.push(e),
        StartError::Backoff(e, after) => {
            result.container_errors.push(e);
            result.retry_after(after);
        }
        StartError::Down(e) => result.pod_error = Some(e.to_string()),
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
