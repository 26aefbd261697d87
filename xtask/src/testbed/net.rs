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
            let lock = open_lock(n)?;
            match lock.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => continue,
                Err(TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("cannot lock slot {n}'s lock file"));
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
            if let Err(e) = clean_abandoned_hostport_rules() {
                eprintln!("testbed network slots: {e:#}");
            }
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
        if let Err(e) = delete_hostport_rules(&self.subnet) {
            eprintln!("testbed network slot {}: {e:#}", self.subnet);
        }
        file.set_len(0)?;
        file.rewind()?;
        file.write_all(dir.as_os_str().as_encoded_bytes())?;
        Ok(())
    }

    /// Deletes the bridge and marks the slot clean; the lock is released when `self` drops.
    pub(crate) fn release(&self) -> Result<()> {
        delete_link(&self.bridge)?;
        delete_hostport_rules(&self.subnet)?;
        self.lock.set_len(0)?;
        Ok(())
    }
}

/// Opens (creating it) the lock file of slot `n`, `/run/xtask-testbed/net-<n>.lock`.
fn open_lock(n: u64) -> Result<File> {
    let path = Path::new(LOCK_DIR).join(format!("net-{n}.lock"));
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))
}

/// Deletes the hostPort rules into every testbed subnet whose slot nobody holds: a testbed
/// killed before its cleanup leaves them, and until its slot is taken again its ports send
/// connections to a pod that is gone (a later kubelet that listens on such a port cannot be
/// reached: the connect hangs).
fn clean_abandoned_hostport_rules() -> Result<()> {
    let rules = util::output(Command::new("iptables").args(["-w", "-t", "nat", "-S"]))?;
    for n in hostport_slots(&rules) {
        // Held while its rules go, so no testbed takes the slot meanwhile.
        let lock = open_lock(n)?;
        if lock.try_lock().is_ok() {
            delete_hostport_rules(&format!("10.{OCTET}.{n}.0/24"))?;
        }
    }
    Ok(())
}

/// The slots (`n` of `10.77.<n>.0/24`) that `iptables -S` output has DNAT rules into.
fn hostport_slots(rules: &str) -> Vec<u64> {
    let prefix = format!("10.{OCTET}.");
    let mut slots: Vec<u64> = hostport_dnats(rules)
        .filter_map(|(_, target)| {
            target
                .strip_prefix(&prefix)?
                .split('.')
                .next()?
                .parse()
                .ok()
        })
        .filter(|n| (1..=SLOTS).contains(n))
        .collect();
    slots.sort_unstable();
    slots.dedup();
    slots
}

/// `(chain, target)` of each portmap DNAT rule in `iptables -S` output:
/// `-A CNI-DN-<id> … -j DNAT --to-destination <ip>:<port>`.
fn hostport_dnats(rules: &str) -> impl Iterator<Item = (&str, &str)> {
    rules.lines().filter_map(|line| {
        let mut words = line.split_whitespace();
        if words.next()? != "-A" {
            return None;
        }
        let chain = words.next().filter(|c| c.starts_with("CNI-DN-"))?;
        let target = words.skip_while(|w| *w != "--to-destination").nth(1)?;
        Some((chain, target))
    })
}

/// The chain of the CNI portmap plugin that every `hostPort` DNAT rule is jumped to from.
const HOSTPORT_DNAT: &str = "CNI-HOSTPORT-DNAT";

/// Deletes the CNI portmap plugin's per-sandbox DNAT chains (`CNI-DN-*`) that forward to
/// `subnet`, and their jumps from `CNI-HOSTPORT-DNAT`. The plugin removes them on CNI DEL, which
/// never runs when a testbed is purged through `ctr`; a leftover rule sends a later test's
/// connections to that port (a "free" port, since nothing binds it) to a pod that is gone, and
/// they time out.
pub(crate) fn delete_hostport_rules(subnet: &str) -> Result<()> {
    let iptables = |args: &[&str]| {
        util::output(
            Command::new("iptables")
                .args(["-w", "-t", "nat"])
                .args(args),
        )
    };
    let chains = hostport_chains(&iptables(&["-S"])?, subnet);
    if chains.is_empty() {
        return Ok(());
    }
    let listing = iptables(&["-L", HOSTPORT_DNAT, "-n", "--line-numbers"])?;
    for number in jump_rule_numbers(&listing, &chains).iter().rev() {
        iptables(&["-D", HOSTPORT_DNAT, &number.to_string()])?;
    }
    for chain in &chains {
        iptables(&["-F", chain])?;
        iptables(&["-X", chain])?;
    }
    Ok(())
}

/// The `CNI-DN-*` chains in `iptables -S` output with a DNAT rule into `subnet` (`a.b.c.0/24`).
fn hostport_chains(rules: &str, subnet: &str) -> Vec<String> {
    let prefix = subnet.strip_suffix("0/24").unwrap_or(subnet);
    let mut chains: Vec<String> = hostport_dnats(rules)
        .filter(|(_, target)| target.starts_with(prefix))
        .map(|(chain, _)| chain.to_owned())
        .collect();
    chains.dedup();
    chains
}

/// The rule numbers, ascending, in `iptables -L <chain> -n --line-numbers` output whose
/// target is one of `chains`.
fn jump_rule_numbers(listing: &str, chains: &[String]) -> Vec<u32> {
    listing
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let number = words.next()?.parse().ok()?;
            let target = words.next()?;
            chains.iter().any(|c| c == target).then_some(number)
        })
        .collect()
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
    fn hostport_rules_into_the_slots_subnet_are_found() {
        let rules = "-N CNI-HOSTPORT-DNAT\n\
            -N CNI-DN-aaa\n\
            -N CNI-DN-bbb\n\
            -A CNI-HOSTPORT-DNAT -p tcp -m comment --comment \"dnat name: \\\"testbed\\\" id: \\\"x\\\"\" -m multiport --dports 33867 -j CNI-DN-aaa\n\
            -A CNI-DN-aaa -s 127.0.0.1/32 -p tcp -m tcp --dport 33867 -j CNI-HOSTPORT-SETMARK\n\
            -A CNI-DN-aaa -p tcp -m tcp --dport 33867 -j DNAT --to-destination 10.77.3.2:8080\n\
            -A CNI-DN-bbb -p tcp -m tcp --dport 34505 -j DNAT --to-destination 10.77.31.2:8080\n";
        assert_eq!(hostport_chains(rules, "10.77.3.0/24"), ["CNI-DN-aaa"]);
        assert_eq!(hostport_chains(rules, "10.77.31.0/24"), ["CNI-DN-bbb"]);
        assert!(hostport_chains(rules, "10.77.4.0/24").is_empty());
        assert_eq!(hostport_slots(rules), [3, 31]);
        assert!(hostport_slots("-A CNI-DN-x -j DNAT --to-destination 10.88.3.2:80\n").is_empty());

        let listing = "Chain CNI-HOSTPORT-DNAT (2 references)\n\
            num  target     prot opt source               destination\n\
            1    CNI-DN-bbb  tcp  --  0.0.0.0/0            0.0.0.0/0            multiport dports 34505\n\
            2    CNI-DN-aaa  tcp  --  0.0.0.0/0            0.0.0.0/0            multiport dports 33867\n";
        assert_eq!(jump_rule_numbers(listing, &["CNI-DN-aaa".to_owned()]), [2]);
        assert!(jump_rule_numbers(listing, &["CNI-DN-ccc".to_owned()]).is_empty());
    }

    #[test]
    fn cidr_overlap() {
        let net = |s| parse_cidr(s).expect("cidr");
        assert!(overlaps(net("10.77.3.0/24"), net("10.77.0.0/16")));
        assert!(overlaps(net("10.77.3.0/24"), net("10.77.3.1")));
        assert!(!overlaps(net("10.77.3.0/24"), net("10.77.4.0/24")));
        assert!(!overlaps(net("10.77.3.0/24"), net("192.0.2.0/24")));
    }
}
