//! What the fake knows about a resource from its URL: group/version/resource, whether it is
//! namespaced, its kind, and whether it has a `/status` subresource (a small table of the
//! resources a kubelet touches; unknown resources are namespaced, status-less and get a kind
//! derived from their name).

use std::fmt;

/// A group/version/resource, as in the URL (`""` is the core group).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Gvr {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) resource: String,
}

impl fmt::Display for Gvr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

const CLUSTER_SCOPED: &[&str] = &[
    "nodes",
    "namespaces",
    "persistentvolumes",
    "tokenreviews",
    "subjectaccessreviews",
    "selfsubjectaccessreviews",
    "csinodes",
    "csidrivers",
    "runtimeclasses",
    "storageclasses",
    "volumeattachments",
    "certificatesigningrequests",
    "clusterroles",
    "clusterrolebindings",
    "priorityclasses",
];

/// Resources whose main endpoint keeps status and whose `/status` changes only status
/// (the registry strategies' `PrepareForUpdate`).
const WITH_STATUS: &[&str] = &[
    "pods",
    "nodes",
    "services",
    "namespaces",
    "persistentvolumeclaims",
    "persistentvolumes",
    "replicationcontrollers",
    "deployments",
    "replicasets",
    "statefulsets",
    "daemonsets",
    "jobs",
    "certificatesigningrequests",
    "volumeattachments",
];

impl Gvr {
    /// `group/version`, or `version` for the core group (an object's `apiVersion`).
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub(crate) fn namespaced(&self) -> bool {
        !CLUSTER_SCOPED.contains(&self.resource.as_str())
    }

    pub(crate) fn has_status(&self) -> bool {
        WITH_STATUS.contains(&self.resource.as_str())
    }

    /// The kind of the resource's objects.
    pub(crate) fn kind(&self) -> String {
        let known = match self.resource.as_str() {
            "pods" => "Pod",
            "nodes" => "Node",
            "leases" => "Lease",
            "events" => "Event",
            "configmaps" => "ConfigMap",
            "secrets" => "Secret",
            "services" => "Service",
            "serviceaccounts" => "ServiceAccount",
            "namespaces" => "Namespace",
            "endpoints" => "Endpoints",
            "persistentvolumeclaims" => "PersistentVolumeClaim",
            "persistentvolumes" => "PersistentVolume",
            "csinodes" => "CSINode",
            "csidrivers" => "CSIDriver",
            "runtimeclasses" => "RuntimeClass",
            "tokenreviews" => "TokenReview",
            "subjectaccessreviews" => "SubjectAccessReview",
            "certificatesigningrequests" => "CertificateSigningRequest",
            "priorityclasses" => "PriorityClass",
            _ => "",
        };
        if !known.is_empty() {
            return known.to_owned();
        }
        let singular = self.resource.strip_suffix('s').unwrap_or(&self.resource);
        let mut chars = singular.chars();
        chars
            .next()
            .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gvr(group: &str, resource: &str) -> Gvr {
        Gvr {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
        }
    }

    #[test]
    fn kinds_scopes_and_api_versions() {
        assert_eq!(gvr("", "configmaps").kind(), "ConfigMap");
        assert_eq!(gvr("example.com", "widgets").kind(), "Widget");
        assert!(!gvr("", "nodes").namespaced());
        assert!(gvr("coordination.k8s.io", "leases").namespaced());
        assert_eq!(
            gvr("coordination.k8s.io", "leases").api_version(),
            "coordination.k8s.io/v1"
        );
        assert_eq!(gvr("", "pods").api_version(), "v1");
        assert!(gvr("", "pods").has_status() && !gvr("", "configmaps").has_status());
    }
}
