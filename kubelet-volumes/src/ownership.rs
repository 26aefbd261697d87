//! Who owns projected files: the pod's `fsGroup`, the `fsUser` derived from `runAsUser`
//! (upstream `FsUserFrom` in `pkg/volume/util/util.go`), and the mode of a projected
//! service-account token (upstream `collectData` in `pkg/volume/projected/projected.go`).
//!
//! A token file gets the projected volume's `defaultMode` (0644 unless the pod says
//! otherwise), except when the pod sets an `fsUser` or `fsGroup`: then it is `0600`, owned by
//! the `fsUser`, and `fsGroup` ownership widens it to `0640` so that only that user and
//! group can read it.

use k8s_openapi::api::core::v1::{Container, Pod};

/// Mode of a token file when the pod has an fsUser or fsGroup.
pub const PRIVATE_TOKEN_MODE: u32 = 0o600;

/// The pod's `securityContext.fsGroup`.
pub fn fs_group(pod: &Pod) -> Option<u32> {
    pod.spec
        .as_ref()?
        .security_context
        .as_ref()?
        .fs_group
        .and_then(|g| u32::try_from(g).ok())
}

/// Upstream `DetermineEffectiveRunAsUser`: the container's `runAsUser`, else the pod's.
fn effective_run_as_user(pod: &Pod, container: &Container) -> Option<i64> {
    container
        .security_context
        .as_ref()
        .and_then(|s| s.run_as_user)
        .or_else(|| pod.spec.as_ref()?.security_context.as_ref()?.run_as_user)
}

/// Upstream `FsUserFrom`: the one user every init and regular container runs as, or `None`
/// when a container sets no user or two containers run as different users.
pub fn fs_user(pod: &Pod) -> Option<u32> {
    let spec = pod.spec.as_ref()?;
    let mut user = None;
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        let u = effective_run_as_user(pod, c)?;
        if user.is_some_and(|seen| seen != u) {
            return None;
        }
        user = Some(u);
    }
    user.and_then(|u| u32::try_from(u).ok())
}

/// Mode and owner of a projected token file whose volume's mode is `default_mode`.
pub fn token_file(pod: &Pod, default_mode: u32) -> (u32, Option<u32>) {
    let user = fs_user(pod);
    if user.is_some() || fs_group(pod).is_some() {
        (PRIVATE_TOKEN_MODE, user)
    } else {
        (default_mode, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSecurityContext, SecurityContext};
    use kubelet_core::testing::pod_with;

    fn with(pod_user: Option<i64>, group: Option<i64>, users: &[Option<i64>]) -> Pod {
        let names: Vec<String> = (0..users.len()).map(|i| format!("c{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut p = pod_with("p", "Always", &names);
        if let Some(spec) = p.spec.as_mut() {
            spec.security_context = Some(PodSecurityContext {
                run_as_user: pod_user,
                fs_group: group,
                ..Default::default()
            });
            for (c, u) in spec.containers.iter_mut().zip(users) {
                c.security_context = u.map(|u| SecurityContext {
                    run_as_user: Some(u),
                    ..Default::default()
                });
            }
        }
        p
    }

    #[test]
    fn fs_user_is_the_single_effective_run_as_user() {
        assert_eq!(fs_user(&with(None, None, &[None])), None);
        assert_eq!(fs_user(&with(Some(1000), None, &[None, None])), Some(1000));
        assert_eq!(
            fs_user(&with(Some(1000), None, &[Some(7), Some(7)])),
            Some(7)
        );
        assert_eq!(fs_user(&with(None, None, &[Some(7), Some(8)])), None);
        assert_eq!(fs_user(&with(None, None, &[Some(7), None])), None);
    }

    #[test]
    fn tokens_are_private_when_the_pod_sets_a_user_or_group() {
        assert_eq!(token_file(&with(None, None, &[None]), 0o644), (0o644, None));
        assert_eq!(
            token_file(&with(Some(1000), None, &[None]), 0o644),
            (0o600, Some(1000))
        );
        assert_eq!(
            token_file(&with(None, Some(2000), &[None]), 0o644),
            (0o600, None)
        );
        assert_eq!(
            token_file(&with(None, None, &[Some(1), Some(2)]), 0o640),
            (0o640, None)
        );
    }
}
