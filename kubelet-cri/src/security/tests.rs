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
        false,
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
    let sc = container_security_context(&p, c, &uid(65534), root, false).expect("valid");
    assert_eq!(sc.run_as_user, Some(cri::Int64Value { value: 65534 }));
    let named = ImageUser {
        uid: None,
        username: "www".into(),
    };
    let sc = container_security_context(&p, c, &named, root, false).expect("valid");
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
        seccomp_profile(p, root, false).map(|s| (s.profile_type, s.localhost_ref))
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
    let sc = container_security_context(&p, &p.containers()[0], &uid(0), root, false).expect("ok");
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

#[test]
fn seccomp_default_confines_containers_without_a_profile() {
    use cri::security_profile::ProfileType;
    let root = Path::new("/var/lib/kubelet/seccomp");
    let p = pod_with(None, None);
    let c = &p.containers()[0];
    let seccomp = |on: bool| {
        container_security_context(&p, c, &uid(0), root, on)
            .expect("valid")
            .seccomp
            .map(|s| s.profile_type)
    };
    assert_eq!(seccomp(false), Some(ProfileType::Unconfined as i32));
    assert_eq!(seccomp(true), Some(ProfileType::RuntimeDefault as i32));
    // An explicit profile wins over the default.
    let unconfined = SeccompProfile {
        type_: "Unconfined".into(),
        localhost_profile: None,
    };
    assert_eq!(
        seccomp_profile(Some(&unconfined), root, true).map(|s| s.profile_type),
        Ok(ProfileType::Unconfined as i32)
    );
}

#[test]
fn apparmor_reaches_the_cri_as_a_profile_and_the_deprecated_string() {
    use cri::security_profile::ProfileType;
    use k8s_openapi::api::core::v1::AppArmorProfile;
    let root = Path::new("/var/lib/kubelet/seccomp");
    let aa = |type_: &str, name: Option<&str>| AppArmorProfile {
        type_: type_.into(),
        localhost_profile: name.map(Into::into),
    };
    let get = |p: &Pod| {
        #[allow(deprecated)]
        container_security_context(p, &p.containers()[0], &uid(0), root, false).map(|sc| {
            (
                sc.apparmor.map(|a| (a.profile_type, a.localhost_ref)),
                sc.apparmor_profile,
            )
        })
    };
    assert_eq!(get(&pod_with(None, None)), Ok((None, String::new())));
    let p = pod_with(
        Some(PodSecurityContext {
            app_armor_profile: Some(aa("RuntimeDefault", None)),
            ..Default::default()
        }),
        None,
    );
    assert_eq!(
        get(&p),
        Ok((
            Some((ProfileType::RuntimeDefault as i32, String::new())),
            "runtime/default".into()
        ))
    );
    let p = pod_with(
        None,
        Some(SecurityContext {
            app_armor_profile: Some(aa("Localhost", Some("k8s-deny-write"))),
            ..Default::default()
        }),
    );
    assert_eq!(
        get(&p),
        Ok((
            Some((ProfileType::Localhost as i32, "k8s-deny-write".into())),
            "localhost/k8s-deny-write".into()
        ))
    );
    let mut p = pod_with(None, None);
    p.metadata.annotations = Some(
        [(
            "container.apparmor.security.beta.kubernetes.io/app".to_owned(),
            "unconfined".to_owned(),
        )]
        .into(),
    );
    assert_eq!(
        get(&p),
        Ok((
            Some((ProfileType::Unconfined as i32, String::new())),
            "unconfined".into()
        ))
    );
    let p = pod_with(
        None,
        Some(SecurityContext {
            app_armor_profile: Some(aa("Localhost", None)),
            ..Default::default()
        }),
    );
    assert_eq!(get(&p), Err(ConfigError::MissingAppArmorLocalhostProfile));
    let e: kubelet_core::runtime::Error = ConfigError::MissingAppArmorLocalhostProfile.into();
    assert_eq!(
        e.to_string(),
        "invalid pod spec: securityContext.appArmorProfile: missing localhost apparmor profile name"
    );
}

#[test]
fn selinux_options_and_supplemental_groups_policy_reach_the_cri() {
    use k8s_openapi::api::core::v1::SELinuxOptions;
    let root = Path::new("/var/lib/kubelet/seccomp");
    let level = |l: &str| SELinuxOptions {
        level: Some(l.into()),
        type_: Some("container_t".into()),
        ..Default::default()
    };
    let mut p = pod_with(
        Some(PodSecurityContext {
            se_linux_options: Some(level("s0:c1,c2")),
            supplemental_groups: Some(vec![4000]),
            supplemental_groups_policy: Some("Strict".into()),
            ..Default::default()
        }),
        None,
    );
    let sc =
        container_security_context(&p, &p.containers()[0], &uid(0), root, false).expect("valid");
    let want = cri::SeLinuxOption {
        user: String::new(),
        role: String::new(),
        r#type: "container_t".into(),
        level: "s0:c1,c2".into(),
    };
    assert_eq!(sc.selinux_options.as_ref(), Some(&want));
    assert_eq!(
        sc.supplemental_groups_policy,
        cri::SupplementalGroupsPolicy::Strict as i32
    );
    let sandbox = sandbox_security_context(&p);
    assert_eq!(sandbox.selinux_options, Some(want));
    assert_eq!(
        sandbox.supplemental_groups_policy,
        cri::SupplementalGroupsPolicy::Strict as i32
    );
    // The container's options win.
    p.spec.as_mut().expect("spec").containers[0].security_context = Some(SecurityContext {
        se_linux_options: Some(level("s0:c3")),
        ..Default::default()
    });
    let sc =
        container_security_context(&p, &p.containers()[0], &uid(0), root, false).expect("valid");
    assert_eq!(sc.selinux_options.map(|o| o.level), Some("s0:c3".into()));
    // An unknown policy is an error naming the field.
    if let Some(s) = p.spec.as_mut().and_then(|s| s.security_context.as_mut()) {
        s.supplemental_groups_policy = Some("Loose".into());
    }
    let e = container_security_context(&p, &p.containers()[0], &uid(0), root, false)
        .expect_err("unknown policy");
    assert_eq!(
        kubelet_core::runtime::Error::from(e).to_string(),
        "invalid pod spec: spec.securityContext.supplementalGroupsPolicy: unsupported supplementalGroupsPolicy: Loose"
    );
}
