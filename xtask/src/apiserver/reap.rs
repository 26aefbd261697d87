//! Leftovers of clusters whose test process died without dropping them (SIGKILL, a killed
//! `cargo test`): their etcd and kube-apiserver would run on, ~330 MB each, and their directory
//! would stay. Each cluster's directory names its owner; the next start reaps the orphans.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process,
    time::Duration,
};

use anyhow::{Context, Result};
use nix::sys::signal::Signal;

use crate::util;

/// The prefix of a cluster directory's name in the temporary directory.
pub(crate) const DIR_PREFIX: &str = "kube-apiserver-";
/// The file in a cluster directory that names its owner: `<pid> <start time>`.
const OWNER_FILE: &str = "owner";

/// Records this process as the owner of the cluster in `dir`.
pub(crate) fn write_owner(dir: &Path) -> Result<()> {
    let pid = process::id();
    let path = dir.join(OWNER_FILE);
    fs::write(
        &path,
        format!("{pid} {}", start_time(pid).unwrap_or_default()),
    )
    .with_context(|| format!("cannot write {}", path.display()))
}

/// Kills the processes of clusters whose owner is gone and removes their directories; returns
/// the directories reaped. Errors are printed: a leftover must not fail a new cluster.
pub(crate) fn reap_orphans() -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(env::temp_dir()) else {
        return Vec::new();
    };
    let mut reaped = Vec::new();
    for dir in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        let is_cluster = dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(DIR_PREFIX));
        // No owner file yet: a cluster being created right now.
        let Ok(owner) = fs::read_to_string(dir.join(OWNER_FILE)) else {
            continue;
        };
        if !is_cluster || owner_alive(&owner) {
            continue;
        }
        kill_processes_under(&dir);
        if let Err(e) = fs::remove_dir_all(&dir) {
            eprintln!("apiserver fixture: cannot remove {}: {e}", dir.display());
        }
        eprintln!(
            "apiserver fixture: reaped {} (its test process died)",
            dir.display()
        );
        reaped.push(dir);
    }
    reaped
}

/// Whether the owner `<pid> <start time>` still runs (the start time guards against pid reuse).
fn owner_alive(owner: &str) -> bool {
    let mut words = owner.split_whitespace();
    let Some(pid) = words.next().and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    util::alive(pid) && start_time(pid).as_deref() == words.next()
}

fn start_time(pid: u32) -> Option<String> {
    util::proc_stat(pid)?.get(19).cloned()
}

/// SIGKILLs every process with an argument under `dir` (etcd's data dir, the server's cert dir).
fn kill_processes_under(dir: &Path) {
    let prefix = format!("{}/", dir.display());
    let Ok(procs) = fs::read_dir("/proc") else {
        return;
    };
    let pids = procs.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok());
    for pid in pids {
        if util::cmdline(pid).iter().any(|a| a.contains(&prefix)) {
            if let Err(e) = util::signal(pid, Signal::SIGKILL) {
                eprintln!("apiserver fixture: {e:#}");
            }
            util::wait_until(Duration::from_secs(5), || !util::alive(pid));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_owns_and_a_dead_pid_does_not() {
        let me = process::id();
        let alive = format!("{me} {}", start_time(me).unwrap_or_default());
        assert!(owner_alive(&alive));
        assert!(
            !owner_alive(&format!("{me} 1")),
            "same pid, other start time"
        );
        assert!(!owner_alive("4194304 1"), "beyond pid_max");
        assert!(!owner_alive("garbage"));
    }
}
