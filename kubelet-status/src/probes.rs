//! How probe results reach status generation (the `UpdatePodStatus` half of upstream
//! `pkg/kubelet/prober/prober_manager.go`).
//!
//! Status generation asks a [`ProbeResults`] for the startup and readiness state of every
//! container instance. Until a probe manager exists, [`NoProbes`] says "no probe" for all of
//! them, so running containers are started and ready, as upstream treats containers without
//! probes.

use kubelet_core::PodUid;

/// The state of one probe of one container instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProbeState {
    /// The container has no such probe: it counts as passing once the container runs.
    #[default]
    NoProbe,
    /// The container has the probe but it has not produced a result yet.
    Pending,
    /// The last result was a success.
    Success,
    /// The last result was a failure.
    Failure,
}

/// Latest probe results, as a probe manager reports them (upstream `prober.Manager`).
///
/// `container_id` is the API form `<runtime>://<id>`, so results of a previous instance of the
/// container never apply to a new one.
pub trait ProbeResults: Send + Sync {
    /// State of the startup probe of the container instance.
    fn startup(&self, pod: &PodUid, container: &str, container_id: &str) -> ProbeState;
    /// State of the readiness probe of the container instance.
    fn readiness(&self, pod: &PodUid, container: &str, container_id: &str) -> ProbeState;
}

/// A [`ProbeResults`] for a kubelet without probes: every container has none.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProbes;

impl ProbeResults for NoProbes {
    fn startup(&self, _pod: &PodUid, _container: &str, _container_id: &str) -> ProbeState {
        ProbeState::NoProbe
    }

    fn readiness(&self, _pod: &PodUid, _container: &str, _container_id: &str) -> ProbeState {
        ProbeState::NoProbe
    }
}
