//! Pulling an image with the pod's pull secrets and the node's credential provider plugins
//! (upstream `pkg/kubelet/kuberuntime/kuberuntime_image.go`, `PullImage`): the keyring made
//! from the secrets (`credentialprovider/secrets.MakeDockerKeyring`, a union with the
//! plugins' keyring) is searched with the image's repository; every matching credential is
//! tried in order, the secrets' first, until one pull succeeds, and the image is pulled
//! without credentials only when none matches.

use k8s_openapi::api::core::v1::Secret;

use super::api::{PodSandboxConfig, PullImageRequest};
use super::service::RuntimeService;
use crate::credentialprovider::{CredentialProviders, make_docker_keyring, repo_to_pull};
use crate::runtime::{Error, Result};

const OP: &str = "PullImage";

/// Pulls `image` (already tagged) for `sandbox` with the credentials that `secrets` hold for
/// its registry, then those of the node's credential provider `plugins`. Returns the image reference. A malformed pull secret or reference fails the
/// pull with a message naming it; the failures of several credentials are joined as Go's
/// `utilerrors.NewAggregate` prints them (`[first, second]`). [`Error::Unavailable`] ends the
/// attempts at once.
pub(super) async fn pull_image<S: RuntimeService + ?Sized>(
    service: &S,
    image: &str,
    sandbox: &PodSandboxConfig<'_>,
    secrets: &[Secret],
    plugins: Option<&CredentialProviders>,
) -> Result<String> {
    let failed = |message: String| Error::Runtime { op: OP, message };
    let repo = repo_to_pull(image).map_err(|e| failed(e.to_string()))?;
    let keyring = make_docker_keyring(secrets).map_err(|e| failed(e.to_string()))?;
    let mut creds = keyring.lookup(&repo);
    if let Some(plugins) = plugins {
        creds.extend(plugins.lookup(&repo).await);
    }
    if creds.is_empty() {
        tracing::debug!(image, "pulling image without credentials");
        return service
            .pull_image(&PullImageRequest {
                image,
                auth: None,
                sandbox,
            })
            .await;
    }
    let mut errors = Vec::new();
    for auth in &creds {
        let request = PullImageRequest {
            image,
            auth: Some(auth),
            sandbox,
        };
        match service.pull_image(&request).await {
            Ok(image_ref) => return Ok(image_ref),
            Err(e @ Error::Unavailable(_)) => return Err(e),
            Err(Error::Runtime { message, .. }) => errors.push(message),
            Err(e) => errors.push(e.to_string()),
        }
    }
    Err(failed(aggregate(&errors)))
}

/// Go's `utilerrors.NewAggregate(errs).Error()`: one message as is, several distinct ones
/// as `[a, b]`.
fn aggregate(messages: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for m in messages {
        if !seen.contains(&m.as_str()) {
            seen.push(m);
        }
    }
    match seen.as_slice() {
        [one] => (*one).to_owned(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
#[path = "pull_tests.rs"]
mod tests;
