//! The node's system containers of the Summary API: `kubelet`, `runtime` and `misc` (the
//! `pods` one is the pod cgroup root, see [`super::Summarizer`]).
//!
//! Mirrors upstream `pkg/kubelet/server/stats/summary_sys_containers.go`
//! (`GetSystemContainersStats`: a system container whose cgroup name is empty is left out,
//! the kubelet's start time is the kubelet's) and the cgroup names of
//! `pkg/kubelet/cm/container_manager_linux.go`: `--kubelet-cgroups` or else the cgroup of the
//! kubelet process itself (`getContainer(os.Getpid())`), `--runtime-cgroups`, and
//! `--system-cgroups` for `misc`.
//!
//! Two differences, both to report what upstream cannot on some machines:
//! * without `--runtime-cgroups`, the runtime's cgroup is the cgroup of the process serving
//!   the CRI socket (its pid from `SO_PEERCRED`), which is what upstream's dockershim found
//!   through docker's pid file;
//! * on cgroup v1 upstream refuses a process whose `cpu` and `memory` cgroups differ ("cpu
//!   and memory cgroup hierarchy not unified"); here CPU is read from the process's
//!   `cpuacct` cgroup and memory from its `memory` cgroup.

// Reviewed (issue 16): procfs reads and one unix-socket connect, made from the Summarizer's
// node reader, which runs on the blocking pool.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use k8s_openapi::jiff::Timestamp;

use super::cgroup::Reader;
use crate::cm::cgroupfs::Layout;

/// Where each system container's cgroup comes from (upstream `NodeConfig`
/// `KubeletCgroupsName`, `RuntimeCgroupsName`, `SystemCgroupsName`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// `--kubelet-cgroups`; `None`: the cgroup of this process.
    pub kubelet: Option<String>,
    /// `--runtime-cgroups`; `None`: the cgroup of the process serving `runtime_socket`.
    pub runtime: Option<String>,
    /// The CRI socket whose server is the runtime.
    pub runtime_socket: Option<PathBuf>,
    /// `--system-cgroups` (`misc`); `None`: no `misc` system container.
    pub misc: Option<String>,
}

/// The cgroups of one system container: the one CPU is read from and the one memory is read
/// from (the same one on cgroup v2 and on a unified v1 hierarchy).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cgroups {
    /// Read for CPU (`cpuacct` on v1).
    pub cpu: String,
    /// Read for memory.
    pub memory: String,
}

impl Cgroups {
    /// Both controllers in cgroup `name`.
    pub fn named(name: &str) -> Self {
        Self {
            cpu: name.to_owned(),
            memory: name.to_owned(),
        }
    }

    /// The cgroups of a process from its `/proc/<pid>/cgroup` text (upstream
    /// `cgroups.ParseCgroupFile`): the `0::` line on v2, the `cpuacct` and `memory` lines on
    /// v1.
    pub fn of_process(proc_cgroup: &str, layout: &Layout) -> Option<Self> {
        let controller_path = |wanted: &str| {
            proc_cgroup.lines().find_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                let found = if wanted.is_empty() {
                    controllers.is_empty()
                } else {
                    controllers.split(',').any(|c| c == wanted)
                };
                found.then(|| path.to_owned())
            })
        };
        match layout {
            Layout::V2(_) => controller_path("").map(|p| Self::named(&p)),
            Layout::V1(_) => Some(Self {
                cpu: controller_path("cpuacct")?,
                memory: controller_path("memory")?,
            }),
        }
    }
}

/// One resolved system container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemContainer {
    /// `kubelet`, `runtime` or `misc`.
    pub name: &'static str,
    /// Its cgroups.
    pub cgroups: Cgroups,
    /// When its process started, when it is a process's cgroup.
    pub start_time: Option<Timestamp>,
}

/// Resolves [`Config`] on each summary; the runtime's pid is looked up once and again only
/// when that process is gone.
#[derive(Debug, Default)]
pub struct Resolver {
    config: Config,
    runtime_pid: Mutex<Option<u32>>,
}

impl Resolver {
    /// A resolver of `config`.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            runtime_pid: Mutex::new(None),
        }
    }

    /// The system containers that can be found now, in upstream's name order
    /// (`kubelet`, `runtime`, `misc`).
    pub fn resolve(&self, reader: &Reader) -> Vec<SystemContainer> {
        let layout = reader.layout();
        let mut out = Vec::new();
        let kubelet = match &self.config.kubelet {
            Some(name) => Some((Cgroups::named(name), None)),
            None => process_cgroups("self", layout)
                .map(|c| (c, process_start_time(Path::new("/proc"), "self"))),
        };
        let runtime = match &self.config.runtime {
            Some(name) => Some((Cgroups::named(name), None)),
            None => self.runtime_pid().and_then(|pid| {
                let pid = pid.to_string();
                process_cgroups(&pid, layout)
                    .map(|c| (c, process_start_time(Path::new("/proc"), &pid)))
            }),
        };
        let misc = self
            .config
            .misc
            .as_deref()
            .map(|name| (Cgroups::named(name), None));
        for (name, found) in [
            (super::v1alpha1::SYSTEM_CONTAINER_KUBELET, kubelet),
            (super::v1alpha1::SYSTEM_CONTAINER_RUNTIME, runtime),
            (super::v1alpha1::SYSTEM_CONTAINER_MISC, misc),
        ] {
            if let Some((cgroups, start_time)) = found {
                out.push(SystemContainer {
                    name,
                    cgroups,
                    start_time,
                });
            }
        }
        out
    }

    fn runtime_pid(&self) -> Option<u32> {
        let socket = self.config.runtime_socket.as_deref()?;
        let mut cached = self.runtime_pid.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pid) = *cached
            && Path::new(&format!("/proc/{pid}")).exists()
        {
            return Some(pid);
        }
        *cached = socket_server_pid(socket);
        *cached
    }
}

fn process_cgroups(pid: &str, layout: &Layout) -> Option<Cgroups> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    Cgroups::of_process(&text, layout)
}

/// The pid of the process serving the unix socket at `path`: its peer credentials
/// (`SO_PEERCRED`) on a connection.
pub fn socket_server_pid(path: &Path) -> Option<u32> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let stream = std::os::unix::net::UnixStream::connect(path).ok()?;
    let creds = getsockopt(&stream, PeerCredentials).ok()?;
    u32::try_from(creds.pid()).ok().filter(|pid| *pid > 0)
}

/// When process `pid` (or `self`) started: `starttime` of `<proc>/<pid>/stat` in clock ticks
/// after the boot time of `<proc>/stat`.
pub fn process_start_time(proc_root: &Path, pid: &str) -> Option<Timestamp> {
    let stat = std::fs::read_to_string(proc_root.join(pid).join("stat")).ok()?;
    let boot = super::host::boot_time(&std::fs::read_to_string(proc_root.join("stat")).ok()?)?;
    start_time_from_stat(&stat, boot)
}

/// `starttime` (field 22) of a `/proc/<pid>/stat` text after `boot`.
fn start_time_from_stat(stat: &str, boot: Timestamp) -> Option<Timestamp> {
    const USER_HZ: u64 = 100;
    let (_, rest) = stat.rsplit_once(')')?;
    // Field 3 (state) is the first after the command.
    let ticks: u64 = rest.split_whitespace().nth(22 - 3)?.parse().ok()?;
    let nanos = i64::try_from(ticks.saturating_mul(1_000_000_000 / USER_HZ)).ok()?;
    boot.checked_add(k8s_openapi::jiff::SignedDuration::from_nanos(nanos))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "9:name=systemd:/\n4:memory:/process_api/abc\n2:cpuacct:/\n1:cpu:/\n0::/\n";

    fn v1() -> Layout {
        Layout::V1(vec![
            ("cpuacct".into(), "/sys/fs/cgroup/cpuacct".into()),
            ("memory".into(), "/sys/fs/cgroup/memory".into()),
        ])
    }

    #[test]
    fn a_process_cgroups_per_controller_on_v1_and_the_unified_one_on_v2() {
        assert_eq!(
            Cgroups::of_process(V1, &v1()),
            Some(Cgroups {
                cpu: "/".into(),
                memory: "/process_api/abc".into(),
            })
        );
        let comounted = "5:cpu,cpuacct:/system.slice/containerd.service\n3:memory:/system.slice/containerd.service\n";
        assert_eq!(
            Cgroups::of_process(comounted, &v1()),
            Some(Cgroups::named("/system.slice/containerd.service"))
        );
        assert_eq!(
            Cgroups::of_process("0::/kubelet.slice\n", &Layout::V2("/sys/fs/cgroup".into())),
            Some(Cgroups::named("/kubelet.slice"))
        );
        assert_eq!(Cgroups::of_process("0::/x\n", &v1()), None);
    }

    #[test]
    fn start_time_is_boot_plus_ticks() {
        let boot = Timestamp::from_second(1_700_000_000).expect("ts");
        let mut fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        fields[22 - 3] = "12345".into();
        let stat = format!("42 (a) b) {}", fields.join(" "));
        assert_eq!(
            start_time_from_stat(&stat, boot),
            Some(Timestamp::from_millisecond(1_700_000_123_450).expect("ts"))
        );
    }

    #[test]
    fn explicit_names_win_and_misc_needs_one() {
        let reader = Reader::new(v1());
        let r = Resolver::new(Config {
            kubelet: Some("/kubelet".into()),
            runtime: Some("/runtime".into()),
            ..Default::default()
        });
        let found: Vec<(&str, Cgroups)> = r
            .resolve(&reader)
            .into_iter()
            .map(|c| (c.name, c.cgroups))
            .collect();
        assert_eq!(
            found,
            [
                ("kubelet", Cgroups::named("/kubelet")),
                ("runtime", Cgroups::named("/runtime")),
            ]
        );
    }

    #[test]
    fn the_runtime_is_the_process_serving_its_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cri.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        assert_eq!(socket_server_pid(&path), Some(std::process::id()));
        assert_eq!(socket_server_pid(&dir.path().join("none.sock")), None);
    }
}
