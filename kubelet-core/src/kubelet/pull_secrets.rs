//! The pod's image pull secrets (upstream `getPullSecretsForPod` in
//! `pkg/kubelet/kubelet_pods.go`): each `spec.imagePullSecrets` entry with a name, read from
//! the object source; one that cannot be read is logged and skipped, and the pull goes on.
//!
//! Only the pod's own list counts, as upstream: a ServiceAccount's `imagePullSecrets` reach
//! the pod through the API server's ServiceAccount admission plugin, which copies them into a
//! new pod that has none, and the Node authorizer lets a node read only the secrets its pods
//! name.

use k8s_openapi::api::core::v1::Pod;

use crate::objects::ObjectSource;
use crate::pod::PodExt;
use crate::runtime::PullSecrets;

/// Reads the secrets named by `pod.spec.imagePullSecrets` from `objects`, in order.
pub async fn get_pull_secrets_for_pod(objects: &dyn ObjectSource, pod: &Pod) -> PullSecrets {
    let mut found = PullSecrets::default();
    let namespace = pod.namespace_or_default();
    let names = pod
        .spec
        .iter()
        .flat_map(|s| s.image_pull_secrets.iter().flatten())
        .map(|r| r.name.as_str())
        .filter(|n| !n.is_empty());
    for name in names {
        let error = match objects.secret(namespace, name).await {
            Ok(Some(secret)) => {
                found.secrets.push(secret);
                continue;
            }
            Ok(None) => format!("secret \"{name}\" not found"),
            Err(e) => e.to_string(),
        };
        tracing::info!(
            pod = %pod.full_name(),
            secret = %format!("{namespace}/{name}"),
            error = %error,
            "unable to retrieve pull secret, the image pull may not succeed"
        );
        found.unavailable.push(name.to_owned());
    }
    found
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{LocalObjectReference, Secret};

    use super::*;
    use crate::objects::{Error, InMemoryObjectSource, MockObjectSource};
    use crate::testing::pod;

    fn with_pull_secrets(names: &[&str]) -> Pod {
        let mut p = pod("p");
        p.metadata.namespace = Some("ns".into());
        p.spec.as_mut().expect("spec").image_pull_secrets = Some(
            names
                .iter()
                .map(|n| LocalObjectReference { name: (*n).into() })
                .collect(),
        );
        p
    }

    fn named(name: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s
    }

    #[tokio::test]
    async fn reads_in_order_and_reports_missing_ones() {
        let objects = InMemoryObjectSource::new();
        objects.set_secret("ns", "b", named("b"));
        objects.set_secret("ns", "a", named("a"));
        objects.set_secret("other", "missing", named("missing"));
        let found =
            get_pull_secrets_for_pod(&objects, &with_pull_secrets(&["b", "", "missing", "a"]))
                .await;
        let names: Vec<_> = found
            .secrets
            .iter()
            .map(|s| s.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(found.unavailable, ["missing"], "empty names are skipped");
    }

    #[tokio::test]
    async fn a_failing_source_is_logged_and_skipped() {
        let mut objects = MockObjectSource::new();
        objects
            .expect_secret()
            .returning(|_, _| Err(Error::Unavailable("forbidden".into())));
        let found = get_pull_secrets_for_pod(&objects, &with_pull_secrets(&["x"])).await;
        assert!(found.secrets.is_empty());
        assert_eq!(found.unavailable, ["x"]);
        let none = get_pull_secrets_for_pod(&objects, &pod("p")).await;
        assert!(none.secrets.is_empty() && none.unavailable.is_empty());
    }
}
