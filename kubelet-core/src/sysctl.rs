//! Pod sysctls: upstream's safe set and the admission rule that rejects every other one
//! (upstream `pkg/kubelet/sysctl/safe_sysctls.go`, `allowlist.go` with no
//! `--allowed-unsafe-sysctls`, and `pkg/util/sysctl` `NormalizeName`).

use k8s_openapi::api::core::v1::Pod;

/// The reason of a pod rejected for its sysctls (upstream `ForbiddenReason`).
pub const FORBIDDEN_REASON: &str = "SysctlForbidden";

/// A pod sysctl the node refuses; the message is upstream's admission message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Not in [`SAFE_SYSCTLS`].
    #[error("forbidden sysctl: {0:?} not allowlisted")]
    NotAllowlisted(String),
    /// A `net.*` sysctl in a host-network pod.
    #[error("forbidden sysctl: {0:?} not allowed with host net enabled")]
    HostNetwork(String),
    /// A `kernel.shm*` sysctl in a host-IPC pod.
    #[error("forbidden sysctl: {0:?} not allowed with host ipc enabled")]
    HostIpc(String),
}

/// Upstream's safe sysctls, all namespaced on the kernels this kubelet supports (≥ 4.15).
pub const SAFE_SYSCTLS: [&str; 12] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// Upstream `patternAllowlist.Admit`: every pod sysctl must be safe, and a `net.*` one needs
/// the pod's own network namespace (`kernel.shm*` its own IPC namespace). The error's message
/// is upstream's, e.g. `forbidden sysctl: "kernel.msgmax" not allowlisted`.
pub fn validate(pod: &Pod) -> Result<(), Error> {
    let spec = pod.spec.as_ref();
    let host_net = spec.and_then(|s| s.host_network).unwrap_or(false);
    let host_ipc = spec.and_then(|s| s.host_ipc).unwrap_or(false);
    let sysctls = spec
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.sysctls.as_ref());
    for s in sysctls.into_iter().flatten() {
        let name = normalize_name(&s.name);
        if !SAFE_SYSCTLS.contains(&name.as_str()) {
            return Err(Error::NotAllowlisted(name));
        }
        if host_net && name.starts_with("net.") {
            return Err(Error::HostNetwork(name));
        }
        if host_ipc && name.starts_with("kernel.shm") {
            return Err(Error::HostIpc(name));
        }
    }
    Ok(())
}

/// Upstream `sysctl.NormalizeName`: `net/ipv4/ip_forward` → `net.ipv4.ip_forward`; a `/`
/// after a first `.` is kept.
pub fn normalize_name(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '/' => '.',
                '.' => '/',
                c => c,
            })
            .collect(),
        _ => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSecurityContext, Sysctl};

    #[test]
    fn only_safe_sysctls_are_admitted() {
        let with = |names: &[&str], host_net: bool, host_ipc: bool| {
            let mut p = crate::testing::pod("bar");
            p.spec.as_mut().expect("spec").security_context = Some(PodSecurityContext {
                sysctls: Some(
                    names
                        .iter()
                        .map(|n| Sysctl {
                            name: (*n).into(),
                            value: "1".into(),
                        })
                        .collect(),
                ),
                ..Default::default()
            });
            if let Some(s) = p.spec.as_mut() {
                s.host_network = Some(host_net);
                s.host_ipc = Some(host_ipc);
            }
            validate(&p).map_err(|e| e.to_string())
        };
        assert_eq!(with(&SAFE_SYSCTLS, false, false), Ok(()));
        assert_eq!(with(&["net/ipv4/tcp_syncookies"], false, false), Ok(()));
        assert_eq!(
            with(&["kernel.msgmax"], false, false),
            Err("forbidden sysctl: \"kernel.msgmax\" not allowlisted".into())
        );
        assert_eq!(
            with(&["net.core.somaxconn"], false, false),
            Err("forbidden sysctl: \"net.core.somaxconn\" not allowlisted".into())
        );
        assert_eq!(
            with(&["net.ipv4.ip_local_port_range"], true, false),
            Err(
                "forbidden sysctl: \"net.ipv4.ip_local_port_range\" not allowed with host net enabled"
                    .into()
            )
        );
        assert_eq!(
            with(&["kernel.shm_rmid_forced"], false, true),
            Err(
                "forbidden sysctl: \"kernel.shm_rmid_forced\" not allowed with host ipc enabled"
                    .into()
            )
        );
        assert_eq!(with(&["kernel.shm_rmid_forced"], true, false), Ok(()));
    }
}
