//! Pod hostname and domain, and the kubelet-managed `/etc/hosts` of a pod's containers.
//!
//! Mirrors upstream `pkg/kubelet/kubelet_pods.go` (`GeneratePodHostNameAndDomain`,
//! `truncatePodHostnameIfNeeded`, `makeHostsMount`, `ensureHostsFile`,
//! `managedHostsFileContent`, `nodeHostsFileContent`, `hostsEntriesFromHostAliases`) and
//! `pkg/kubelet/util/util.go` (`GetNodenameForKernel`).

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, HostAlias, Pod};

use crate::PodExt;
use crate::runtime::Mount;

/// Where the managed hosts file is mounted.
pub const ETC_HOSTS_PATH: &str = "/etc/hosts";
/// Header of a managed hosts file.
pub const MANAGED_HOSTS_HEADER: &str = "# Kubernetes-managed hosts file.\n";
/// Header of a managed hosts file of a host-network pod.
pub const MANAGED_HOSTS_HEADER_HOST_NETWORK: &str =
    "# Kubernetes-managed hosts file (host network).\n";
/// Longest hostname (a DNS label).
pub const MAX_HOSTNAME_LEN: usize = 63;
/// Longest FQDN the kernel accepts as a hostname.
pub const MAX_FQDN_LEN: usize = 64;

/// Why a pod has no valid hostname (upstream's messages).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `spec.hostname` is not a DNS-1123 label.
    #[error("pod Hostname {0:?} is not a valid DNS label")]
    InvalidHostname(String),
    /// `spec.subdomain` is not a DNS-1123 label.
    #[error("pod Subdomain {0:?} is not a valid DNS label")]
    InvalidSubdomain(String),
    /// `setHostnameAsFQDN` with an FQDN longer than [`MAX_FQDN_LEN`].
    #[error(
        "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long ({MAX_FQDN_LEN} characters is the max, {} characters requested)",
        fqdn.len()
    )]
    FqdnTooLong {
        /// The FQDN that was built.
        fqdn: String,
    },
}

fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_HOSTNAME_LEN
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The pod's hostname (`spec.hostname` or its name, truncated to 63 characters without a
/// trailing `-`/`.`) and domain (`<subdomain>.<namespace>.svc.<cluster domain>` with a
/// subdomain, else empty); upstream `GeneratePodHostNameAndDomain`.
#[doc(alias = "GeneratePodHostNameAndDomain")]
pub fn pod_hostname_and_domain(pod: &Pod, cluster_domain: &str) -> Result<(String, String), Error> {
    let spec = pod.spec.as_ref();
    let mut hostname = pod.name_or_empty().to_owned();
    if let Some(h) = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
    {
        if !is_dns1123_label(h) {
            return Err(Error::InvalidHostname(h.to_owned()));
        }
        hostname = h.to_owned();
    }
    if hostname.len() > MAX_HOSTNAME_LEN {
        hostname.truncate(MAX_HOSTNAME_LEN);
        while hostname.ends_with(['-', '.']) {
            hostname.pop();
        }
    }
    let domain = match spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|d| !d.is_empty())
    {
        Some(sub) if !is_dns1123_label(sub) => {
            return Err(Error::InvalidSubdomain(sub.to_owned()));
        }
        Some(sub) => format!("{sub}.{}.svc.{cluster_domain}", pod.namespace_or_default()),
        None => String::new(),
    };
    Ok((hostname, domain))
}

/// The hostname the kernel gets (upstream `GetNodenameForKernel`): the FQDN with
/// `setHostnameAsFQDN` and a domain, else the short name; an FQDN over 64 characters is an
/// error.
pub fn kernel_hostname(hostname: &str, domain: &str, set_fqdn: bool) -> Result<String, Error> {
    if !set_fqdn || domain.is_empty() {
        return Ok(hostname.to_owned());
    }
    let fqdn = format!("{hostname}.{domain}");
    if fqdn.len() > MAX_FQDN_LEN {
        return Err(Error::FqdnTooLong { fqdn });
    }
    Ok(fqdn)
}

fn host_alias_entries(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for a in aliases {
        let names = a.hostnames.as_deref().unwrap_or_default().join("\t");
        out.push_str(&format!("{}\t{names}\n", a.ip));
    }
    out
}

/// The managed hosts file of a pod that is not on the host network (upstream
/// `managedHostsFileContent`).
pub fn managed_hosts_content(
    pod_ips: &[String],
    hostname: &str,
    domain: &str,
    aliases: &[HostAlias],
) -> String {
    let mut out = String::from(MANAGED_HOSTS_HEADER);
    out.push_str("127.0.0.1\tlocalhost\n");
    out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    out.push_str("fe00::0\tip6-localnet\n");
    out.push_str("fe00::0\tip6-mcastprefix\n");
    out.push_str("fe00::1\tip6-allnodes\n");
    out.push_str("fe00::2\tip6-allrouters\n");
    for ip in pod_ips {
        if domain.is_empty() {
            out.push_str(&format!("{ip}\t{hostname}\n"));
        } else {
            out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
        }
    }
    out.push_str(&host_alias_entries(aliases));
    out
}

/// The hosts file of a host-network pod: the node's file plus the aliases (upstream
/// `nodeHostsFileContent`).
pub fn node_hosts_content(node_hosts: &str, aliases: &[HostAlias]) -> String {
    format!(
        "{MANAGED_HOSTS_HEADER_HOST_NETWORK}{node_hosts}{}",
        host_alias_entries(aliases)
    )
}

/// Whether `container` gets the managed `/etc/hosts` (upstream `makeMounts`): the pod has
/// IPs (host-network pods use the node's) and the container mounts nothing at `/etc/hosts`.
pub fn should_mount_hosts_file(pod: &Pod, container: &Container, pod_ips: &[String]) -> bool {
    (pod.host_network() || !pod_ips.is_empty())
        && !container
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == ETC_HOSTS_PATH)
}

/// Inputs of [`ensure_hosts_mount`].
#[derive(Debug)]
pub struct HostsFile<'a> {
    /// The pod directory (`<root>/pods/<uid>`); the file is `etc-hosts` in it.
    pub pod_dir: &'a Path,
    /// The node's hosts file, read for host-network pods.
    pub node_hosts: &'a Path,
    /// Pod IPs.
    pub pod_ips: &'a [String],
    /// Pod hostname.
    pub hostname: &'a str,
    /// Pod domain (may be empty).
    pub domain: &'a str,
}

/// Writes the pod's hosts file (mode 0644) and returns its mount (upstream
/// `makeHostsMount`/`ensureHostsFile`). The file system calls run on the blocking pool.
pub async fn ensure_hosts_mount(pod: &Pod, f: &HostsFile<'_>) -> std::io::Result<Mount> {
    let aliases = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_aliases.as_deref())
        .unwrap_or_default();
    let content = if pod.host_network() {
        node_hosts_content(&tokio::fs::read_to_string(f.node_hosts).await?, aliases)
    } else {
        managed_hosts_content(f.pod_ips, f.hostname, f.domain, aliases)
    };
    tokio::fs::create_dir_all(f.pod_dir).await?;
    let path: PathBuf = f.pod_dir.join("etc-hosts");
    tokio::fs::write(&path, content).await?;
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).await?;
    Ok(Mount {
        host_path: path,
        container_path: ETC_HOSTS_PATH.into(),
        read_only: false,
        ..Mount::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    fn alias(ip: &str, names: &[&str]) -> HostAlias {
        HostAlias {
            ip: ip.into(),
            hostnames: Some(names.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    // Golden outputs of upstream TestManagedHostsFileContent.
    #[test]
    fn managed_content() {
        assert_eq!(
            managed_hosts_content(&["123.45.67.89".into()], "podFoo", "", &[]),
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n123.45.67.89\tpodFoo\n"
        );
        assert_eq!(
            managed_hosts_content(
                &["203.0.113.1".into()],
                "podFoo",
                "domainFoo",
                &[
                    alias("123.45.67.89", &["foo", "bar", "baz"]),
                    alias("456.78.90.123", &["park", "doo", "boo"])
                ],
            ),
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n203.0.113.1\tpodFoo.domainFoo\tpodFoo\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\tbaz\n456.78.90.123\tpark\tdoo\tboo\n"
        );
        assert_eq!(
            node_hosts_content("127.0.0.1\tlocalhost\n", &[alias("1.2.3.4", &["x"])]),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n\n# Entries added by HostAliases.\n1.2.3.4\tx\n"
        );
    }

    #[test]
    fn hostname_domain_and_fqdn() {
        let mut p = pod("web");
        assert_eq!(
            pod_hostname_and_domain(&p, "cluster.local"),
            Ok(("web".into(), String::new()))
        );
        let s = p.spec.as_mut().expect("spec");
        s.hostname = Some("h".into());
        s.subdomain = Some("sub".into());
        let (h, d) = pod_hostname_and_domain(&p, "cluster.local").expect("valid");
        assert_eq!(
            (h.as_str(), d.as_str()),
            ("h", "sub.default.svc.cluster.local")
        );
        assert_eq!(kernel_hostname(&h, &d, false).as_deref(), Ok("h"));
        assert_eq!(
            kernel_hostname(&h, &d, true).as_deref(),
            Ok("h.sub.default.svc.cluster.local")
        );
        let long = "a".repeat(60);
        assert!(
            kernel_hostname(&long, &d, true)
                .expect_err("too long")
                .to_string()
                .contains("too long")
        );
        p.spec.as_mut().expect("spec").hostname = Some("Bad_Name".into());
        assert!(pod_hostname_and_domain(&p, "").is_err());
        let mut p = pod("x");
        p.metadata.name = Some(format!("{}-.{}", "a".repeat(61), "b".repeat(5)));
        assert_eq!(
            pod_hostname_and_domain(&p, "").expect("ok").0,
            "a".repeat(61)
        );
    }

    #[tokio::test]
    async fn mount_rules_and_file() {
        let mut p = pod("web");
        let c = p.spec.as_ref().expect("spec").containers[0].clone();
        assert!(!should_mount_hosts_file(&p, &c, &[]));
        assert!(should_mount_hosts_file(&p, &c, &["10.1.0.5".into()]));
        let mut own = c.clone();
        own.volume_mounts = Some(vec![k8s_openapi::api::core::v1::VolumeMount {
            name: "h".into(),
            mount_path: ETC_HOSTS_PATH.into(),
            ..Default::default()
        }]);
        assert!(!should_mount_hosts_file(&p, &own, &["10.1.0.5".into()]));
        let dir = tempfile::tempdir().expect("tmp");
        let node_hosts = dir.path().join("node-hosts");
        std::fs::write(&node_hosts, "10.0.0.1\tnode\n").expect("w");
        p.spec.as_mut().expect("spec").host_aliases = Some(vec![alias("1.2.3.4", &["db"])]);
        let f = HostsFile {
            pod_dir: &dir.path().join("pod"),
            node_hosts: &node_hosts,
            pod_ips: &["10.1.0.5".into()],
            hostname: "web",
            domain: "",
        };
        let m = ensure_hosts_mount(&p, &f).await.expect("mount");
        assert_eq!(m.container_path, "/etc/hosts");
        let text = std::fs::read_to_string(&m.host_path).expect("read");
        assert!(
            text.ends_with("10.1.0.5\tweb\n\n# Entries added by HostAliases.\n1.2.3.4\tdb\n"),
            "{text}"
        );
        p.spec.as_mut().expect("spec").host_network = Some(true);
        assert!(should_mount_hosts_file(&p, &c, &[]));
        let m = ensure_hosts_mount(&p, &f).await.expect("mount");
        let text = std::fs::read_to_string(&m.host_path).expect("read");
        assert!(
            text.starts_with("# Kubernetes-managed hosts file (host network).\n10.0.0.1\tnode\n"),
            "{text}"
        );
    }
}
