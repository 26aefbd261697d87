//! The pod sandbox configuration sent in `RunPodSandbox` (and again with each
//! `CreateContainer` and `PullImage`).
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/kuberuntime_sandbox.go`
//! (`generatePodSandboxConfig`, `generatePodSandboxLinuxConfig`),
//! `pkg/kubelet/kuberuntime/util/util.go` (`NamespacesForPod`) and the host DNS part of
//! `pkg/kubelet/network/dns/dns.go` (`parseResolvConf`). The DNS policies are applied by
//! [`crate::dns`]; resources, overhead and the pod cgroup parent by [`crate::resources`];
//! the sync replaces [`pod_hostname`] with the kubelet's hostname/domain/FQDN logic
//! (`kubelet_core::kubelet::hosts`) for pods off the host network.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use kubelet_core::pod::PodExt;

use crate::labels::{new_pod_annotations, new_pod_labels};
use crate::runtime::Options;

/// `<root>/<namespace>_<name>_<uid>`, the pod's log directory (upstream
/// `BuildPodLogsDirectory`).
pub fn pod_logs_dir(root: &Path, pod: &Pod) -> PathBuf {
    root.join(format!(
        "{}_{}_{}",
        pod.namespace_or_default(),
        pod.name_or_empty(),
        pod.uid()
    ))
}

/// Network namespace mode of a pod: `NODE` with `hostNetwork`, else `POD`.
pub fn network_namespace_for_pod(pod: &Pod) -> cri::NamespaceMode {
    if pod.host_network() {
        cri::NamespaceMode::Node
    } else {
        cri::NamespaceMode::Pod
    }
}

/// Namespace options of a pod's sandbox and containers (upstream `NamespacesForPod`):
/// network and IPC are `NODE` with `hostNetwork`/`hostIPC`, else `POD`; PID is `NODE` with
/// `hostPID`, `POD` with `shareProcessNamespace`, else `CONTAINER` (the v1 API default).
pub fn namespace_options(pod: &Pod) -> cri::NamespaceOption {
    let spec = pod.spec.as_ref();
    let flag = |f: fn(&k8s_openapi::api::core::v1::PodSpec) -> Option<bool>| {
        spec.and_then(f).unwrap_or(false)
    };
    let ipc = if flag(|s| s.host_ipc) {
        cri::NamespaceMode::Node
    } else {
        cri::NamespaceMode::Pod
    };
    let pid = if flag(|s| s.host_pid) {
        cri::NamespaceMode::Node
    } else if flag(|s| s.share_process_namespace) {
        cri::NamespaceMode::Pod
    } else {
        cri::NamespaceMode::Container
    };
    cri::NamespaceOption {
        network: network_namespace_for_pod(pod) as i32,
        pid: pid as i32,
        ipc: ipc as i32,
        ..Default::default()
    }
}

/// The sandbox hostname (upstream `GeneratePodHostNameAndDomain`): `spec.hostname` or the pod
/// name, truncated to 63 characters without a trailing `-` or `.`. Empty for host-network
/// pods, which keep the node's hostname.
pub fn pod_hostname(pod: &Pod) -> String {
    if pod.host_network() {
        return String::new();
    }
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
        .unwrap_or(pod.name_or_empty());
    if name.len() <= 63 {
        return name.to_owned();
    }
    let mut truncated: String = name.chars().take(63).collect();
    while truncated.ends_with(['-', '.']) {
        truncated.pop();
    }
    truncated
}

/// Host resolver configuration parsed from resolv.conf text (upstream `parseResolvConf`):
/// `nameserver`, `search` (the last line wins, trailing dots dropped) and `options`.
pub fn parse_resolv_conf(text: &str) -> cri::DnsConfig {
    let mut dns = cri::DnsConfig::default();
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
pub(crate) async fn host_dns_config(path: &Path) -> cri::DnsConfig {
    match tokio::fs::read_to_string(path).await {
        Ok(text) => parse_resolv_conf(&text),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read host resolv.conf; pods get no DNS config");
            cri::DnsConfig::default()
        }
    }
}

/// Port mappings of every container port that has a `hostPort`.
pub fn port_mappings(pod: &Pod) -> Vec<cri::PortMapping> {
    pod.containers()
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| cri::PortMapping {
            protocol: match p.protocol.as_deref() {
                Some("UDP") => cri::Protocol::Udp,
                Some("SCTP") => cri::Protocol::Sctp,
                _ => cri::Protocol::Tcp,
            } as i32,
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or_default(),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect()
}

/// `true` when any container of the pod asks for privileged mode.
fn has_privileged_container(pod: &Pod) -> bool {
    pod.containers()
        .iter()
        .chain(pod.init_containers())
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        })
}

/// Normalizes a sysctl name to dots as separators ([`kubelet_core::sysctl::normalize_name`]).
fn normalize_sysctl(name: &str) -> String {
    kubelet_core::sysctl::normalize_name(name)
}

/// The full sandbox configuration for `pod` at `attempt`, with the given DNS config.
pub(crate) fn generate_pod_sandbox_config(
    pod: &Pod,
    attempt: u32,
    opts: &Options,
    dns: cri::DnsConfig,
) -> cri::PodSandboxConfig {
    let sysctls: HashMap<String, String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (normalize_sysctl(&s.name), s.value.clone()))
        .collect();
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: pod.name_or_empty().into(),
            uid: pod.uid().0,
            namespace: pod.namespace_or_default().into(),
            attempt,
        }),
        hostname: pod_hostname(pod),
        log_directory: pod_logs_dir(&opts.pod_logs_dir, pod)
            .to_string_lossy()
            .into_owned(),
        dns_config: Some(dns),
        port_mappings: port_mappings(pod),
        labels: new_pod_labels(pod),
        annotations: new_pod_annotations(pod),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: opts.cgroup_parent.clone().unwrap_or_default(),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                privileged: has_privileged_container(pod),
                ..crate::security::sandbox_security_context(pod)
            }),
            sysctls,
            ..Default::default()
        }),
        windows: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, PodSecurityContext, Sysctl};
    use kubelet_core::testing::pod;

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

    #[test]
    fn namespaces_follow_host_flags() {
        let mut p = pod("web");
        let ns = namespace_options(&p);
        assert_eq!(ns.network, cri::NamespaceMode::Pod as i32);
        assert_eq!(ns.ipc, cri::NamespaceMode::Pod as i32);
        assert_eq!(ns.pid, cri::NamespaceMode::Container as i32);
        let spec = p.spec.as_mut().expect("spec");
        spec.host_network = Some(true);
        spec.host_pid = Some(true);
        spec.host_ipc = Some(true);
        let ns = namespace_options(&p);
        assert_eq!(ns.network, cri::NamespaceMode::Node as i32);
        assert_eq!(ns.ipc, cri::NamespaceMode::Node as i32);
        assert_eq!(ns.pid, cri::NamespaceMode::Node as i32);
        assert_eq!(pod_hostname(&p), "");
    }

    #[test]
    fn hostname_is_truncated() {
        let mut p = pod("web");
        assert_eq!(pod_hostname(&p), "web");
        p.metadata.name = Some(format!("{}-{}", "a".repeat(62), "b"));
        assert_eq!(pod_hostname(&p), "a".repeat(62));
        if let Some(s) = p.spec.as_mut() {
            s.hostname = Some("custom".into());
        }
        assert_eq!(pod_hostname(&p), "custom");
    }

    #[test]
    fn sandbox_config() {
        let mut p = pod("web");
        let spec = p.spec.as_mut().expect("spec");
        spec.containers[0].ports = Some(vec![
            ContainerPort {
                container_port: 80,
                host_port: Some(8080),
                ..Default::default()
            },
            ContainerPort {
                container_port: 53,
                protocol: Some("UDP".into()),
                host_port: Some(5353),
                host_ip: Some("127.0.0.1".into()),
                ..Default::default()
            },
            ContainerPort {
                container_port: 9090,
                ..Default::default()
            },
        ]);
        spec.security_context = Some(PodSecurityContext {
            sysctls: Some(vec![Sysctl {
                name: "net/ipv4/ip_unprivileged_port_start".into(),
                value: "0".into(),
            }]),
            ..Default::default()
        });
        let opts = Options::default().with_pod_logs_dir("/logs");
        let cfg = generate_pod_sandbox_config(&p, 3, &opts, cri::DnsConfig::default());
        let md = cfg.metadata.as_ref().expect("metadata");
        assert_eq!(
            (
                md.name.as_str(),
                md.namespace.as_str(),
                md.uid.as_str(),
                md.attempt
            ),
            ("web", "default", "uid-web", 3)
        );
        assert_eq!(cfg.log_directory, "/logs/default_web_uid-web");
        assert_eq!(cfg.hostname, "web");
        assert_eq!(cfg.port_mappings.len(), 2);
        assert_eq!(cfg.port_mappings[1].protocol, cri::Protocol::Udp as i32);
        assert_eq!(cfg.port_mappings[1].host_ip, "127.0.0.1");
        let linux = cfg.linux.as_ref().expect("linux");
        assert_eq!(linux.sysctls["net.ipv4.ip_unprivileged_port_start"], "0");
        assert_eq!(
            normalize_sysctl("kernel.shm_rmid_forced"),
            "kernel.shm_rmid_forced"
        );
        assert_eq!(
            normalize_sysctl("net.ipv4.conf.eno2/100.rp_filter"),
            "net.ipv4.conf.eno2/100.rp_filter"
        );
    }
}
