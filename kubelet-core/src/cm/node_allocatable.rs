//! Node allocatable on the cgroups: the `kubepods` cgroup sized to what pods may use, and the
//! limits of the `--kube-reserved-cgroup` and `--system-reserved-cgroup`.
//!
//! Mirrors upstream `pkg/kubelet/cm/node_container_manager_linux.go`:
//! `createNodeAllocatableCgroups` and `enforceNodeAllocatableCgroups` (the `kubepods` cgroup
//! gets the shares and memory limit of node allocatable, or of capacity when `pods` is not
//! enforced: a new cgroup's default shares would starve the pods), `enforceExistingCgroup`
//! (the reserved cgroups must exist) and `getCgroupConfig` (memory in bytes, CPU as
//! `MilliCPUToShares`, no CFS quota). What the limits are (capacity minus the reservations)
//! is the caller's: the binary computes it beside the Node status' allocatable.
//!
//! Every function here blocks on the cgroup filesystem (see [`super::cgroupfs`]).

// Reviewed (issue 16): the binary calls these at startup, before any pod, as it calls
// `Cgroupfs::setup_qos`; a retry runs on the blocking pool.
#![allow(clippy::disallowed_methods)]

use super::cgroupfs::Cgroupfs;
use super::helpers::{ResourceConfig, milli_cpu_to_shares};
use super::{Error, KUBEPODS, Result};

/// The limits a resource list puts on a top-level cgroup (upstream `getCgroupConfig`): the
/// memory limit in bytes and the cpu shares of the milli-CPUs (`MilliCPUToShares`); a
/// resource the list lacks is left alone, and no CFS quota is set.
#[doc(alias = "getCgroupConfig")]
pub fn cgroup_config(cpu_millis: Option<i64>, memory_bytes: Option<i64>) -> ResourceConfig {
    ResourceConfig {
        cpu_shares: cpu_millis.map(milli_cpu_to_shares),
        memory: memory_bytes,
        ..ResourceConfig::default()
    }
}

/// The cgroups node allocatable is enforced on, as each cgroup driver names and writes them
/// (upstream's `CgroupManager` under `enforceNodeAllocatableCgroups`).
pub trait NodeAllocatableCgroups {
    /// Creates the `kubepods` cgroup below the cgroup root unless it exists and writes
    /// `config` into it (upstream `createNodeAllocatableCgroups` and the update of
    /// `enforceNodeAllocatableCgroups`). On cgroup v1 the kernel refuses a memory limit
    /// below what the pods use (`EBUSY`): upstream retries until evictions bring it down.
    #[doc(alias = "enforceNodeAllocatableCgroups")]
    fn enforce_node_allocatable(&self, config: &ResourceConfig) -> Result<()>;

    /// The name of the `kubepods` cgroup, as the driver shows it (e.g. `/custom/kubepods`,
    /// `/kubepods.slice`).
    fn node_allocatable_cgroup(&self) -> String;

    /// Writes `config` into the existing cgroup `name`, a cgroupfs name from the hierarchy
    /// root such as `/system.slice` (upstream `enforceExistingCgroup`, for
    /// `--kube-reserved-cgroup` and `--system-reserved-cgroup`). [`Error::Missing`] when it
    /// is absent from any hierarchy: the kubelet does not create these.
    #[doc(alias = "enforceExistingCgroup")]
    fn enforce_existing_cgroup(&self, name: &str, config: &ResourceConfig) -> Result<()>;
}

impl NodeAllocatableCgroups for Cgroupfs {
    fn enforce_node_allocatable(&self, config: &ResourceConfig) -> Result<()> {
        let leaves = self.create(&[KUBEPODS])?;
        self.apply(&leaves, config)
    }

    fn node_allocatable_cgroup(&self) -> String {
        self.name(&[KUBEPODS])
    }

    fn enforce_existing_cgroup(&self, name: &str, config: &ResourceConfig) -> Result<()> {
        let leaves: Vec<_> = self
            .mounts()
            .into_iter()
            .map(|(mount, controllers)| (Self::dir(&mount, name), controllers))
            .collect();
        if leaves.iter().any(|(dir, _)| !dir.is_dir()) {
            return Err(Error::Missing(name.to_owned()));
        }
        self.apply(&leaves, config)
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::cm::cgroupfs::Layout;

    fn v1_in(dir: &Path, root: &str) -> Cgroupfs {
        let list = ["cpu", "memory"]
            .iter()
            .map(|c| ((*c).to_owned(), dir.join(c)))
            .collect();
        for c in ["cpu", "memory"] {
            std::fs::create_dir_all(dir.join(c)).expect("mkdir");
        }
        Cgroupfs::new(Layout::V1(list), root)
    }

    fn read(p: PathBuf) -> String {
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn the_config_has_shares_and_memory_only() {
        assert_eq!(
            cgroup_config(Some(3250), Some(6 << 30)),
            ResourceConfig {
                cpu_shares: Some(3328),
                memory: Some(6 << 30),
                ..ResourceConfig::default()
            }
        );
        // An absent resource is left alone; zero CPUs are the minimum shares.
        assert_eq!(cgroup_config(None, None), ResourceConfig::default());
        assert_eq!(cgroup_config(Some(0), None).cpu_shares, Some(2));
    }

    #[test]
    fn kubepods_is_created_and_sized() {
        let tmp = tempfile::tempdir().expect("tmp");
        let cg = v1_in(tmp.path(), "/node");
        assert_eq!(cg.node_allocatable_cgroup(), "/node/kubepods");
        cg.enforce_node_allocatable(&cgroup_config(Some(3500), Some(6 << 30)))
            .expect("enforce");
        let d = tmp.path();
        assert_eq!(read(d.join("cpu/node/kubepods/cpu.shares")), "3584");
        assert_eq!(
            read(d.join("memory/node/kubepods/memory.limit_in_bytes")),
            (6_i64 << 30).to_string()
        );
        assert!(!d.join("cpu/node/kubepods/cpu.cfs_quota_us").exists());
        // A later enforcement (new reservations) updates the existing cgroup.
        cg.setup_qos().expect("qos");
        cg.enforce_node_allocatable(&cgroup_config(Some(1000), Some(1 << 30)))
            .expect("enforce again");
        assert_eq!(read(d.join("cpu/node/kubepods/cpu.shares")), "1024");
        assert_eq!(
            read(d.join("memory/node/kubepods/memory.limit_in_bytes")),
            (1_i64 << 30).to_string()
        );
    }

    #[test]
    fn v2_writes_weight_and_max() {
        let tmp = tempfile::tempdir().expect("tmp");
        let cg = Cgroupfs::new(Layout::V2(tmp.path().into()), "/");
        cg.enforce_node_allocatable(&cgroup_config(Some(2000), Some(1 << 30)))
            .expect("enforce");
        let dir = tmp.path().join("kubepods");
        assert_eq!(read(dir.join("cpu.weight")), "79");
        assert_eq!(read(dir.join("memory.max")), (1 << 30).to_string());
        assert!(!dir.join("cpu.max").exists(), "no quota");
    }

    #[test]
    fn reserved_cgroups_must_exist() {
        let tmp = tempfile::tempdir().expect("tmp");
        let cg = v1_in(tmp.path(), "/node");
        let config = cgroup_config(Some(500), Some(256 << 20));
        assert!(matches!(
            cg.enforce_existing_cgroup("/system.slice", &config),
            Err(Error::Missing(name)) if name == "/system.slice"
        ));
        std::fs::create_dir_all(tmp.path().join("cpu/system.slice")).expect("mkdir");
        assert!(
            matches!(
                cg.enforce_existing_cgroup("/system.slice", &config),
                Err(Error::Missing(_))
            ),
            "absent from the memory hierarchy"
        );
        std::fs::create_dir_all(tmp.path().join("memory/system.slice")).expect("mkdir");
        cg.enforce_existing_cgroup("/system.slice", &config)
            .expect("enforce");
        assert_eq!(read(tmp.path().join("cpu/system.slice/cpu.shares")), "512");
        assert_eq!(
            read(tmp.path().join("memory/system.slice/memory.limit_in_bytes")),
            (256 << 20).to_string()
        );
    }
}
