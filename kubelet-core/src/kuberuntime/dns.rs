//! The DNS configuration of a pod's sandbox from its `dnsPolicy` and `dnsConfig`, and the
//! host's resolv.conf it starts from.
//!
//! Mirrors upstream `pkg/kubelet/network/dns/dns.go` (`GetPodDNS`, `getPodDNSType`, `parseResolvConf`,
//! `generateSearchesForDNSClusterFirst`, `appendDNSConfig`, `mergeDNSOptions`,
//! `formDNSConfigFitsLimits`) with the expanded limits (`ExpandedDNSConfig`, GA): at most
//! 32 search paths, 2048 characters of search line, 3 nameservers.

use std::path::Path;

use k8s_openapi::api::core::v1::{Pod, PodDNSConfig};

use super::api::DnsConfig;
use crate::pod::PodExt;

/// Upstream `MaxDNSSearchPathsExpanded`.
pub const MAX_DNS_SEARCH_PATHS: usize = 32;
/// Upstream `MaxDNSSearchListCharsExpanded`.
pub const MAX_DNS_SEARCH_LIST_CHARS: usize = 2048;
/// Upstream `MaxDNSNameservers`.
pub const MAX_DNS_NAMESERVERS: usize = 3;
/// Upstream `DNS1123SubdomainMaxLength`: longer search paths are dropped.
pub const MAX_SEARCH_PATH_LEN: usize = 253;
/// Options of `ClusterFirst` pods (upstream `defaultDNSOptions`).
pub const DEFAULT_DNS_OPTIONS: [&str; 1] = ["ndots:5"];

/// The kubelet's DNS settings (upstream `--cluster-dns`, `--cluster-domain`,
/// `--resolv-conf`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterDns {
    /// Cluster DNS server IPs; empty makes `ClusterFirst` fall back to `Default`.
    pub servers: Vec<String>,
    /// The cluster domain, e.g. `cluster.local`; empty adds no cluster search paths.
    pub domain: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DnsType {
    Cluster,
    Host,
    None,
}

fn dns_type(pod: &Pod) -> DnsType {
    match pod.spec.as_ref().and_then(|s| s.dns_policy.as_deref()) {
        Some("None") => DnsType::None,
        Some("ClusterFirstWithHostNet") => DnsType::Cluster,
        Some("Default") => DnsType::Host,
        // ClusterFirst is the API default; host-network pods fall back to Default.
        Some("ClusterFirst") | None if pod.host_network() => DnsType::Host,
        Some("ClusterFirst") | None => DnsType::Cluster,
        Some(other) => {
            tracing::error!(pod = %pod.full_name(), policy = other, "invalid dnsPolicy; falling back to ClusterFirst");
            DnsType::Cluster
        }
    }
}

fn omit_duplicates(list: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    list.into_iter()
        .filter(|s| seen.insert(s.clone()))
        .collect()
}

/// Merges options by name, `dnsConfig` winning (upstream `mergeDNSOptions`). Upstream goes
/// through a Go map, so its order is random; here the first occurrence keeps its place.
fn merge_options(existing: Vec<String>, config: &PodDNSConfig) -> Vec<String> {
    let mut merged: Vec<(String, String)> = Vec::new();
    let mut set = |name: &str, value: &str| match merged.iter_mut().find(|(n, _)| n == name) {
        Some(e) => e.1 = value.to_owned(),
        None => merged.push((name.to_owned(), value.to_owned())),
    };
    for op in &existing {
        match op.split_once(':') {
            Some((n, v)) => set(n, v),
            None => set(op, ""),
        }
    }
    for op in config.options.iter().flatten() {
        set(
            op.name.as_deref().unwrap_or_default(),
            op.value.as_deref().unwrap_or_default(),
        );
    }
    merged
        .into_iter()
        .map(|(n, v)| if v.is_empty() { n } else { format!("{n}:{v}") })
        .collect()
}

/// Applies the search and nameserver limits (upstream `formDNSConfigFitsLimits`); logs a
/// warning naming the applied line when something was dropped.
fn fit_limits(mut dns: DnsConfig, pod: &Pod) -> DnsConfig {
    if dns.servers.len() > MAX_DNS_NAMESERVERS {
        dns.servers.truncate(MAX_DNS_NAMESERVERS);
        tracing::warn!(pod = %pod.full_name(), applied = %dns.servers.join(" "), "Nameserver limits were exceeded, some nameservers have been omitted");
    }
    let mut exceeded = false;
    if dns.searches.len() > MAX_DNS_SEARCH_PATHS {
        dns.searches.truncate(MAX_DNS_SEARCH_PATHS);
        exceeded = true;
    }
    let before = dns.searches.len();
    dns.searches.retain(|s| s.len() <= MAX_SEARCH_PATH_LEN);
    exceeded |= dns.searches.len() != before;
    let line_len =
        |s: &[String]| s.iter().map(String::len).sum::<usize>() + s.len().saturating_sub(1);
    while line_len(&dns.searches) > MAX_DNS_SEARCH_LIST_CHARS {
        dns.searches.pop();
        exceeded = true;
    }
    if exceeded {
        tracing::warn!(pod = %pod.full_name(), applied = %dns.searches.join(" "), "Search Line limits were exceeded, some search paths have been omitted");
    }
    dns
}

/// The pod's DNS config (upstream `GetPodDNS`) from the host's resolv.conf settings
/// (`None` when `--resolv-conf` is empty) and the cluster DNS settings.
#[doc(alias = "GetPodDNS")]
pub fn pod_dns_config(
    pod: &Pod,
    host: Option<DnsConfig>,
    cluster: &ClusterDns,
    node_ips: &[String],
) -> DnsConfig {
    let resolv_conf_empty = host.is_none();
    let mut dns = host.unwrap_or_default();
    let mut kind = dns_type(pod);
    if kind == DnsType::Cluster && cluster.servers.is_empty() {
        tracing::warn!(
            pod = %pod.full_name(),
            reason = "MissingClusterDNS",
            "kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy."
        );
        kind = DnsType::Host;
    }
    match kind {
        DnsType::None => dns = DnsConfig::default(),
        DnsType::Cluster => {
            dns.servers = cluster.servers.clone();
            if !cluster.domain.is_empty() {
                let d = &cluster.domain;
                let mut searches = vec![
                    format!("{}.svc.{d}", pod.namespace_or_default()),
                    format!("svc.{d}"),
                    d.clone(),
                ];
                searches.append(&mut dns.searches);
                dns.searches = omit_duplicates(searches);
            }
            dns.options = DEFAULT_DNS_OPTIONS
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
        }
        DnsType::Host if resolv_conf_empty => {
            for ip in node_ips {
                dns.servers
                    .push(if ip.contains(':') { "::1" } else { "127.0.0.1" }.into());
            }
            if dns.servers.is_empty() {
                dns.servers.push("127.0.0.1".into());
            }
            dns.searches = vec![".".into()];
        }
        DnsType::Host => {}
    }
    if let Some(config) = pod.spec.as_ref().and_then(|s| s.dns_config.as_ref()) {
        dns.servers
            .extend(config.nameservers.iter().flatten().cloned());
        dns.servers = omit_duplicates(std::mem::take(&mut dns.servers));
        dns.searches
            .extend(config.searches.iter().flatten().cloned());
        dns.searches = omit_duplicates(std::mem::take(&mut dns.searches));
        dns.options = merge_options(std::mem::take(&mut dns.options), config);
    }
    fit_limits(dns, pod)
}

/// Host resolver configuration parsed from resolv.conf text (upstream `parseResolvConf`):
/// `nameserver`, `search` (the last line wins, trailing dots dropped) and `options`.
pub fn parse_resolv_conf(text: &str) -> DnsConfig {
    let mut dns = DnsConfig::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("nameserver") => dns.servers.extend(fields.next().map(str::to_owned)),
            Some("search") => {
                dns.searches = fields
                    .filter(|s| *s != ".")
                    .map(|s| s.trim_end_matches('.').to_owned())
                    .collect();
            }
            Some("options") => dns.options.extend(fields.map(str::to_owned)),
            _ => {}
        }
    }
    dns
}

/// Reads the host resolver configuration; an unreadable file gives an empty config (the
/// runtime then uses its own default) and a warning.
pub(super) async fn host_dns_config(path: &Path) -> DnsConfig {
    match tokio::fs::read_to_string(path).await {
        Ok(text) => parse_resolv_conf(&text),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read host resolv.conf; pods get no DNS config");
            DnsConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;
    use k8s_openapi::api::core::v1::PodDNSConfigOption;

    fn host() -> DnsConfig {
        DnsConfig {
            servers: vec!["10.0.0.1".into()],
            searches: vec!["host.example".into()],
            options: vec!["timeout:2".into()],
        }
    }

    fn cluster() -> ClusterDns {
        ClusterDns {
            servers: vec!["10.96.0.10".into()],
            domain: "cluster.local".into(),
        }
    }

    fn with_policy(policy: Option<&str>, host_network: bool) -> Pod {
        let mut p = pod("dns");
        let s = p.spec.as_mut().expect("spec");
        s.dns_policy = policy.map(Into::into);
        s.host_network = Some(host_network);
        p
    }

    #[test]
    fn parses_resolv_conf() {
        let dns = parse_resolv_conf(
            "# generated\nnameserver 10.0.0.10\nnameserver 8.8.8.8 ; google\nsearch old.example\n\
             search svc.cluster.local. example.com .\noptions ndots:5 timeout:1\noptions edns0\n",
        );
        assert_eq!(dns.servers, ["10.0.0.10", "8.8.8.8"]);
        assert_eq!(dns.searches, ["svc.cluster.local", "example.com"]);
        assert_eq!(dns.options, ["ndots:5", "timeout:1", "edns0"]);
    }

    // Cases of upstream TestGetPodDNSType / TestGetPodDNS.
    #[test]
    fn policies() {
        let cf = pod_dns_config(
            &with_policy(Some("ClusterFirst"), false),
            Some(host()),
            &cluster(),
            &[],
        );
        assert_eq!(cf.servers, ["10.96.0.10"]);
        assert_eq!(
            cf.searches,
            [
                "default.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "host.example"
            ]
        );
        assert_eq!(cf.options, ["ndots:5"]);
        // ClusterFirst on the host network is Default.
        let hn = pod_dns_config(
            &with_policy(Some("ClusterFirst"), true),
            Some(host()),
            &cluster(),
            &[],
        );
        assert_eq!(hn, host());
        let hn = pod_dns_config(
            &with_policy(Some("ClusterFirstWithHostNet"), true),
            Some(host()),
            &cluster(),
            &[],
        );
        assert_eq!(hn.servers, ["10.96.0.10"]);
        assert_eq!(
            pod_dns_config(
                &with_policy(Some("Default"), false),
                Some(host()),
                &cluster(),
                &[]
            ),
            host()
        );
        assert_eq!(
            pod_dns_config(
                &with_policy(Some("None"), false),
                Some(host()),
                &cluster(),
                &[]
            ),
            DnsConfig::default()
        );
        // No cluster DNS: ClusterFirst falls back to Default.
        let fb = pod_dns_config(
            &with_policy(None, false),
            Some(host()),
            &ClusterDns::default(),
            &[],
        );
        assert_eq!(fb, host());
        // --resolv-conf="" with Default: localhost per node IP family.
        let lo = pod_dns_config(
            &with_policy(Some("Default"), false),
            None,
            &cluster(),
            &["192.0.2.1".into(), "2001:db8::1".into()],
        );
        assert_eq!(lo.servers, ["127.0.0.1", "::1"]);
        assert_eq!(lo.searches, ["."]);
    }

    #[test]
    fn dns_config_is_merged() {
        let mut p = with_policy(Some("None"), false);
        p.spec.as_mut().expect("spec").dns_config = Some(PodDNSConfig {
            nameservers: Some(vec!["1.1.1.1".into(), "1.1.1.1".into()]),
            searches: Some(vec!["a.example".into()]),
            options: Some(vec![
                PodDNSConfigOption {
                    name: Some("ndots".into()),
                    value: Some("2".into()),
                },
                PodDNSConfigOption {
                    name: Some("edns0".into()),
                    value: None,
                },
            ]),
        });
        let d = pod_dns_config(&p, Some(host()), &cluster(), &[]);
        assert_eq!(d.servers, ["1.1.1.1"]);
        assert_eq!(d.searches, ["a.example"]);
        assert_eq!(d.options, ["ndots:2", "edns0"]);
        // Merged over ClusterFirst: the pod's ndots wins.
        p.spec.as_mut().expect("spec").dns_policy = Some("ClusterFirst".into());
        let d = pod_dns_config(&p, Some(host()), &cluster(), &[]);
        assert_eq!(d.servers, ["10.96.0.10", "1.1.1.1"]);
        assert_eq!(d.options, ["ndots:2", "edns0"]);
        assert_eq!(d.searches.last().map(String::as_str), Some("a.example"));
    }

    #[test]
    fn limits() {
        let mut p = with_policy(Some("None"), false);
        let searches: Vec<String> = (0..40).map(|i| format!("s{i}.example")).collect();
        p.spec.as_mut().expect("spec").dns_config = Some(PodDNSConfig {
            nameservers: Some((1..=5).map(|i| format!("10.0.0.{i}")).collect()),
            searches: Some(searches.clone()),
            options: None,
        });
        let d = pod_dns_config(&p, None, &cluster(), &[]);
        assert_eq!(d.servers.len(), 3);
        assert_eq!(d.searches, searches[..32]);
        // Too long a line: the last paths are cut until it fits.
        let long: Vec<String> = (0..20).map(|i| format!("{i:0>200}")).collect();
        p.spec.as_mut().expect("spec").dns_config = Some(PodDNSConfig {
            searches: Some(long.clone()),
            ..Default::default()
        });
        let d = pod_dns_config(&p, None, &cluster(), &[]);
        assert_eq!(d.searches, long[..10], "10 × 201 - 1 = 2009 ≤ 2048");
        // A path over 253 characters is dropped.
        p.spec.as_mut().expect("spec").dns_config = Some(PodDNSConfig {
            searches: Some(vec!["x".repeat(254), "ok".into()]),
            ..Default::default()
        });
        assert_eq!(pod_dns_config(&p, None, &cluster(), &[]).searches, ["ok"]);
    }
}
