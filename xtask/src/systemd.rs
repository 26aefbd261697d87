//! A systemd for tests of the systemd cgroup driver on machines whose PID 1 is not systemd:
//! `/lib/systemd/systemd` as PID 1 of its own PID, mount and cgroup namespaces, with a
//! D-Bus system bus, its own `/run`, and its cgroup tree below `rk-systemd-<n>` in every
//! hierarchy of the host; killed and cleaned up on drop.
//!
//! It boots a minimal target (`dbus.socket` + `dbus.service` only) from a private unit
//! directory (`SYSTEMD_UNIT_PATH`), so none of the host's units start. Clients outside reach
//! its manager through the bus at [`NamespacedSystemd::bus_address`]
//! (`/proc/<pid>/root/run/dbus/system_bus_socket`); systemd's private socket refuses
//! peers from outside its PID namespace (their `SO_PEERCRED` pid is 0).
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! let dir = tempfile::tempdir()?;
//! let systemd = xtask::systemd::NamespacedSystemd::start(dir.path())?;
//! println!("{}", systemd.systemctl(&["status", "kubepods.slice"])?);
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Where systemd is installed on Debian.
const SYSTEMD: [&str; 2] = ["/lib/systemd/systemd", "/usr/lib/systemd/systemd"];

/// How long systemd and its bus may take to come up on a loaded machine.
const START_DEADLINE: Duration = Duration::from_secs(90);

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A running namespaced systemd (see the module docs).
#[derive(Debug)]
pub struct NamespacedSystemd {
    child: Child,
    pid: u32,
    subdir: String,
    mounts: Vec<PathBuf>,
    log: PathBuf,
}

fn units(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let target = |desc: &str, wants: &str| format!("[Unit]\nDescription={desc}\n{wants}");
    for t in ["sysinit", "basic", "shutdown", "sockets"] {
        std::fs::write(dir.join(format!("{t}.target")), target(t, ""))?;
    }
    std::fs::write(
        dir.join("rk.target"),
        target(
            "rust kubelet test target",
            "Wants=dbus.socket dbus.service\n",
        ),
    )?;
    std::fs::write(
        dir.join("dbus.socket"),
        "[Unit]\nDescription=D-Bus System Message Bus Socket\n\n[Socket]\nListenStream=/run/dbus/system_bus_socket\n",
    )?;
    std::fs::write(
        dir.join("dbus.service"),
        "[Unit]\nDescription=D-Bus System Message Bus\nRequires=dbus.socket\n\n[Service]\nType=notify\nNotifyAccess=main\nExecStart=/usr/bin/dbus-daemon --system --address=systemd: --nofork --nopidfile --systemd-activation --syslog-only\n",
    )?;
    Ok(())
}

/// The mount point of every cgroup hierarchy (v1 controllers, `name=systemd`, the unified
/// one), from `/proc/self/mountinfo`.
fn cgroup_mounts() -> Result<Vec<(PathBuf, String, String)>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount = left.split_whitespace().nth(4).unwrap_or_default();
        let mut right = right.split_whitespace();
        let fstype = right.next().unwrap_or_default();
        let opts = right.nth(1).unwrap_or_default();
        if fstype == "cgroup" || fstype == "cgroup2" {
            out.push((mount.into(), fstype.to_owned(), opts.to_owned()));
        }
    }
    Ok(out)
}

impl NamespacedSystemd {
    /// Why a namespaced systemd cannot run here, if it cannot: not root, no systemd or
    /// dbus-daemon, no cgroup filesystem.
    pub fn unavailable() -> Option<String> {
        if !crate::is_root() {
            return Some("needs root".into());
        }
        if !SYSTEMD.iter().any(|p| Path::new(p).exists()) {
            return Some(format!("no systemd at {SYSTEMD:?}"));
        }
        if !Path::new("/usr/bin/dbus-daemon").exists() {
            return Some("no /usr/bin/dbus-daemon (package dbus)".into());
        }
        match cgroup_mounts() {
            Ok(m) if !m.is_empty() => None,
            _ => Some("no cgroup filesystem mounted".into()),
        }
    }

    /// Starts systemd with its unit files and log in `dir`, and waits until its bus
    /// answers (`systemctl is-system-running` reports `running` or `degraded`). Installs
    /// the Debian packages first when missing ([`crate::testbed::ensure_packages`]).
    pub fn start(dir: &Path) -> Result<Self> {
        if crate::is_root() {
            crate::testbed::ensure_packages()?;
        }
        if let Some(why) = Self::unavailable() {
            bail!("namespaced systemd: {why}");
        }
        let binary = SYSTEMD
            .iter()
            .find(|p| Path::new(p).exists())
            .copied()
            .unwrap_or(SYSTEMD[0]);
        let unit_dir = dir.join("units");
        units(&unit_dir)?;
        let subdir = format!(
            "rk-systemd-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let hierarchies = cgroup_mounts()?;
        let mut mounts = Vec::new();
        let mut inner_mounts = String::new();
        let v2_only = hierarchies
            .iter()
            .any(|(m, t, _)| t == "cgroup2" && m == Path::new("/sys/fs/cgroup"));
        if v2_only {
            inner_mounts.push_str("mount -t cgroup2 cgroup2 /sys/fs/cgroup\n");
        } else {
            inner_mounts.push_str("mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup\n");
        }
        for (mount, fstype, opts) in &hierarchies {
            let cg = mount.join(&subdir);
            std::fs::create_dir_all(&cg).with_context(|| format!("creating {}", cg.display()))?;
            // A new cpuset cgroup has no CPUs or memory nodes until given its parent's.
            for file in ["cpuset.cpus", "cpuset.mems"] {
                if let Ok(v) = std::fs::read_to_string(mount.join(file)) {
                    let _ = std::fs::write(cg.join(file), v.trim());
                }
            }
            mounts.push(mount.clone());
            if v2_only {
                continue;
            }
            let Some(name) = mount.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let controllers: Vec<&str> = opts
                .split(',')
                .filter(|o| !matches!(*o, "rw" | "ro" | "nsdelegate" | "memory_recursiveprot"))
                .collect();
            if fstype == "cgroup2" {
                inner_mounts.push_str(&format!(
                    "mkdir -p /sys/fs/cgroup/{name}; mount -t cgroup2 cgroup2 /sys/fs/cgroup/{name}\n"
                ));
            } else {
                let opts = if controllers.iter().any(|c| c.starts_with("name=")) {
                    format!("none,{}", controllers.join(","))
                } else {
                    controllers.join(",")
                };
                inner_mounts.push_str(&format!(
                    "mkdir -p /sys/fs/cgroup/{name}; mount -t cgroup -o {opts} cgroup /sys/fs/cgroup/{name}\n"
                ));
            }
        }
        let log = dir.join("systemd.log");
        let enter: String = mounts
            .iter()
            .map(|m| format!("echo $$ > {}/{subdir}/cgroup.procs\n", m.display()))
            .collect();
        let inner = format!(
            "set -e\nmount -t tmpfs tmpfs /run\n{inner_mounts}exec env container=rust-kubelet-test SYSTEMD_UNIT_PATH={units} {binary} --unit=rk.target --log-target=console\n",
            units = unit_dir.display(),
        );
        let outer = format!(
            "set -e\n{enter}exec unshare --pid --fork --mount --cgroup --mount-proc --propagation private sh -c '{inner}'\n"
        );
        let child = Command::new("sh")
            .arg("-c")
            .arg(&outer)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(dir.join("systemd.stderr"))?)
            .spawn()
            .context("starting unshare")?;
        let mut this = Self {
            pid: 0,
            child,
            subdir,
            mounts,
            log,
        };
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Some(status) = this.child.try_wait()? {
                let err = std::fs::read_to_string(dir.join("systemd.stderr")).unwrap_or_default();
                bail!("namespaced systemd exited ({status}): {err}");
            }
            if this.pid == 0 {
                this.pid = systemd_pid(this.child.id()).unwrap_or(0);
            }
            if this.pid != 0
                && Path::new(&format!(
                    "/proc/{}/root/run/dbus/system_bus_socket",
                    this.pid
                ))
                .exists()
            {
                let state = this.systemctl(&["is-system-running"]).unwrap_or_default();
                if matches!(state.trim(), "running" | "degraded") {
                    return Ok(this);
                }
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(&this.log).unwrap_or_default();
                bail!("namespaced systemd did not come up in {START_DEADLINE:?}; log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// systemd's PID on the host.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The D-Bus address of its system bus, reachable from the host.
    pub fn bus_address(&self) -> String {
        format!(
            "unix:path=/proc/{}/root/run/dbus/system_bus_socket",
            self.pid
        )
    }

    /// The directory below each hierarchy's mount point that is systemd's root cgroup
    /// (`rk-systemd-<pid>-<n>`).
    pub fn cgroup_subdir(&self) -> &str {
        &self.subdir
    }

    /// Runs `systemctl args` inside its namespaces; stdout, whatever the exit status.
    pub fn systemctl(&self, args: &[&str]) -> Result<String> {
        let out = entered(self.pid, "systemctl")
            .arg("--no-pager")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running systemctl in the namespace")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A unit's property as `systemctl show -p <name> --value` prints it.
    pub fn property(&self, unit: &str, name: &str) -> Result<String> {
        Ok(self
            .systemctl(&["show", "-p", name, "--value", unit])?
            .trim()
            .to_owned())
    }
}

/// `nsenter` into the PID, mount and cgroup namespaces of the systemd with host PID
/// `systemd_pid`, running `program` (add its arguments). `nsenter` forks: the program is its
/// child ([`entered_pid`]); signal that one, `nsenter` does not forward signals.
pub fn entered(systemd_pid: u32, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("nsenter");
    c.args(["-t", &systemd_pid.to_string(), "-p", "-m", "-C", "--"])
        .arg(program);
    c
}

/// The host PID of the program an [`entered`] `nsenter` (host PID `nsenter_pid`) forked,
/// once it runs (waits up to 5 s).
pub fn entered_pid(nsenter_pid: u32) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(pid) = first_child(nsenter_pid) {
            return Some(pid);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn first_child(pid: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

/// The child of `unshare` (PID 1 in the new namespace).
fn systemd_pid(sh_pid: u32) -> Option<u32> {
    // `sh` execs `unshare`, which forks systemd.
    let children =
        std::fs::read_to_string(format!("/proc/{sh_pid}/task/{sh_pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

/// Removes a cgroup directory tree, deepest first (the kernel's files go with each rmdir).
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

impl Drop for NamespacedSystemd {
    fn drop(&mut self) {
        // SIGKILL to PID 1 of a namespace kills every process in it.
        if self.pid != 0 {
            let _ = Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let deadline = Instant::now() + Duration::from_secs(30);
        for mount in &self.mounts {
            let dir = mount.join(&self.subdir);
            while dir.exists() && Instant::now() < deadline {
                remove_cgroup_tree(&dir);
                if dir.exists() {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
}
