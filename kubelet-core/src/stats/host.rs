//! Node-level readings from `/proc` and the filesystems, as cadvisor takes them (upstream
//! `vendor/github.com/google/cadvisor/fs/fs.go`, `machine/info.go`, the network counters of
//! `container/libcontainer/handler.go` from `/proc/<pid>/net/dev`) and the volume usage of
//! upstream `pkg/volume/metrics_du.go` (`du` and `find | wc -l` as `fs.DiskUsage`).

// Reviewed (issue 16): blocking readers by contract (procfs reads, statfs and `du` walks); the
// stats providers call them on the blocking pool (CriStatsProvider, Summarizer).
#![allow(clippy::disallowed_methods)]

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use k8s_openapi::jiff::Timestamp;

use crate::kuberuntime::api::InterfaceUsage;

/// Capacity and free space of the filesystem holding `path` (statfs, as cadvisor's
/// `GetDirFsDevice`/`GetFsInfoForPath`), with `used` = capacity − free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsInfo {
    /// Size of the filesystem.
    pub capacity_bytes: u64,
    /// Free for unprivileged users.
    pub available_bytes: u64,
    /// Used on the whole filesystem.
    pub used_bytes: u64,
    /// All inodes.
    pub inodes: u64,
    /// Free inodes.
    pub inodes_free: u64,
}

/// [`FsInfo`] of the filesystem of `path`, or of its nearest existing ancestor.
pub fn fs_info(path: &Path) -> Option<FsInfo> {
    let mut path = path.to_path_buf();
    loop {
        if let Ok(s) = nix::sys::statvfs::statvfs(&path) {
            // The field types are narrower on 32-bit targets.
            #[allow(clippy::useless_conversion)]
            let (frsize, blocks, bfree, bavail, files, ffree) = (
                u64::from(s.fragment_size()),
                u64::from(s.blocks()),
                u64::from(s.blocks_free()),
                u64::from(s.blocks_available()),
                u64::from(s.files()),
                u64::from(s.files_free()),
            );
            return Some(FsInfo {
                capacity_bytes: blocks.saturating_mul(frsize),
                available_bytes: bavail.saturating_mul(frsize),
                used_bytes: blocks.saturating_sub(bfree).saturating_mul(frsize),
                inodes: files,
                inodes_free: ffree,
            });
        }
        if !path.pop() {
            return None;
        }
    }
}

/// The mount source (the block device) of the filesystem holding `path`: the mount of
/// `mountinfo` (`/proc/self/mountinfo`) with the longest mount point above it, as
/// cadvisor's `device` label.
pub fn device_of(mountinfo: &str, path: &Path) -> Option<String> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split_whitespace().nth(4)?;
            let source = right.split_whitespace().nth(1)?;
            path.starts_with(mount_point)
                .then(|| (mount_point.len(), source.to_owned()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, source)| source)
}

/// Whether `path` is on a tmpfs (a `medium: Memory` emptyDir, a secret volume).
pub fn is_tmpfs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

/// Bytes (allocated blocks) and inodes used under `path` on its own filesystem, each inode
/// counted once, symlinks not followed (upstream `fs.DiskUsage`: `du -x -s -B 1` and
/// `find -xdev | wc -l`). `None` when `path` cannot be read.
pub fn disk_usage(path: &Path) -> Option<(u64, u64)> {
    let root = std::fs::symlink_metadata(path).ok()?;
    let dev = root.dev();
    let mut seen = HashSet::new();
    let (mut bytes, mut inodes) = (0u64, 0u64);
    let mut stack = vec![(path.to_path_buf(), root)];
    while let Some((p, meta)) = stack.pop() {
        inodes += 1;
        if seen.insert(meta.ino()) {
            bytes = bytes.saturating_add(meta.blocks().saturating_mul(512));
        }
        if !meta.is_dir() {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&p) else {
            continue;
        };
        for entry in entries.flatten() {
            let child = entry.path();
            if let Ok(m) = std::fs::symlink_metadata(&child)
                && m.dev() == dev
            {
                stack.push((child, m));
            }
        }
    }
    Some((bytes, inodes))
}

/// Cumulative CPU time of the whole machine from `/proc/stat`'s `cpu` line (user, nice,
/// system, irq, softirq, steal; idle and iowait excluded), in nanoseconds.
pub fn proc_stat_cpu_nanos(stat: &str, user_hz: u64) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let busy: u64 = [0usize, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| fields.get(*i))
        .sum();
    Some(busy.saturating_mul(1_000_000_000 / user_hz.max(1)))
}

/// Boot time from `/proc/stat`'s `btime`.
pub fn boot_time(stat: &str) -> Option<Timestamp> {
    let secs: i64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Timestamp::from_second(secs).ok()
}

/// A `/proc/meminfo` value in bytes (`MemTotal`, `MemAvailable`, …).
pub fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        let kb: u64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kb * 1024)
    })
}

/// The interfaces of a `/proc/<pid>/net/dev`, loopback left out (as cadvisor).
pub fn net_dev(text: &str) -> Vec<InterfaceUsage> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, counters) = line.split_once(':')?;
            let name = name.trim();
            if name == "lo" {
                return None;
            }
            let c: Vec<u64> = counters
                .split_whitespace()
                .map(|f| f.parse().unwrap_or(0))
                .collect();
            Some(InterfaceUsage {
                name: name.to_owned(),
                rx_bytes: c.first().copied(),
                rx_errors: c.get(2).copied(),
                tx_bytes: c.get(8).copied(),
                tx_errors: c.get(10).copied(),
            })
        })
        .collect()
}

/// Processes and threads running now (`/proc/loadavg`'s `running/total`), as cadvisor's
/// `curproc`.
pub fn loadavg_procs(loadavg: &str) -> Option<i64> {
    loadavg
        .split_whitespace()
        .nth(3)?
        .split_once('/')?
        .1
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_counts_busy_time() {
        let stat = "cpu  100 20 30 1000 50 5 6 7 0 0\ncpu0 1 2 3 4\nbtime 1700000000\n";
        // (100 + 20 + 30 + 5 + 6 + 7) ticks of 10 ms.
        assert_eq!(proc_stat_cpu_nanos(stat, 100), Some(1_680_000_000));
        assert_eq!(boot_time(stat).map(|t| t.as_second()), Some(1_700_000_000));
    }

    #[test]
    fn meminfo_in_bytes() {
        let text = "MemTotal:        2048 kB\nMemFree:          1024 kB\n";
        assert_eq!(meminfo_bytes(text, "MemTotal"), Some(2048 * 1024));
        assert_eq!(meminfo_bytes(text, "Mem"), None);
    }

    #[test]
    fn net_dev_skips_loopback() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0\n  \
eth0:    5000      40    2    0    0     0          0         0     3000      30    1    0    0     0       0          0\n";
        let ifaces = net_dev(text);
        assert_eq!(
            ifaces,
            vec![InterfaceUsage {
                name: "eth0".into(),
                rx_bytes: Some(5000),
                rx_errors: Some(2),
                tx_bytes: Some(3000),
                tx_errors: Some(1),
            }]
        );
    }

    #[test]
    fn disk_usage_counts_files_once_and_inodes() {
        let Ok(tmp) = tempfile::tempdir() else {
            return;
        };
        let dir = tmp.path().join("vol");
        std::fs::create_dir_all(dir.join("sub")).ok();
        std::fs::write(dir.join("sub/a"), vec![1u8; 64 * 1024]).ok();
        std::fs::hard_link(dir.join("sub/a"), dir.join("b")).ok();
        std::os::unix::fs::symlink("/etc", dir.join("link")).ok();
        let (bytes, inodes) = disk_usage(&dir).unwrap_or_default();
        // vol, sub, a, b (same inode as a: counted once for bytes), link.
        assert_eq!(inodes, 5);
        assert!(
            (64 * 1024..64 * 1024 + 64 * 1024).contains(&bytes),
            "{bytes}"
        );
        assert_eq!(disk_usage(&tmp.path().join("missing")), None);
    }

    #[test]
    fn device_of_the_longest_mount_point() {
        let mountinfo = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                         30 22 8:2 / /var/lib rw - xfs /dev/sdb1 rw\n\
                         31 22 0:5 / /var/lib/x/shm rw - tmpfs shm rw\n";
        let device = |p: &str| device_of(mountinfo, Path::new(p));
        assert_eq!(device("/var/lib/containerd").as_deref(), Some("/dev/sdb1"));
        assert_eq!(device("/var/libx").as_deref(), Some("/dev/sda1"));
        assert_eq!(device("/").as_deref(), Some("/dev/sda1"));
    }

    #[test]
    fn loadavg_total_procs() {
        assert_eq!(loadavg_procs("0.00 0.01 0.05 1/123 4567\n"), Some(123));
    }

    #[test]
    fn fs_info_of_a_missing_path_is_its_ancestors() {
        let info = fs_info(Path::new("/definitely/not/here"));
        assert!(info.is_some_and(|i| i.capacity_bytes > 0));
    }
}
