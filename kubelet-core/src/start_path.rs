//! The pod start path as trace events, for `cargo xtask bench`'s per-step breakdown of a
//! pod's start (issue 17).
//!
//! Every event has [`TARGET`] as its target, so `RUST_LOG=info,kubelet_start_path=trace`
//! turns on exactly these and nothing else; off, each costs one level check. Two messages:
//!
//! - `start path`, with `step` (one of the constants below) and, where one pod is meant, `pod`
//!   (its full name, `name_namespace`): where a pod's start reached.
//! - `cri call`, with `op` (the CRI method) and `us` (how long the call took): every CRI call
//!   the kubelet makes, logged when it returns.
//!
//! The steps, in the order a static pod's start passes them:
//! [`MANIFEST_EVENT`] → [`CONFIG_SNAPSHOT`] → [`ADMITTED`] → [`SYNC_START`] →
//! [`POD_CGROUP`] → [`POD_DIRS`] → [`VOLUMES`] → (CRI calls) → [`RUNTIME_SYNCED`] →
//! [`STATUS_STORED`]; [`RUNTIME_EVENT`] and then [`PLEG_EVENT`] whenever the runtime reports a
//! container's change (what `cargo xtask bench` reads for G3, a container's exit).

/// The tracing target of the start path's events.
pub const TARGET: &str = "kubelet_start_path";

#[doc(hidden)]
pub use tracing as __tracing;

/// Logs that a pod's start reached `step` (one of this module's constants), with any further
/// fields after it: `start_step!(start_path::ADMITTED, pod = %pod.full_name())`. The one place
/// that writes the `start path` event the bench reads.
#[macro_export]
macro_rules! start_step {
    ($step:expr $(, $($field:tt)+)?) => {
        $crate::start_path::__tracing::trace!(
            target: $crate::start_path::TARGET,
            $($($field)+,)?
            step = $step,
            "start path"
        )
    };
}

/// The file source saw a relevant inotify event in the manifest directory.
pub const MANIFEST_EVENT: &str = "manifest_event";
/// The file source sent its pods to the pod config.
pub const CONFIG_SNAPSHOT: &str = "config_snapshot";
/// The sync loop admitted the pod and handed it to its pod worker.
pub const ADMITTED: &str = "admitted";
/// The pod worker began the pod's sync.
pub const SYNC_START: &str = "sync_start";
/// The pod cgroup exists.
pub const POD_CGROUP: &str = "pod_cgroup";
/// The pod's data directories exist.
pub const POD_DIRS: &str = "pod_dirs";
/// The pod's volumes are mounted.
pub const VOLUMES: &str = "volumes";
/// The runtime's `sync_pod` returned (sandbox and containers started).
pub const RUNTIME_SYNCED: &str = "runtime_synced";
/// The pod's status, as it stands after the sync, is stored (what `/pods` serves).
pub const STATUS_STORED: &str = "status_stored";
/// The PLEG received an event from the runtime's event stream (`kind`, `container`).
pub const RUNTIME_EVENT: &str = "runtime_event";
/// The PLEG saw the runtime show an event about a container (`kind`, `container`).
pub const PLEG_EVENT: &str = "pleg_event";
