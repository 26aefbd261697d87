//! The errors of this crate: why an event stream is unavailable ([`crate::evented`]) and why
//! a PLEG is unhealthy (upstream `GenericPLEG.Healthy`).

use std::time::Duration;

use kubelet_core::time::go_duration;

/// Errors of the PLEGs and their event sources.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The event service could not be reached or refused the subscription. Retryable: the
    /// evented PLEG relists at the fallback period and subscribes again with backoff.
    #[error("subscribing to runtime events: {0}")]
    Subscribe(String),
    /// The event stream broke after it was open. Retryable, as [`Error::Subscribe`].
    #[error("runtime event stream broke: {0}")]
    Stream(String),
    /// Unhealthy: no relist has succeeded yet.
    #[error("pleg has yet to be successful")]
    NeverRelisted,
    /// Unhealthy: the last successful relist is older than the threshold.
    #[error(
        "pleg was last seen active {} ago; threshold is {}",
        go_duration(*elapsed),
        go_duration(*threshold)
    )]
    Stale {
        /// Time since the last successful relist.
        elapsed: Duration,
        /// The configured relist threshold.
        threshold: Duration,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
