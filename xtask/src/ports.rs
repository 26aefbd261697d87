//! Free TCP ports for the processes a test or a benchmark starts and must know the port of
//! beforehand (kubelet, etcd, kube-apiserver, registry).
//!
//! Asking the kernel for port 0 and closing the socket is not enough: that port comes from the
//! ephemeral range (`net.ipv4.ip_local_port_range`, 32768–60999 by default), the same range every
//! outgoing connection takes its local port from. A test polling `/pods` opens hundreds of
//! connections a minute, and one of them may hold the port by the time the kubelet binds it
//! (`Address already in use`, seen once in CI). The ports here come from *below* that range,
//! where no connection's local port ever lands, each tried with a bind on all addresses first.
//! A process-wide counter, started at an offset from the process id, keeps the test threads of
//! one binary, and test binaries run one after another, from picking the same port twice.

use std::{
    net::{Ipv4Addr, TcpListener},
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::{Result, bail};

/// The lowest port handed out: above the well-known and commonly configured service ports.
const LOWEST: u32 = 20_000;

/// The ports handed out when the ephemeral range cannot be read (or starts too low).
const FALLBACK_END: u32 = 32_768;

/// How many ports [`free_port`] handed out in this process.
static HANDED_OUT: AtomicU32 = AtomicU32::new(0);

/// The first port of the kernel's ephemeral range, as `ip_local_port_range` says.
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(FALLBACK_END)
}

/// The candidate ports: `[LOWEST, start of the ephemeral range)`.
fn candidates() -> std::ops::Range<u32> {
    let end = ephemeral_start();
    LOWEST..if end > LOWEST + 1_000 {
        end
    } else {
        FALLBACK_END
    }
}

/// `true` when nothing is bound to `port` on any address.
fn is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok()
}

/// A port nothing listens on now and no outgoing connection will take: the next free one of
/// this process's sequence below the ephemeral range.
pub fn free_port() -> Result<u16> {
    let range = candidates();
    let width = range.end - range.start;
    let offset = std::process::id().wrapping_mul(97) % width;
    for _ in 0..width {
        let n = HANDED_OUT.fetch_add(1, Ordering::Relaxed);
        let port = range.start + (offset + n) % width;
        let port = u16::try_from(port)?;
        if is_free(port) {
            return Ok(port);
        }
    }
    bail!("no free TCP port in {range:?} (below the ephemeral range)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50).map(|_| free_port().expect("port")).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "a port was handed out twice");
        for port in ports {
            assert!(u32::from(port) >= LOWEST && u32::from(port) < ephemeral_start());
            assert!(is_free(port), "{port} is not bindable");
        }
    }

    #[test]
    fn a_port_in_use_is_skipped() {
        let next = free_port().expect("port");
        // Occupy the port the sequence would hand out after `next`, then ask again.
        let range = candidates();
        let following =
            range.start + (u32::from(next) - range.start + 1) % (range.end - range.start);
        let held = TcpListener::bind((
            Ipv4Addr::UNSPECIFIED,
            u16::try_from(following).expect("u16"),
        ));
        let port = free_port().expect("port");
        if held.is_ok() {
            assert_ne!(u32::from(port), following, "handed out a port in use");
        }
    }
}
