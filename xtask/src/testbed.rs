//! A private containerd for tests and the demo: a child process with everything under one
//! directory, its own CNI bridge and subnet, the local images imported, and cleanup on drop.
//!
//! # Use from an integration test
//!
//! Add `xtask = { path = "../xtask" }` (and `tempfile`) to the crate's `[dev-dependencies]`:
//!
//! ```no_run
//! use xtask::testbed::Testbed;
//!
//! fn pods_run_on_real_containerd() -> anyhow::Result<()> {
//!     if !xtask::is_root() {
//!         eprintln!("SKIPPED: the containerd testbed needs root");
//!         return Ok(());
//!     }
//!     let dir = tempfile::tempdir()?; // declared first, so dropped after the testbed
//!     let testbed = Testbed::start(dir.path())?; // ~1-2 s: containerd up, images in, CRI ready
//!     let endpoint = testbed.endpoint(); // "unix:///tmp/.tmpXXXX/containerd.sock"
//!     // ... point the CRI client or a kubelet at `endpoint`, run pods, then assert on the
//!     // runtime's view, e.g. the containers in namespace k8s.io:
//!     let ids = testbed.ctr(&["containers", "ls", "-q"])?;
//!     assert!(ids.lines().count() < 100);
//!     // Outage tests: testbed.kill()?; ...; testbed.restart()?;
//!     Ok(())
//! } // drop: removes all sandboxes and containers, stops containerd, deletes the bridge
//! ```
//!
//! Several testbeds can run at once (one per directory). [`Testbed::start`] installs missing
//! Debian packages ([`ensure_packages`]) and builds the images on first use
//! ([`images::ensure_images`], cached under
//! `target/testbed/images`). What it needs from the host: root, cgroup v1 or v2 with cgroupfs,
//! overlayfs, and the CNI plugins in `/usr/lib/cni`.
//!
//! # Directory layout
//!
//! `containerd.toml`, `containerd.sock`, `containerd.log`, `containerd.pid`, `root/`, `state/`
//! (including the pods' network namespaces), `runc/` (runc's state), `cni/net.d/` (the conflist:
//! bridge + loopback) and `cni/ipam/` (host-local's allocations).

mod cleanup;
mod cni_cache;
mod config;
mod cri;
mod net;
mod packages;

use std::{
    fs::{self, File, OpenOptions, TryLockError},
    io::Write,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow, bail};
use nix::sys::signal::Signal;

pub use cri::{Condition, runtime_status};
pub use packages::ensure_packages;

use crate::{
    images::{self, ImageTarballs},
    util,
};

/// The containerd namespace the CRI plugin uses; [`Testbed::ctr`] works in it.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// The `--eviction-hard` that kubelets started on a testbed (tests, the demo, the bench) run with:
/// upstream's memory threshold only. Upstream's disk thresholds (`nodefs.available<10%`,
/// `imagefs.available<15%`, ...) judge the host's disk, which the testbed shares: on a developer
/// machine or CI runner whose disk is over 85 % full they would put the node under DiskPressure and
/// refuse every pod, whatever the test is about. Tests of eviction pass their own `--eviction-hard`.
pub const EVICTION_HARD: &str = "--eviction-hard=memory.available<100Mi";

/// The `--pod-infra-container-image` that kubelets started on a testbed run with: the sandbox
/// image its containerd is configured with ([`images::PAUSE_REF`]), which image GC must never
/// remove. containerd 1.6 does not report it `pinned`, and the kubelet's default (upstream's
/// `registry.k8s.io/pause:3.10`) is another tag, so on a host disk over image GC's high threshold
/// (85 %, the testbed shares the host's disk) the kubelet removed the pause image from under 110
/// running sandboxes, and no pod could start after that (the soak, issue 16). An operator aligns
/// the two settings the same way.
pub fn pod_infra_container_image_arg() -> String {
    format!("--pod-infra-container-image={}", images::PAUSE_REF)
}

const START_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// `sun_path` is 108 bytes including the NUL.
const MAX_SOCKET_PATH: usize = 107;

/// The files and directories of a testbed in one directory.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) dir: PathBuf,
    pub(crate) config: PathBuf,
    pub(crate) socket: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) pid_file: PathBuf,
    pub(crate) root: PathBuf,
    pub(crate) state: PathBuf,
    pub(crate) runc_root: PathBuf,
    pub(crate) cni_conf: PathBuf,
    pub(crate) ipam: PathBuf,
}

impl Layout {
    pub(crate) fn new(dir: &Path) -> Layout {
        Layout {
            dir: dir.to_path_buf(),
            config: dir.join("containerd.toml"),
            socket: dir.join("containerd.sock"),
            log: dir.join("containerd.log"),
            pid_file: dir.join("containerd.pid"),
            root: dir.join("root"),
            state: dir.join("state"),
            runc_root: dir.join("runc"),
            cni_conf: dir.join("cni").join("net.d"),
            ipam: dir.join("cni").join("ipam"),
        }
    }
}

/// Locks `dir/testbed.lock`; fails if a live testbed holds it.
pub(crate) fn lock_dir(dir: &Path) -> Result<File> {
    let path = dir.join("testbed.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => {
            bail!("{} is used by another running testbed", dir.display())
        }
        Err(TryLockError::Error(e)) => Err(e).context(format!("cannot lock {}", path.display())),
    }
}

/// A private containerd with CRI, CNI and the test images, running until dropped.
///
/// Dropping it removes every container and sandbox in namespace `k8s.io`, stops containerd,
/// kills leftover shims and container processes, unmounts what they left under the directory,
/// deletes the CNI bridge and the IPAM state. Errors during that are printed, not raised; use
/// [`Testbed::shutdown`] to see them.
#[derive(Debug)]
pub struct Testbed {
    layout: Layout,
    images: ImageTarballs,
    slot: Option<net::Slot>,
    child: Option<Child>,
    /// Where the current containerd's output starts in the log.
    log_start: u64,
    /// The host PID of the namespaced systemd containerd runs under, if any.
    systemd_pid: Option<u32>,
    /// Empty CNI result files [`restart`](Self::restart) removed (see [`cni_cache`]).
    corrupt_cni_results: Vec<PathBuf>,
    _dir_lock: File,
}

impl Testbed {
    /// Starts a testbed with everything under `dir` (created if needed) and waits until CRI
    /// `Status` reports RuntimeReady and NetworkReady.
    ///
    /// Needs root. Installs missing packages, builds or reuses the images, cleans what a testbed
    /// that died in the same directory left, picks a free bridge and subnet, starts containerd
    /// (output in `dir/containerd.log`) and imports the images into namespace `k8s.io`.
    /// Blocks for about a second or two on a warm machine.
    pub fn start(dir: &Path) -> Result<Testbed> {
        Self::start_with(dir, None)
    }

    /// A testbed whose runc uses the systemd cgroup driver (`SystemdCgroup = true`) of
    /// `systemd`: containerd runs in its PID, mount and cgroup namespaces
    /// ([`crate::systemd::entered`]), so runc reaches that systemd on its bus and the
    /// container PIDs it hands over are systemd's. Pair it with a kubelet with
    /// `--cgroup-driver=systemd` in the same namespaces.
    pub fn start_in_systemd(
        dir: &Path,
        systemd: &crate::systemd::NamespacedSystemd,
    ) -> Result<Testbed> {
        Self::start_with(dir, Some(systemd.pid()))
    }

    fn start_with(dir: &Path, systemd_pid: Option<u32>) -> Result<Testbed> {
        if !util::is_root() {
            bail!("the containerd testbed needs root (mounts, cgroups, CNI)");
        }
        ensure_packages()?;
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let dir = dir.canonicalize()?;
        let layout = Layout::new(&dir);
        let socket_len = layout.socket.as_os_str().len();
        if socket_len > MAX_SOCKET_PATH {
            bail!(
                "{} is too long for a unix socket ({socket_len} > {MAX_SOCKET_PATH} bytes): use a shorter directory",
                layout.socket.display()
            );
        }
        let dir_lock = lock_dir(&dir)?;
        for e in cleanup::reap_dir(&dir) {
            eprintln!("testbed {}: cleaning an earlier run: {e:#}", dir.display());
        }
        let images = images::ensure_images(&images::default_dir())?;
        let slot = net::Slot::take(&dir)?;
        config::write(&layout, &slot, systemd_pid.is_some())?;
        fs::write(&layout.log, "")?; // a fresh log per start; restarts append
        let mut testbed = Testbed {
            layout,
            images,
            slot: Some(slot),
            child: None,
            log_start: 0,
            systemd_pid,
            corrupt_cni_results: Vec::new(),
            _dir_lock: dir_lock,
        };
        testbed.spawn()?;
        testbed.wait_serving()?;
        if !testbed.ctr(&["containers", "ls", "-q"])?.trim().is_empty() {
            // Left by an earlier run in this directory: remove them, then restart so that the
            // CRI plugin (which loaded them at start) forgets them too.
            testbed.purge()?;
            testbed.stop()?;
            testbed.spawn()?;
            testbed.wait_serving()?;
        }
        testbed.import_images()?;
        testbed.wait_ready()?;
        Ok(testbed)
    }

    /// The directory everything lives in (canonical).
    pub fn dir(&self) -> &Path {
        &self.layout.dir
    }

    /// The containerd socket, `dir/containerd.sock`.
    pub fn socket(&self) -> &Path {
        &self.layout.socket
    }

    /// The CRI endpoint for `--container-runtime-endpoint`: `unix://` + [`socket`](Self::socket).
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.layout.socket.display())
    }

    /// containerd's stdout and stderr, `dir/containerd.log` (restarts append to it).
    pub fn log(&self) -> &Path {
        &self.layout.log
    }

    /// The image tarballs that were imported.
    pub fn images(&self) -> &ImageTarballs {
        &self.images
    }

    /// The CNI bridge's name (the link exists once the first pod got an address).
    pub fn bridge(&self) -> &str {
        self.slot.as_ref().map_or("", |s| s.bridge.as_str())
    }

    /// The pod subnet, `10.77.<n>.0/24`.
    pub fn subnet(&self) -> &str {
        self.slot.as_ref().map_or("", |s| s.subnet.as_str())
    }

    /// The empty CNI result files (`/var/lib/cni/results/…`) that restarts removed so far: each
    /// is a sandbox whose network setup a killed containerd interrupted.
    pub fn corrupt_cni_results(&self) -> &[PathBuf] {
        &self.corrupt_cni_results
    }

    /// The sandboxes holding a pod address: host-local IPAM's allocations (one file per
    /// address, naming the sandbox), which only a successful CNI teardown releases.
    pub fn sandboxes_with_an_address(&self) -> Result<Vec<String>> {
        let mut ids = Vec::new();
        for entry in util::dir_entries(&self.layout.ipam.join(config::CNI_NETWORK))? {
            let is_address = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.parse::<std::net::IpAddr>().is_ok());
            if is_address {
                let content = fs::read_to_string(entry.path())?;
                ids.extend(content.lines().next().map(|id| id.trim().to_string()));
            }
        }
        Ok(ids)
    }

    /// Where containerd's CNI library caches `sandbox_id`'s network result (`eth0`); see
    /// [`restart`](Self::restart).
    pub fn cni_result_file(&self, sandbox_id: &str) -> PathBuf {
        cni_cache::result_file(config::CNI_NETWORK, sandbox_id)
    }

    /// containerd's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether containerd is running (false after [`stop`](Self::stop), [`kill`](Self::kill) or a crash).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Runs `ctr --address SOCK --namespace k8s.io ARGS…` and returns its stdout, e.g.
    /// `testbed.ctr(&["tasks", "ls"])`.
    pub fn ctr(&self, args: &[&str]) -> Result<String> {
        util::output(
            Command::new("ctr")
                .arg("--address")
                .arg(&self.layout.socket)
                .args(["--namespace", CRI_NAMESPACE, "--timeout", "60s"])
                .args(args),
        )
    }

    /// CRI `RuntimeService/Status`: the runtime conditions (RuntimeReady, NetworkReady).
    pub fn status(&self) -> Result<Vec<Condition>> {
        runtime_status(&self.layout.socket, Duration::from_secs(5))
    }

    /// Stops containerd gracefully (SIGTERM, SIGKILL after 10 s). Like `systemctl stop
    /// containerd`: shims and containers keep running, and [`restart`](Self::restart) finds them.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        util::signal(self.containerd_pid(&child), Signal::SIGTERM)?;
        let deadline = Instant::now() + STOP_TIMEOUT;
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                child.kill()?;
                child.wait()?;
                bail!("containerd ignored SIGTERM for {STOP_TIMEOUT:?}; killed it");
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Kills containerd with SIGKILL, for outage tests; shims and containers keep running.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            let pid = self.containerd_pid(&child);
            if pid != child.id() {
                util::signal(pid, Signal::SIGKILL)?;
            }
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Stops containerd if it runs, starts it again on the same state and waits until CRI is
    /// ready; running containers are picked up again.
    ///
    /// Like an operator's unit would before starting it, this removes the empty CNI result
    /// files a killed containerd can leave for its sandboxes, which would fail every
    /// `StopPodSandbox` of those sandboxes ([`corrupt_cni_results`](Self::corrupt_cni_results)).
    pub fn restart(&mut self) -> Result<()> {
        self.stop()?;
        let removed = cni_cache::remove_empty_results(&self.layout.root, config::CNI_NETWORK)?;
        self.corrupt_cni_results.extend(removed);
        self.spawn()?;
        self.wait_serving()?;
        self.wait_ready()
    }

    /// containerd's host PID: the child's, or in a namespaced systemd the process `nsenter`
    /// forked.
    fn containerd_pid(&self, child: &Child) -> u32 {
        match self.systemd_pid {
            Some(_) => crate::systemd::entered_pid(child.id()).unwrap_or(child.id()),
            None => child.id(),
        }
    }

    /// Tears the testbed down like `drop`, but returns what went wrong.
    pub fn shutdown(mut self) -> Result<()> {
        self.teardown()
    }

    fn spawn(&mut self) -> Result<()> {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.layout.log)
            .with_context(|| format!("cannot open {}", self.layout.log.display()))?;
        writeln!(log, "==== xtask: starting containerd")?;
        self.log_start = log.metadata()?.len();
        let mut cmd = match self.systemd_pid {
            Some(pid) => crate::systemd::entered(pid, "containerd"),
            None => Command::new("containerd"),
        };
        let child = cmd
            .arg("--config")
            .arg(&self.layout.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: a Ctrl-C in the terminal goes to xtask, which cleans up.
            .process_group(0)
            .spawn()
            .context("cannot start containerd")?;
        fs::write(&self.layout.pid_file, child.id().to_string())?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits for the socket and for `ctr version` to answer.
    fn wait_serving(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = &mut self.child
                && let Some(status) = child.try_wait()?
            {
                self.child = None;
                bail!(
                    "containerd exited ({status}); end of {}:\n{}",
                    self.layout.log.display(),
                    util::tail(&self.layout.log, 20)
                );
            }
            if self.layout.socket.exists() && self.ctr(&["version"]).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "containerd did not serve {} within {START_TIMEOUT:?}; end of its log:\n{}",
                    self.layout.socket.display(),
                    util::tail(&self.layout.log, 20)
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until CRI Status reports RuntimeReady and NetworkReady.
    fn wait_ready(&self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let last = match self.status() {
                Ok(conditions) => {
                    let ready = |kind| conditions.iter().any(|c| c.kind == kind && c.status);
                    if ready("RuntimeReady") && ready("NetworkReady") {
                        return Ok(());
                    }
                    format!("{conditions:?}")
                }
                Err(e) => format!("{e:#}"),
            };
            let log = fs::read(&self.layout.log).unwrap_or_default();
            let log = String::from_utf8_lossy(log.get(self.log_start as usize..).unwrap_or(&[]));
            if let Some(line) = log
                .lines()
                .find(|l| l.contains("failed to load plugin io.containerd.grpc.v1.cri"))
            {
                bail!("containerd's CRI plugin did not load: {line}");
            }
            if Instant::now() > deadline {
                bail!(
                    "CRI not ready within {START_TIMEOUT:?}: {last}; end of {}:\n{}",
                    self.layout.log.display(),
                    util::tail(&self.layout.log, 20)
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn import_images(&self) -> Result<()> {
        for tarball in self.images.all() {
            let path = tarball.to_string_lossy();
            let mut attempt = 0;
            while let Err(e) = self.ctr(&["images", "import", &path]) {
                attempt += 1;
                if attempt == 5 {
                    return Err(e.context(format!("cannot import {path}")));
                }
                thread::sleep(Duration::from_millis(200));
            }
        }
        Ok(())
    }

    /// Removes every task and container in namespace k8s.io (tasks are killed with SIGKILL).
    ///
    /// One id at a time, ignoring errors: the CRI plugin removes some by itself as sandboxes die.
    /// Fails only if something is left at the end.
    fn purge(&self) -> Result<()> {
        let ids = |what| -> Result<Vec<String>> {
            Ok(self
                .ctr(&[what, "ls", "-q"])?
                .split_whitespace()
                .map(str::to_owned)
                .collect())
        };
        for id in ids("tasks")? {
            let _ = self.ctr(&["tasks", "kill", "--signal", "SIGKILL", &id]);
        }
        for id in ids("tasks")? {
            let _ = self.ctr(&["tasks", "rm", "--force", &id]);
        }
        for id in ids("containers")? {
            let _ = self.ctr(&["containers", "rm", &id]);
        }
        let (tasks, containers) = (ids("tasks")?, ids("containers")?);
        if !tasks.is_empty() || !containers.is_empty() {
            bail!("cannot remove tasks {tasks:?} and containers {containers:?}");
        }
        Ok(())
    }

    fn teardown(&mut self) -> Result<()> {
        let mut errors = Vec::new();
        if self.is_running() {
            errors.extend(self.purge().err());
            errors.extend(self.stop().err());
        }
        self.child = None;
        errors.extend(cleanup::reap_dir(&self.layout.dir));
        if let Some(slot) = self.slot.take() {
            errors.extend(slot.release().err());
        }
        match errors.len() {
            0 => Ok(()),
            _ => Err(anyhow!(
                "{}",
                errors
                    .iter()
                    .map(|e| format!("{e:#}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
        }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!(
                "testbed {}: cleanup incomplete: {e:#}",
                self.layout.dir.display()
            );
        }
    }
}
