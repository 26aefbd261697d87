//! AppArmor profiles of a pod's containers and whether this node can enforce them (upstream
//! `pkg/security/apparmor`: `helpers.go` `GetProfile`, `isRequired`; `validate.go`
//! `Validator`, `validateHost`; runc's `apparmor.IsEnabled`). The admit handler that refuses
//! a pod this node cannot confine is [`crate::kubelet::admit::AppArmorAdmitHandler`]; the CRI
//! backend turns [`profile`] into the runtime's security profile.

use k8s_openapi::api::core::v1::{AppArmorProfile, Container, Pod};

use crate::pod::PodExt;

/// The deprecated per-container annotation's prefix; the container's name follows.
pub const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
/// The annotation's value for the runtime's default profile.
pub const RUNTIME_DEFAULT: &str = "runtime/default";
/// The annotation's value for no profile.
pub const UNCONFINED: &str = "unconfined";
/// The annotation's prefix of a profile loaded on the node.
pub const LOCALHOST_PREFIX: &str = "localhost/";

/// A container's AppArmor profile (upstream `v1.AppArmorProfile` by type).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Profile {
    /// The runtime's default profile.
    RuntimeDefault,
    /// No AppArmor confinement.
    Unconfined,
    /// A profile loaded on the node, by name (empty when the pod gives none, which
    /// [`Validator::validate`] refuses).
    Localhost(String),
    /// A profile type this kubelet does not know.
    Unknown(String),
}

impl Profile {
    fn from_field(p: &AppArmorProfile) -> Self {
        match p.type_.as_str() {
            "RuntimeDefault" => Profile::RuntimeDefault,
            "Unconfined" => Profile::Unconfined,
            "Localhost" => Profile::Localhost(p.localhost_profile.clone().unwrap_or_default()),
            other => Profile::Unknown(other.to_owned()),
        }
    }

    fn from_annotation(value: &str) -> Option<Self> {
        match value {
            RUNTIME_DEFAULT => Some(Profile::RuntimeDefault),
            UNCONFINED => Some(Profile::Unconfined),
            v => v
                .strip_prefix(LOCALHOST_PREFIX)
                .map(|name| Profile::Localhost(name.to_owned())),
        }
    }
}

/// Upstream `GetProfile`: the container's `securityContext.appArmorProfile`, else the
/// pod's annotation for the container (static pods may not have had them synced to the
/// fields), else the pod's `securityContext.appArmorProfile`; `None` when none is set (or
/// the annotation is invalid).
pub fn profile(pod: &Pod, container: &Container) -> Option<Profile> {
    if let Some(p) = container
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.as_ref())
    {
        return Some(Profile::from_field(p));
    }
    let key = format!("{ANNOTATION_PREFIX}{}", container.name);
    if let Some(p) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&key))
        .and_then(|v| Profile::from_annotation(v))
    {
        return Some(p);
    }
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.app_armor_profile.as_ref())
        .map(Profile::from_field)
}

/// Upstream `isRequired`: the pod asks for a profile other than unconfined, in a field or in
/// an annotation.
pub fn is_required(pod: &Pod) -> bool {
    let confined = |p: Option<&AppArmorProfile>| p.is_some_and(|p| p.type_ != "Unconfined");
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    if confined(pod_sc.and_then(|s| s.app_armor_profile.as_ref())) {
        return true;
    }
    if pod
        .init_containers()
        .iter()
        .chain(pod.containers())
        .any(|c| {
            confined(
                c.security_context
                    .as_ref()
                    .and_then(|s| s.app_armor_profile.as_ref()),
            )
        })
    {
        return true;
    }
    pod.metadata
        .annotations
        .iter()
        .flatten()
        .any(|(k, v)| k.starts_with(ANNOTATION_PREFIX) && v != UNCONFINED)
}

/// runc's `apparmor.IsEnabled`: securityfs has `apparmor` and the module says `Y`.
// Reviewed: two tiny sysfs/securityfs reads, once at kubelet start.
#[allow(clippy::disallowed_methods)]
pub fn host_enabled() -> bool {
    std::path::Path::new("/sys/kernel/security/apparmor").exists()
        && std::fs::read("/sys/module/apparmor/parameters/enabled")
            .is_ok_and(|b| b.len() > 1 && b[0] == b'Y')
}

/// Whether pods asking for AppArmor can run here (upstream `apparmor.Validator`): the host
/// is checked once, at construction, as upstream (enabling AppArmor needs a kubelet restart).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validator {
    host_error: Option<String>,
}

impl Validator {
    /// Upstream `NewValidator`: probes this host with [`host_enabled`].
    pub fn detect() -> Self {
        Self::with_host(host_enabled())
    }

    /// A validator for a host where AppArmor is (`true`) or is not enabled.
    pub fn with_host(enabled: bool) -> Self {
        Self {
            host_error: (!enabled).then(|| "AppArmor is not enabled on the host".to_owned()),
        }
    }

    /// Upstream `ValidateHost`: why this host cannot enforce AppArmor, if it cannot.
    pub fn validate_host(&self) -> Result<(), String> {
        self.host_error.clone().map_or(Ok(()), Err)
    }

    /// Upstream `Validate`: a pod that asks for no confinement always passes; otherwise the
    /// host must enforce AppArmor, and a `Localhost` profile must name its profile.
    pub fn validate(&self, pod: &Pod) -> Result<(), String> {
        if !is_required(pod) {
            return Ok(());
        }
        self.validate_host()?;
        for c in pod.init_containers().iter().chain(pod.containers()) {
            if let Some(Profile::Localhost(name)) = profile(pod, c)
                && name.trim().is_empty()
            {
                return Err(format!(
                    "invalid empty AppArmor profile name: container {:?}: a Localhost profile needs localhostProfile",
                    c.name
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodSecurityContext, SecurityContext};

    use super::*;
    use crate::testing::pod;

    fn with_annotation(mut p: Pod, container: &str, value: &str) -> Pod {
        p.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(format!("{ANNOTATION_PREFIX}{container}"), value.into());
        p
    }

    fn field(type_: &str, name: Option<&str>) -> AppArmorProfile {
        AppArmorProfile {
            type_: type_.into(),
            localhost_profile: name.map(Into::into),
        }
    }

    #[test]
    fn the_container_field_wins_then_the_annotation_then_the_pod_field() {
        let mut p = pod("web");
        let c = p.containers()[0].clone();
        assert_eq!(profile(&p, &c), None);
        p.spec.as_mut().expect("spec").security_context = Some(PodSecurityContext {
            app_armor_profile: Some(field("RuntimeDefault", None)),
            ..Default::default()
        });
        assert_eq!(profile(&p, &c), Some(Profile::RuntimeDefault));
        let p = with_annotation(p, "app", "localhost/k8s-deny-write");
        assert_eq!(
            profile(&p, &c),
            Some(Profile::Localhost("k8s-deny-write".into()))
        );
        let mut c2 = c.clone();
        c2.security_context = Some(SecurityContext {
            app_armor_profile: Some(field("Unconfined", None)),
            ..Default::default()
        });
        assert_eq!(profile(&p, &c2), Some(Profile::Unconfined));
        // An invalid annotation is ignored.
        let p = with_annotation(pod("web"), "app", "bogus");
        assert_eq!(profile(&p, &c), None);
    }

    #[test]
    fn unconfined_pods_run_anywhere_and_others_need_apparmor() {
        let off = Validator::with_host(false);
        let on = Validator::with_host(true);
        let plain = pod("web");
        assert_eq!(off.validate(&plain), Ok(()));
        let unconfined = with_annotation(pod("web"), "app", "unconfined");
        assert_eq!(off.validate(&unconfined), Ok(()));
        let confined = with_annotation(pod("web"), "app", "runtime/default");
        assert_eq!(
            off.validate(&confined),
            Err("AppArmor is not enabled on the host".into())
        );
        assert_eq!(on.validate(&confined), Ok(()));
        let mut field_pod = pod("web");
        field_pod.spec.as_mut().expect("spec").containers[0].security_context =
            Some(SecurityContext {
                app_armor_profile: Some(field("Localhost", Some(" "))),
                ..Default::default()
            });
        assert_eq!(
            off.validate(&field_pod),
            Err("AppArmor is not enabled on the host".into())
        );
        assert_eq!(
            on.validate(&field_pod),
            Err("invalid empty AppArmor profile name: container \"app\": a Localhost profile needs localhostProfile".into())
        );
    }
}
