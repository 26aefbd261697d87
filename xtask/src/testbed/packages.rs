//! Installs the Debian packages the testbed and the build need, when missing.

use std::{
    path::Path,
    process::Command,
    sync::{Mutex, PoisonError},
};

use anyhow::{Result, bail};

use crate::util;

/// How to tell that a package is already there.
enum Probe {
    /// A program on `PATH` (or in an sbin directory).
    Program(&'static str),
    /// A file that the package installs.
    File(&'static str),
    /// dpkg says it is installed (for `busybox-static`, whose `/bin/busybox` the dynamic `busybox`
    /// package also provides).
    Dpkg,
}

/// The packages and their probes. `gcc` and `libc6-dev` build the static pause binary.
const PACKAGES: &[(&str, Probe)] = &[
    ("containerd", Probe::Program("containerd")),
    ("containerd", Probe::Program("ctr")),
    ("runc", Probe::Program("runc")),
    (
        "containernetworking-plugins",
        Probe::File("/usr/lib/cni/bridge"),
    ),
    (
        "containernetworking-plugins",
        Probe::File("/usr/lib/cni/host-local"),
    ),
    (
        "containernetworking-plugins",
        Probe::File("/usr/lib/cni/portmap"),
    ),
    ("busybox-static", Probe::Dpkg),
    ("protobuf-compiler", Probe::Program("protoc")),
    ("iptables", Probe::Program("iptables")),
    ("iproute2", Probe::Program("ip")),
    ("gcc", Probe::Program("gcc")),
    ("libc6-dev", Probe::File("/usr/include/stdio.h")),
];

/// Installs the Debian packages the testbed and the build need, if any is missing.
///
/// The packages are containerd, runc, containernetworking-plugins, busybox-static,
/// protobuf-compiler, iptables, iproute2, gcc and libc6-dev. A package counts as present when its
/// program or file is found, so a containerd installed another way is left alone. When one is
/// missing this runs `apt-get update` once and `apt-get install -y --no-install-recommends` for the
/// missing ones; that needs root, and the error says so. When nothing is missing it only
/// checks files, so it is cheap to call before every testbed.
pub fn ensure_packages() -> Result<()> {
    // Test threads may race here; apt itself would fail on its lock.
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(PoisonError::into_inner);

    let mut missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(pkg, probe)| !present(pkg, probe))
        .map(|(pkg, _)| *pkg)
        .collect();
    missing.dedup();
    if missing.is_empty() {
        return Ok(());
    }
    let list = missing.join(" ");
    if !util::is_root() {
        bail!("missing Debian packages: {list}; run as root, or: sudo apt-get install {list}");
    }
    eprintln!("xtask: installing {list}");
    let apt = |args: &[&str]| {
        util::run(
            Command::new("apt-get")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .args(["-q", "-o", "DPkg::Lock::Timeout=300"])
                .args(args),
        )
    };
    apt(&["update"])?;
    apt(&[
        &["install", "-y", "--no-install-recommends"],
        missing.as_slice(),
    ]
    .concat())?;
    if let Some((pkg, _)) = PACKAGES.iter().find(|(pkg, probe)| !present(pkg, probe)) {
        bail!("package {pkg} is still missing after apt-get install");
    }
    Ok(())
}

fn present(pkg: &str, probe: &Probe) -> bool {
    match probe {
        Probe::Program(name) => util::find_program(name).is_some(),
        Probe::File(path) => Path::new(path).exists(),
        Probe::Dpkg => Command::new("dpkg-query")
            .args(["-W", "-f=${db:Status-Status}", pkg])
            .output()
            .is_ok_and(|out| out.stdout == b"installed"),
    }
}
