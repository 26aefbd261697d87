//! Network slots: each live testbed holds one, which gives it a bridge name and a /24 subnet.
//!
//! Slot `n` (1..=250) means bridge `kubelet-tb<n>` and subnet `10.77.<n>.0/24`. A slot is taken by
//! holding an exclusive `flock` on `/run/xtask-testbed/net-<n>.lock`, so the lock goes away with
//! the process, even one that was killed. The lock file records the owner's directory; whoever
//! takes a slot next cleans what a dead owner left (its bridge, and its directory when free).

use std::{
    fs::{self, File, OpenOptions, TryLockError},
    hash::{DefaultHasher, Hash, Hasher},
    io::{Read, Seek, Write},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use crate::util;

const LOCK_DIR: &str = "/run/xtask-testbed";
const SLOTS: u64 = 250;
/// The second octet of every testbed subnet (10.88/16 is containerd's and podman's default).
const OCTET: u8 = 77;

/// A network slot held by this process.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The bridge the CNI bridge plugin creates.
    pub(crate) bridge: String,
    /// The pod subnet, `10.77.<n>.0/24`.
    pub(crate) subnet: String,
    lock: File,
}

impl Slot {
    /// Takes a free slot for `dir`, trying `hash(dir)` first so a directory tends to keep its slot.
    pub(crate) fn take(dir: &Path) -> Result<Slot> {
        fs::create_dir_all(LOCK_DIR).with_context(|| format!("cannot create {LOCK_DIR}"))?;
        let mut hasher = DefaultHasher::new();
        dir.hash(&mut hasher);
        let first = hasher.finish() % SLOTS;
        let routes = routes()?;
        for i in 0..SLOTS {
            let n = (first + i) % SLOTS + 1;
            let path = Path::new(LOCK_DIR).join(format!("net-{n}.lock"));
            let lock = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            match lock.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => continue,
                Err(TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("cannot lock {}", path.display()));
                }
            }
            let slot = Slot {
                bridge: format!("kubelet-tb{n}"),
                subnet: format!("10.{OCTET}.{n}.0/24"),
                lock,
            };
            let (net, len) = parse_cidr(&slot.subnet).context("bad subnet")?;
            if routes
                .iter()
                .any(|(dev, route)| *dev != slot.bridge && overlaps(*route, (net, len)))
            {
                continue; // someone else's network uses this range
            }
            slot.clean_previous_owner(dir)?;
            return Ok(slot);
        }
        bail!("no free testbed network slot in {LOCK_DIR} (all {SLOTS} held or overlapping routes)")
    }

    /// Cleans after a previous holder that did not release the slot, then records `dir`.
    fn clean_previous_owner(&self, dir: &Path) -> Result<()> {
        let mut file = &self.lock;
        let mut previous = String::new();
        file.read_to_string(&mut previous)?;
        let previous = PathBuf::from(previous.trim());
        if !previous.as_os_str().is_empty() && previous != dir && previous.is_dir() {
            // Only when no live testbed holds that directory now.
            if let Ok(_dir_lock) = super::lock_dir(&previous) {
                super::cleanup::reap_dir(&previous);
            }
        }
        delete_link(&self.bridge)?;
        file.set_len(0)?;
        file.rewind()?;
        file.write_all(dir.as_os_str().as_encoded_bytes())?;
        Ok(())
    }

    /// Deletes the bridge and marks the slot clean; the lock is released when `self` drops.
    pub(crate) fn release(&self) -> Result<()> {
        delete_link(&self.bridge)?;
        self.lock.set_len(0)?;
        Ok(())
    }
}

/// Deletes a network link if it exists.
pub(crate) fn delete_link(name: &str) -> Result<()> {
    if link_exists(name) {
        util::output(Command::new("ip").args(["link", "delete", name]))?;
    }
    Ok(())
}

/// Whether a network link exists.
fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// IPv4 routes as (device, (network, prefix length)).
fn routes() -> Result<Vec<(String, (u32, u32))>> {
    let out = util::output(Command::new("ip").args(["-4", "-o", "route", "show", "table", "all"]))?;
    Ok(out
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let mut dst = words.next()?;
            if matches!(
                dst,
                "local" | "broadcast" | "unicast" | "blackhole" | "unreachable"
            ) {
                dst = words.next()?;
            }
            let dst = if dst == "default" { "0.0.0.0/0" } else { dst };
            let cidr = parse_cidr(dst)?;
            let dev = line
                .split_whitespace()
                .skip_while(|w| *w != "dev")
                .nth(1)
                .unwrap_or("")
                .to_owned();
            // A default route covers everything but is not a conflict.
            (cidr.1 > 0).then_some((dev, cidr))
        })
        .collect())
}

fn parse_cidr(s: &str) -> Option<(u32, u32)> {
    let (addr, len) = s.split_once('/').unwrap_or((s, "32"));
    let addr: std::net::Ipv4Addr = addr.parse().ok()?;
    let len: u32 = len.parse().ok().filter(|l| *l <= 32)?;
    Some((u32::from(addr), len))
}

fn overlaps((a, alen): (u32, u32), (b, blen): (u32, u32)) -> bool {
    let len = alen.min(blen);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    a & mask == b & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_overlap() {
        let net = |s| parse_cidr(s).expect("cidr");
        assert!(overlaps(net("10.77.3.0/24"), net("10.77.0.0/16")));
        assert!(overlaps(net("10.77.3.0/24"), net("10.77.3.1")));
        assert!(!overlaps(net("10.77.3.0/24"), net("10.77.4.0/24")));
        assert!(!overlaps(net("10.77.3.0/24"), net("192.0.2.0/24")));
    }
}
