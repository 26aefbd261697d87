//! Cases of upstream `TestDetermineEffectiveSecurityContext`-style merges, `TestFieldProfile` (helpers_test.go),
//! `TestAddNoNewPrivileges` (pkg/securitycontext).

use k8s_openapi::api::core::v1::{Capabilities, PodSecurityContext};
use kubelet_core::PodExt;
use kubelet_core::testing::pod;

use super::*;

fn pod_with(pod_sc: Option<PodSecurityContext>, sc: Option<SecurityContext>) -> Pod {
    let mut p = pod("bar");
    p.metadata.namespace = Some("new".into());
    p.metadata.uid = Some("12345678".into());
    if let Some(spec) = p.spec.as_mut() {
        spec.security_context = pod_sc;
        spec.containers[0].security_context = sc;
    }
    p
}

fn uid(u: i64) -> ImageUser {
    ImageUser {
        uid: Some(u),
        username: String::new(),
    }
}

#[test]
fn container_context_merges_pod_and_container() {
    let p = pod_with(
        Some(PodSecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(3000),
            fs_group: Some(2000),
            supplemental_groups: Some(vec![4000, 5000]),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        Some(SecurityContext {
            run_as_user: Some(1001),
            capabilities: Some(Capabilities {
                add: Some(vec!["NET_ADMIN".into()]),
                drop: Some(vec!["ALL".into()]),
            }),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            ..Default::default()
        }),
    );
    let sc = container_security_context(
        &p,
        &p.containers()[0],
        &uid(0),
        Path::new("/var/lib/kubelet/seccomp"),
    )
    .expect("valid");
    assert_eq!(sc.run_as_user, Some(cri::Int64Value { value: 1001 }));
    assert_eq!(sc.run_as_group, Some(cri::Int64Value { value: 3000 }));
    assert_eq!(sc.run_as_username, "");
    assert_eq!(sc.supplemental_groups, [2000, 4000, 5000]);
    let caps = sc.capabilities.expect("capabilities");
    assert_eq!(caps.add_capabilities, ["NET_ADMIN"]);
    assert_eq!(caps.drop_capabilities, ["ALL"]);
    assert!(sc.readonly_rootfs);
    assert!(sc.no_new_privs);
    assert!(!sc.privileged);
    assert_eq!(
        sc.seccomp.map(|s| s.profile_type),
        Some(cri::security_profile::ProfileType::RuntimeDefault as i32)
    );
    assert!(sc.masked_paths.contains(&"/proc/kcore".to_owned()));
    assert_eq!(
        sc.readonly_paths,
        [
            "/proc/bus",
            "/proc/fs",
            "/proc/irq",
            "/proc/sys",
            "/proc/sysrq-trigger"
        ]
    );
}

#[test]
fn unset_user_comes_from_the_image() {
    let p = pod_with(None, None);
    let c = &p.containers()[0];
    let root = Path::new("/r");
    let sc = container_security_context(&p, c, &uid(65534), root).expect("valid");
    assert_eq!(sc.run_as_user, Some(cri::Int64Value { value: 65534 }));
    let named = ImageUser {
        uid: None,
        username: "www".into(),
    };
    let sc = container_security_context(&p, c, &named, root).expect("valid");
    assert_eq!((sc.run_as_user, sc.run_as_username.as_str()), (None, "www"));
    assert!(!sc.no_new_privs, "unset allowPrivilegeEscalation");
    assert_eq!(
        sc.seccomp.map(|s| s.profile_type),
        Some(cri::security_profile::ProfileType::Unconfined as i32),
        "seccompDefault is off"
    );
}

#[test]
fn no_new_privs_only_when_escalation_is_forbidden() {
    let with = |v: Option<bool>| SecurityContext {
        allow_privilege_escalation: v,
        ..Default::default()
    };
    assert!(!add_no_new_privileges(&with(None)));
    assert!(!add_no_new_privileges(&with(Some(true))));
    assert!(add_no_new_privileges(&with(Some(false))));
}

#[test]
fn seccomp_profiles_match_upstream() {
    use cri::security_profile::ProfileType;
    let root = Path::new("/var/lib/kubelet/seccomp");
    let prof = |t: &str, l: Option<&str>| SeccompProfile {
        type_: t.into(),
        localhost_profile: l.map(Into::into),
    };
    let get = |p: Option<&SeccompProfile>| {
        seccomp_profile(p, root).map(|s| (s.profile_type, s.localhost_ref))
    };
    assert_eq!(
        get(None),
        Ok((ProfileType::Unconfined as i32, String::new()))
    );
    assert_eq!(
        get(Some(&prof("Unconfined", None))),
        Ok((ProfileType::Unconfined as i32, String::new()))
    );
    assert_eq!(
        get(Some(&prof("RuntimeDefault", None))),
        Ok((ProfileType::RuntimeDefault as i32, String::new()))
    );
    assert_eq!(
        get(Some(&prof("Localhost", Some("profiles/audit.json")))),
        Ok((
            ProfileType::Localhost as i32,
            "/var/lib/kubelet/seccomp/profiles/audit.json".into()
        ))
    );
    assert_eq!(
        get(Some(&prof("Localhost", None))),
        Err(ConfigError::MissingLocalhostProfile)
    );
    // The container's profile wins over the pod's.
    let p = pod_with(
        Some(PodSecurityContext {
            seccomp_profile: Some(prof("RuntimeDefault", None)),
            ..Default::default()
        }),
        Some(SecurityContext {
            seccomp_profile: Some(prof("Unconfined", None)),
            ..Default::default()
        }),
    );
    let sc = container_security_context(&p, &p.containers()[0], &uid(0), root).expect("ok");
    assert_eq!(
        sc.seccomp.map(|s| s.profile_type),
        Some(ProfileType::Unconfined as i32)
    );
}

#[test]
fn proc_mount_unmasked_clears_paths() {
    assert!(masked_paths(Some("Unmasked")).is_empty());
    assert!(readonly_paths(Some("Unmasked")).is_empty());
    let defaults = masked_paths(Some("Default"));
    assert_eq!(defaults, masked_paths(None));
    assert_eq!(
        &defaults[..12],
        [
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
    );
    assert!(
        defaults[12..]
            .iter()
            .all(|p| p.ends_with("/thermal_throttle"))
    );
}

#[test]
fn sandbox_context() {
    let p = pod_with(
        Some(PodSecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(3000),
            fs_group: Some(2000),
            supplemental_groups: Some(vec![4000]),
            ..Default::default()
        }),
        None,
    );
    let sc = sandbox_security_context(&p);
    assert_eq!(sc.run_as_user, Some(cri::Int64Value { value: 1000 }));
    assert_eq!(sc.run_as_group, Some(cri::Int64Value { value: 3000 }));
    assert_eq!(sc.supplemental_groups, [2000, 4000]);
    assert_eq!(
        sc.seccomp.map(|s| s.profile_type),
        Some(cri::security_profile::ProfileType::RuntimeDefault as i32)
    );
}
