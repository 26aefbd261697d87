//! The container configuration sent in `CreateContainer`, log paths, restart counts and
//! grace periods.
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/kuberuntime_container.go`
//! (`generateContainerConfig`, `makeMounts`, `calcRestartCountByLogDir`, the grace period
//! logic of `killContainer`), `helpers.go` (`buildContainerLogsPath`) and
//! `pkg/kubelet/container/helpers.go` (`ExpandContainerCommandAndArgs`) with the `$(VAR)`
//! expansion of `third_party/forked/golang/expansion`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_core::runtime::RunContainerOptions;

use crate::convert;
use crate::labels::{ContainerType, new_container_annotations, new_container_labels};
use crate::sandbox::namespace_options;

/// Upstream `minimumGracePeriodInSeconds`: a minimal shutdown window to avoid needless SIGKILLs.
pub const MINIMUM_GRACE_PERIOD_SECONDS: i64 = 2;

/// Grace period when neither the pod nor the container says anything (the API default).
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;

/// `<container name>/<restart count>.log`, relative to the sandbox log directory (upstream
/// `buildContainerLogsPath`).
pub fn container_log_path(name: &str, restart_count: u32) -> String {
    format!("{name}/{restart_count}.log")
}

/// `<pod log dir>/<container name>` (upstream `BuildContainerLogsDirectory`).
pub fn container_logs_dir(pod_logs_dir: &Path, name: &str) -> PathBuf {
    pod_logs_dir.join(name)
}

/// The restart count to use when the runtime has no previous instance of the container
/// (e.g. after a node reboot cleared the runtime): one more than the highest `<N>.log` in the
/// container's log directory, or 0 (upstream `calcRestartCountByLogDir`).
pub fn restart_count_from_log_dir(dir: &Path) -> u32 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            let digits = name.split('.').next()?;
            let rest = &name[digits.len()..];
            if digits.is_empty() || !(rest == ".log" || rest.starts_with(".log.")) {
                return None;
            }
            digits.parse::<u32>().ok()?.checked_add(1)
        })
        .max()
        .unwrap_or(0)
}

/// Expands `$(VAR)` references in `input` from `env` (upstream `expansion.Expand` with
/// `MappingFuncFor`): `$$` is an escaped `$`, unknown or unterminated references are kept
/// verbatim.
pub fn expand(input: &str, env: &HashMap<&str, &str>) -> String {
    kubelet_core::expansion::expand(input, |name| env.get(name).map(|v| (*v).to_owned()))
}

/// The CRI command and args of a container (upstream `ExpandContainerCommandAndArgs`):
/// `command` overrides the image entrypoint, `args` the image cmd, both with `$(VAR)`
/// expansion; empty means the image default.
pub fn command_and_args(
    container: &Container,
    envs: &[(String, String)],
) -> (Vec<String>, Vec<String>) {
    let map: HashMap<&str, &str> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let expand_all = |v: &Option<Vec<String>>| -> Vec<String> {
        v.iter().flatten().map(|s| expand(s, &map)).collect()
    };
    (expand_all(&container.command), expand_all(&container.args))
}

fn linux_container_config(
    pod: &Pod,
    security_context: &cri::LinuxContainerSecurityContext,
) -> cri::LinuxContainerConfig {
    cri::LinuxContainerConfig {
        resources: None,
        security_context: Some(cri::LinuxContainerSecurityContext {
            namespace_options: Some(namespace_options(pod)),
            ..security_context.clone()
        }),
    }
}

/// Inputs of [`generate_container_config`].
pub(crate) struct ContainerConfigInput<'a> {
    pub pod: &'a Pod,
    pub container: &'a Container,
    pub container_type: ContainerType,
    pub restart_count: u32,
    /// Image reference returned by the image step (an image ID when known).
    pub image_ref: &'a str,
    pub opts: &'a RunContainerOptions,
    /// From [`crate::security::container_security_context`].
    pub security_context: &'a cri::LinuxContainerSecurityContext,
}

/// The `ContainerConfig` of one container instance (upstream `generateContainerConfig`).
pub(crate) fn generate_container_config(input: &ContainerConfigInput<'_>) -> cri::ContainerConfig {
    let ContainerConfigInput {
        pod,
        container,
        container_type,
        restart_count,
        image_ref,
        opts,
        security_context,
    } = *input;
    let envs = &opts.envs;
    let (command, args) = command_and_args(container, envs);
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: container.name.clone(),
            attempt: restart_count,
        }),
        image: Some(cri::ImageSpec {
            image: image_ref.to_owned(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command,
        args,
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: envs.iter().map(convert::key_value).collect(),
        mounts: opts.mounts.iter().map(convert::mount).collect(),
        labels: new_container_labels(container, pod),
        annotations: new_container_annotations(container, pod, restart_count, container_type),
        log_path: container_log_path(&container.name, restart_count),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(linux_container_config(pod, security_context)),
        ..Default::default()
    }
}

/// The grace period a container's termination starts with (upstream
/// `setTerminationGracePeriod` and the override of `killContainer`): an override as is;
/// otherwise the pod's `deletionGracePeriodSeconds`, else its
/// `terminationGracePeriodSeconds`, else 30 s. (A pod the kubelet no longer knows is
/// restored from the container's annotations first, [`crate::labels::restore_specs`].) The
/// preStop hook's time is taken off this and [`MINIMUM_GRACE_PERIOD_SECONDS`] applied last,
/// when stopping.
pub fn grace_period_seconds(pod: Option<&Pod>, override_seconds: Option<i64>) -> i64 {
    if let Some(o) = override_seconds {
        return o.max(0);
    }
    let from_pod = pod.and_then(|p| {
        p.metadata.deletion_grace_period_seconds.or_else(|| {
            p.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
    });
    from_pod.unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_core::runtime::{Mount, MountPropagation};
    use kubelet_core::testing::pod;

    #[test]
    fn expansion() {
        let env = HashMap::from([("A", "1"), ("B", "two")]);
        assert_eq!(expand("$(A)-$(B)", &env), "1-two");
        assert_eq!(expand("$(C)", &env), "$(C)");
        assert_eq!(expand("$$(A)", &env), "$(A)");
        assert_eq!(expand("cost $5", &env), "cost $5");
        assert_eq!(expand("end$", &env), "end$");
        assert_eq!(expand("$(A", &env), "$(A");
        assert_eq!(expand("é$(A)é$é", &env), "é1é$é");
    }

    #[test]
    fn command_args_semantics() {
        let mut c = Container {
            name: "c".into(),
            ..Default::default()
        };
        assert_eq!(command_and_args(&c, &[]), (vec![], vec![]));
        c.command = Some(vec!["sh".into(), "-c".into()]);
        c.args = Some(vec!["echo $(MSG)".into()]);
        let envs = vec![("MSG".to_owned(), "hi".to_owned())];
        let (cmd, args) = command_and_args(&c, &envs);
        assert_eq!(cmd, ["sh", "-c"]);
        assert_eq!(args, ["echo hi"]);
        c.command = None;
        let (cmd, args) = command_and_args(&c, &envs);
        assert!(cmd.is_empty());
        assert_eq!(args, ["echo hi"]);
    }

    #[test]
    fn container_config() {
        let mut p = pod("web");
        let c = {
            let spec = p.spec.as_mut().expect("spec");
            let c = &mut spec.containers[0];
            c.working_dir = Some("/work".into());
            c.tty = Some(true);
            c.clone()
        };
        let opts = RunContainerOptions {
            envs: vec![("X".into(), "1".into())],
            mounts: vec![
                Mount {
                    host_path: "/var/lib/kubelet/pods/uid-web/volumes/data".into(),
                    container_path: "/data".into(),
                    read_only: true,
                    ..Default::default()
                },
                Mount {
                    host_path: "/mnt/shared".into(),
                    container_path: "/shared".into(),
                    read_only: false,
                    propagation: MountPropagation::Bidirectional,
                },
                Mount {
                    host_path: "/mnt/slave".into(),
                    container_path: "/slave".into(),
                    read_only: false,
                    propagation: MountPropagation::HostToContainer,
                },
            ],
            hostname: "web".into(),
        };
        let cfg = generate_container_config(&ContainerConfigInput {
            pod: &p,
            container: &c,
            container_type: ContainerType::Regular,
            restart_count: 2,
            image_ref: "sha256:123",
            opts: &opts,
            security_context: &cri::LinuxContainerSecurityContext {
                run_as_user: Some(cri::Int64Value { value: 1000 }),
                ..Default::default()
            },
        });
        assert_eq!(cfg.log_path, "app/2.log");
        assert_eq!(cfg.metadata.as_ref().map(|m| m.attempt), Some(2));
        assert_eq!(cfg.command, ["sleep", "3600"]);
        assert_eq!(cfg.working_dir, "/work");
        assert!(cfg.tty);
        assert_eq!(cfg.mounts[0].container_path, "/data");
        assert!(cfg.mounts[0].readonly);
        let propagation: Vec<_> = cfg.mounts.iter().map(|m| m.propagation()).collect();
        assert_eq!(
            propagation,
            [
                cri::MountPropagation::PropagationPrivate,
                cri::MountPropagation::PropagationBidirectional,
                cri::MountPropagation::PropagationHostToContainer
            ]
        );
        assert_eq!(cfg.envs[0].key, "X");
        let sc = cfg.linux.and_then(|l| l.security_context).expect("sc");
        assert_eq!(sc.run_as_user, Some(cri::Int64Value { value: 1000 }));
        assert!(sc.namespace_options.is_some());
        let img = cfg.image.as_ref().expect("image");
        assert_eq!(
            (img.image.as_str(), img.user_specified_image.as_str()),
            ("sha256:123", "busybox:1.36")
        );
    }

    #[test]
    fn restart_count_from_logs() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(restart_count_from_log_dir(&dir.path().join("missing")), 0);
        assert_eq!(restart_count_from_log_dir(dir.path()), 0);
        for f in [
            "0.log",
            "3.log",
            "7.log.20240101-000000.gz",
            "x.log",
            "12.txt",
        ] {
            std::fs::write(dir.path().join(f), b"").expect("write");
        }
        std::fs::create_dir(dir.path().join("99.log")).expect("mkdir");
        assert_eq!(restart_count_from_log_dir(dir.path()), 8);
    }

    #[test]
    fn grace_periods() {
        let mut p = pod("web");
        assert_eq!(grace_period_seconds(Some(&p), None), 30);
        if let Some(s) = p.spec.as_mut() {
            s.termination_grace_period_seconds = Some(10);
        }
        assert_eq!(grace_period_seconds(Some(&p), None), 10);
        p.metadata.deletion_grace_period_seconds = Some(0);
        assert_eq!(grace_period_seconds(Some(&p), None), 0);
        assert_eq!(grace_period_seconds(Some(&p), Some(0)), 0);
        assert_eq!(grace_period_seconds(Some(&p), Some(1)), 1);
        assert_eq!(grace_period_seconds(None, None), 30);
    }
}
