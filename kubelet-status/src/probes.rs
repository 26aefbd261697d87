//! How probe results reach status generation (the `UpdatePodStatus` half of upstream
//! `pkg/kubelet/prober/prober_manager.go`).
//!
//! Status generation asks a [`ProbeResults`] for the startup and readiness state of every
//! container instance. The trait lives in `kubelet_core::probe` so that a probe manager
//! (`kubelet-probe`) implements it without depending on this crate; [`NoProbes`] says "no
//! probe" for every container, so running containers are started and ready, as upstream treats
//! containers without probes.

pub use kubelet_core::probe::{NoProbes, ProbeResults, ProbeState};
