//! The errors of this crate: why a probe could not run (upstream `probe.Unknown` with an
//! error, whose result is thrown away). A probe that ran and failed is an
//! [`Outcome`](crate::Outcome), not an error.

use kubelet_core::container::PortError;
use kubelet_core::runtime;

/// Why a probe could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The probe's port is not a valid number or a name of one of the container's ports.
    #[error(transparent)]
    Port(#[from] PortError),
    /// A network probe without `host` in a pod that has no IP yet.
    #[error("the pod has no IP yet")]
    NoPodIp,
    /// A gRPC probe's port is not in 1–65535.
    #[error("invalid port number: {0}")]
    InvalidGrpcPort(i32),
    /// The probe sets none of exec, httpGet, tcpSocket and grpc.
    #[error("missing probe handler")]
    MissingHandler,
    /// A gRPC probe in a build without the `grpc` feature.
    #[error("gRPC probes are not built in (kubelet-probe's `grpc` feature is off)")]
    GrpcNotBuilt,
    /// The runtime could not run an exec probe's command.
    #[error("{0}")]
    Exec(#[source] runtime::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
