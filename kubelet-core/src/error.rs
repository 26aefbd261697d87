//! [`Error`]: the crate's one error type. Each module keeps the precise error of its own API
//! (what a caller matches on); every one of them converts into this enum with `?`, so code that
//! only reports errors can use [`Result`] across modules.

/// Any error of this crate, by the module it comes from; the message and the source chain are
/// the module error's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A container runtime call failed ([`crate::runtime::Error`]).
    #[error(transparent)]
    Runtime(#[from] crate::runtime::Error),
    /// A container's environment, mounts or hostname could not be resolved.
    #[error(transparent)]
    RunContainerOptions(#[from] crate::runtime::RunContainerOptionsError),
    /// Syncing a pod failed.
    #[error(transparent)]
    Sync(#[from] crate::sync::Error),
    /// Housekeeping failed.
    #[error(transparent)]
    Cleanup(#[from] crate::sync::CleanupError),
    /// The sync loop is not healthy.
    #[error(transparent)]
    SyncLoop(#[from] crate::kubelet::sync_loop::Unhealthy),
    /// The node shutdown manager could not start.
    #[error(transparent)]
    NodeShutdown(#[from] crate::nodeshutdown::Error),
    /// A volume could not be set up or torn down.
    #[error(transparent)]
    Volume(#[from] crate::volume::Error),
    /// A static pod manifest could not be read or decoded.
    #[error(transparent)]
    StaticPod(#[from] crate::config::static_pod::Error),
    /// A pod failed validation.
    #[error(transparent)]
    Validation(#[from] crate::config::validate::ValidationErrors),
    /// A pod source's channel is closed.
    #[error(transparent)]
    SourceClosed(#[from] crate::config::channel::SourceClosed),
    /// A container's environment could not be built.
    #[error(transparent)]
    Env(#[from] crate::kubelet::env::Error),
    /// A pod's hostname or domain is invalid.
    #[error(transparent)]
    Hostname(#[from] crate::kubelet::hosts::Error),
    /// A lifecycle hook failed.
    #[error(transparent)]
    Hook(#[from] crate::lifecycle::HookError),
    /// `runAsNonRoot` cannot be verified or is violated.
    #[error(transparent)]
    NonRoot(#[from] crate::kuberuntime::security::NonRootError),
    /// A cgroup operation failed.
    #[error(transparent)]
    Cgroup(#[from] crate::cm::Error),
    /// A ConfigMap, Secret or other object could not be read.
    #[error(transparent)]
    Object(#[from] crate::objects::Error),
    /// Registry credentials could not be read from image pull secrets.
    #[error(transparent)]
    Credentials(#[from] crate::credentialprovider::Error),
    /// A downward API field path is invalid.
    #[error(transparent)]
    FieldPath(#[from] crate::fieldpath::Error),
    /// A named container port does not exist.
    #[error(transparent)]
    Port(#[from] crate::container::PortError),
    /// A pod sysctl is not allowed.
    #[error(transparent)]
    Sysctl(#[from] crate::sysctl::Error),
    /// A mirror pod could not be created or deleted.
    #[error(transparent)]
    Mirror(#[from] crate::kubelet::mirror::Error),
    /// A container log could not be read.
    #[error(transparent)]
    Logs(#[from] crate::logs::Error),
    /// A container log could not be rotated.
    #[error(transparent)]
    LogRotation(#[from] crate::logs::rotation::Error),
    /// A resource quantity is invalid.
    #[error(transparent)]
    Resource(#[from] crate::resources::Error),
    /// The fake API server could not start or serve (tests only).
    #[cfg(feature = "test-util")]
    #[error(transparent)]
    FakeApiServer(#[from] crate::testing::apiserver::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `error: its source: its source's source …` (anyhow's `{:#}`), for a log line that must name
/// the cause. A source whose text its parent already ends with is not repeated (hyper's and
/// kube's errors repeat their cause).
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_errors_convert_and_keep_their_message() {
        fn fails() -> Result<()> {
            Err(crate::runtime::Error::NotFound("container abc".into()))?;
            Ok(())
        }
        let e = fails().expect_err("fails");
        assert!(matches!(e, Error::Runtime(_)), "{e:?}");
        assert_eq!(e.to_string(), "not found: container abc");
    }

    #[test]
    fn an_error_is_shown_with_its_causes_once_each() {
        #[derive(Debug, thiserror::Error)]
        #[error("client error (SendRequest)")]
        struct Outer(#[source] std::io::Error);
        let error = Outer(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection closed before message completed",
        ));
        assert_eq!(
            chain(&error),
            "client error (SendRequest): connection closed before message completed"
        );
        #[derive(Debug, thiserror::Error)]
        #[error("failed: {0}")]
        struct Repeats(#[source] std::io::Error);
        let repeats = Repeats(std::io::Error::other("refused"));
        assert_eq!(chain(&repeats), "failed: refused");
    }
}
