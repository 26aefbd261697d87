//! TLS bootstrap and certificate rotation: the kubelet gets its client certificate (and, with
//! `serverTLSBootstrap`, its serving certificate) from the API server through
//! `certificates.k8s.io/v1` CertificateSigningRequests and renews them before they expire.
//!
//! Mirrors upstream `pkg/kubelet/certificate/bootstrap/bootstrap.go` (`LoadClientCert`:
//! [`bootstrap`]), `pkg/kubelet/certificate/kubelet.go` (the templates:
//! [`csr::Template::client`], [`csr::Template::serving`]) and client-go's `util/certificate/certificate_manager.go`
//! ([`manager`], [`deadline`]), `certificate_store.go` ([`store`]) and `util/certificate/csr`
//! ([`csr`]).
//!
//! Keys are ECDSA P-256 (upstream's too); private keys are never logged.

pub mod bootstrap;
pub mod csr;
pub mod deadline;
pub mod manager;
pub mod store;

use std::path::PathBuf;
use std::time::Duration;

pub use bootstrap::Bootstrap;
pub use manager::Rotation;
pub use store::{Pair, Store};

/// Why a certificate could not be obtained, stored or loaded.
///
/// Retryable (a new request may succeed): [`Api`](Error::Api) when
/// [`retryable`](crate::cluster::client::retryable) says so, [`Denied`](Error::Denied),
/// [`Failed`](Error::Failed), [`Timeout`](Error::Timeout) and [`Issued`](Error::Issued).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A PEM file holds no usable certificate or key.
    #[error("{path}: {message}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A kubeconfig file could not be read, has no usable context, or could not be written.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The key or the certificate request could not be made.
    #[error("making the key and certificate request: {0}")]
    Key(#[source] rcgen::Error),
    /// A request to the API server about a CertificateSigningRequest failed.
    #[error("certificate signing request {name}: {source}")]
    Api {
        /// The request's name (`generateName` while creating it).
        name: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// The request was denied.
    #[error("certificate signing request {name} was denied: {reason}: {message}")]
    Denied {
        /// The request's name.
        name: String,
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// The signer failed to issue the certificate.
    #[error("certificate signing request {name} failed: {reason}: {message}")]
    Failed {
        /// The request's name.
        name: String,
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
    },
    /// No certificate was issued in time.
    #[error("certificate signing request {name}: no certificate issued within {after:?}")]
    Timeout {
        /// The request's name.
        name: String,
        /// How long it waited.
        after: Duration,
    },
    /// The issued certificate is not usable (not PEM, or not for the request's key).
    #[error("certificate signing request {name}: the issued certificate {message}")]
    Issued {
        /// The request's name.
        name: String,
        /// What is wrong with it.
        message: String,
    },
}

impl Error {
    /// Whether a new request may succeed (see the [type docs](Error)).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Api { source, .. } => crate::cluster::client::retryable(source),
            Error::Denied { .. }
            | Error::Failed { .. }
            | Error::Timeout { .. }
            | Error::Issued { .. } => true,
            Error::Io { .. } | Error::Pem { .. } | Error::Kubeconfig { .. } | Error::Key(_) => {
                false
            }
        }
    }
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How long one request waits for its certificate (client-go `certificateWaitTimeout`).
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The back-off between failed requests: 2 s doubling up to 5 min (client-go's manager backs
/// off from 2 s too).
pub(crate) fn backoff(failures: u32) -> Duration {
    Duration::from_secs(2u64.saturating_pow(failures.min(20)).saturating_mul(2))
        .min(Duration::from_secs(300))
}

#[cfg(test)]
mod serving_tests;
#[cfg(test)]
pub(crate) mod test_ca;
