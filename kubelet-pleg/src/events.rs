//! Events from the difference of two relists (upstream `generateEvents`, `computeEvents` and
//! `getContainersFromPods` in `pkg/kubelet/pleg/generic.go`).

use kubelet_core::PodUid;
use kubelet_core::pleg::{Event, EventType};
use kubelet_core::runtime::{ContainerState, RunningPod, SandboxState};

/// A container's state as the PLEG compares it (upstream `plegContainerState`): the runtime
/// states plus "does not exist".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlegState {
    /// Running.
    Running,
    /// Exited.
    Exited,
    /// Created but not started, or unknown to the runtime.
    Unknown,
    /// Not listed at all.
    NonExistent,
}

impl From<ContainerState> for PlegState {
    fn from(state: ContainerState) -> Self {
        match state {
            ContainerState::Running => PlegState::Running,
            ContainerState::Exited => PlegState::Exited,
            // As upstream, the kubelet does not use "created" yet.
            ContainerState::Created | ContainerState::Unknown => PlegState::Unknown,
        }
    }
}

impl From<SandboxState> for PlegState {
    fn from(state: SandboxState) -> Self {
        match state {
            SandboxState::Ready => PlegState::Running,
            SandboxState::NotReady => PlegState::Exited,
        }
    }
}

fn event(pod: &PodUid, kind: EventType, id: &str) -> Event {
    Event {
        id: pod.clone(),
        kind,
        container_id: Some(id.to_owned()),
    }
}

/// The events for one container whose state went from `old` to `new` (upstream
/// `generateEvents`). A container that disappears while not known to have exited first
/// died, then was removed.
#[doc(alias = "generateEvents")]
pub fn generate_events(
    pod: &PodUid,
    container_id: &str,
    old: PlegState,
    new: PlegState,
) -> Vec<Event> {
    if old == new {
        return Vec::new();
    }
    match new {
        PlegState::Running => vec![event(pod, EventType::ContainerStarted, container_id)],
        PlegState::Exited => vec![event(pod, EventType::ContainerDied, container_id)],
        PlegState::Unknown => vec![event(pod, EventType::ContainerChanged, container_id)],
        PlegState::NonExistent if old == PlegState::Exited => {
            vec![event(pod, EventType::ContainerRemoved, container_id)]
        }
        PlegState::NonExistent => vec![
            event(pod, EventType::ContainerDied, container_id),
            event(pod, EventType::ContainerRemoved, container_id),
        ],
    }
}

fn container_state(pod: Option<&RunningPod>, id: &str) -> PlegState {
    pod.and_then(|p| p.containers.iter().find(|c| c.id == id))
        .map_or(PlegState::NonExistent, |c| c.state.into())
}

fn sandbox_state(pod: Option<&RunningPod>, id: &str) -> PlegState {
    pod.and_then(|p| p.sandboxes.iter().find(|s| s.id == id))
        .map_or(PlegState::NonExistent, |s| s.state.into())
}

/// The state of the container or sandbox with runtime ID `id` in `pod`.
pub(crate) fn state_of(pod: Option<&RunningPod>, id: &str) -> PlegState {
    match container_state(pod, id) {
        PlegState::NonExistent => sandbox_state(pod, id),
        state => state,
    }
}

/// Every event between two observations of a pod: per container as [`generate_events`], and
/// one [`EventType::PodSync`] per sandbox whose state changed (appeared, became ready or not
/// ready, disappeared). Containers come first, each in the order they are first seen in
/// `old` then `new`.
pub fn compute_events(
    uid: &PodUid,
    old: Option<&RunningPod>,
    new: Option<&RunningPod>,
) -> Vec<Event> {
    let mut events = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    let pods = [old, new];
    for c in pods.iter().flatten().flat_map(|p| &p.containers) {
        if seen.contains(&c.id.as_str()) {
            continue;
        }
        seen.push(&c.id);
        let (before, after) = (container_state(old, &c.id), container_state(new, &c.id));
        events.extend(generate_events(uid, &c.id, before, after));
    }
    for s in pods.iter().flatten().flat_map(|p| &p.sandboxes) {
        if seen.contains(&s.id.as_str()) {
            continue;
        }
        seen.push(&s.id);
        if sandbox_state(old, &s.id) != sandbox_state(new, &s.id) {
            events.push(event(uid, EventType::PodSync, &s.id));
        }
    }
    events
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kubelet_core::runtime::{ContainerSummary, SandboxSummary};

    use PlegState::*;

    fn kinds(events: &[Event]) -> Vec<EventType> {
        events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn generate_events_table() {
        let uid = PodUid::from("p");
        let cases = [
            (NonExistent, Running, vec![EventType::ContainerStarted]),
            (Unknown, Running, vec![EventType::ContainerStarted]),
            (Exited, Running, vec![EventType::ContainerStarted]),
            (Running, Exited, vec![EventType::ContainerDied]),
            (NonExistent, Exited, vec![EventType::ContainerDied]),
            (Running, Unknown, vec![EventType::ContainerChanged]),
            (NonExistent, Unknown, vec![EventType::ContainerChanged]),
            (Exited, NonExistent, vec![EventType::ContainerRemoved]),
            (
                Running,
                NonExistent,
                vec![EventType::ContainerDied, EventType::ContainerRemoved],
            ),
            (
                Unknown,
                NonExistent,
                vec![EventType::ContainerDied, EventType::ContainerRemoved],
            ),
            (Running, Running, vec![]),
            (Exited, Exited, vec![]),
        ];
        for (old, new, expected) in cases {
            let events = generate_events(&uid, "c1", old, new);
            assert_eq!(kinds(&events), expected, "{old:?} -> {new:?}");
            assert!(
                events
                    .iter()
                    .all(|e| e.id == uid && e.container_id.as_deref() == Some("c1"))
            );
        }
    }

    /// Pod `p` listing these containers and sandboxes (IDs and states only).
    pub(crate) fn pod(
        containers: &[(&str, ContainerState)],
        sandboxes: &[(&str, SandboxState)],
    ) -> RunningPod {
        RunningPod {
            uid: PodUid::from("p"),
            containers: containers
                .iter()
                .map(|(id, state)| ContainerSummary {
                    id: (*id).into(),
                    state: *state,
                    ..Default::default()
                })
                .collect(),
            sandboxes: sandboxes
                .iter()
                .map(|(id, state)| SandboxSummary {
                    id: (*id).into(),
                    state: *state,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn compute_events_over_containers_and_sandboxes() {
        let uid = PodUid::from("p");
        let old = pod(
            &[
                ("a", ContainerState::Running),
                ("b", ContainerState::Running),
            ],
            &[("s1", SandboxState::Ready)],
        );
        let new = pod(
            &[
                ("a", ContainerState::Exited),
                ("c", ContainerState::Running),
            ],
            &[("s1", SandboxState::NotReady), ("s2", SandboxState::Ready)],
        );
        let events = compute_events(&uid, Some(&old), Some(&new));
        let got: Vec<(EventType, &str)> = events
            .iter()
            .map(|e| (e.kind, e.container_id.as_deref().unwrap_or("")))
            .collect();
        assert_eq!(
            got,
            [
                (EventType::ContainerDied, "a"),
                (EventType::ContainerDied, "b"),
                (EventType::ContainerRemoved, "b"),
                (EventType::ContainerStarted, "c"),
                (EventType::PodSync, "s1"),
                (EventType::PodSync, "s2"),
            ]
        );
        assert!(compute_events(&uid, Some(&new), Some(&new)).is_empty());
    }

    #[test]
    fn vanished_pod_removes_everything() {
        let uid = PodUid::from("p");
        let old = pod(
            &[("a", ContainerState::Exited)],
            &[("s1", SandboxState::NotReady)],
        );
        let events = compute_events(&uid, Some(&old), None);
        assert_eq!(
            kinds(&events),
            [EventType::ContainerRemoved, EventType::PodSync]
        );
    }
}
