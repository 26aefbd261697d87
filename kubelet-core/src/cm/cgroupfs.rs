//! The cgroupfs driver: pod cgroups as directories of the cgroup filesystem, on cgroup v1
//! (one hierarchy per controller) and cgroup v2 (the unified hierarchy).
//!
//! Mirrors upstream `pkg/kubelet/cm/cgroup_manager_linux.go` (cgroupfs `Create`, `Destroy`,
//! `Exists`, the v1/v2 resource writers), `qos_container_manager_linux.go` (the `kubepods`,
//! `burstable` and `besteffort` cgroups; BestEffort gets the minimum shares) and
//! `pod_container_manager_linux.go` (`EnsureExists`, `Destroy`, `GetAllPodsFromCgroups`).
//!
//! Every function here blocks on the cgroup filesystem: async code calls them through
//! [`crate::blocking::unblock`] (see [`PodContainerManager`]).

// Reviewed (issue 16): this module is the blocking implementation of PodContainerManager;
// the kubelet calls it on the blocking pool, and the binary at startup before any pod.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

use super::helpers::{
    MIN_SHARES, QUOTA_PERIOD, ResourceConfig, resource_config_for_pod, shares_to_weight,
};
use super::{
    Error, KUBEPODS, PodContainerManager, Result, cgroupfs_name, pod_cgroup_suffix,
    qos_cgroup_segments,
};
use crate::PodExt;
use crate::pod::PodUid;

/// The v1 controllers pod cgroups are created in (upstream checks cpu, cpuacct, cpuset,
/// memory, and pids/hugetlb when mounted).
pub const V1_CONTROLLERS: [&str; 6] = ["cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb"];

/// The QoS cgroups below the root, as path segments.
const QOS_PARENTS: [&[&str]; 3] = [
    &[KUBEPODS],
    &[KUBEPODS, "burstable"],
    &[KUBEPODS, "besteffort"],
];

/// Where the cgroup filesystem is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// cgroup v1: each controller's mount point (co-mounted controllers share one).
    V1(Vec<(String, PathBuf)>),
    /// cgroup v2: the unified hierarchy's mount point.
    V2(PathBuf),
}

impl Layout {
    /// The layout of this machine from `/proc/self/mountinfo`: v2 when `/sys/fs/cgroup` is
    /// a cgroup2 mount, else the v1 controller mounts.
    pub fn detect() -> Result<Layout> {
        let path = Path::new("/proc/self/mountinfo");
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.into(),
            op: "read".into(),
            source,
        })?;
        Layout::from_mountinfo(&text)
    }

    /// The cgroup version: 1 or 2.
    pub fn version(&self) -> u8 {
        match self {
            Layout::V1(_) => 1,
            Layout::V2(_) => 2,
        }
    }

    /// Parses mountinfo text (see [`Layout::detect`]).
    pub fn from_mountinfo(text: &str) -> Result<Layout> {
        let mut v1 = Vec::new();
        for line in text.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let mount_point = left.split_whitespace().nth(4).unwrap_or_default();
            let mut right = right.split_whitespace();
            let fstype = right.next().unwrap_or_default();
            let super_opts = right.nth(1).unwrap_or_default();
            match fstype {
                "cgroup2" if mount_point == "/sys/fs/cgroup" => {
                    return Ok(Layout::V2(mount_point.into()));
                }
                "cgroup" => {
                    for opt in super_opts.split(',') {
                        if V1_CONTROLLERS.contains(&opt) {
                            v1.push((opt.to_owned(), PathBuf::from(mount_point)));
                        }
                    }
                }
                _ => {}
            }
        }
        for needed in ["cpu", "memory"] {
            if !v1.iter().any(|(c, _)| c == needed) {
                return Err(Error::Unsupported(format!(
                    "no cgroup v2 at /sys/fs/cgroup and no cgroup v1 {needed} controller mounted"
                )));
            }
        }
        Ok(Layout::V1(v1))
    }
}

/// Pod cgroups with the cgroupfs driver.
#[derive(Clone, Debug)]
pub struct Cgroupfs {
    layout: Layout,
    root: String,
    enforce_cpu_limits: bool,
    cpu_period: u64,
}

fn io(path: &Path, op: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    let op = op.into();
    move |source| Error::Io { path, op, source }
}

fn write(dir: &Path, file: &str, value: &str) -> Result<()> {
    let path = dir.join(file);
    std::fs::write(&path, value).map_err(io(&path, format!("write {value:?}")))
}

impl Cgroupfs {
    /// Pods under cgroup `root` (`/` or e.g. `/kubelet`, upstream `--cgroup-root`) of
    /// `layout`, with CFS quota enforced over the default 100 ms period.
    pub fn new(layout: Layout, root: impl Into<String>) -> Self {
        let root = root.into();
        Self {
            layout,
            root: if root.is_empty() { "/".into() } else { root },
            enforce_cpu_limits: true,
            cpu_period: QUOTA_PERIOD as u64,
        }
    }

    /// Sets CFS quota enforcement (upstream `--cpu-cfs-quota`) and period
    /// (`--cpu-cfs-quota-period`, microseconds).
    #[must_use]
    pub fn with_cpu_cfs_quota(mut self, enforce: bool, period_us: u64) -> Self {
        self.enforce_cpu_limits = enforce;
        self.cpu_period = period_us;
        self
    }

    /// The cgroupfs name of segments below the root.
    pub(super) fn name(&self, segments: &[&str]) -> String {
        cgroupfs_name(&self.root, segments)
    }

    /// Every distinct hierarchy mount, with the controllers mounted there.
    pub(super) fn mounts(&self) -> Vec<(PathBuf, Vec<&str>)> {
        match &self.layout {
            Layout::V2(m) => vec![(m.clone(), vec![])],
            Layout::V1(list) => {
                let mut out: Vec<(PathBuf, Vec<&str>)> = Vec::new();
                for (c, m) in list {
                    match out.iter_mut().find(|(p, _)| p == m) {
                        Some((_, cs)) => cs.push(c),
                        None => out.push((m.clone(), vec![c])),
                    }
                }
                out
            }
        }
    }

    /// The directory of cgroupfs name `name` in the hierarchy mounted at `mount`.
    pub(super) fn dir(mount: &Path, name: &str) -> PathBuf {
        mount.join(name.trim_start_matches('/'))
    }

    /// Creates every level of `segments` in each hierarchy; returns the leaf directories.
    pub(super) fn create(&self, segments: &[&str]) -> Result<Vec<(PathBuf, Vec<&str>)>> {
        let mut leaves = Vec::new();
        for (mount, controllers) in self.mounts() {
            let root_dir = Self::dir(&mount, &self.root);
            let mut levels: Vec<PathBuf> = root_dir
                .ancestors()
                .take_while(|p| p.starts_with(&mount) && *p != mount)
                .map(Path::to_path_buf)
                .collect();
            levels.reverse();
            let mut dir = root_dir;
            for s in segments {
                dir = dir.join(s);
                levels.push(dir.clone());
            }
            for level in &levels {
                if let Some(parent) = level.parent()
                    && matches!(self.layout, Layout::V2(_))
                {
                    enable_v2_controllers(parent)?;
                }
                if !level.exists() {
                    std::fs::create_dir(level)
                        .or_else(|e| match e.kind() {
                            std::io::ErrorKind::AlreadyExists => Ok(()),
                            _ => Err(e),
                        })
                        .map_err(io(level, "create"))?;
                }
                if controllers.contains(&"cpuset") {
                    copy_cpuset_from_parent(level)?;
                    clone_cpuset_into_children(level)?;
                }
            }
            leaves.push((dir, controllers));
        }
        Ok(leaves)
    }

    /// Writes `config` into the cgroup files of each leaf directory (with its controllers).
    pub(super) fn apply(
        &self,
        leaves: &[(PathBuf, Vec<&str>)],
        config: &ResourceConfig,
    ) -> Result<()> {
        for (dir, controllers) in leaves {
            if matches!(self.layout, Layout::V2(_)) {
                if let Some(shares) = config.cpu_shares {
                    write(dir, "cpu.weight", &shares_to_weight(shares).to_string())?;
                }
                if let Some(period) = config.cpu_period {
                    let quota = match config.cpu_quota {
                        Some(q) if q > 0 => q.to_string(),
                        _ => "max".into(),
                    };
                    write(dir, "cpu.max", &format!("{quota} {period}"))?;
                }
                if let Some(memory) = config.memory.filter(|m| *m > 0) {
                    write(dir, "memory.max", &memory.to_string())?;
                }
                continue;
            }
            if controllers.contains(&"cpu") {
                if let Some(shares) = config.cpu_shares {
                    write(dir, "cpu.shares", &shares.to_string())?;
                }
                if let Some(period) = config.cpu_period {
                    write(dir, "cpu.cfs_period_us", &period.to_string())?;
                }
                if let Some(quota) = config.cpu_quota {
                    let quota = if quota > 0 { quota } else { -1 };
                    write(dir, "cpu.cfs_quota_us", &quota.to_string())?;
                }
            }
            if controllers.contains(&"memory")
                && let Some(memory) = config.memory.filter(|m| *m > 0)
            {
                write(dir, "memory.limit_in_bytes", &memory.to_string())?;
            }
        }
        Ok(())
    }

    /// Creates `kubepods`, `kubepods/burstable` and `kubepods/besteffort` (the latter with
    /// the minimum cpu shares), as upstream's QoS container manager does at start.
    pub fn setup_qos(&self) -> Result<()> {
        for segments in QOS_PARENTS {
            let leaves = self.create(segments)?;
            if segments.last() == Some(&"besteffort") {
                let config = ResourceConfig {
                    cpu_shares: Some(MIN_SHARES),
                    ..Default::default()
                };
                self.apply(&leaves, &config)?;
            }
        }
        Ok(())
    }

    fn pod_dirs(&self, uid: &PodUid) -> Vec<PathBuf> {
        let suffix = pod_cgroup_suffix(uid);
        let mut out = Vec::new();
        for (mount, _) in self.mounts() {
            for parent in QOS_PARENTS {
                let mut segments = parent.to_vec();
                segments.push(&suffix);
                out.push(Self::dir(&mount, &self.name(&segments)));
            }
        }
        out
    }
}

/// Writes `+<controller>` for each controller of `parent`'s `cgroup.controllers` into its
/// `cgroup.subtree_control` (v2), so that children get the files.
fn enable_v2_controllers(parent: &Path) -> Result<()> {
    let available = std::fs::read_to_string(parent.join("cgroup.controllers")).unwrap_or_default();
    let enabled =
        std::fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
    for c in available.split_whitespace() {
        if ["cpu", "cpuset", "memory", "pids", "hugetlb"].contains(&c)
            && !enabled.split_whitespace().any(|e| e == c)
        {
            write(parent, "cgroup.subtree_control", &format!("+{c}"))?;
        }
    }
    Ok(())
}

/// A new v1 cpuset cgroup has no CPUs and memory nodes: copy the parent's (as libcontainer's
/// `cpusetCopyIfNeeded`).
fn copy_cpuset_from_parent(dir: &Path) -> Result<()> {
    let Some(parent) = dir.parent() else {
        return Ok(());
    };
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let current = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        if !current.trim().is_empty() {
            continue;
        }
        let value = std::fs::read_to_string(parent.join(file)).unwrap_or_default();
        if !value.trim().is_empty() {
            write(dir, file, value.trim())?;
        }
    }
    Ok(())
}

/// Sets v1 `cgroup.clone_children` on a cpuset cgroup, so that the kernel gives each new
/// child its CPUs and memory nodes at `mkdir` (the flag passes on to the children too).
/// Writing `cpuset.cpus` into a child instead, as [`copy_cpuset_from_parent`] must without
/// it, makes the kernel rebuild its scheduling domains: about 5 ms per cgroup on the 2-core
/// test machine, paid once for the pod cgroup and again by the runtime for each container's.
/// The cgroups end up with the same CPUs and nodes either way.
fn clone_cpuset_into_children(dir: &Path) -> Result<()> {
    let flag = std::fs::read_to_string(dir.join("cgroup.clone_children")).unwrap_or_default();
    if flag.trim() == "1" {
        return Ok(());
    }
    write(dir, "cgroup.clone_children", "1")
}

/// Removes a cgroup directory and its child cgroups, deepest first.
pub(super) fn remove_tree(dir: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(dir, "read")(e)),
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(dir, "remove")(e)),
        _ => Ok(()),
    }
}

impl PodContainerManager for Cgroupfs {
    fn pod_cgroup_parent(&self, pod: &Pod) -> String {
        super::pod_cgroupfs_name(&self.root, pod)
    }

    fn pod_cgroup_exists(&self, pod: &Pod) -> bool {
        let name = self.pod_cgroup_parent(pod);
        self.mounts()
            .iter()
            .all(|(mount, _)| Self::dir(mount, &name).is_dir())
    }

    fn update_qos_cgroups(&self, burstable_cpu_shares: u64) -> Result<()> {
        for (segments, shares) in [
            (QOS_PARENTS[1], burstable_cpu_shares),
            (QOS_PARENTS[2], MIN_SHARES),
        ] {
            let leaves = self.create(segments)?;
            let config = ResourceConfig {
                cpu_shares: Some(shares),
                ..Default::default()
            };
            self.apply(&leaves, &config)?;
        }
        Ok(())
    }

    fn ensure_exists(&self, pod: &Pod) -> Result<()> {
        let suffix = pod_cgroup_suffix(&pod.uid());
        let mut segments = qos_cgroup_segments(pod);
        segments.push(&suffix);
        let name = self.name(&segments);
        if self.pod_cgroup_exists(pod) {
            return Ok(());
        }
        let leaves = self.create(&segments)?;
        let config = resource_config_for_pod(pod, self.enforce_cpu_limits, self.cpu_period);
        tracing::debug!(pod = %pod.full_name(), cgroup = %name, ?config, "created pod cgroup");
        self.apply(&leaves, &config)
    }

    fn destroy(&self, uid: &PodUid) -> Result<()> {
        for dir in self.pod_dirs(uid) {
            remove_tree(&dir)?;
        }
        Ok(())
    }

    fn pod_cgroups(&self) -> Result<Vec<PodUid>> {
        let Some((mount, _)) = self.mounts().into_iter().next() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for parent in QOS_PARENTS {
            let dir = Self::dir(&mount, &self.name(parent));
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name();
                if let Some(uid) = name.to_str().and_then(|n| n.strip_prefix("pod"))
                    && e.file_type().is_ok_and(|t| t.is_dir())
                {
                    out.push(PodUid(uid.to_owned()));
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::container_with_resources as container;
    use crate::testing::pod;

    const MOUNTINFO_V1: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn detects_layouts() {
        let Layout::V1(list) = Layout::from_mountinfo(MOUNTINFO_V1).expect("v1") else {
            panic!("expected v1");
        };
        assert!(list.contains(&("cpuacct".into(), "/sys/fs/cgroup/cpu,cpuacct".into())));
        assert!(list.contains(&("memory".into(), "/sys/fs/cgroup/memory".into())));
        assert_eq!(list.len(), 5);
        let v2 = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            Layout::from_mountinfo(v2).expect("v2"),
            Layout::V2("/sys/fs/cgroup".into())
        );
        assert!(matches!(
            Layout::from_mountinfo("1 0 0:1 / / rw - ext4 /dev/sda rw\n"),
            Err(Error::Unsupported(_))
        ));
    }

    fn v1_in(dir: &Path) -> Cgroupfs {
        let list = ["cpu", "cpuset", "memory"]
            .iter()
            .map(|c| ((*c).to_owned(), dir.join(c)))
            .collect();
        for c in ["cpu", "cpuset", "memory"] {
            std::fs::create_dir_all(dir.join(c)).expect("mkdir");
        }
        std::fs::write(dir.join("cpuset/cpuset.cpus"), "0-1\n").expect("cpus");
        std::fs::write(dir.join("cpuset/cpuset.mems"), "0\n").expect("mems");
        Cgroupfs::new(Layout::V1(list), "/node")
    }

    fn read(p: PathBuf) -> String {
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn v1_pod_cgroups_lifecycle() {
        let tmp = tempfile::tempdir().expect("tmp");
        let cg = v1_in(tmp.path());
        cg.setup_qos().expect("qos");
        let d = tmp.path();
        assert_eq!(read(d.join("cpu/node/kubepods/besteffort/cpu.shares")), "2");
        assert_eq!(
            read(d.join("cpuset/node/kubepods/burstable/cpuset.cpus")),
            "0-1"
        );

        let mut guaranteed = pod("g");
        guaranteed.spec.as_mut().expect("spec").containers =
            vec![container("a", &[], &[("cpu", "250m"), ("memory", "64Mi")])];
        cg.ensure_exists(&guaranteed).expect("create");
        assert_eq!(cg.pod_cgroup_parent(&guaranteed), "/node/kubepods/poduid-g");
        let g = |c: &str, f: &str| read(d.join(c).join("node/kubepods/poduid-g").join(f));
        assert_eq!(g("cpu", "cpu.shares"), "256");
        assert_eq!(g("cpu", "cpu.cfs_period_us"), "100000");
        assert_eq!(g("cpu", "cpu.cfs_quota_us"), "25000");
        assert_eq!(g("memory", "memory.limit_in_bytes"), (64 << 20).to_string());
        assert_eq!(g("cpuset", "cpuset.mems"), "0");
        // Every cpuset level the kubelet manages passes its CPUs and nodes on at `mkdir`.
        for level in ["node", "node/kubepods", "node/kubepods/poduid-g"] {
            let flag = d.join("cpuset").join(level).join("cgroup.clone_children");
            assert_eq!(read(flag), "1", "{level}");
        }
        assert!(!d.join("cpu/node/kubepods/cgroup.clone_children").exists());

        let mut burstable = pod("b");
        burstable.spec.as_mut().expect("spec").containers =
            vec![container("a", &[("cpu", "100m")], &[])];
        cg.ensure_exists(&burstable).expect("create");
        assert_eq!(
            read(d.join("cpu/node/kubepods/burstable/poduid-b/cpu.shares")),
            "102"
        );
        assert!(
            !d.join("cpu/node/kubepods/burstable/poduid-b/cpu.cfs_quota_us")
                .exists()
        );

        let mut uids = cg.pod_cgroups().expect("list");
        uids.sort();
        assert_eq!(uids, [PodUid::from("uid-b"), PodUid::from("uid-g")]);
    }

    #[test]
    fn v2_writes_unified_files() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::write(tmp.path().join("cgroup.controllers"), "cpu memory io").expect("w");
        let cg = Cgroupfs::new(Layout::V2(tmp.path().into()), "/");
        let mut p = pod("g");
        p.spec.as_mut().expect("spec").containers =
            vec![container("a", &[], &[("cpu", "1"), ("memory", "1Gi")])];
        cg.ensure_exists(&p).expect("create");
        let dir = tmp.path().join("kubepods/poduid-g");
        assert_eq!(read(dir.join("cpu.weight")), "39");
        assert_eq!(read(dir.join("cpu.max")), "100000 100000");
        assert_eq!(read(dir.join("memory.max")), (1 << 30).to_string());
        // The last controller enabled in the root is what the fake file holds.
        assert_eq!(read(tmp.path().join("cgroup.subtree_control")), "+memory");
    }

    #[test]
    fn destroy_removes_empty_cgroups() {
        let tmp = tempfile::tempdir().expect("tmp");
        let list = vec![("cpu".to_owned(), tmp.path().join("cpu"))];
        std::fs::create_dir_all(tmp.path().join("cpu/kubepods/besteffort/poduid-x/ctr"))
            .expect("mkdir");
        let cg = Cgroupfs::new(Layout::V1(list), "/");
        assert_eq!(cg.pod_cgroups().expect("list"), [PodUid::from("uid-x")]);
        cg.destroy(&PodUid::from("uid-x")).expect("destroy");
        assert!(!tmp.path().join("cpu/kubepods/besteffort/poduid-x").exists());
        cg.destroy(&PodUid::from("uid-x")).expect("absent is fine");
    }
}
