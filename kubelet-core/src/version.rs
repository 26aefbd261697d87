//! The upstream Kubernetes release whose kubelet behaviour this workspace targets (mirrors
//! `k8s.io/component-base/version`): `kubelet --version`, the Node's
//! `nodeInfo.kubeletVersion`, the API client's User-Agent and the probes' and hooks'
//! `kube-probe/<major>.<minor>` / `kube-lifecycle/<major>.<minor>` all come from here.
//!
//! kubeadm's preflight reads `Kubernetes vX.Y.Z` from `kubelet --version` and compares it with
//! the control plane's version, so this is the upstream release, not the crates' version.

/// Expands to the targeted release as string literals, for `concat!` in constants:
/// `kubernetes_version!()` is `"v1.36.0"`, `kubernetes_version!(major_minor)` is `"1.36"`.
/// [`GIT_VERSION`] and [`MAJOR_MINOR`] are the same values as constants.
#[macro_export]
macro_rules! kubernetes_version {
    () => {
        "v1.36.0"
    };
    (major_minor) => {
        "1.36"
    };
}

/// The targeted release, `vX.Y.Z` (upstream `gitVersion`).
pub const GIT_VERSION: &str = kubernetes_version!();

/// `X.Y` of [`GIT_VERSION`].
pub const MAJOR_MINOR: &str = kubernetes_version!(major_minor);

/// What `kubelet --version` prints (upstream `Kubernetes <gitVersion>`).
pub const VERSION_LINE: &str = concat!("Kubernetes ", kubernetes_version!());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn major_minor_is_the_git_versions() {
        let rest = GIT_VERSION.strip_prefix('v').expect("v prefix");
        let (major_minor, patch) = rest.rsplit_once('.').expect("X.Y.Z");
        assert_eq!(major_minor, MAJOR_MINOR);
        assert!(patch.parse::<u32>().is_ok(), "{GIT_VERSION}");
        assert_eq!(VERSION_LINE, format!("Kubernetes {GIT_VERSION}"));
    }
}
