//! Container probes for a Rust kubelet: liveness, readiness and startup.
//!
//! Mirrors upstream `pkg/kubelet/prober` (probe manager, one worker per container and probe
//! type) and `pkg/kubelet/prober/results` (the results manager whose updates the sync loop
//! consumes). This crate currently holds the shared result vocabulary; the probe manager and
//! the exec/httpGet/tcpSocket/grpc probers are the subject of the probes issue.
//!
//! ```
//! use kubelet_probe::{ProbeKind, ProbeResult};
//! assert_eq!(ProbeKind::Liveness.to_string(), "Liveness");
//! assert!(ProbeResult::Success.is_success());
//! ```

use std::fmt;

/// Which probe (upstream `probeType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// Restarts the container when it fails.
    Liveness,
    /// Gates the container's `ready` flag.
    Readiness,
    /// Gates liveness and readiness until it first succeeds.
    Startup,
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        })
    }
}

/// The outcome of one probe (upstream `results.Result`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeResult {
    /// Not probed yet.
    Unknown,
    /// The probe passed.
    Success,
    /// The probe failed.
    Failure,
}

impl ProbeResult {
    /// `true` for [`ProbeResult::Success`].
    pub fn is_success(self) -> bool {
        self == ProbeResult::Success
    }
}
