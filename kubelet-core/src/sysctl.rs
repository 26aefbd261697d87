//! Pod sysctls: upstream's safe set, the node's `--allowed-unsafe-sysctls` patterns, and the
//! admission rule that rejects every other one (upstream `pkg/kubelet/sysctl/safe_sysctls.go`,
//! `allowlist.go`, `namespace.go`, `pkg/apis/policy/validation` `IsValidSysctlPattern` and
//! `pkg/util/sysctl` `NormalizeName`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

/// The reason of a pod rejected for its sysctls (upstream `ForbiddenReason`).
pub const FORBIDDEN_REASON: &str = "SysctlForbidden";

/// The longest sysctl name or pattern (upstream `SysctlMaxLength`).
pub const MAX_LENGTH: usize = 253;

/// Upstream's `SysctlContainSlashPatternFmt`, quoted in the message of a malformed pattern.
const PATTERN_FMT: &str = r"([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]";

/// A pod sysctl the node refuses, or an allowlist pattern it cannot use; the messages are
/// upstream's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Neither safe nor allowed by `--allowed-unsafe-sysctls`.
    #[error("forbidden sysctl: {0:?} not allowlisted")]
    NotAllowlisted(String),
    /// A `net.*` sysctl in a host-network pod.
    #[error("forbidden sysctl: {0:?} not allowed with host net enabled")]
    HostNetwork(String),
    /// An IPC sysctl (`kernel.shm*`, `kernel.msg*`, `kernel.sem`, `fs.mqueue.*`) in a
    /// host-IPC pod.
    #[error("forbidden sysctl: {0:?} not allowed with host ipc enabled")]
    HostIpc(String),
    /// An `--allowed-unsafe-sysctls`/`allowedUnsafeSysctls` entry that is not a sysctl
    /// name or `<prefix>*` pattern.
    #[error(
        "allowedUnsafeSysctls: sysctl {0:?} must have at most {MAX_LENGTH} characters and match regex {PATTERN_FMT}"
    )]
    InvalidPattern(String),
    /// An `--allowed-unsafe-sysctls`/`allowedUnsafeSysctls` entry outside the namespaced
    /// sysctls: a pod's value would change the whole node.
    #[error("allowedUnsafeSysctls: the sysctls {0:?} are not known to be namespaced")]
    NotNamespaced(String),
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

/// The kernel namespace a sysctl belongs to (upstream `namespace.go`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Namespace {
    Ipc,
    Net,
}

/// Upstream `NamespacedBy`: `kernel.sem`, and the `kernel.shm`, `kernel.msg`, `fs.mqueue.`
/// prefixes are IPC; `net.` is the network; everything else is not namespaced.
fn namespaced_by(name: &str) -> Option<Namespace> {
    if name == "kernel.sem" {
        return Some(Namespace::Ipc);
    }
    if ["kernel.shm", "kernel.msg", "fs.mqueue."]
        .iter()
        .any(|p| name.starts_with(p))
    {
        return Some(Namespace::Ipc);
    }
    name.starts_with("net.").then_some(Namespace::Net)
}

/// Upstream `IsValidSysctlPattern`: at most [`MAX_LENGTH`] characters of lowercase
/// segments joined by `.` or `/`, the last of which may end in `*`.
pub fn is_valid_pattern(pattern: &str) -> bool {
    if pattern.is_empty() || pattern.len() > MAX_LENGTH {
        return false;
    }
    let segments: Vec<&str> = pattern.split(['.', '/']).collect();
    let (last, leading) = segments.split_last().unwrap_or((&"", &[]));
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let inner = |c: char| alnum(c) || c == '-' || c == '_';
    // `[a-z0-9]([-_a-z0-9]*[a-z0-9])?`
    let segment = |s: &str| {
        let mut chars = s.chars();
        chars.next().is_some_and(alnum)
            && s.chars().last().is_some_and(alnum)
            && s.chars().all(inner)
    };
    // `([a-z0-9][-_a-z0-9]*)?[a-z0-9*]`
    let last_ok = |s: &str| match s.strip_suffix('*') {
        Some("") => true,
        Some(rest) => rest.chars().next().is_some_and(alnum) && rest.chars().all(inner),
        None => segment(s),
    };
    leading.iter().all(|s| segment(s)) && last_ok(last)
}

/// The sysctls a pod may set on this node (upstream `patternAllowlist`): the safe set plus
/// the node's `--allowed-unsafe-sysctls` patterns, each a full name or a `<prefix>*`, each
/// with the namespace it belongs to.
///
/// ```
/// use kubelet_core::sysctl::Allowlist;
///
/// let list = Allowlist::new(&["kernel.msg*".to_owned(), "net.core.somaxconn".to_owned()])
///     .expect("namespaced patterns");
/// assert!(list.is_allowed("kernel.msgmax"));
/// assert!(list.is_allowed("net.ipv4.tcp_syncookies"));
/// assert!(!list.is_allowed("kernel.sem"));
/// assert!(Allowlist::new(&["kernel.panic".to_owned()]).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowlist {
    sysctls: BTreeMap<String, Namespace>,
    prefixes: BTreeMap<String, Namespace>,
}

impl Default for Allowlist {
    /// Upstream's safe sysctls only (no `--allowed-unsafe-sysctls`).
    fn default() -> Self {
        Self::new(&[]).unwrap_or_else(|_| Self {
            sysctls: BTreeMap::new(),
            prefixes: BTreeMap::new(),
        })
    }
}

impl Allowlist {
    /// The safe set plus `allowed_unsafe` (upstream `NewAllowlist(append(SafeSysctlAllowlist(),
    /// allowedUnsafeSysctls...))`). A pattern that is malformed or names sysctls that are not
    /// namespaced is an error naming it.
    pub fn new(allowed_unsafe: &[String]) -> Result<Self, Error> {
        let mut list = Self {
            sysctls: BTreeMap::new(),
            prefixes: BTreeMap::new(),
        };
        let patterns = SAFE_SYSCTLS
            .iter()
            .copied()
            .chain(allowed_unsafe.iter().map(String::as_str));
        for pattern in patterns {
            if !is_valid_pattern(pattern) {
                return Err(Error::InvalidPattern(pattern.to_owned()));
            }
            let mut name = normalize_name(pattern);
            let prefixed = match name.find('*') {
                Some(i) => {
                    name.truncate(i);
                    true
                }
                None => false,
            };
            let Some(ns) = namespaced_by(&name) else {
                return Err(Error::NotNamespaced(name));
            };
            if prefixed {
                list.prefixes.insert(name, ns);
            } else {
                list.sysctls.insert(name, ns);
            }
        }
        Ok(list)
    }

    /// `true` when a pod may set `name` (host namespaces aside).
    pub fn is_allowed(&self, name: &str) -> bool {
        self.namespace_of(&normalize_name(name)).is_some()
    }

    fn namespace_of(&self, name: &str) -> Option<Namespace> {
        if let Some(ns) = self.sysctls.get(name) {
            return Some(*ns);
        }
        self.prefixes
            .iter()
            .find(|(p, _)| name.starts_with(p.as_str()))
            .map(|(_, ns)| *ns)
    }

    /// Upstream `patternAllowlist.Admit`: every pod sysctl must be allowed, and one of the
    /// network (IPC) namespace needs the pod's own network (IPC) namespace. The error's
    /// message is upstream's, e.g. `forbidden sysctl: "kernel.msgmax" not allowlisted`.
    pub fn validate(&self, pod: &Pod) -> Result<(), Error> {
        let spec = pod.spec.as_ref();
        let host_net = spec.and_then(|s| s.host_network).unwrap_or(false);
        let host_ipc = spec.and_then(|s| s.host_ipc).unwrap_or(false);
        let sysctls = spec
            .and_then(|s| s.security_context.as_ref())
            .and_then(|s| s.sysctls.as_ref());
        for s in sysctls.into_iter().flatten() {
            let name = normalize_name(&s.name);
            match self.namespace_of(&name) {
                None => return Err(Error::NotAllowlisted(name)),
                Some(Namespace::Net) if host_net => return Err(Error::HostNetwork(name)),
                Some(Namespace::Ipc) if host_ipc => return Err(Error::HostIpc(name)),
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// [`Allowlist::validate`] with the safe sysctls only.
pub fn validate(pod: &Pod) -> Result<(), Error> {
    Allowlist::default().validate(pod)
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
            validate(&pod_with(names, host_net, host_ipc)).map_err(|e| e.to_string())
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

    fn pod_with(names: &[&str], host_net: bool, host_ipc: bool) -> Pod {
        let mut p = crate::testing::pod("bar");
        if let Some(s) = p.spec.as_mut() {
            s.security_context = Some(PodSecurityContext {
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
            s.host_network = Some(host_net);
            s.host_ipc = Some(host_ipc);
        }
        p
    }

    #[test]
    fn allowed_unsafe_sysctls_extend_the_safe_set() {
        let list = Allowlist::new(&[
            "kernel.msg*".to_owned(),
            "net.core.somaxconn".to_owned(),
            "kernel.sem".to_owned(),
            "fs/mqueue/*".to_owned(),
        ])
        .expect("valid");
        let check = |names: &[&str], net: bool, ipc: bool| {
            list.validate(&pod_with(names, net, ipc))
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            check(&["kernel.msgmax", "kernel.msgmnb"], false, false),
            Ok(())
        );
        assert_eq!(check(&["kernel/msgmax"], false, false), Ok(()));
        assert_eq!(check(&["net.core.somaxconn"], false, false), Ok(()));
        assert_eq!(check(&["fs.mqueue.msg_max"], false, false), Ok(()));
        assert_eq!(check(&["net.ipv4.tcp_syncookies"], false, false), Ok(()));
        // An exact name does not allow its longer siblings.
        assert_eq!(
            check(&["net.core.somaxconn2"], false, false),
            Err("forbidden sysctl: \"net.core.somaxconn2\" not allowlisted".into())
        );
        assert_eq!(
            check(&["kernel.msgmax"], false, true),
            Err("forbidden sysctl: \"kernel.msgmax\" not allowed with host ipc enabled".into())
        );
        assert_eq!(
            check(&["kernel.sem"], false, true),
            Err("forbidden sysctl: \"kernel.sem\" not allowed with host ipc enabled".into())
        );
        assert_eq!(
            check(&["net.core.somaxconn"], true, false),
            Err(
                "forbidden sysctl: \"net.core.somaxconn\" not allowed with host net enabled".into()
            )
        );
        assert_eq!(check(&["kernel.msgmax"], true, false), Ok(()));
        // Without the flag, only the safe set.
        assert_eq!(
            Allowlist::default()
                .validate(&pod_with(&["kernel.msgmax"], false, false))
                .map_err(|e| e.to_string()),
            Err("forbidden sysctl: \"kernel.msgmax\" not allowlisted".into())
        );
    }

    #[test]
    fn allowlist_patterns_must_be_valid_and_namespaced() {
        let err = |p: &str| Allowlist::new(&[p.to_owned()]).err().map(|e| e.to_string());
        assert_eq!(
            err("kernel.panic"),
            Some(
                "allowedUnsafeSysctls: the sysctls \"kernel.panic\" are not known to be namespaced"
                    .into()
            )
        );
        assert_eq!(
            err("*"),
            Some("allowedUnsafeSysctls: the sysctls \"\" are not known to be namespaced".into())
        );
        assert_eq!(
            err("kernel.*"),
            Some(
                "allowedUnsafeSysctls: the sysctls \"kernel.\" are not known to be namespaced"
                    .into()
            )
        );
        for bad in [
            "Net.core.somaxconn",
            "net..core",
            "net.*.x",
            "net.core.",
            "",
            "net.core.so maxconn",
        ] {
            let e = err(bad).unwrap_or_default();
            assert!(
                e.starts_with(&format!(
                    "allowedUnsafeSysctls: sysctl {bad:?} must have at most 253 characters"
                )),
                "{bad:?}: {e}"
            );
        }
        assert!(err(&format!("net.{}", "a".repeat(250))).is_some());
        for good in [
            "net.*",
            "kernel.shm*",
            "kernel.msg*",
            "net.ipv4.conf.eth0/100.rp_filter",
        ] {
            assert_eq!(err(good), None, "{good}");
        }
    }
}
