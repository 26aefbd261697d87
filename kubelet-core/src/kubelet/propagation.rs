//! `volumeMounts[].mountPropagation` → [`MountPropagation`] (upstream
//! `translateMountPropagation` in `pkg/kubelet/kubelet_pods.go`, plus the API server's
//! `validateMountPropagation` rule that only privileged containers may use `Bidirectional`,
//! which a standalone kubelet has to enforce itself).

use k8s_openapi::api::core::v1::{Container, VolumeMount};

use crate::runtime::MountPropagation;

/// Why a volume mount's `mountPropagation` is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `Bidirectional` in a container that is not privileged (the API server's message).
    #[error("mountPropagation: Forbidden: {BIDIRECTIONAL_NEEDS_PRIVILEGED}")]
    BidirectionalNeedsPrivileged,
    /// Not one of `None`, `HostToContainer`, `Bidirectional`.
    #[error("invalid MountPropagation mode: {0:?}")]
    InvalidMode(String),
}

/// Upstream's validation message for `Bidirectional` in an unprivileged container.
pub const BIDIRECTIONAL_NEEDS_PRIVILEGED: &str =
    "Bidirectional mount propagation is available only to privileged containers";

/// The propagation of `mount` in `container`: unset and `None` are private,
/// `HostToContainer` is rslave, `Bidirectional` is rshared and needs a privileged container;
/// anything else is an error naming the mode.
pub fn translate_mount_propagation(
    container: &Container,
    mount: &VolumeMount,
) -> Result<MountPropagation, Error> {
    match mount.mount_propagation.as_deref() {
        None | Some("None") => Ok(MountPropagation::Private),
        Some("HostToContainer") => Ok(MountPropagation::HostToContainer),
        Some("Bidirectional") if is_privileged(container) => Ok(MountPropagation::Bidirectional),
        Some("Bidirectional") => Err(Error::BidirectionalNeedsPrivileged),
        Some(other) => Err(Error::InvalidMode(other.to_owned())),
    }
}

fn is_privileged(container: &Container) -> bool {
    container
        .security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::SecurityContext;

    fn container(privileged: Option<bool>) -> Container {
        Container {
            name: "c".into(),
            security_context: privileged.map(|p| SecurityContext {
                privileged: Some(p),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn mount(mode: Option<&str>) -> VolumeMount {
        VolumeMount {
            name: "v".into(),
            mount_path: "/v".into(),
            mount_propagation: mode.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn modes_translate_as_upstream() {
        let c = container(None);
        for (mode, want) in [
            (None, MountPropagation::Private),
            (Some("None"), MountPropagation::Private),
            (Some("HostToContainer"), MountPropagation::HostToContainer),
        ] {
            assert_eq!(translate_mount_propagation(&c, &mount(mode)), Ok(want));
        }
        let err = translate_mount_propagation(&c, &mount(Some("rshared"))).expect_err("bad");
        assert_eq!(err, Error::InvalidMode("rshared".into()));
        assert_eq!(
            err.to_string(),
            "invalid MountPropagation mode: \"rshared\""
        );
    }

    #[test]
    fn bidirectional_needs_a_privileged_container() {
        let m = mount(Some("Bidirectional"));
        assert_eq!(
            translate_mount_propagation(&container(Some(true)), &m),
            Ok(MountPropagation::Bidirectional)
        );
        for c in [container(None), container(Some(false))] {
            let err = translate_mount_propagation(&c, &m).expect_err("unprivileged");
            assert!(
                err.to_string().contains(BIDIRECTIONAL_NEEDS_PRIVILEGED),
                "{err}"
            );
        }
    }

    #[tokio::test]
    async fn the_runtime_helper_sets_propagation_and_refuses_unprivileged_bidirectional() {
        use crate::runtime::RuntimeHelper;
        use crate::volume::{MockVolumeManager, MountedVolume};
        use std::sync::Arc;

        let mut volumes = MockVolumeManager::new();
        volumes.expect_mounted_volumes().returning(|_| {
            [(
                "v".to_owned(),
                MountedVolume {
                    host_path: "/host/v".into(),
                    read_only: false,
                    size_limit_bytes: None,
                },
            )]
            .into()
        });
        let helper = super::super::KubeletRuntimeHelper::new(Arc::new(volumes));
        let pod = crate::testing::pod("p");
        let mut c = container(Some(true));
        c.volume_mounts = Some(vec![
            mount(None),
            mount(Some("HostToContainer")),
            mount(Some("Bidirectional")),
        ]);
        let opts = helper
            .generate_run_container_options(&pod, &c, &[])
            .await
            .expect("options");
        let got: Vec<MountPropagation> = opts.mounts.iter().map(|m| m.propagation).collect();
        assert_eq!(
            got,
            [
                MountPropagation::Private,
                MountPropagation::HostToContainer,
                MountPropagation::Bidirectional
            ]
        );
        c.security_context = None;
        let err = helper
            .generate_run_container_options(&pod, &c, &[])
            .await
            .expect_err("unprivileged")
            .to_string();
        assert!(
            err.contains("\"v\"") && err.contains(BIDIRECTIONAL_NEEDS_PRIVILEGED),
            "{err}"
        );
    }
}
