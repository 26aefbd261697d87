//! Exits the runtime's event stream reported before its status API shows them
//! ([`Runtime::observe_exit`](crate::runtime::Runtime::observe_exit)).
//!
//! containerd publishes `/tasks/exit` the moment a container's main process ends, but its CRI
//! plugin reports the container exited only after it has deleted the task, tens of
//! milliseconds later. Until then a status read through CRI says `Running` for a process that
//! is gone. The engine remembers each observed exit and reports such a container as exited,
//! with the exit code, time and reason the runtime itself gives once it catches up
//! (containerd's rule: `OOMKilled` after an OOM event, else `Completed` for 0 and `Error`
//! otherwise). An exit is forgotten once the runtime shows the container in any other state
//! than running, when the container is removed, or after [`FORGET_AFTER`]; so a status never
//! goes back from exited to running.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::api;
use crate::collections::shrink_when_sparse;
use crate::runtime::{ContainerState, ObservedExit};

/// How long an exit is remembered when the runtime never shows the container again.
pub const FORGET_AFTER: Duration = Duration::from_secs(120);

/// containerd's reasons for an exited container (`pkg/cri/server/container_status.go`).
const OOM_KILLED: &str = "OOMKilled";
const COMPLETED: &str = "Completed";
const ERROR: &str = "Error";

/// The exits observed and not yet shown by the runtime, by container ID.
#[derive(Debug, Default)]
pub struct ObservedExits {
    exits: Mutex<HashMap<String, (ObservedExit, Instant)>>,
}

impl ObservedExits {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (ObservedExit, Instant)>> {
        self.exits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers `exit` (and forgets exits older than [`FORGET_AFTER`]).
    pub fn note(&self, exit: ObservedExit) {
        let now = Instant::now();
        let mut exits = self.lock();
        exits.retain(|_, (_, noted)| now.duration_since(*noted) < FORGET_AFTER);
        shrink_when_sparse(&mut exits);
        exits.insert(exit.container_id.clone(), (exit, now));
    }

    /// Forgets the exit of a container the runtime stopped or removed.
    pub fn forget(&self, container_id: &str) {
        let mut exits = self.lock();
        if exits.remove(container_id).is_some() {
            shrink_when_sparse(&mut exits);
        }
    }

    /// Makes `status` show the observed exit of its container while the runtime still says
    /// it runs; forgets the exit once the runtime says anything else.
    pub fn apply(&self, status: &mut api::ContainerStatus) {
        let mut exits = self.lock();
        let Some(exit) = exit_to_show(&mut exits, &status.id, status.state) else {
            return;
        };
        status.state = ContainerState::Exited;
        status.exit_code = exit.exit_code;
        status.finished_at = exit.finished_at;
        status.reason = if exit.oom_killed {
            OOM_KILLED
        } else if exit.exit_code == 0 {
            COMPLETED
        } else {
            ERROR
        }
        .to_owned();
    }

    /// Makes a listing show the observed exits of the containers it lists as running: their
    /// state becomes exited, or, for a listing of running containers only
    /// (`only_running`), they are left out.
    pub fn apply_to_list(&self, containers: &mut Vec<api::Container>, only_running: bool) {
        let mut exits = self.lock();
        if exits.is_empty() {
            return;
        }
        containers.retain_mut(|c| {
            if exit_to_show(&mut exits, &c.id, c.state).is_none() {
                return true;
            }
            c.state = ContainerState::Exited;
            !only_running
        });
    }

    /// How many exits are remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no exit is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The rule both views follow: the exit noted for a container the runtime still shows
/// `Running`, if any; an exit is forgotten once the runtime shows any other state.
fn exit_to_show<'a>(
    exits: &'a mut HashMap<String, (ObservedExit, Instant)>,
    container_id: &str,
    state: ContainerState,
) -> Option<&'a ObservedExit> {
    if state != ContainerState::Running {
        exits.remove(container_id);
        return None;
    }
    exits.get(container_id).map(|(exit, _)| exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(id: &str) -> api::ContainerStatus {
        api::ContainerStatus {
            id: id.into(),
            state: ContainerState::Running,
            ..Default::default()
        }
    }

    fn exit(id: &str, exit_code: i32, oom_killed: bool) -> ObservedExit {
        ObservedExit {
            container_id: id.into(),
            exit_code,
            finished_at: Some(
                k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).expect("ts"),
            ),
            oom_killed,
        }
    }

    #[test]
    fn a_running_container_with_an_observed_exit_shows_it_with_containerd_s_reason() {
        let exits = ObservedExits::default();
        exits.note(exit("a", 0, false));
        exits.note(exit("b", 3, false));
        exits.note(exit("c", 137, true));
        for (id, code, reason) in [
            ("a", 0, "Completed"),
            ("b", 3, "Error"),
            ("c", 137, "OOMKilled"),
        ] {
            let mut st = running(id);
            exits.apply(&mut st);
            assert_eq!(st.state, ContainerState::Exited, "{id}");
            assert_eq!((st.exit_code, st.reason.as_str()), (code, reason), "{id}");
            assert_eq!(st.finished_at, exit(id, code, false).finished_at);
        }
        let mut other = running("d");
        exits.apply(&mut other);
        assert_eq!(other.state, ContainerState::Running);
    }

    #[test]
    fn the_exit_stays_until_the_runtime_shows_the_container_otherwise() {
        let exits = ObservedExits::default();
        exits.note(exit("a", 1, false));
        for _ in 0..3 {
            let mut st = running("a");
            exits.apply(&mut st);
            assert_eq!(st.state, ContainerState::Exited);
        }
        let mut caught_up = api::ContainerStatus {
            id: "a".into(),
            state: ContainerState::Exited,
            exit_code: 1,
            reason: "Error".into(),
            ..Default::default()
        };
        exits.apply(&mut caught_up);
        assert_eq!(
            (caught_up.exit_code, caught_up.reason.as_str()),
            (1, "Error")
        );
        assert!(exits.is_empty());
    }

    #[test]
    fn a_listing_shows_the_exit_or_leaves_the_container_out() {
        let exits = ObservedExits::default();
        exits.note(exit("a", 0, false));
        exits.note(exit("b", 0, false));
        let listed = |id: &str, state| api::Container {
            id: id.into(),
            state,
            ..Default::default()
        };
        let listing = || {
            vec![
                listed("a", ContainerState::Running),
                listed("b", ContainerState::Running),
                listed("c", ContainerState::Running),
            ]
        };
        let mut all = listing();
        exits.apply_to_list(&mut all, false);
        let states: Vec<_> = all.iter().map(|c| (c.id.as_str(), c.state)).collect();
        assert_eq!(
            states,
            [
                ("a", ContainerState::Exited),
                ("b", ContainerState::Exited),
                ("c", ContainerState::Running)
            ]
        );
        let mut running = listing();
        exits.apply_to_list(&mut running, true);
        let ids: Vec<_> = running.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["c"]);
        // The runtime caught up with a: its exit is forgotten, b's stays.
        exits.apply_to_list(&mut vec![listed("a", ContainerState::Exited)], false);
        assert_eq!(exits.len(), 1);
    }

    #[test]
    fn a_removed_container_s_exit_is_forgotten() {
        let exits = ObservedExits::default();
        exits.note(exit("a", 1, false));
        exits.forget("a");
        let mut st = running("a");
        exits.apply(&mut st);
        assert_eq!(st.state, ContainerState::Running);
    }
}
