//! The runtime-agnostic half of security contexts: the effective context of a container
//! and the `runAsNonRoot` check against the image's user.
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/security_context_others.go`
//! (`verifyRunAsNonRoot`), `kuberuntime_container.go` (`getImageUser`) and
//! `pkg/securitycontext` (`DetermineEffectiveSecurityContext`). Turning the context into a
//! runtime's settings is the backend's job (`kubelet-cri` for CRI).

use k8s_openapi::api::core::v1::{Container, Pod, SecurityContext};

use super::api::{Image, ImageUser};
use crate::PodExt;

/// Why a container may not run as the user it would run as (upstream `verifyRunAsNonRoot`);
/// reported as `CreateContainerConfigError` with this message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NonRootError {
    /// `runAsUser: 0` with `runAsNonRoot: true`.
    #[error("container's runAsUser breaks non-root policy (pod: {pod:?}, container: {container})")]
    RunAsUserRoot {
        /// `<name>_<namespace>(<uid>)`.
        pod: String,
        /// Container name.
        container: String,
    },
    /// The image runs as root.
    #[error(
        "container has runAsNonRoot and image will run as root (pod: {pod:?}, container: {container})"
    )]
    ImageRoot {
        /// `<name>_<namespace>(<uid>)`.
        pod: String,
        /// Container name.
        container: String,
    },
    /// The image names a user by name, which cannot be checked.
    #[error(
        "container has runAsNonRoot and image has non-numeric user ({username}), cannot verify user is non-root (pod: {pod:?}, container: {container})"
    )]
    NonNumericUser {
        /// The image's user name.
        username: String,
        /// `<name>_<namespace>(<uid>)`.
        pod: String,
        /// Container name.
        container: String,
    },
}

/// The user an image runs as (upstream `getImageUser`): its numeric UID, else its user
/// name, else root (an image the runtime does not report counts as root too).
pub fn image_user(image: Option<&Image>) -> ImageUser {
    match image {
        Some(i) if i.user.uid.is_some() => ImageUser {
            uid: i.user.uid,
            username: String::new(),
        },
        Some(i) if !i.user.username.is_empty() => ImageUser {
            uid: None,
            username: i.user.username.clone(),
        },
        _ => ImageUser {
            uid: Some(0),
            username: String::new(),
        },
    }
}

/// Upstream `DetermineEffectiveSecurityContext`: the pod's `runAsUser`, `runAsGroup`,
/// `runAsNonRoot`, `seLinuxOptions` and `seccompProfile`, overridden by whatever the
/// container sets.
pub fn effective_security_context(pod: &Pod, container: &Container) -> SecurityContext {
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let mut sc = SecurityContext {
        run_as_user: pod_sc.and_then(|s| s.run_as_user),
        run_as_group: pod_sc.and_then(|s| s.run_as_group),
        run_as_non_root: pod_sc.and_then(|s| s.run_as_non_root),
        se_linux_options: pod_sc.and_then(|s| s.se_linux_options.clone()),
        seccomp_profile: pod_sc.and_then(|s| s.seccomp_profile.clone()),
        ..Default::default()
    };
    let Some(c) = container.security_context.as_ref() else {
        return sc;
    };
    macro_rules! over {
        ($($f:ident),*) => {$(if c.$f.is_some() { sc.$f = c.$f.clone(); })*};
    }
    over!(
        se_linux_options,
        capabilities,
        privileged,
        run_as_user,
        run_as_group,
        run_as_non_root,
        read_only_root_filesystem,
        allow_privilege_escalation,
        proc_mount,
        seccomp_profile
    );
    sc
}

/// Upstream `verifyRunAsNonRoot`: with `runAsNonRoot: true`, the container must not run as
/// UID 0, whether set by `runAsUser` or by the image; a non-numeric image user cannot be
/// verified.
pub fn verify_run_as_non_root(
    pod: &Pod,
    container: &Container,
    image: &ImageUser,
) -> Result<(), NonRootError> {
    let sc = effective_security_context(pod, container);
    if sc.run_as_non_root != Some(true) {
        return Ok(());
    }
    let pod_name = format!("{}({})", pod.full_name(), pod.uid().as_str());
    let container_name = container.name.clone();
    if let Some(uid) = sc.run_as_user {
        if uid == 0 {
            return Err(NonRootError::RunAsUserRoot {
                pod: pod_name,
                container: container_name,
            });
        }
        return Ok(());
    }
    match image.uid {
        Some(0) => Err(NonRootError::ImageRoot {
            pod: pod_name,
            container: container_name,
        }),
        None if !image.username.is_empty() => Err(NonRootError::NonNumericUser {
            username: image.username.clone(),
            pod: pod_name,
            container: container_name,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    //! Cases of upstream `TestVerifyRunAsNonRoot` (security_context_others_test.go).

    use k8s_openapi::api::core::v1::PodSecurityContext;

    use super::*;
    use crate::testing::pod;

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
    fn verify_run_as_non_root_matches_upstream() {
        let non_root = |user: Option<i64>| SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: user,
            ..Default::default()
        };
        let named = ImageUser {
            uid: None,
            username: "test".into(),
        };
        let cases: Vec<(&str, Option<SecurityContext>, ImageUser, Option<&str>)> = vec![
            ("no security context", None, uid(0), None),
            (
                "runAsUser non-root",
                Some(non_root(Some(999))),
                uid(0),
                None,
            ),
            (
                "runAsNonRoot unset",
                Some(SecurityContext {
                    run_as_user: Some(0),
                    ..Default::default()
                }),
                uid(0),
                None,
            ),
            (
                "runAsNonRoot false",
                Some(SecurityContext {
                    run_as_non_root: Some(false),
                    ..Default::default()
                }),
                uid(0),
                None,
            ),
            (
                "runAsUser root",
                Some(non_root(Some(0))),
                uid(0),
                Some(
                    "container's runAsUser breaks non-root policy (pod: \"bar_new(12345678)\", container: app)",
                ),
            ),
            (
                "image user root",
                Some(non_root(None)),
                uid(0),
                Some(
                    "container has runAsNonRoot and image will run as root (pod: \"bar_new(12345678)\", container: app)",
                ),
            ),
            (
                "image user name",
                Some(non_root(None)),
                named,
                Some(
                    "container has runAsNonRoot and image has non-numeric user (test), cannot verify user is non-root (pod: \"bar_new(12345678)\", container: app)",
                ),
            ),
            ("image user non-root", Some(non_root(None)), uid(1234), None),
            (
                "neither user set",
                Some(non_root(None)),
                ImageUser::default(),
                None,
            ),
        ];
        for (desc, sc, image, want) in cases {
            let p = pod_with(None, sc);
            let c = &p.containers()[0];
            assert_eq!(
                verify_run_as_non_root(&p, c, &image)
                    .err()
                    .map(|e| e.to_string())
                    .as_deref(),
                want,
                "{desc}"
            );
        }
        // The pod-level runAsNonRoot applies to every container.
        let p = pod_with(
            Some(PodSecurityContext {
                run_as_non_root: Some(true),
                ..Default::default()
            }),
            None,
        );
        assert!(verify_run_as_non_root(&p, &p.containers()[0], &uid(0)).is_err());
    }

    #[test]
    fn image_user_from_image_status() {
        let image = |uid: Option<i64>, username: &str| Image {
            user: ImageUser {
                uid,
                username: username.into(),
            },
            ..Default::default()
        };
        assert_eq!(image_user(Some(&image(Some(1000), ""))), uid(1000));
        assert_eq!(
            image_user(Some(&image(None, "nobody"))),
            ImageUser {
                uid: None,
                username: "nobody".into()
            }
        );
        assert_eq!(image_user(Some(&image(None, ""))), uid(0));
        assert_eq!(image_user(None), uid(0));
    }
}
