//! The CRI pod sandbox configuration sent in `RunPodSandbox` (and again with each
//! `CreateContainer` and `PullImage`), from the engine's [`api::PodSandboxConfig`].
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/kuberuntime_sandbox.go`
//! (`generatePodSandboxConfig`, `generatePodSandboxLinuxConfig`) and
//! `pkg/kubelet/kuberuntime/util/util.go` (`NamespacesForPod`). Hostname, DNS, log directory,
//! labels and the pod cgroup come from the engine; resources and overhead from
//! [`crate::resources`].

use std::collections::HashMap;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use kubelet_core::kuberuntime::api;
use kubelet_core::pod::PodExt;

use crate::resources::apply_to_sandbox;
use crate::service::CriOptions;

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
/// `hostPID`, `POD` with `shareProcessNamespace`, else `CONTAINER` (the v1 API default); the
/// user namespace is the node's unless `hostUsers: false` (which
/// [`check_user_namespaces`] refuses before any sandbox is asked for).
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
    let userns_options =
        (spec.and_then(|s| s.host_users) != Some(false)).then(|| cri::UserNamespace {
            mode: cri::NamespaceMode::Node as i32,
            ..Default::default()
        });
    cri::NamespaceOption {
        network: network_namespace_for_pod(pod) as i32,
        pid: pid as i32,
        ipc: ipc as i32,
        userns_options,
        ..Default::default()
    }
}

/// Whether a pod with `hostUsers: false` can get a user namespace from the runtime whose
/// status is `status`, with the RuntimeClass `handler` (`""`: the default), as upstream's
/// `UsernsManager.GetOrCreateUserNamespaceMappings` and `HandlerSupportsUserNamespaces`
/// decide: the runtime must report its handlers and this one must support user namespaces
/// (containerd 1.6 reports none). Other pods always pass.
pub fn check_user_namespaces(
    pod: &Pod,
    status: &cri::StatusResponse,
    handler: &str,
) -> Result<(), crate::error::ConfigError> {
    use crate::error::ConfigError::UserNamespaces;
    if pod.spec.as_ref().and_then(|s| s.host_users) != Some(false) {
        return Ok(());
    }
    if status.runtime_handlers.is_empty() {
        return Err(UserNamespaces("runtime handlers are not set".into()));
    }
    let Some(h) = status.runtime_handlers.iter().find(|h| h.name == handler) else {
        return Err(UserNamespaces(format!(
            "the handler {handler:?} is not known"
        )));
    };
    if !h.features.as_ref().is_some_and(|f| f.user_namespaces) {
        return Err(UserNamespaces(format!(
            "RuntimeClass handler {handler:?} does not support user namespaces"
        )));
    }
    // Upstream allocates each pod 65536 host IDs from the kubelet's range and persists
    // them; this kubelet does not allocate yet.
    Err(UserNamespaces(
        "allocating user namespace ID mappings is not implemented by this kubelet".into(),
    ))
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

/// The full CRI sandbox configuration (upstream `generatePodSandboxConfig`): the engine's
/// choices, plus ports, namespaces, security context, sysctls, resources and overhead from
/// the pod; the cgroup parent falls back to [`CriOptions::cgroup_parent`].
pub(crate) fn generate_pod_sandbox_config(
    config: &api::PodSandboxConfig<'_>,
    opts: &CriOptions,
) -> cri::PodSandboxConfig {
    let pod = config.pod;
    let sysctls: HashMap<String, String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (normalize_sysctl(&s.name), s.value.clone()))
        .collect();
    let cgroup_parent = if config.cgroup_parent.is_empty() {
        opts.cgroup_parent.clone().unwrap_or_default()
    } else {
        config.cgroup_parent.clone()
    };
    let dns = &config.dns;
    let mut out = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: pod.name_or_empty().into(),
            uid: pod.uid().0,
            namespace: pod.namespace_or_default().into(),
            attempt: config.attempt,
        }),
        hostname: config.hostname.clone(),
        log_directory: config.log_directory.to_string_lossy().into_owned(),
        dns_config: Some(cri::DnsConfig {
            servers: dns.servers.clone(),
            searches: dns.searches.clone(),
            options: dns.options.clone(),
        }),
        port_mappings: port_mappings(pod),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                privileged: has_privileged_container(pod),
                ..crate::security::sandbox_security_context(pod)
            }),
            sysctls,
            ..Default::default()
        }),
        windows: None,
    };
    apply_to_sandbox(&mut out, pod, &cgroup_parent, opts.cfs_quota);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, PodSecurityContext, Sysctl};
    use kubelet_core::testing::pod;

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
        let config = api::PodSandboxConfig {
            pod: &p,
            attempt: 3,
            hostname: "web".into(),
            dns: api::DnsConfig::default(),
            log_directory: "/logs/default_web_uid-web".into(),
            cgroup_parent: String::new(),
            labels: Default::default(),
            annotations: Default::default(),
            runtime_handler: String::new(),
        };
        let opts = CriOptions::default().with_cgroup_parent("/kubepods");
        let cfg = generate_pod_sandbox_config(&config, &opts);
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
        assert_eq!(linux.cgroup_parent, "/kubepods", "the backend's default");
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

    #[test]
    fn host_users_false_needs_a_runtime_with_user_namespaces() {
        let mut p = pod("web");
        let no_handlers = cri::StatusResponse::default();
        assert_eq!(check_user_namespaces(&p, &no_handlers, ""), Ok(()));
        assert_eq!(
            namespace_options(&p).userns_options.map(|u| u.mode),
            Some(cri::NamespaceMode::Node as i32)
        );
        p.spec.as_mut().expect("spec").host_users = Some(false);
        assert_eq!(namespace_options(&p).userns_options, None);
        let msg = |status: &cri::StatusResponse| {
            check_user_namespaces(&p, status, "")
                .map_err(|e| kubelet_core::runtime::Error::from(e).to_string())
        };
        // containerd 1.6: no handlers reported.
        assert_eq!(
            msg(&no_handlers),
            Err("invalid pod spec: spec.hostUsers: the runtime cannot run the pod in a user namespace: runtime handlers are not set".into())
        );
        let with = |userns: bool| cri::StatusResponse {
            runtime_handlers: vec![cri::RuntimeHandler {
                name: String::new(),
                features: Some(cri::RuntimeHandlerFeatures {
                    user_namespaces: userns,
                    ..Default::default()
                }),
            }],
            ..Default::default()
        };
        assert_eq!(
            msg(&with(false)),
            Err("invalid pod spec: spec.hostUsers: the runtime cannot run the pod in a user namespace: RuntimeClass handler \"\" does not support user namespaces".into())
        );
        assert!(msg(&with(true)).is_err_and(|m| m.contains("not implemented")));
    }
}
