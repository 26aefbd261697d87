//! The pod engine's garbage collection: dead containers, dead sandboxes and pod log
//! directories.
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/kuberuntime_gc.go` (`containerGC`):
//!
//! 1. `evictContainers`: every container that is not running and was created more than
//!    `min_age` ago is grouped by (pod UID, container name); once all sources are ready,
//!    every group of a pod whose content may go is removed whole; then each group keeps its
//!    `max_per_pod_container` newest (the newest dead container stays for the restart count
//!    and `kubectl logs --previous`); then, over `max_containers` in total, every group is
//!    cut to an equal share (at least one) and the oldest go until the total fits. Newest is
//!    the highest attempt, then the latest creation. A container in an unknown state is
//!    stopped before it is removed; a removal takes the container's log files with it.
//! 2. `evictSandboxes`: a sandbox is active while it is ready or still has containers; of
//!    a pod whose content may go every inactive sandbox is removed, otherwise all but the
//!    newest (stopped first, then removed).
//! 3. `evictPodLogsDirectories`: once all sources are ready, the log directory
//!    (`<ns>_<name>_<uid>`) of every pod whose content may go.
//!
//! Departures: objects without our pod UID label are never touched (upstream would group
//! them under an empty UID); the `/var/log/containers` symlinks go with their containers
//! (`remove_container_and_log`, `remove`), and upstream's sweep of dangling ones (left by
//! kubelets that did not remove them) is not done; a pod log root that does not exist is
//! nothing to collect.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use futures::future::join_all;
use k8s_openapi::jiff::Timestamp;

use super::api::{ContainerFilter, PodSandboxFilter};
use super::kill::{combine, ok_if_not_found};
use super::labels::{
    CONTAINER_NAME_LABEL, CONTAINER_RESTART_COUNT_ANNOTATION, ContainerLabels, SandboxLabels,
};
use super::manager::KubeRuntimeManager;
use super::service::RuntimeService;
use crate::container_gc::{PodStateProvider, Policy};
use crate::pod::PodUid;
use crate::runtime::{ContainerState, Error, Result, SandboxState};

/// One dead container considered for removal (upstream `containerGCInfo`).
#[derive(Clone, Debug)]
struct ContainerInfo {
    id: String,
    name: String,
    created_at: Option<Timestamp>,
    attempt: u32,
    unknown: bool,
}

/// One sandbox considered for removal (upstream `sandboxGCInfo`).
#[derive(Clone, Debug)]
struct SandboxInfo {
    id: String,
    created_at: Option<Timestamp>,
    attempt: u32,
    active: bool,
}

/// Newest first: the highest attempt, then the latest creation (upstream `byAttempt`).
fn newest_first_containers(containers: &mut [ContainerInfo]) {
    containers.sort_by(|a, b| {
        b.attempt
            .cmp(&a.attempt)
            .then(b.created_at.cmp(&a.created_at))
    });
}

fn newest_first_sandboxes(sandboxes: &mut [SandboxInfo]) {
    sandboxes.sort_by(|a, b| {
        b.attempt
            .cmp(&a.attempt)
            .then(b.created_at.cmp(&a.created_at))
    });
}

/// (pod UID, container name): the unit `max_per_pod_container` counts in.
type EvictUnit = (PodUid, String);

/// The pod UID at the end of a pod log directory name `<ns>_<name>_<uid>` (upstream
/// `parsePodUIDFromLogsDirectory`).
fn pod_uid_from_logs_directory(name: &str) -> PodUid {
    PodUid::from(name.rsplit('_').next().unwrap_or(name))
}

impl<S: RuntimeService> KubeRuntimeManager<S> {
    /// One collection (upstream `containerGC.GarbageCollect`; see the [module docs](self)).
    pub(super) async fn collect_garbage(
        &self,
        policy: Policy,
        all_sources_ready: bool,
        evict_non_deleted_pods: bool,
        pods: &dyn PodStateProvider,
    ) -> Result<()> {
        let mut errors = Vec::new();
        if let Err(e) = self
            .evict_containers(policy, all_sources_ready, evict_non_deleted_pods, pods)
            .await
        {
            errors.push(e);
        }
        if let Err(e) = self.evict_sandboxes(evict_non_deleted_pods, pods).await {
            errors.push(e);
        }
        if let Err(e) = self
            .evict_pod_logs_directories(all_sources_ready, pods)
            .await
        {
            errors.push(e);
        }
        combine("GarbageCollect", errors)
    }

    /// `true` when everything of the pod may go in this collection.
    fn pod_may_go(pods: &dyn PodStateProvider, uid: &PodUid, evict_non_deleted: bool) -> bool {
        pods.should_pod_content_be_removed(uid)
            || (evict_non_deleted && pods.should_pod_runtime_be_removed(uid))
    }

    /// Dead containers old enough, by (pod UID, name) (upstream `evictableContainers`).
    async fn evictable_containers(
        &self,
        policy: Policy,
    ) -> Result<HashMap<EvictUnit, Vec<ContainerInfo>>> {
        let containers = self
            .service
            .list_containers(&ContainerFilter::default())
            .await?;
        let now = crate::time::now();
        let mut units: HashMap<EvictUnit, Vec<ContainerInfo>> = HashMap::new();
        for c in containers {
            if c.state == ContainerState::Running {
                continue;
            }
            // Created before `now - min_age` (a creation time in the future is not).
            let old_enough = c.created_at.is_none_or(|created| {
                let age = now.duration_since(created);
                !age.is_negative() && age.unsigned_abs() >= policy.min_age
            });
            if !old_enough {
                continue;
            }
            let Some(labels) = ContainerLabels::parse(&c.labels) else {
                continue;
            };
            let name = match c.labels.get(CONTAINER_NAME_LABEL) {
                Some(n) if !n.is_empty() => n.clone(),
                _ => c.name.clone(),
            };
            let attempt = c
                .annotations
                .get(CONTAINER_RESTART_COUNT_ANNOTATION)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            units
                .entry((labels.pod_uid, name.clone()))
                .or_default()
                .push(ContainerInfo {
                    id: c.id,
                    name,
                    created_at: c.created_at,
                    attempt,
                    unknown: c.state == ContainerState::Unknown,
                });
        }
        Ok(units)
    }

    /// Removes the oldest `to_remove` of `containers` and returns those kept (upstream
    /// `removeOldestN`): failures are logged, and the removed count as gone either way.
    async fn remove_oldest_n(
        &self,
        mut containers: Vec<ContainerInfo>,
        to_remove: usize,
    ) -> Vec<ContainerInfo> {
        let keep = containers.len().saturating_sub(to_remove);
        if keep > 0 {
            newest_first_containers(&mut containers);
        }
        for c in containers[keep..].iter().rev() {
            if c.unknown {
                // A container in an unknown state may still run: stop it first.
                if let Err(error) = self
                    .kill_container(
                        None,
                        &c.id,
                        &c.name,
                        None,
                        "Container is in unknown state, try killing it before removal",
                        None,
                    )
                    .await
                {
                    tracing::error!(%error, container_id = %c.id, "Failed to stop container");
                    continue;
                }
            }
            tracing::debug!(container_id = %c.id, name = %c.name, "removing dead container");
            if let Err(error) = self.remove_container_and_log(&c.id).await {
                tracing::error!(%error, container_id = %c.id, "Failed to remove container");
            }
        }
        containers.truncate(keep);
        containers
    }

    /// Upstream `evictContainers`.
    async fn evict_containers(
        &self,
        policy: Policy,
        all_sources_ready: bool,
        evict_non_deleted: bool,
        pods: &dyn PodStateProvider,
    ) -> Result<()> {
        let mut units = self.evictable_containers(policy).await?;
        if all_sources_ready {
            let gone: Vec<EvictUnit> = units
                .keys()
                .filter(|(uid, _)| Self::pod_may_go(pods, uid, evict_non_deleted))
                .cloned()
                .collect();
            for key in gone {
                if let Some(unit) = units.remove(&key) {
                    let n = unit.len();
                    self.remove_oldest_n(unit, n).await;
                }
            }
        }
        if let Ok(max) = usize::try_from(policy.max_per_pod_container) {
            self.enforce_max_per_unit(&mut units, max).await;
        }
        let Ok(max_total) = usize::try_from(policy.max_containers) else {
            return Ok(());
        };
        let total: usize = units.values().map(Vec::len).sum();
        if total <= max_total {
            return Ok(());
        }
        // An equal share per unit (at least one), then the oldest overall.
        let share = (max_total / units.len().max(1)).max(1);
        self.enforce_max_per_unit(&mut units, share).await;
        let flattened: Vec<ContainerInfo> = units.into_values().flatten().collect();
        if flattened.len() > max_total {
            let n = flattened.len() - max_total;
            self.remove_oldest_n(flattened, n).await;
        }
        Ok(())
    }

    /// Cuts every unit to its `max` newest (upstream `enforceMaxContainersPerEvictUnit`).
    async fn enforce_max_per_unit(
        &self,
        units: &mut HashMap<EvictUnit, Vec<ContainerInfo>>,
        max: usize,
    ) {
        for unit in units.values_mut() {
            if unit.len() > max {
                let n = unit.len() - max;
                *unit = self.remove_oldest_n(std::mem::take(unit), n).await;
            }
        }
    }

    /// Upstream `evictSandboxes`.
    async fn evict_sandboxes(
        &self,
        evict_non_deleted: bool,
        pods: &dyn PodStateProvider,
    ) -> Result<()> {
        if !self.service.has_sandboxes() {
            return Ok(());
        }
        let (container_filter, sandbox_filter) =
            (ContainerFilter::default(), PodSandboxFilter::default());
        let (containers, sandboxes) = tokio::try_join!(
            self.service.list_containers(&container_filter),
            self.service.list_pod_sandbox(&sandbox_filter),
        )?;
        let with_containers: HashSet<&str> =
            containers.iter().map(|c| c.sandbox_id.as_str()).collect();
        let mut by_pod: HashMap<PodUid, Vec<SandboxInfo>> = HashMap::new();
        for s in &sandboxes {
            let Some(labels) = SandboxLabels::parse(&s.labels) else {
                continue;
            };
            by_pod.entry(labels.pod_uid).or_default().push(SandboxInfo {
                id: s.id.clone(),
                created_at: s.created_at,
                attempt: s.attempt,
                active: s.state == SandboxState::Ready || with_containers.contains(s.id.as_str()),
            });
        }
        for (uid, mut sandboxes) in by_pod {
            // Keep the newest of a pod that still exists.
            let keep = usize::from(!Self::pod_may_go(pods, &uid, evict_non_deleted));
            if keep > 0 {
                newest_first_sandboxes(&mut sandboxes);
            }
            for s in sandboxes.iter().skip(keep).rev().filter(|s| !s.active) {
                self.remove_sandbox(&s.id).await;
            }
        }
        Ok(())
    }

    /// Stops (in case it was not) and removes a sandbox (upstream `removeSandbox`).
    async fn remove_sandbox(&self, id: &str) {
        tracing::debug!(sandbox_id = id, "removing sandbox");
        if let Err(error) = ok_if_not_found(self.service.stop_pod_sandbox(id).await) {
            tracing::error!(%error, sandbox_id = id, "Failed to stop sandbox before removing");
            return;
        }
        if let Err(error) = ok_if_not_found(self.service.remove_pod_sandbox(id).await) {
            tracing::error!(%error, sandbox_id = id, "Failed to remove sandbox");
        }
    }

    /// Upstream `evictPodLogsDirectories`.
    async fn evict_pod_logs_directories(
        &self,
        all_sources_ready: bool,
        pods: &dyn PodStateProvider,
    ) -> Result<()> {
        if !all_sources_ready {
            return Ok(());
        }
        let root = &self.opts.pod_logs_dir;
        let mut dirs = match tokio::fs::read_dir(root).await {
            Ok(dirs) => dirs,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(read_dir_error(root, &e)),
        };
        let mut gone = Vec::new();
        loop {
            match dirs.next_entry().await {
                Ok(Some(entry)) => {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if pods.should_pod_content_be_removed(&pod_uid_from_logs_directory(&name)) {
                        gone.push(entry.path());
                    }
                }
                Ok(None) => break,
                Err(e) => return Err(read_dir_error(root, &e)),
            }
        }
        join_all(gone.iter().map(|dir| async move {
            tracing::debug!(path = %dir.display(), "removing pod logs");
            if let Err(error) = tokio::fs::remove_dir_all(dir).await
                && error.kind() != std::io::ErrorKind::NotFound
            {
                tracing::error!(%error, path = %dir.display(), "Failed to remove pod logs directory");
            }
        }))
        .await;
        Ok(())
    }
}

fn read_dir_error(root: &Path, e: &std::io::Error) -> Error {
    Error::Runtime {
        op: "GarbageCollect",
        message: format!("failed to read podLogsDirectory {:?}: {e}", root.display()),
    }
}

#[cfg(test)]
#[path = "gc_tests.rs"]
mod tests;
