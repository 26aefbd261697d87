//! What the node status reports about the machine: cadvisor's `MachineInfo` and
//! `VersionInfo` as the kubelet uses them (upstream `pkg/kubelet/cadvisor/util.go`
//! `CapacityFromMachineInfo`, and cadvisor's `machine/info.go`): online CPUs, `MemTotal`,
//! hugepage pools, the machine-id, system-uuid and boot-id, the kernel release, the OS image
//! (`PRETTY_NAME`) and the capacity of the filesystem holding the kubelet's root directory.
//!
//! Everything is read below a host root (`/` in production, a temporary directory in tests);
//! a file that cannot be read leaves its value empty or zero, as cadvisor does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::quantity::{Amount, Format};

/// The machine as the node status reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineInfo {
    /// Online logical CPUs (cadvisor `NumCores`).
    pub num_cores: u32,
    /// `MemTotal` in bytes.
    pub memory_bytes: u64,
    /// Hugepage pools: page size in bytes → pages.
    pub hugepages: BTreeMap<u64, u64>,
    /// Capacity in bytes of the filesystem holding the kubelet root directory.
    pub root_fs_bytes: Option<u64>,
    /// `/etc/machine-id`.
    pub machine_id: String,
    /// The DMI product UUID.
    pub system_uuid: String,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// The kernel release (`uname -r`).
    pub kernel_version: String,
    /// `PRETTY_NAME` of `/etc/os-release` (cadvisor `ContainerOsVersion`).
    pub os_image: String,
}

impl MachineInfo {
    /// Reads this machine; `root_dir` is the kubelet's root directory (ephemeral storage).
    pub fn read(root_dir: &Path) -> Self {
        Self::read_from(Path::new("/"), root_dir)
    }

    /// Reads a machine whose files are below `host` (tests point it at a fixture tree).
    pub fn read_from(host: &Path, root_dir: &Path) -> Self {
        let file = |p: &str| -> Option<String> {
            std::fs::read_to_string(host.join(p.trim_start_matches('/')))
                .ok()
                .map(|s| s.trim().to_owned())
        };
        Self {
            num_cores: file("sys/devices/system/cpu/online")
                .and_then(|s| count_cpu_list(&s))
                .unwrap_or_else(|| {
                    std::thread::available_parallelism()
                        .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
                }),
            memory_bytes: file("proc/meminfo")
                .and_then(|m| mem_total_bytes(&m))
                .unwrap_or(0),
            hugepages: hugepages(&host.join("sys/kernel/mm/hugepages")),
            root_fs_bytes: fs_capacity(root_dir),
            machine_id: file("etc/machine-id")
                .or_else(|| file("var/lib/dbus/machine-id"))
                .unwrap_or_default(),
            system_uuid: file("sys/class/dmi/id/product_uuid").unwrap_or_default(),
            boot_id: file("proc/sys/kernel/random/boot_id").unwrap_or_default(),
            kernel_version: file("proc/sys/kernel/osrelease").unwrap_or_default(),
            os_image: file("etc/os-release")
                .and_then(|s| pretty_name(&s))
                .unwrap_or_else(|| "Linux".to_owned()),
        }
    }

    /// Upstream `CapacityFromMachineInfo` plus the root filesystem: `cpu`, `memory`,
    /// `hugepages-<size>` (also when empty) and `ephemeral-storage`.
    pub fn capacity(&self) -> BTreeMap<String, Amount> {
        let mut c = BTreeMap::new();
        c.insert(
            "cpu".to_owned(),
            Amount::milli(i128::from(self.num_cores) * 1000),
        );
        c.insert(
            "memory".to_owned(),
            Amount::new(i128::from(self.memory_bytes), Format::BinarySi),
        );
        for (size, pages) in &self.hugepages {
            let size_name = Amount::new(i128::from(*size), Format::BinarySi).canonical();
            c.insert(
                format!("hugepages-{size_name}"),
                Amount::new(i128::from(*size) * i128::from(*pages), Format::BinarySi),
            );
        }
        if let Some(bytes) = self.root_fs_bytes {
            c.insert(
                "ephemeral-storage".to_owned(),
                Amount::new(i128::from(bytes), Format::BinarySi),
            );
        }
        c
    }
}

/// Counts a kernel CPU list such as `0-3,6,8-9`.
fn count_cpu_list(list: &str) -> Option<u32> {
    let mut n = 0u32;
    for part in list.split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<u32>().ok()?.checked_sub(a.parse::<u32>().ok()?)? + 1,
            None => part.parse::<u32>().map(|_| 1).ok()?,
        };
    }
    (n > 0).then_some(n)
}

fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

fn pretty_name(os_release: &str) -> Option<String> {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_owned())
}

/// `hugepages-<kB>kB/nr_hugepages` under `/sys/kernel/mm/hugepages`.
fn hugepages(dir: &Path) -> BTreeMap<u64, u64> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let kb: u64 = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let pages = std::fs::read_to_string(e.path().join("nr_hugepages"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            Some((kb * 1024, pages))
        })
        .collect()
}

/// The filesystem capacity (`f_blocks × f_frsize`, as cadvisor) of the nearest existing
/// ancestor of `dir`.
fn fs_capacity(dir: &Path) -> Option<u64> {
    let mut path: PathBuf = dir.to_path_buf();
    loop {
        if let Ok(s) = nix::sys::statvfs::statvfs(&path) {
            // The field types are narrower on 32-bit targets.
            #[allow(clippy::useless_conversion)]
            return Some(u64::from(s.blocks()).saturating_mul(u64::from(s.fragment_size())));
        }
        if !path.pop() {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, path: &str, content: &str) {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap_or(root)).ok();
        std::fs::write(p, content).ok();
    }

    #[test]
    fn reads_a_machine_from_its_files() {
        let host = tempfile::tempdir().ok();
        let host = host
            .as_ref()
            .map_or(Path::new("/nonexistent"), |d| d.path());
        write(host, "sys/devices/system/cpu/online", "0-3,6\n");
        write(
            host,
            "proc/meminfo",
            "MemTotal:       16393268 kB\nMemFree: 1 kB\n",
        );
        write(
            host,
            "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
            "4\n",
        );
        write(
            host,
            "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages",
            "0\n",
        );
        write(host, "etc/machine-id", "abc123\n");
        write(host, "proc/sys/kernel/random/boot_id", "boot-1\n");
        write(host, "proc/sys/kernel/osrelease", "6.1.0-18-amd64\n");
        write(
            host,
            "etc/os-release",
            "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n",
        );
        let m = MachineInfo::read_from(host, host);
        assert_eq!(m.num_cores, 5);
        assert_eq!(m.memory_bytes, 16_393_268 * 1024);
        assert_eq!(m.machine_id, "abc123");
        assert_eq!(m.system_uuid, "");
        assert_eq!(m.boot_id, "boot-1");
        assert_eq!(m.kernel_version, "6.1.0-18-amd64");
        assert_eq!(m.os_image, "Debian GNU/Linux 12 (bookworm)");
        assert!(m.root_fs_bytes.is_some_and(|b| b > 0));
        let c: BTreeMap<_, _> = m
            .capacity()
            .into_iter()
            .map(|(k, v)| (k, v.canonical()))
            .collect();
        assert_eq!(c["cpu"], "5");
        assert_eq!(c["memory"], "16393268Ki");
        assert_eq!(c["hugepages-2Mi"], "8Mi");
        assert_eq!(c["hugepages-1Gi"], "0");
        assert!(c.contains_key("ephemeral-storage"));
    }

    #[test]
    fn cpu_lists_count_as_the_kernel_writes_them() {
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-7"), Some(8));
        assert_eq!(count_cpu_list("0-1,4-5,9"), Some(5));
        assert_eq!(count_cpu_list("x"), None);
    }
}
