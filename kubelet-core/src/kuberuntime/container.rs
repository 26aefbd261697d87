//! Log paths, restart counts and the command line of a container instance.
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/kuberuntime_container.go`
//! (`calcRestartCountByLogDir`), `helpers.go` (`buildContainerLogsPath`,
//! `BuildPodLogsDirectory`, `BuildContainerLogsDirectory`) and
//! `pkg/kubelet/container/helpers.go` (`ExpandContainerCommandAndArgs`) with the `$(VAR)`
//! expansion of `third_party/forked/golang/expansion`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::pod::PodExt;

/// `<root>/<namespace>_<name>_<uid>`, the pod's log directory (upstream
/// `BuildPodLogsDirectory`).
pub fn pod_logs_dir(root: &Path, pod: &Pod) -> PathBuf {
    root.join(format!(
        "{}_{}_{}",
        pod.namespace_or_default(),
        pod.name_or_empty(),
        pod.uid()
    ))
}

/// `<container name>/<restart count>.log`, relative to the sandbox log directory (upstream
/// `buildContainerLogsPath`).
pub fn container_log_path(name: &str, restart_count: u32) -> PathBuf {
    PathBuf::from(format!("{name}/{restart_count}.log"))
}

/// The length upstream cuts a log symlink's name at, before `.log` (`logSymlink`).
const MAX_SYMLINK_NAME: usize = 251;

/// `<dir>/<pod>_<namespace>_<container>-<container id>.log`, the symlink to a container's log
/// that log shippers read (upstream `legacyLogSymlink` in `/var/log/containers`; the name is
/// cut at 251 characters before `.log`, as upstream).
pub fn legacy_log_symlink(
    dir: &Path,
    pod_name: &str,
    namespace: &str,
    container: &str,
    container_id: &str,
) -> PathBuf {
    let mut name = format!("{pod_name}_{namespace}_{container}-{container_id}");
    if name.len() > MAX_SYMLINK_NAME {
        let cut = (0..=MAX_SYMLINK_NAME)
            .rev()
            .find(|i| name.is_char_boundary(*i))
            .unwrap_or(0);
        name.truncate(cut);
    }
    dir.join(format!("{name}.log"))
}

/// `<pod log dir>/<container name>` (upstream `BuildContainerLogsDirectory`).
pub fn container_logs_dir(pod_logs_dir: &Path, name: &str) -> PathBuf {
    pod_logs_dir.join(name)
}

/// The restart count to use when the runtime has no previous instance of the container
/// (e.g. after a node reboot cleared the runtime): one more than the highest `<N>.log` in the
/// container's log directory, or 0 (upstream `calcRestartCountByLogDir`). Blocking.
// Reviewed (issue 16): blocking by contract; the pod sync calls it in spawn_blocking.
#[allow(clippy::disallowed_methods)]
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
    crate::expansion::expand(input, |name| env.get(name).map(|v| (*v).to_owned()))
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
