//! The node's IP when none is configured (upstream `nodeutil.GetNodeHostIPs` with no
//! `--node-ip`, `utilnet.ChooseHostInterface`): the first global IPv4 address of the interface
//! that carries the default route, read from `/proc/net/route` and `getifaddrs`.

use std::net::{IpAddr, Ipv4Addr};

/// The default route's interface in the text of `/proc/net/route` (destination `00000000`).
fn default_route_interface(routes: &str) -> Option<&str> {
    routes.lines().skip(1).find_map(|line| {
        let mut fields = line.split_whitespace();
        let iface = fields.next()?;
        (fields.next()? == "00000000").then_some(iface)
    })
}

/// `true` for an address other nodes could reach: not loopback, link-local or unspecified.
fn is_global(ip: Ipv4Addr) -> bool {
    !(ip.is_loopback() || ip.is_link_local() || ip.is_unspecified())
}

/// The node's IPs as upstream chooses them without `--node-ip`; empty when there is no
/// default route (the pods' `hostIP` is then left unset).
pub(super) fn detect_node_ips() -> Vec<String> {
    let Ok(routes) = std::fs::read_to_string("/proc/net/route") else {
        return Vec::new();
    };
    let Some(iface) = default_route_interface(&routes) else {
        return Vec::new();
    };
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    addrs
        .filter(|a| a.interface_name == iface)
        .filter_map(|a| a.address?.as_sockaddr_in().map(|s| s.ip()))
        .filter(|ip| is_global(*ip))
        .map(|ip| IpAddr::V4(ip).to_string())
        .take(1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_route_names_the_interface() {
        let routes = "Iface\tDestination\tGateway\tFlags\n\
                      br0\t00B54D0A\t00000000\t0001\n\
                      eth0\t00000000\t010200C0\t0003\n";
        assert_eq!(default_route_interface(routes), Some("eth0"));
        assert_eq!(default_route_interface("Iface\tDestination\n"), None);
    }

    #[test]
    fn only_reachable_addresses_count() {
        assert!(is_global(Ipv4Addr::new(192, 0, 2, 10)));
        assert!(!is_global(Ipv4Addr::LOCALHOST));
        assert!(!is_global(Ipv4Addr::new(169, 254, 1, 1)));
        assert!(!is_global(Ipv4Addr::UNSPECIFIED));
    }
}
