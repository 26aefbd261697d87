//! Stopping and removing containers and sandboxes.
//!
//! Mirrors upstream `killPodWithSyncResult`, `killContainersWithSyncResult` and
//! `killContainer` of `pkg/kubelet/kuberuntime` (containers are stopped concurrently, sidecars
//! last, then the sandboxes; preStop hooks first, see `graceful`; `NotFound` is
//! success), and the removal half of its garbage collector (`kuberuntime_gc.go`:
//! `removeContainer`, `removeSandbox`, pod log directories) for pods that are gone.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Container, Pod};

use super::container::legacy_log_symlink;
use super::graceful::{TerminationOrdering, stop_gracefully};
use super::labels::{ContainerLabels, restore_specs};
use super::manager::KubeRuntimeManager;
use super::service::RuntimeService;
use crate::events::{EventType, container_ref_by_name, reasons as events};
use crate::lifecycle::HookTarget;
use crate::pod::{PodExt, container_grace_period_seconds};
use crate::runtime::{ContainerState, Error, Result, RunningPod};

fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::NotFound(_))
}

/// Folds several failures into one error: `Unavailable` if any call found the runtime down,
/// else the single error, else a `Runtime` error listing them.
pub(super) fn combine(op: &'static str, mut errors: Vec<Error>) -> Result<()> {
    if let Some(i) = errors
        .iter()
        .position(|e| matches!(e, Error::Unavailable(_)))
    {
        return Err(errors.swap_remove(i));
    }
    match errors.len() {
        0 => return Ok(()),
        1 => return Err(errors.swap_remove(0)),
        _ => {}
    }
    Err(Error::Runtime {
        op,
        message: errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
    })
}

pub(super) fn ok_if_not_found(r: Result<()>) -> Result<()> {
    match r {
        Err(e) if is_not_found(&e) => Ok(()),
        r => r,
    }
}

/// `true` for a single normal path component (no separator, not `.` or `..`).
fn is_plain_name(name: &str) -> bool {
    let mut components = Path::new(name).components();
    matches!(
        (components.next(), components.next()),
        (Some(std::path::Component::Normal(_)), None)
    )
}

/// `true` when `path` is strictly inside `root` without `..` components.
fn is_under(path: &Path, root: &Path) -> bool {
    path.starts_with(root)
        && path != root
        && !path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

async fn remove_path(path: &Path, dir: bool) {
    let r = if dir {
        tokio::fs::remove_dir_all(path).await
    } else {
        tokio::fs::remove_file(path).await
    };
    if let Err(e) = r
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "failed to remove log path");
    }
}

/// The spec of the container called `name` in `pod` (app or init container).
fn container_spec<'a>(pod: Option<&'a Pod>, name: &str) -> Option<&'a Container> {
    let pod = pod?;
    pod.containers()
        .iter()
        .chain(pod.init_containers())
        .find(|c| c.name == name)
}

impl<S: RuntimeService> KubeRuntimeManager<S> {
    /// Stops one container (upstream `killContainer`): without `pod`, the pod and container
    /// are restored from the container's labels and annotations first (a `ContainerStatus`
    /// call, [`restore_specs`]); the grace period comes from `grace_override`, else the pod
    /// (`deletionGracePeriodSeconds`, then `terminationGracePeriodSeconds`); the container's
    /// preStop hook runs first and its time is taken off; a sidecar waits for its turn in `ordering`; `StopContainer` gets what is left, at
    /// least 2 s.
    ///
    /// Cancel safe. A preStop hook that was started by a cancelled call is not run again by
    /// the next one: that call stops the container with its (shorter) grace period at once.
    pub(super) async fn kill_container(
        &self,
        pod: Option<&Pod>,
        id: &str,
        name: &str,
        grace_override: Option<i64>,
        reason: &str,
        ordering: Option<&TerminationOrdering>,
    ) -> Result<()> {
        // A pod the kubelet no longer knows (e.g. removed while it was down): what stopping
        // needs comes back from the container's labels and annotations.
        let restored = match pod {
            Some(_) => None,
            None => match self.service.container_status(id).await {
                Ok(s) => restore_specs(&s.labels, &s.annotations),
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) => return Err(e),
            },
        };
        let (pod, spec) = match &restored {
            Some((pod, container)) => (Some(pod), Some(container)),
            None => (pod, container_spec(pod, name)),
        };
        let grace = container_grace_period_seconds(pod, grace_override);
        tracing::info!(container = name, id, grace, reason, "killing container");
        let reference = pod.map(|pod| container_ref_by_name(pod, name));
        if let Some(reference) = &reference {
            let message = if reason.is_empty() {
                format!("Stopping container {name}")
            } else {
                reason.to_owned()
            };
            self.events.event(
                reference,
                EventType::Normal,
                events::KILLING_CONTAINER,
                &message,
            );
        }
        let pre_stop = match (pod, spec) {
            (Some(pod), Some(spec)) => spec
                .lifecycle
                .as_ref()
                .and_then(|l| l.pre_stop.as_ref())
                .filter(|_| self.first_pre_stop(id))
                .map(|handler| async move {
                    let target = HookTarget {
                        pod,
                        container: spec,
                        container_id: id,
                    };
                    if let Err(error) = self.hooks.run(self, target, handler).await {
                        tracing::warn!(container = name, id, %error, "preStop hook failed");
                        self.events.event(
                            &container_ref_by_name(pod, name),
                            EventType::Warning,
                            events::FAILED_PRE_STOP_HOOK,
                            &error.to_string(),
                        );
                    }
                }),
            _ => None,
        };
        let result = stop_gracefully(
            grace,
            pre_stop,
            ordering.map(|o| (o, name)),
            |grace| async move {
                tracing::debug!(container = name, id, grace, "stopping container");
                ok_if_not_found(self.service.stop_container(id, grace).await)
            },
        )
        .await;
        if result.is_ok() {
            self.forget_pre_stop(id);
            // The runtime shows the container stopped from now on: its exit is not needed.
            self.observed_exits.forget(id);
        }
        result
    }

    /// Records that the preStop hook of container `id` starts now; `false` when it was
    /// started before (by a kill that was cancelled).
    fn first_pre_stop(&self, id: &str) -> bool {
        self.pre_stop_started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_owned())
    }

    fn forget_pre_stop(&self, id: &str) {
        self.pre_stop_started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    /// Stops every container that may still run, concurrently (sidecars after the app
    /// containers, in reverse order), then every sandbox (upstream `killPodWithSyncResult`).
    pub(super) async fn kill(
        &self,
        pod: Option<&Pod>,
        running: &RunningPod,
        grace_override: Option<i64>,
    ) -> Result<()> {
        let live: Vec<_> = running
            .containers
            .iter()
            .filter(|c| c.state != ContainerState::Exited)
            .collect();
        let names: HashSet<&str> = live.iter().map(|c| c.name.as_str()).collect();
        let ordering = pod.and_then(|p| TerminationOrdering::for_pod(p, &names));
        let kills = live.iter().map(|c| {
            self.kill_container(pod, &c.id, &c.name, grace_override, "", ordering.as_ref())
        });
        let mut errors: Vec<Error> = join_all(kills)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        // All sandboxes, ready or not: stopping also releases the network (upstream does the
        // same; the sandboxes are removed later).
        for s in &running.sandboxes {
            if let Err(e) = ok_if_not_found(self.service.stop_pod_sandbox(&s.id).await) {
                errors.push(e);
            }
        }
        combine("KillPod", errors)
    }

    /// Removes a container and its log files, the rotated ones included (upstream
    /// `removeContainer`, `removeContainerLog` and the log manager's `Clean`: `<log>*`), only
    /// when the runtime reports a log under our pod log root: the path comes from the
    /// runtime.
    pub(super) async fn remove_container_and_log(&self, id: &str) -> Result<()> {
        match self.service.container_status(id).await {
            Ok(s) => {
                let log = Path::new(&s.log_path);
                if let (Some(dir), Some(info)) = (
                    &self.opts.container_log_links_dir,
                    ContainerLabels::parse(&s.labels),
                ) {
                    // Upstream `removeContainerLog`: the legacy symlink goes with the container.
                    let link = legacy_log_symlink(
                        dir,
                        &info.pod_name,
                        &info.pod_namespace,
                        &info.container_name,
                        id,
                    );
                    remove_path(&link, false).await;
                }
                if is_under(log, &self.opts.pod_logs_dir) {
                    let owned = log.to_owned();
                    let rotated = tokio::task::spawn_blocking(move || {
                        crate::logs::files::rotated_candidates(&owned)
                    })
                    .await
                    .ok()
                    .and_then(std::result::Result::ok)
                    .unwrap_or_default();
                    for path in rotated.iter().map(PathBuf::as_path).chain([log]) {
                        remove_path(path, false).await;
                    }
                }
            }
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        }
        self.observed_exits.forget(id);
        ok_if_not_found(self.service.remove_container(id).await)
    }

    /// Removes every container, then every sandbox, then the pod's log directory.
    pub(super) async fn remove(&self, running: &RunningPod) -> Result<()> {
        let removals = running.containers.iter().map(|c| async {
            let removed = ok_if_not_found(self.service.remove_container(&c.id).await);
            if removed.is_ok()
                && let Some(dir) = &self.opts.container_log_links_dir
            {
                let link =
                    legacy_log_symlink(dir, &running.name, &running.namespace, &c.name, &c.id);
                remove_path(&link, false).await;
            }
            removed
        });
        let mut errors: Vec<Error> = join_all(removals)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        for s in &running.sandboxes {
            if let Err(e) = ok_if_not_found(self.service.remove_pod_sandbox(&s.id).await) {
                errors.push(e);
            }
        }
        // The names come from runtime labels: only a plain directory name is removed.
        let dir_name = format!("{}_{}_{}", running.namespace, running.name, running.uid);
        if errors.is_empty() && !running.uid.as_str().is_empty() && is_plain_name(&dir_name) {
            remove_path(&self.opts.pod_logs_dir.join(dir_name), true).await;
        }
        combine("RemovePod", errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_safe_log_paths_are_removed() {
        assert!(is_plain_name("default_web_uid-1"));
        assert!(!is_plain_name("default_../../etc_x"));
        assert!(!is_plain_name(".."));
        assert!(!is_plain_name(""));
        let root = Path::new("/var/log/pods");
        assert!(is_under(Path::new("/var/log/pods/ns_p_u/app/0.log"), root));
        assert!(!is_under(Path::new("/var/log/pods/../../etc/passwd"), root));
        assert!(!is_under(Path::new("/etc/passwd"), root));
        assert!(!is_under(root, root));
    }

    #[test]
    fn combine_prefers_unavailable() {
        assert!(combine("X", vec![]).is_ok());
        let e = combine(
            "X",
            vec![
                Error::Runtime {
                    op: "StopContainer",
                    message: "a".into(),
                },
                Error::Unavailable("down".into()),
            ],
        )
        .expect_err("err");
        assert!(matches!(e, Error::Unavailable(_)));
        let e = combine(
            "X",
            vec![
                Error::NotFound("a".into()),
                Error::Runtime {
                    op: "StopPodSandbox",
                    message: "b".into(),
                },
            ],
        )
        .expect_err("err");
        assert!(matches!(e, Error::Runtime { op: "X", ref message } if message.contains("b")));
    }
}
