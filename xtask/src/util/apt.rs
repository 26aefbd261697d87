//! Debian packages through `apt-get`: install what is missing, judged by a probe per package, so
//! that a program installed another way is left alone.

use std::{
    path::Path,
    process::Command,
    sync::{Mutex, PoisonError},
};

use anyhow::{Result, bail};

use crate::util;

/// How to tell that a package is already there.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Probe {
    /// A program on `PATH` (or in an sbin directory).
    Program(&'static str),
    /// A file or directory that the package installs.
    File(&'static str),
    /// dpkg says it is installed (for `busybox-static`, whose `/bin/busybox` the dynamic `busybox`
    /// package also provides).
    Dpkg,
}

/// Installs the packages of `wanted` whose probe fails, with `apt-get update` first; checks the
/// probes again afterwards. Cheap (file checks only) when nothing is missing.
///
/// Needs root when something is missing; the error then names the packages. Calls are
/// serialized within the process (apt would fail on its own lock).
pub(crate) fn ensure(wanted: &[(&'static str, Probe)]) -> Result<()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(PoisonError::into_inner);

    let mut missing: Vec<&str> = wanted
        .iter()
        .filter(|(pkg, probe)| !present(pkg, *probe))
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
    update()?;
    apt_get(
        &[
            &["install", "-y", "--no-install-recommends"],
            missing.as_slice(),
        ]
        .concat(),
    )?;
    if let Some((pkg, _)) = wanted.iter().find(|(pkg, probe)| !present(pkg, *probe)) {
        bail!("package {pkg} is still missing after apt-get install");
    }
    Ok(())
}

/// `apt-get update`.
pub(crate) fn update() -> Result<()> {
    apt_get(&["update"])
}

/// Runs `apt-get <args>` non-interactively, waiting up to 5 minutes for dpkg's lock.
pub(crate) fn apt_get(args: &[&str]) -> Result<()> {
    util::run(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["-q", "-o", "DPkg::Lock::Timeout=300"])
            .args(args),
    )
}

fn present(pkg: &str, probe: Probe) -> bool {
    match probe {
        Probe::Program(name) => util::find_program(name).is_some(),
        Probe::File(path) => Path::new(path).exists(),
        Probe::Dpkg => Command::new("dpkg-query")
            .args(["-W", "-f=${db:Status-Status}", pkg])
            .output()
            .is_ok_and(|out| out.stdout == b"installed"),
    }
}
