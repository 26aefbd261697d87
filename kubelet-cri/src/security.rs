//! Pod and container security contexts → CRI (the effective context and the
//! `runAsNonRoot` check are the engine's: [`kubelet_core::kuberuntime::security`]).
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/security_context.go`
//! (`determineEffectiveSecurityContext`, `convertToRuntimeSecurityContext`),
//! `helpers.go` (`getSeccompProfile`,
//! `fieldSeccompProfile`), the sandbox part of `kuberuntime_sandbox.go`
//! (`generatePodSandboxLinuxConfig`), `pkg/securitycontext` (`DetermineEffectiveSecurityContext`,
//! `AddNoNewPrivileges`, the default masked and read-only paths). Sysctls are admitted by
//! [`kubelet_core::sysctl`].
//!
//! Also AppArmor (`getAppArmorProfile`: the `apparmor` profile and the deprecated
//! `apparmor_profile` string, from [`kubelet_core::apparmor::profile`]), SELinux options,
//! `supplementalGroupsPolicy`, and the kubelet's `seccompDefault` (a container without a
//! seccomp profile gets the runtime's default instead of unconfined).

use std::path::Path;
use std::sync::OnceLock;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, SELinuxOptions, SeccompProfile, SecurityContext};
use kubelet_core::apparmor::{self, Profile};
use kubelet_core::kuberuntime::api::ImageUser;
use kubelet_core::kuberuntime::security::effective_security_context;

use crate::error::ConfigError;

/// Upstream `determineEffectiveSecurityContext`: the container's CRI security context
/// (without namespace options, which the caller adds). `seccomp_root` is
/// `<root-dir>/seccomp`, where `Localhost` profiles live; `seccomp_default` is the kubelet's
/// `seccompDefault`.
pub fn container_security_context(
    pod: &Pod,
    container: &Container,
    image: &ImageUser,
    seccomp_root: &Path,
    seccomp_default: bool,
) -> Result<cri::LinuxContainerSecurityContext, ConfigError> {
    let sc = effective_security_context(pod, container);
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let mut out = cri::LinuxContainerSecurityContext {
        capabilities: sc.capabilities.as_ref().map(|c| cri::Capability {
            add_capabilities: c.add.clone().unwrap_or_default(),
            drop_capabilities: c.drop.clone().unwrap_or_default(),
            add_ambient_capabilities: Vec::new(),
        }),
        privileged: sc.privileged.unwrap_or(false),
        run_as_user: sc.run_as_user.map(|value| cri::Int64Value { value }),
        run_as_group: sc.run_as_group.map(|value| cri::Int64Value { value }),
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        no_new_privs: add_no_new_privileges(&sc),
        masked_paths: masked_paths(sc.proc_mount.as_deref()),
        readonly_paths: readonly_paths(sc.proc_mount.as_deref()),
        seccomp: Some(seccomp_profile(
            container
                .security_context
                .as_ref()
                .and_then(|s| s.seccomp_profile.as_ref())
                .or_else(|| pod_sc.and_then(|s| s.seccomp_profile.as_ref())),
            seccomp_root,
            seccomp_default,
        )?),
        selinux_options: sc.se_linux_options.as_ref().map(selinux_option),
        ..Default::default()
    };
    if let Some((profile, deprecated)) = apparmor_profile(pod, container)? {
        out.apparmor = Some(profile);
        // Upstream still sets the deprecated string for runtimes older than the field.
        #[allow(deprecated)]
        {
            out.apparmor_profile = deprecated;
        }
    }
    if out.run_as_user.is_none() {
        out.run_as_user = image.uid.map(|value| cri::Int64Value { value });
        out.run_as_username = image.username.clone();
    }
    if let Some(p) = pod_sc {
        out.supplemental_groups.extend(p.fs_group);
        out.supplemental_groups
            .extend(p.supplemental_groups.iter().flatten());
        out.supplemental_groups_policy = supplemental_groups_policy(pod)? as i32;
    }
    Ok(out)
}

/// Upstream `convertToRuntimeSELinuxOption`.
pub fn selinux_option(o: &SELinuxOptions) -> cri::SeLinuxOption {
    cri::SeLinuxOption {
        user: o.user.clone().unwrap_or_default(),
        role: o.role.clone().unwrap_or_default(),
        r#type: o.type_.clone().unwrap_or_default(),
        level: o.level.clone().unwrap_or_default(),
    }
}

/// The pod's `securityContext.supplementalGroupsPolicy` as CRI's (`Merge`, the default, or
/// `Strict`); another value is an error naming it.
pub fn supplemental_groups_policy(pod: &Pod) -> Result<cri::SupplementalGroupsPolicy, ConfigError> {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.supplemental_groups_policy.as_deref());
    match policy {
        None | Some("Merge") => Ok(cri::SupplementalGroupsPolicy::Merge),
        Some("Strict") => Ok(cri::SupplementalGroupsPolicy::Strict),
        Some(other) => Err(ConfigError::UnsupportedSupplementalGroupsPolicy(
            other.to_owned(),
        )),
    }
}

/// Upstream `getAppArmorProfile`: the container's profile ([`apparmor::profile`]) as CRI's
/// security profile and the deprecated profile string older runtimes read
/// (`runtime/default`, `unconfined`, `localhost/<name>`); `None` when the pod sets none.
pub fn apparmor_profile(
    pod: &Pod,
    container: &Container,
) -> Result<Option<(cri::SecurityProfile, String)>, ConfigError> {
    use cri::security_profile::ProfileType;
    let of = |t: ProfileType, localhost_ref: String| cri::SecurityProfile {
        profile_type: t as i32,
        localhost_ref,
    };
    Ok(match apparmor::profile(pod, container) {
        None => None,
        Some(Profile::RuntimeDefault) => Some((
            of(ProfileType::RuntimeDefault, String::new()),
            apparmor::RUNTIME_DEFAULT.to_owned(),
        )),
        Some(Profile::Unconfined) => Some((
            of(ProfileType::Unconfined, String::new()),
            apparmor::UNCONFINED.to_owned(),
        )),
        Some(Profile::Localhost(name)) if name.is_empty() => {
            return Err(ConfigError::MissingAppArmorLocalhostProfile);
        }
        Some(Profile::Localhost(name)) => Some((
            of(ProfileType::Localhost, name.clone()),
            format!("{}{name}", apparmor::LOCALHOST_PREFIX),
        )),
        Some(Profile::Unknown(t)) => return Err(ConfigError::UnknownAppArmorProfileType(t)),
    })
}

/// The sandbox's CRI security context, without namespace options and `privileged`, which the
/// caller adds (upstream `generatePodSandboxLinuxConfig`): the pod's `runAsUser`,
/// `runAsGroup`, `fsGroup` and `supplementalGroups`, and always the runtime's default seccomp
/// profile (upstream issue #84623).
pub fn sandbox_security_context(pod: &Pod) -> cri::LinuxSandboxSecurityContext {
    let mut out = cri::LinuxSandboxSecurityContext {
        seccomp: Some(cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        }),
        ..Default::default()
    };
    if let Some(sc) = pod.spec.as_ref().and_then(|s| s.security_context.as_ref()) {
        out.run_as_user = sc.run_as_user.map(|value| cri::Int64Value { value });
        out.run_as_group = sc.run_as_group.map(|value| cri::Int64Value { value });
        out.supplemental_groups.extend(sc.fs_group);
        out.supplemental_groups
            .extend(sc.supplemental_groups.iter().flatten());
        out.selinux_options = sc.se_linux_options.as_ref().map(selinux_option);
        // An unknown policy fails the containers' configs, which name it.
        out.supplemental_groups_policy = supplemental_groups_policy(pod).unwrap_or_default() as i32;
    }
    out
}

/// Upstream `AddNoNewPrivileges`: only an explicit `allowPrivilegeEscalation: false` sets
/// `no_new_privs`.
pub fn add_no_new_privileges(sc: &SecurityContext) -> bool {
    sc.allow_privilege_escalation == Some(false)
}

/// Upstream `getSeccompProfile`/`fieldSeccompProfile`: no profile → the runtime's default
/// with `seccomp_default` (the kubelet's `seccompDefault`), else unconfined; `Unconfined`;
/// `RuntimeDefault`; `Localhost` → `<seccomp_root>/<profile>` (the profile name is required).
pub fn seccomp_profile(
    profile: Option<&SeccompProfile>,
    seccomp_root: &Path,
    seccomp_default: bool,
) -> Result<cri::SecurityProfile, ConfigError> {
    use cri::security_profile::ProfileType;
    let of = |t: ProfileType, localhost_ref: String| cri::SecurityProfile {
        profile_type: t as i32,
        localhost_ref,
    };
    Ok(match profile.map(|p| (p.type_.as_str(), p)) {
        Some(("RuntimeDefault", _)) => of(ProfileType::RuntimeDefault, String::new()),
        Some(("Localhost", p)) => match p.localhost_profile.as_deref().filter(|s| !s.is_empty()) {
            Some(name) => of(
                ProfileType::Localhost,
                seccomp_root.join(name).to_string_lossy().into_owned(),
            ),
            None => return Err(ConfigError::MissingLocalhostProfile),
        },
        None if seccomp_default => of(ProfileType::RuntimeDefault, String::new()),
        _ => of(ProfileType::Unconfined, String::new()),
    })
}

/// Upstream's default masked paths (kept in sync with moby), plus each CPU's
/// `thermal_throttle` directory that exists on this node.
// Reviewed: sysfs is served from kernel memory (never a disk), read once per process.
#[allow(clippy::disallowed_methods)]
fn default_masked_paths() -> &'static [String] {
    static PATHS: OnceLock<Vec<String>> = OnceLock::new();
    PATHS.get_or_init(|| {
        let mut paths: Vec<String> = [
            "/proc/asound",
            "/proc/acpi",
            "/proc/interrupts",
            "/proc/kcore",
            "/proc/keys",
            "/proc/latency_stats",
            "/proc/timer_list",
            "/proc/timer_stats",
            "/proc/sched_debug",
            "/proc/scsi",
            "/sys/firmware",
            "/sys/devices/virtual/powercap",
        ]
        .map(str::to_owned)
        .to_vec();
        let mut cpus: Vec<u32> = std::fs::read_dir("/sys/devices/system/cpu")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok())
            .collect();
        cpus.sort_unstable();
        for cpu in cpus {
            let path = format!("/sys/devices/system/cpu/cpu{cpu}/thermal_throttle");
            if Path::new(&path).exists() {
                paths.push(path);
            }
        }
        paths
    })
}

/// Upstream's default read-only paths.
const DEFAULT_READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Upstream `ConvertToRuntimeMaskedPaths`: none for `procMount: Unmasked`, else the defaults.
pub fn masked_paths(proc_mount: Option<&str>) -> Vec<String> {
    if proc_mount == Some("Unmasked") {
        return Vec::new();
    }
    default_masked_paths().to_vec()
}

/// Upstream `ConvertToRuntimeReadonlyPaths`: none for `procMount: Unmasked`, else the defaults.
pub fn readonly_paths(proc_mount: Option<&str>) -> Vec<String> {
    if proc_mount == Some("Unmasked") {
        return Vec::new();
    }
    DEFAULT_READONLY_PATHS.map(str::to_owned).to_vec()
}

#[cfg(test)]
mod tests;
