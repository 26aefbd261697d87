//! Removing what a testbed leaves on the host when containerd is gone: container processes,
//! shims, mounts and IPAM state. Only things that belong to one testbed directory are touched.

use std::{
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result, anyhow};
use nix::{
    mount::{MntFlags, umount2},
    sys::signal::Signal,
};

use super::Layout;
use crate::util;

/// Kills and unmounts everything a testbed in `dir` may have left; errors are collected, not fatal.
pub(crate) fn reap_dir(dir: &Path) -> Vec<anyhow::Error> {
    let layout = Layout::new(dir);
    let mut errors = Vec::new();
    let mut check = |r: Result<()>| {
        if let Err(e) = r {
            errors.push(e);
        }
    };
    check(kill_stale_containerd(&layout));
    check(kill_container_inits(&layout.runc_root));
    check(kill_shims(&layout.socket));
    for top in [&layout.state, &layout.root] {
        check(unmount_under(top));
    }
    if layout.ipam.exists() {
        check(
            fs::remove_dir_all(&layout.ipam)
                .with_context(|| format!("cannot remove {}", layout.ipam.display())),
        );
    }
    errors
}

/// Kills a containerd recorded in the pid file if it still runs with this testbed's config.
fn kill_stale_containerd(layout: &Layout) -> Result<()> {
    let Some(pid) = fs::read_to_string(&layout.pid_file)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    else {
        return Ok(());
    };
    let config = layout.config.to_string_lossy();
    if util::alive(pid) && util::cmdline(pid).iter().any(|a| *a == config) {
        util::signal(pid, Signal::SIGKILL)?;
        util::wait_until(Duration::from_secs(5), || !util::alive(pid));
    }
    let _ = fs::remove_file(&layout.pid_file);
    Ok(())
}

/// Kills the init process of every container in runc's state under `runc_root`, removes the
/// containers' (empty) cgroups and the state.
fn kill_container_inits(runc_root: &Path) -> Result<()> {
    let mut states = Vec::new();
    find_states(runc_root, 3, &mut states);
    let mut cgroups = Vec::new();
    for state_dir in &states {
        let Ok(text) = fs::read_to_string(state_dir.join(STATE)) else {
            continue;
        };
        let state: serde_json::Value = serde_json::from_str(&text)?;
        let pid = state["init_process_pid"].as_u64().unwrap_or(0) as u32;
        let start = match &state["init_process_start"] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let same = util::proc_stat(pid).is_some_and(|f| f.get(19) == Some(&start));
        if pid > 1 && same {
            util::signal(pid, Signal::SIGKILL)?;
            util::wait_until(Duration::from_secs(2), || !util::alive(pid));
        }
        if let Some(paths) = state["cgroup_paths"].as_object() {
            cgroups.extend(paths.values().filter_map(|p| p.as_str().map(PathBuf::from)));
        }
    }
    for cgroup in cgroups {
        let _ = fs::remove_dir(cgroup); // fails harmlessly when shared or already gone
    }
    for state_dir in states {
        let _ = fs::remove_dir_all(state_dir);
    }
    Ok(())
}

const STATE: &str = "state.json";

/// Directories below `dir` (at most `depth` levels) that hold a runc `state.json`: runc's root is
/// `<root>/<namespace>/<id>`.
fn find_states(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    if dir.join(STATE).is_file() {
        out.push(dir.to_path_buf());
    } else if depth > 0 {
        for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                find_states(&entry.path(), depth - 1, out);
            }
        }
    }
}

/// Kills containerd shims started for the containerd at `socket`.
fn kill_shims(socket: &Path) -> Result<()> {
    let socket = socket.to_string_lossy();
    for entry in fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let args = util::cmdline(pid);
        let is_shim = args.first().is_some_and(|a| a.contains("containerd-shim"));
        if is_shim
            && args
                .windows(2)
                .any(|w| w[0] == "-address" && w[1] == socket)
        {
            util::signal(pid, Signal::SIGKILL)?;
        }
    }
    Ok(())
}

/// Lazily unmounts every mount point at or below `top`, innermost first.
pub(crate) fn unmount_under(top: &Path) -> Result<()> {
    let mut points = mounts_under(top)?;
    points.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    let mut failed = Vec::new();
    for point in points {
        if let Err(e) = umount2(&point, MntFlags::MNT_DETACH) {
            failed.push(format!("{}: {e}", point.display()));
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(anyhow!("cannot unmount {}", failed.join(", ")))
    }
}

/// Mount points at or below `top`, from `/proc/self/mountinfo`.
pub(crate) fn mounts_under(top: &Path) -> Result<Vec<PathBuf>> {
    let info = fs::read_to_string("/proc/self/mountinfo")?;
    Ok(info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|point| PathBuf::from(unescape(point)))
        .filter(|point| point.starts_with(top))
        .collect())
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                let value = d.iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                out.push(value as u8);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn unescape_mountinfo() {
        assert_eq!(super::unescape(r"/a\040b/c"), "/a b/c");
        assert_eq!(super::unescape(r"/plain"), "/plain");
    }
}
