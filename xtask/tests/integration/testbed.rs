//! The testbed on the real containerd: start, images, CRI readiness, outage and restart, and a
//! drop that leaves no process, bridge or mount behind. Needs root (CI is root); skipped otherwise.

use std::{fs, path::Path, process::Command, thread, time::Instant};

use anyhow::{Context, Result, ensure};
use xtask::{images, testbed::Testbed};

fn skip() -> bool {
    if xtask::is_root() {
        return false;
    }
    eprintln!("SKIPPED: the containerd testbed needs root");
    true
}

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(") ")
            .next()
            .is_some_and(|s| !s.starts_with('Z'))
    })
}

fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

fn mounts_under(dir: &Path) -> usize {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let dir = dir.to_string_lossy();
    info.lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|p| p.starts_with(&*dir)))
        .count()
}

/// The pid of a running task, from `ctr tasks ls`.
fn task_pid(testbed: &Testbed, id: &str) -> Result<u32> {
    let tasks = testbed.ctr(&["tasks", "ls"])?;
    let line = tasks
        .lines()
        .find(|l| l.starts_with(id))
        .with_context(|| format!("no task {id} in:\n{tasks}"))?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .context("no pid column")?
        .parse()?)
}

/// Starts a busybox `sleep` container the way CRI would (runc state under the testbed); its pid.
fn run_container(testbed: &Testbed, id: &str) -> Result<u32> {
    let runc_root = testbed.dir().join("runc");
    testbed.ctr(&[
        "run",
        "--detach",
        "--snapshotter",
        "overlayfs",
        "--runc-root",
        &runc_root.to_string_lossy(),
        images::BUSYBOX_REFS[1],
        id,
        "sleep",
        "3600",
    ])?;
    task_pid(testbed, id)
}

#[test]
fn testbed_starts_ready_survives_restart_and_cleans_up() -> Result<()> {
    if skip() {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let mut testbed = Testbed::start(dir.path())?;
    eprintln!("testbed started in {:?}", started.elapsed());

    let refs = testbed.ctr(&["images", "ls", "-q"])?;
    for image in images::BUSYBOX_REFS.iter().chain([&images::PAUSE_REF]) {
        ensure!(
            refs.lines().any(|r| r == *image),
            "{image} not imported:\n{refs}"
        );
    }
    let status = testbed.status()?;
    for kind in ["RuntimeReady", "NetworkReady"] {
        ensure!(
            status.iter().any(|c| c.kind == kind && c.status),
            "{kind} not true: {status:?}"
        );
    }
    ensure!(testbed.endpoint().starts_with("unix:///"));
    let log = fs::read_to_string(testbed.log())?;
    ensure!(!log.contains("failed to load cni"), "CNI config not loaded");

    // A container (not a pod: xtask has no CRI client) that must survive a containerd outage.
    let pid = run_container(&testbed, "xtask-check")?;
    ensure!(alive(pid));
    let containerd = testbed.pid().context("containerd pid")?;
    testbed.kill()?;
    ensure!(!alive(containerd) && !testbed.is_running());
    ensure!(alive(pid), "the container died with containerd");
    let restarted = Instant::now();
    testbed.restart()?;
    eprintln!("testbed restarted in {:?}", restarted.elapsed());
    ensure!(task_pid(&testbed, "xtask-check")? == pid);

    // The CNI bridge exists once a pod got an address; stand in for that so drop must remove it.
    let bridge = testbed.bridge().to_owned();
    let ip = Command::new("ip")
        .args(["link", "add", &bridge, "type", "bridge"])
        .status()?;
    ensure!(ip.success() && link_exists(&bridge));
    let containerd = testbed.pid().context("containerd pid")?;
    ensure!(
        mounts_under(dir.path()) > 0,
        "the container's rootfs is mounted"
    );

    let dropped = Instant::now();
    drop(testbed);
    eprintln!("testbed dropped in {:?}", dropped.elapsed());
    ensure!(!alive(pid), "container process {pid} left running");
    ensure!(!alive(containerd), "containerd {containerd} left running");
    ensure!(!link_exists(&bridge), "bridge {bridge} left");
    ensure!(
        mounts_under(dir.path()) == 0,
        "mounts left under the testbed"
    );
    ensure!(!dir.path().join("cni/ipam").exists(), "IPAM state left");
    Ok(())
}

#[test]
fn testbeds_run_side_by_side() -> Result<()> {
    if skip() {
        return Ok(());
    }
    let (a, b) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let (pa, pb) = (a.path().to_owned(), b.path().to_owned());
    let first = thread::spawn(move || Testbed::start(&pa));
    let second = Testbed::start(&pb)?;
    let first = first.join().expect("start thread")?;
    ensure!(first.socket() != second.socket());
    ensure!(first.bridge() != second.bridge());
    ensure!(first.subnet() != second.subnet());
    ensure!(first.status()?.iter().all(|c| c.status));
    ensure!(second.status()?.iter().all(|c| c.status));
    // The same directory cannot hold two.
    ensure!(Testbed::start(a.path()).is_err());
    first.shutdown()?;
    second.shutdown()?;
    Ok(())
}

#[test]
fn drop_during_an_outage_reaps_containers_and_mounts() -> Result<()> {
    if skip() {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let mut testbed = Testbed::start(dir.path())?;
    let pid = run_container(&testbed, "orphan")?;
    testbed.kill()?;
    ensure!(alive(pid));
    drop(testbed);
    ensure!(!alive(pid), "container process {pid} left running");
    ensure!(
        mounts_under(dir.path()) == 0,
        "mounts left under the testbed"
    );

    // The same directory starts clean again: the old container is gone from containerd too.
    let testbed = Testbed::start(dir.path())?;
    let containers = testbed.ctr(&["containers", "ls", "-q"])?;
    ensure!(containers.trim().is_empty(), "left over: {containers}");
    Ok(())
}
