//! Image pull policy and "ensure the image is present" before a container is created.
//!
//! Mirrors upstream `pkg/kubelet/images/image_manager.go` (`EnsureImageExists`,
//! `shouldPullImage`, `applyDefaultImageTag`) and the pull-policy defaulting of
//! `pkg/apis/core/v1/defaults.go` (`SetDefaults_Container`). A failed pull is `ErrImagePull`;
//! until its backoff window ends ([`super::pull_backoff`]) further starts are
//! `ImagePullBackOff`. Each outcome is recorded as upstream's image manager records it
//! (`Pulling`, `Pulled`, `Failed`, `BackOff`, `InspectFailed`, `ErrImageNeverPull`).
//! Pulls use the pod's pull secrets (`kuberuntime/pull.rs`, upstream `PullImage`).

use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod};

use super::api::PodSandboxConfig;
use super::pull::pull_image;
use super::pull_backoff::ImagePullBackoff;
use super::reasons::{
    ERR_IMAGE_NEVER_PULL, ERR_IMAGE_PULL, IMAGE_INSPECT_ERROR, INVALID_IMAGE_NAME,
};
use super::service::RuntimeService;
use crate::events::{EventRecorder, EventType, pod_ref, reasons as events};
use crate::pod::PodExt;
use crate::runtime::{Error, Result, RuntimeHelper};

/// Where the image manager's events go: the recorder and the container's reference.
pub(super) struct ImageEvents<'a> {
    /// The recorder.
    pub(super) recorder: &'a dyn EventRecorder,
    /// The container the image is for.
    pub(super) object: &'a ObjectReference,
}

impl ImageEvents<'_> {
    fn record(&self, event_type: EventType, reason: &str, message: &str) {
        self.recorder
            .event(self.object, event_type, reason, message);
    }
}

/// A container's `imagePullPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullPolicy {
    /// Pull on every container start.
    Always,
    /// Pull only when the image is absent.
    IfNotPresent,
    /// Never pull; fail when absent.
    Never,
}

/// The container's pull policy: the explicit one, or the API server's default (`Always` for
/// the `latest` tag or no tag, `IfNotPresent` otherwise, including digests). An unknown value
/// is treated as the default.
pub fn pull_policy(container: &Container) -> PullPolicy {
    match container.image_pull_policy.as_deref() {
        Some("Always") => PullPolicy::Always,
        Some("IfNotPresent") => PullPolicy::IfNotPresent,
        Some("Never") => PullPolicy::Never,
        _ => default_pull_policy(container.image.as_deref().unwrap_or("")),
    }
}

/// The default pull policy for an image reference.
pub fn default_pull_policy(image: &str) -> PullPolicy {
    let (_, tag, digest) = split_reference(image);
    match (tag, digest) {
        (_, Some(_)) => PullPolicy::IfNotPresent,
        (None, None) | (Some("latest"), None) => PullPolicy::Always,
        (Some(_), None) => PullPolicy::IfNotPresent,
    }
}

/// Splits `name[:tag][@digest]`; a `:` in the registry host (`host:5000/x`) is not a tag.
fn split_reference(image: &str) -> (&str, Option<&str>, Option<&str>) {
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (image, None),
    };
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    match rest[last_slash..].rfind(':') {
        Some(i) => {
            let at = last_slash + i;
            (&rest[..at], Some(&rest[at + 1..]), digest)
        }
        None => (rest, None, digest),
    }
}

/// Appends `:latest` to a reference that has neither tag nor digest (upstream
/// `applyDefaultImageTag`). `None` for an empty or malformed reference.
pub fn apply_default_tag(image: &str) -> Option<String> {
    let image = image.trim();
    if image.is_empty() || image.chars().any(char::is_whitespace) {
        return None;
    }
    let (name, tag, digest) = split_reference(image);
    if name.is_empty() || tag == Some("") || digest == Some("") {
        return None;
    }
    Some(match (tag, digest) {
        (None, None) => format!("{image}:latest"),
        _ => image.to_owned(),
    })
}

/// Why an image could not be made available: a waiting reason and message for the
/// container, or a runtime error that must abort the sync (runtime down).
#[derive(Debug)]
pub(super) enum EnsureError {
    /// Report on the container.
    Container {
        /// Waiting reason, e.g. [`super::reasons::ERR_IMAGE_PULL`].
        reason: &'static str,
        /// Message.
        message: String,
    },
    /// A recent pull of the image failed: `ImagePullBackOff` until `retry_after`.
    Backoff {
        /// Message with the last pull error.
        message: String,
        /// Time until the window ends.
        retry_after: std::time::Duration,
    },
    /// The runtime is unavailable.
    Unavailable(Error),
}

fn fail(reason: &'static str, e: Error) -> EnsureError {
    match e {
        Error::Unavailable(_) => EnsureError::Unavailable(e),
        e => EnsureError::Container {
            reason,
            message: e.to_string(),
        },
    }
}

/// Makes sure the container's image is present according to its pull policy and returns the
/// reference to create the container from (the image ID when known). A pull asks `helper`
/// for the pod's pull secrets first.
#[allow(clippy::too_many_arguments)]
pub(super) async fn ensure_image_exists<S: RuntimeService + ?Sized>(
    service: &S,
    pulls: &ImagePullBackoff,
    pod: &Pod,
    helper: &dyn RuntimeHelper,
    container: &Container,
    sandbox: &PodSandboxConfig<'_>,
    events: &ImageEvents<'_>,
    plugins: Option<&crate::credentialprovider::CredentialProviders>,
) -> Result<String, EnsureError> {
    let pod_uid = pod.uid();
    let pod_uid = pod_uid.as_str();
    let raw = container.image.as_deref().unwrap_or("");
    let Some(image) = apply_default_tag(raw) else {
        let message =
            format!("Failed to apply default image tag {raw:?}: invalid reference format");
        events.record(
            EventType::Warning,
            events::FAILED_TO_INSPECT_IMAGE,
            &message,
        );
        return Err(EnsureError::Container {
            reason: INVALID_IMAGE_NAME,
            message,
        });
    };
    let policy = pull_policy(container);
    let present = match service.image_status(&image).await {
        Ok(p) => p,
        Err(e) => {
            return Err(match fail(IMAGE_INSPECT_ERROR, e) {
                EnsureError::Container { reason, message } => {
                    let message = format!("Failed to inspect image {raw:?}: {message}");
                    events.record(
                        EventType::Warning,
                        events::FAILED_TO_INSPECT_IMAGE,
                        &message,
                    );
                    EnsureError::Container { reason, message }
                }
                down => down,
            });
        }
    };
    match (present, policy) {
        (Some(img), PullPolicy::IfNotPresent | PullPolicy::Never) => {
            events.record(
                EventType::Normal,
                events::PULLED_IMAGE,
                &format!("Container image {raw:?} already present on machine"),
            );
            return Ok(img.id);
        }
        (None, PullPolicy::Never) => {
            let message =
                format!("Container image {raw:?} is not present with pull policy of Never");
            events.record(
                EventType::Warning,
                events::ERR_IMAGE_NEVER_PULL_POLICY,
                &message,
            );
            return Err(EnsureError::Container {
                reason: ERR_IMAGE_NEVER_PULL,
                message,
            });
        }
        _ => {}
    }
    if let Some(refused) = pulls.check(pod_uid, raw) {
        events.record(
            EventType::Normal,
            events::BACK_OFF_PULL_IMAGE,
            &format!("Back-off pulling image {raw:?}"),
        );
        return Err(EnsureError::Backoff {
            message: refused.message,
            retry_after: refused.retry_after,
        });
    }
    tracing::info!(image = %image, "pulling image");
    events.record(
        EventType::Normal,
        events::PULLING_IMAGE,
        &format!("Pulling image {raw:?}"),
    );
    let secrets = helper.pull_secrets(pod).await;
    if !secrets.unavailable.is_empty() {
        events.recorder.event(
            &pod_ref(pod),
            EventType::Warning,
            events::FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET,
            &format!(
                "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                secrets.unavailable.join(", ")
            ),
        );
    }
    let started = tokio::time::Instant::now();
    match pull_image(service, &image, sandbox, &secrets.secrets, plugins).await {
        Ok(image_ref) => {
            pulls.succeeded();
            // Upstream truncates to milliseconds; pulls are not queued here, so there is
            // no waiting beyond the pull itself.
            let took = crate::time::go_duration(std::time::Duration::from_millis(
                u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            ));
            events.record(
                EventType::Normal,
                events::PULLED_IMAGE,
                &format!(
                    "Successfully pulled image {raw:?} in {} ({} including waiting)",
                    took, took,
                ),
            );
            Ok(image_ref)
        }
        Err(Error::Unavailable(e)) => Err(EnsureError::Unavailable(Error::Unavailable(e))),
        Err(e) => {
            let message = match e {
                Error::Runtime { message, .. } => message,
                e => e.to_string(),
            };
            tracing::warn!(image = %image, error = %message, "failed to pull image");
            pulls.failed(pod_uid, raw, &message);
            events.record(
                EventType::Warning,
                events::FAILED_TO_PULL_IMAGE,
                &format!("Failed to pull image {raw:?}: {message}"),
            );
            Err(EnsureError::Container {
                reason: ERR_IMAGE_PULL,
                message,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(image: &str, policy: Option<&str>) -> Container {
        Container {
            name: "c".into(),
            image: Some(image.into()),
            image_pull_policy: policy.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn pull_policy_defaults() {
        assert_eq!(pull_policy(&container("busybox", None)), PullPolicy::Always);
        assert_eq!(
            pull_policy(&container("busybox:latest", None)),
            PullPolicy::Always
        );
        assert_eq!(
            pull_policy(&container("busybox:1.36", None)),
            PullPolicy::IfNotPresent
        );
        assert_eq!(
            pull_policy(&container("localhost:5000/busybox", None)),
            PullPolicy::Always
        );
        assert_eq!(
            pull_policy(&container("localhost:5000/busybox:1", None)),
            PullPolicy::IfNotPresent
        );
        assert_eq!(
            pull_policy(&container("busybox@sha256:abcd", None)),
            PullPolicy::IfNotPresent
        );
        assert_eq!(
            pull_policy(&container("busybox:latest", Some("Never"))),
            PullPolicy::Never
        );
        assert_eq!(
            pull_policy(&container("busybox:1", Some("Always"))),
            PullPolicy::Always
        );
        assert_eq!(
            pull_policy(&container("busybox", Some("IfNotPresent"))),
            PullPolicy::IfNotPresent
        );
    }

    #[test]
    fn default_tag() {
        assert_eq!(
            apply_default_tag("busybox").as_deref(),
            Some("busybox:latest")
        );
        assert_eq!(
            apply_default_tag("busybox:1.36").as_deref(),
            Some("busybox:1.36")
        );
        assert_eq!(
            apply_default_tag("host:5000/ns/app").as_deref(),
            Some("host:5000/ns/app:latest")
        );
        assert_eq!(
            apply_default_tag("app@sha256:abcd").as_deref(),
            Some("app@sha256:abcd")
        );
        assert_eq!(apply_default_tag(""), None);
        assert_eq!(apply_default_tag("app:"), None);
        assert_eq!(apply_default_tag("bad image"), None);
    }
}
