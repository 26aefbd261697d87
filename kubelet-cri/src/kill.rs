//! Stopping and removing containers and sandboxes.
//!
//! Mirrors upstream `killPodWithSyncResult`, `killContainersWithSyncResult` and
//! `killContainer` of `pkg/kubelet/kuberuntime` (containers are stopped concurrently, then the
//! sandboxes; `NotFound` is success), and the removal half of its garbage collector
//! (`kuberuntime_gc.go`: `removeContainer`, `removeSandbox`, pod log directories) for pods that
//! are gone. PreStop hooks are not run yet.

use std::path::Path;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kubelet_core::runtime::{ContainerState, Error, Result, RunningPod};

use crate::container::grace_period_seconds;
use crate::error::is_not_found;
use crate::labels::ContainerAnnotations;
use crate::runtime::RemoteRuntime;

/// Folds several failures into one error: `Unavailable` if any call found the runtime down,
/// else the single error, else a `Runtime` error listing them.
fn combine(op: &'static str, mut errors: Vec<Error>) -> Result<()> {
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

fn ok_if_not_found(r: Result<()>) -> Result<()> {
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

impl RemoteRuntime {
    /// Stops one container (upstream `killContainer` without hooks). Without a pod and an
    /// override, the grace period comes from the container's annotations, which costs a
    /// `ContainerStatus` call.
    pub(crate) async fn kill_container(
        &self,
        pod: Option<&Pod>,
        id: &str,
        name: &str,
        grace_override: Option<i64>,
        reason: &str,
    ) -> Result<()> {
        let annotations = if pod.is_none() && grace_override.is_none() {
            match self.client.container_status(id).await {
                Ok(s) => Some(ContainerAnnotations::parse(&s.annotations)),
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        let grace = grace_period_seconds(pod, annotations.as_ref(), grace_override);
        tracing::info!(container = name, id, grace, reason, "killing container");
        ok_if_not_found(self.client.stop_container(id, grace).await)
    }

    /// Stops every container that may still run, concurrently, then every sandbox.
    pub(crate) async fn kill(
        &self,
        pod: Option<&Pod>,
        running: &RunningPod,
        grace_override: Option<i64>,
    ) -> Result<()> {
        let kills = running
            .containers
            .iter()
            .filter(|c| c.state != ContainerState::Exited)
            .map(|c| self.kill_container(pod, &c.id, &c.name, grace_override, "Need to kill Pod"));
        let mut errors: Vec<Error> = join_all(kills)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        // All sandboxes, ready or not: stopping also releases the network (upstream does the
        // same; the sandboxes are removed later).
        for s in &running.sandboxes {
            if let Err(e) = ok_if_not_found(self.client.stop_pod_sandbox(&s.id).await) {
                errors.push(e);
            }
        }
        combine("KillPod", errors)
    }

    /// Removes a container and its log file (only when the runtime reports one under our
    /// pod log root: the path comes from the runtime).
    pub(crate) async fn remove_container_and_log(&self, id: &str) -> Result<()> {
        match self.client.container_status(id).await {
            Ok(s) => {
                let log = Path::new(&s.log_path);
                if is_under(log, &self.opts.pod_logs_dir) {
                    remove_path(log, false).await;
                }
            }
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        }
        ok_if_not_found(self.client.remove_container(id).await)
    }

    /// Removes every container, then every sandbox, then the pod's log directory.
    pub(crate) async fn remove(&self, running: &RunningPod) -> Result<()> {
        let removals = running
            .containers
            .iter()
            .map(|c| async { ok_if_not_found(self.client.remove_container(&c.id).await) });
        let mut errors: Vec<Error> = join_all(removals)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        for s in &running.sandboxes {
            if let Err(e) = ok_if_not_found(self.client.remove_pod_sandbox(&s.id).await) {
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
