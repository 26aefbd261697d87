//! Errors of this crate and the mapping of gRPC statuses onto [`kubelet_core::runtime::Error`].
//!
//! Mirrors the error handling of upstream `pkg/kubelet/cri/remote/remote_runtime.go` and
//! `k8s.io/cri-api/pkg/errors` (`IsNotFound`).

use kubelet_core::runtime::Error;
use tonic::Code;

/// Every error of this crate that is not a [`kubelet_core::runtime::Error`] (what the
/// [`kubelet_core::kuberuntime::RuntimeService`] calls return).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CriError {
    /// The endpoint was refused.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A pod or container cannot be expressed in CRI.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// Why a pod or container spec cannot be turned into a CRI config (reported on the
/// container as `CreateContainerConfigError`, through [`Error::InvalidSpec`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `seccompProfile.type: Localhost` without `localhostProfile`.
    #[error("localhostProfile must be set if seccompProfile type is Localhost.")]
    MissingLocalhostProfile,
    /// `appArmorProfile.type: Localhost` (or a `localhost/` annotation) without a name.
    #[error("missing localhost apparmor profile name")]
    MissingAppArmorLocalhostProfile,
    /// An `appArmorProfile.type` this kubelet does not know.
    #[error("unknown apparmor profile type: {0:?}")]
    UnknownAppArmorProfileType(String),
    /// A `supplementalGroupsPolicy` other than `Merge` and `Strict`.
    #[error("unsupported supplementalGroupsPolicy: {0}")]
    UnsupportedSupplementalGroupsPolicy(String),
    /// `hostUsers: false` where the runtime cannot give the pod a user namespace.
    #[error("the runtime cannot run the pod in a user namespace: {0}")]
    UserNamespaces(String),
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        let field = match e {
            ConfigError::MissingLocalhostProfile => "securityContext.seccompProfile",
            ConfigError::MissingAppArmorLocalhostProfile
            | ConfigError::UnknownAppArmorProfileType(_) => "securityContext.appArmorProfile",
            ConfigError::UnsupportedSupplementalGroupsPolicy(_) => {
                "spec.securityContext.supplementalGroupsPolicy"
            }
            ConfigError::UserNamespaces(_) => "spec.hostUsers",
        };
        Error::InvalidSpec {
            field: field.into(),
            reason: e.to_string(),
        }
    }
}

/// Why [`crate::connect`] refused an endpoint.
///
/// None of these is retryable: they are configuration errors. A runtime that is merely down is
/// not an error at connect time (the connection is lazy); it shows up as
/// [`Error::Unavailable`] on each call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The endpoint is not a unix socket (`unix:///path` or an absolute or relative path).
    #[error("unsupported CRI endpoint {0:?}: expected unix:///path/to/socket or a path")]
    UnsupportedEndpoint(String),
    /// `connect` was called outside a Tokio runtime (the channel needs one for its worker).
    #[error("kubelet_cri::connect must be called from within a Tokio runtime")]
    NoRuntime,
}

/// Maps a gRPC status of the CRI call `op` onto the core runtime error.
///
/// `Unavailable` (including transport and connect errors, which tonic reports as
/// `Unavailable`) becomes [`Error::Unavailable`], `NotFound` becomes [`Error::NotFound`],
/// `Unimplemented` becomes [`Error::Unsupported`], and everything else is [`Error::Runtime`]
/// naming the call. A call whose connection broke mid-way (the runtime was killed) is
/// `Unavailable` too, as grpc-go (upstream's client) reports it; tonic says `Unknown`.
pub(crate) fn from_status(op: &'static str, status: &tonic::Status) -> Error {
    let message = status.message().to_owned();
    match status.code() {
        Code::Unavailable => Error::Unavailable(format!("{op}: {message}")),
        Code::Unknown if broken_connection(status) => {
            Error::Unavailable(format!("{op}: connection to the runtime broke: {message}"))
        }
        Code::NotFound => Error::NotFound(format!("{op}: {message}")),
        // A runtime without the call (e.g. `ListPodSandboxStats` before containerd 1.7).
        Code::Unimplemented => Error::Unsupported(op),
        code => Error::Runtime {
            op,
            message: if message.is_empty() {
                format!("{code:?}")
            } else {
                message
            },
        },
    }
}

/// Whether tonic reported a transport failure (a closed or reset connection) as the status.
fn broken_connection(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if e.is::<tonic::transport::Error>() || e.is::<std::io::Error>() {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_codes() {
        let e = from_status("Version", &tonic::Status::unavailable("connection refused"));
        assert!(matches!(e, Error::Unavailable(ref m) if m.contains("Version")));
        let e = from_status(
            "ContainerStatus",
            &tonic::Status::not_found("no such container"),
        );
        assert!(matches!(e, Error::NotFound(_)));
        let e = from_status("RunPodSandbox", &tonic::Status::internal("cni failed"));
        assert!(
            matches!(e, Error::Runtime { op: "RunPodSandbox", ref message } if message == "cni failed")
        );
        let e = from_status("ListPodSandboxStats", &tonic::Status::unimplemented("no"));
        assert!(matches!(e, Error::Unsupported("ListPodSandboxStats")));
        let broken = tonic::Status::from_error(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        assert_eq!(broken.code(), Code::Unknown);
        let e = from_status("Version", &broken);
        assert!(
            matches!(e, Error::Unavailable(ref m) if m.contains("broke")),
            "{e:?}"
        );
        let e = from_status("Version", &tonic::Status::unknown("runtime said so"));
        assert!(matches!(e, Error::Runtime { .. }), "{e:?}");
        let e = from_status("Status", &tonic::Status::new(Code::Internal, ""));
        assert!(matches!(e, Error::Runtime { ref message, .. } if message == "Internal"));
    }
}
