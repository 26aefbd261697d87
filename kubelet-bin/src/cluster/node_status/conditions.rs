//! The node conditions the kubelet owns, with upstream's reasons, messages and time rules
//! (upstream `pkg/kubelet/nodestatus/setters.go` `ReadyCondition`, `MemoryPressureCondition`,
//! `DiskPressureCondition`, `PIDPressureCondition`).
//!
//! Every round sets `lastHeartbeatTime` to now; `lastTransitionTime` moves only when the
//! status changes. A transition returns the event upstream records (`NodeReady`,
//! `NodeHasSufficientMemory`, …). Conditions owned by others (e.g. `NetworkUnavailable`) are
//! left alone, and a new Ready condition is appended last, as upstream requires.

use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use kubelet_core::events::{EventType, reasons};

/// The Ready message while healthy.
pub const READY_MESSAGE: &str = "kubelet is posting ready status";

/// One pressure condition and its wording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pressure {
    /// `MemoryPressure`.
    Memory,
    /// `DiskPressure`.
    Disk,
    /// `PIDPressure`.
    Pid,
}

/// `(status, reason, message, event)` for one side of a pressure condition.
type Wording = (&'static str, &'static str, &'static str, &'static str);

impl Pressure {
    /// The condition type.
    pub fn condition_type(self) -> &'static str {
        match self {
            Self::Memory => "MemoryPressure",
            Self::Disk => "DiskPressure",
            Self::Pid => "PIDPressure",
        }
    }

    fn wording(self, under_pressure: bool) -> Wording {
        match (self, under_pressure) {
            (Self::Memory, true) => (
                "True",
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
                reasons::NODE_HAS_INSUFFICIENT_MEMORY,
            ),
            (Self::Memory, false) => (
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
                reasons::NODE_HAS_SUFFICIENT_MEMORY,
            ),
            (Self::Disk, true) => (
                "True",
                "KubeletHasDiskPressure",
                "kubelet has disk pressure",
                reasons::NODE_HAS_DISK_PRESSURE,
            ),
            (Self::Disk, false) => (
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
                reasons::NODE_HAS_NO_DISK_PRESSURE,
            ),
            (Self::Pid, true) => (
                "True",
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
                reasons::NODE_HAS_INSUFFICIENT_PID,
            ),
            (Self::Pid, false) => (
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
                reasons::NODE_HAS_SUFFICIENT_PID,
            ),
        }
    }
}

/// Upstream `ReadyCondition`: True (`KubeletReady`) without errors, else False
/// (`KubeletNotReady`, the errors joined by `,`). Returns `NodeReady`/`NodeNotReady` when the
/// status changed from an earlier one.
pub fn set_ready(
    conditions: &mut Vec<NodeCondition>,
    now: &Time,
    errors: &[String],
) -> Option<(EventType, &'static str)> {
    let (status, reason, message) = if errors.is_empty() {
        ("True", "KubeletReady", READY_MESSAGE.to_owned())
    } else {
        ("False", "KubeletNotReady", errors.join(","))
    };
    let mut new = NodeCondition {
        type_: "Ready".to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    };
    match conditions.iter_mut().find(|c| c.type_ == "Ready") {
        Some(old) => {
            let changed = old.status != new.status;
            if !changed {
                new.last_transition_time = old.last_transition_time.clone();
            }
            *old = new;
            changed.then_some((
                EventType::Normal,
                if status == "True" {
                    reasons::NODE_READY
                } else {
                    reasons::NODE_NOT_READY
                },
            ))
        }
        None => {
            conditions.push(new);
            None
        }
    }
}

/// Upstream `MemoryPressureCondition` and its siblings: a new condition starts `Unknown`, so
/// the first round is a transition (and records `NodeHasSufficientMemory`, …).
pub fn set_pressure(
    conditions: &mut Vec<NodeCondition>,
    kind: Pressure,
    now: &Time,
    under_pressure: bool,
) -> Option<(EventType, &'static str)> {
    let type_ = kind.condition_type();
    let index = match conditions.iter().position(|c| c.type_ == type_) {
        Some(i) => i,
        None => {
            conditions.push(NodeCondition {
                type_: type_.to_owned(),
                status: "Unknown".to_owned(),
                ..NodeCondition::default()
            });
            conditions.len() - 1
        }
    };
    let condition = &mut conditions[index];
    condition.last_heartbeat_time = Some(now.clone());
    let (status, reason, message, event) = kind.wording(under_pressure);
    if condition.status == status {
        return None;
    }
    condition.status = status.to_owned();
    condition.reason = Some(reason.to_owned());
    condition.message = Some(message.to_owned());
    condition.last_transition_time = Some(now.clone());
    Some((EventType::Normal, event))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap_or(Timestamp::UNIX_EPOCH))
    }

    #[test]
    fn ready_keeps_its_transition_time_until_the_status_changes() {
        let mut c = Vec::new();
        assert_eq!(set_ready(&mut c, &at(10), &[]), None);
        assert_eq!(c[0].reason.as_deref(), Some("KubeletReady"));
        assert_eq!(c[0].message.as_deref(), Some(READY_MESSAGE));
        assert_eq!(set_ready(&mut c, &at(20), &[]), None);
        assert_eq!(c[0].last_heartbeat_time, Some(at(20)));
        assert_eq!(c[0].last_transition_time, Some(at(10)));

        let errors = [
            "container runtime is down".to_owned(),
            "PLEG is not healthy: x".to_owned(),
        ];
        assert_eq!(
            set_ready(&mut c, &at(30), &errors),
            Some((EventType::Normal, "NodeNotReady"))
        );
        assert_eq!(c[0].status, "False");
        assert_eq!(c[0].reason.as_deref(), Some("KubeletNotReady"));
        assert_eq!(
            c[0].message.as_deref(),
            Some("container runtime is down,PLEG is not healthy: x")
        );
        assert_eq!(c[0].last_transition_time, Some(at(30)));
        assert_eq!(
            set_ready(&mut c, &at(40), &[]),
            Some((EventType::Normal, "NodeReady"))
        );
    }

    #[test]
    fn pressure_starts_unknown_so_the_first_round_is_a_transition() {
        let mut c = vec![NodeCondition {
            type_: "NetworkUnavailable".to_owned(),
            status: "False".to_owned(),
            ..NodeCondition::default()
        }];
        assert_eq!(
            set_pressure(&mut c, Pressure::Memory, &at(1), false),
            Some((EventType::Normal, "NodeHasSufficientMemory"))
        );
        assert_eq!(set_pressure(&mut c, Pressure::Memory, &at(2), false), None);
        assert_eq!(c[1].last_transition_time, Some(at(1)));
        assert_eq!(c[1].last_heartbeat_time, Some(at(2)));
        assert_eq!(
            set_pressure(&mut c, Pressure::Disk, &at(3), true),
            Some((EventType::Normal, "NodeHasDiskPressure"))
        );
        assert_eq!(c[2].reason.as_deref(), Some("KubeletHasDiskPressure"));
        assert_eq!(c[2].message.as_deref(), Some("kubelet has disk pressure"));
        set_pressure(&mut c, Pressure::Pid, &at(4), false);
        assert_eq!(c[3].reason.as_deref(), Some("KubeletHasSufficientPID"));
        assert_eq!(c[0].type_, "NetworkUnavailable");
        assert_eq!(c.len(), 4);
    }
}
