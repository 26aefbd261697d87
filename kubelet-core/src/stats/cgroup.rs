//! CPU and memory of a cgroup, read as cadvisor reads them (upstream
//! `vendor/github.com/google/cadvisor/container/libcontainer/handler.go` through
//! libcontainer's cgroup managers; the working set as `setMemoryStats`).
//!
//! * cgroup v1: `cpuacct.usage`; `memory.usage_in_bytes`, `memory.limit_in_bytes` and
//!   `memory.stat` (`total_inactive_file`, `total_rss`, `total_pgfault`, `total_pgmajfault`).
//! * cgroup v2: `cpu.stat` `usage_usec`; `memory.current`, `memory.max` and `memory.stat`
//!   (`inactive_file`, `anon`, `pgfault`, `pgmajfault`).
//!
//! The working set is usage minus inactive file pages, never below zero.

// Reviewed (issue 16): blocking readers by contract (cgroupfs reads); the stats providers call
// them on the blocking pool (CriStatsProvider, Summarizer).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

use crate::cm::cgroup_name::CgroupName;
use crate::cm::cgroupfs::Layout;
use crate::cm::{cgroupfs_name, pod_cgroup_suffix};
use crate::pod::PodUid;

/// Limits at or above this are "no limit" (v1 reports a page-rounded `i64::MAX`).
const NO_LIMIT: u64 = 1 << 62;

/// Memory of a cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// All memory in use, cache included.
    pub usage_bytes: u64,
    /// Usage minus inactive file pages.
    pub working_set_bytes: u64,
    /// Anonymous memory.
    pub rss_bytes: Option<u64>,
    /// Page faults.
    pub page_faults: Option<u64>,
    /// Major page faults.
    pub major_page_faults: Option<u64>,
    /// The limit, `None` when unlimited.
    pub limit_bytes: Option<u64>,
}

/// What one read of a cgroup gave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Cumulative CPU time in nanoseconds.
    pub cpu_usage_nanos: Option<u64>,
    /// Memory.
    pub memory: Option<Memory>,
}

/// Reads cgroups of one machine by name (`/`, `/kubepods/burstable/pod<uid>`, …).
#[derive(Clone, Debug)]
pub struct Reader {
    layout: Layout,
}

impl Reader {
    /// A reader for the cgroup filesystem at `layout`.
    pub fn new(layout: Layout) -> Self {
        Self { layout }
    }

    /// A reader for this machine, `None` when no cgroup filesystem is found.
    pub fn detect() -> Option<Self> {
        Layout::detect().ok().map(Self::new)
    }

    fn dir(&self, controller: &str, name: &str) -> Option<PathBuf> {
        let mount = match &self.layout {
            Layout::V2(mount) => mount,
            Layout::V1(mounts) => &mounts.iter().find(|(c, _)| c == controller)?.1,
        };
        Some(mount.join(name.trim_start_matches('/')))
    }

    /// Whether cgroup `name` exists.
    pub fn exists(&self, name: &str) -> bool {
        self.dir("memory", name).is_some_and(|d| d.is_dir())
    }

    /// The cgroup of pod `uid` below `root`, wherever its QoS class put it (`kubepods`,
    /// `kubepods/burstable`, `kubepods/besteffort`), if it exists: named as the cgroupfs
    /// driver names it, or as the systemd driver does
    /// (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`).
    pub fn pod_cgroup(&self, root: &str, uid: &PodUid) -> Option<String> {
        let suffix = pod_cgroup_suffix(uid);
        let root_name = CgroupName::parse_cgroupfs(root);
        [
            &["kubepods"][..],
            &["kubepods", "burstable"],
            &["kubepods", "besteffort"],
        ]
        .into_iter()
        .flat_map(|parent| {
            let mut segments = parent.to_vec();
            segments.push(&suffix);
            let systemd = root_name.child(segments.iter().copied()).to_systemd();
            [cgroupfs_name(root, &segments), systemd]
        })
        .find(|name| self.exists(name))
    }

    /// The cgroup filesystem this reader reads.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// CPU and memory of cgroup `name`; each part `None` when it cannot be read.
    pub fn usage(&self, name: &str) -> Usage {
        self.usage_split(name, name)
    }

    /// CPU of cgroup `cpu` and memory of cgroup `memory` (a process whose v1 controllers
    /// put it in different cgroups); each part `None` when it cannot be read.
    pub fn usage_split(&self, cpu: &str, memory: &str) -> Usage {
        match &self.layout {
            Layout::V1(_) => Usage {
                cpu_usage_nanos: self
                    .dir("cpuacct", cpu)
                    .and_then(|d| read_u64(&d.join("cpuacct.usage"))),
                memory: self.dir("memory", memory).and_then(|d| memory_v1(&d)),
            },
            Layout::V2(_) => Usage {
                cpu_usage_nanos: self
                    .dir("", cpu)
                    .and_then(|d| read(&d.join("cpu.stat")))
                    .and_then(|s| stat_value(&s, "usage_usec"))
                    .map(|us| us.saturating_mul(1000)),
                memory: self.dir("", memory).as_deref().and_then(memory_v2),
            },
        }
    }

    /// The first process of cgroup `name` (to read its network namespace's counters).
    pub fn first_pid(&self, name: &str) -> Option<u32> {
        let dir = self.dir("memory", name)?;
        read(&dir.join("cgroup.procs"))?
            .lines()
            .find_map(|l| l.trim().parse().ok())
    }
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn read_u64(path: &Path) -> Option<u64> {
    read(path)?.trim().parse().ok()
}

/// A `key value` line of a stat file.
pub(crate) fn stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn memory_v1(dir: &Path) -> Option<Memory> {
    let usage = read_u64(&dir.join("memory.usage_in_bytes"))?;
    let stat = read(&dir.join("memory.stat")).unwrap_or_default();
    let inactive = stat_value(&stat, "total_inactive_file").unwrap_or(0);
    Some(Memory {
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(inactive),
        rss_bytes: stat_value(&stat, "total_rss"),
        page_faults: stat_value(&stat, "total_pgfault"),
        major_page_faults: stat_value(&stat, "total_pgmajfault"),
        limit_bytes: read_u64(&dir.join("memory.limit_in_bytes")).filter(|l| *l < NO_LIMIT),
    })
}

fn memory_v2(dir: &Path) -> Option<Memory> {
    let usage = read_u64(&dir.join("memory.current"))?;
    let stat = read(&dir.join("memory.stat")).unwrap_or_default();
    let inactive = stat_value(&stat, "inactive_file").unwrap_or(0);
    Some(Memory {
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(inactive),
        rss_bytes: stat_value(&stat, "anon"),
        page_faults: stat_value(&stat, "pgfault"),
        major_page_faults: stat_value(&stat, "pgmajfault"),
        // "max" does not parse: unlimited.
        limit_bytes: read_u64(&dir.join("memory.max")).filter(|l| *l < NO_LIMIT),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, file: &str, text: &str) {
        std::fs::create_dir_all(dir).ok();
        std::fs::write(dir.join(file), text).ok();
    }

    #[test]
    fn v1_working_set_is_usage_minus_inactive_file() {
        let tmp = tempfile::tempdir().ok();
        let root = tmp
            .as_ref()
            .map(|t| t.path().to_owned())
            .unwrap_or_default();
        let layout = Layout::V1(vec![
            ("cpuacct".into(), root.join("cpuacct")),
            ("memory".into(), root.join("memory")),
        ]);
        let pod = root.join("memory/kubepods/burstable/podu1");
        write(&pod, "memory.usage_in_bytes", "10000\n");
        write(
            &pod,
            "memory.stat",
            "cache 1\ninactive_file 7\ntotal_rss 6000\ntotal_inactive_file 3000\ntotal_pgfault 5\ntotal_pgmajfault 1\n",
        );
        write(&pod, "memory.limit_in_bytes", "9223372036854771712\n");
        write(
            &root.join("cpuacct/kubepods/burstable/podu1"),
            "cpuacct.usage",
            "123456789\n",
        );
        let reader = Reader::new(layout);
        let name = reader.pod_cgroup("/", &PodUid::from("u1"));
        assert_eq!(name.as_deref(), Some("/kubepods/burstable/podu1"));
        let usage = reader.usage("/kubepods/burstable/podu1");
        assert_eq!(usage.cpu_usage_nanos, Some(123_456_789));
        assert_eq!(
            usage.memory,
            Some(Memory {
                usage_bytes: 10000,
                working_set_bytes: 7000,
                rss_bytes: Some(6000),
                page_faults: Some(5),
                major_page_faults: Some(1),
                limit_bytes: None,
            })
        );
        assert_eq!(reader.pod_cgroup("/", &PodUid::from("u2")), None);
        // The systemd driver's slice of the same pod class.
        std::fs::create_dir_all(root.join(
            "memory/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu_3.slice",
        ))
        .expect("mkdir");
        assert_eq!(
            reader.pod_cgroup("/", &PodUid::from("u-3")).as_deref(),
            Some("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu_3.slice")
        );
    }

    #[test]
    fn v2_reads_cpu_stat_and_memory_current() {
        let tmp = tempfile::tempdir().ok();
        let root = tmp
            .as_ref()
            .map(|t| t.path().to_owned())
            .unwrap_or_default();
        let pod = root.join("kubepods/podu1");
        write(&pod, "cpu.stat", "usage_usec 2500\nuser_usec 2000\n");
        write(&pod, "memory.current", "4096\n");
        write(&pod, "memory.stat", "anon 1024\ninactive_file 5000\n");
        write(&pod, "memory.max", "max\n");
        let reader = Reader::new(Layout::V2(root));
        let usage = reader.usage("/kubepods/podu1");
        assert_eq!(usage.cpu_usage_nanos, Some(2_500_000));
        let memory = usage.memory.unwrap_or_default();
        assert_eq!(memory.working_set_bytes, 0, "never below zero");
        assert_eq!(memory.rss_bytes, Some(1024));
        assert_eq!(memory.limit_bytes, None);
    }
}
