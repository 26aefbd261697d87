//! What counts as a node status change (upstream `nodeStatusHasChanged` in
//! `pkg/kubelet/kubelet_node_status.go`): any field but the conditions' heartbeat times.
//! An unchanged status is written only every `nodeStatusReportFrequency`.

use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};

/// Whether `new` differs from `old` in anything but `lastHeartbeatTime` (conditions are
/// compared by type, in any order).
pub fn status_has_changed(old: Option<&NodeStatus>, new: Option<&NodeStatus>) -> bool {
    let (old, new) = match (old, new) {
        (None, None) => return false,
        (Some(o), Some(n)) => (o, n),
        _ => return true,
    };
    if conditions_changed(old.conditions.as_deref(), new.conditions.as_deref()) {
        return true;
    }
    let strip = |s: &NodeStatus| NodeStatus {
        conditions: None,
        ..s.clone()
    };
    strip(old) != strip(new)
}

fn conditions_changed(old: Option<&[NodeCondition]>, new: Option<&[NodeCondition]>) -> bool {
    let (old, new) = (old.unwrap_or_default(), new.unwrap_or_default());
    if old.len() != new.len() {
        return true;
    }
    let key = |c: &NodeCondition| NodeCondition {
        last_heartbeat_time: None,
        ..c.clone()
    };
    let mut old: Vec<_> = old.iter().map(key).collect();
    let mut new: Vec<_> = new.iter().map(key).collect();
    old.sort_by(|a, b| a.type_.cmp(&b.type_));
    new.sort_by(|a, b| a.type_.cmp(&b.type_));
    old != new
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn condition(type_: &str, status: &str, heartbeat: i64) -> NodeCondition {
        NodeCondition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            last_heartbeat_time: Timestamp::from_second(heartbeat).ok().map(Time),
            ..NodeCondition::default()
        }
    }

    fn status(conditions: Vec<NodeCondition>) -> NodeStatus {
        NodeStatus {
            conditions: Some(conditions),
            ..NodeStatus::default()
        }
    }

    #[test]
    fn heartbeats_and_order_are_not_changes() {
        let old = status(vec![
            condition("Ready", "True", 1),
            condition("MemoryPressure", "False", 1),
        ]);
        let new = status(vec![
            condition("MemoryPressure", "False", 9),
            condition("Ready", "True", 9),
        ]);
        assert!(!status_has_changed(Some(&old), Some(&new)));
    }

    #[test]
    fn status_and_other_fields_are_changes() {
        let old = status(vec![condition("Ready", "True", 1)]);
        assert!(status_has_changed(
            Some(&old),
            Some(&status(vec![condition("Ready", "False", 1)]))
        ));
        assert!(status_has_changed(
            Some(&old),
            Some(&status(vec![
                condition("Ready", "True", 1),
                condition("DiskPressure", "False", 1)
            ]))
        ));
        let mut other = old.clone();
        other.phase = Some("Running".to_owned());
        assert!(status_has_changed(Some(&old), Some(&other)));
        assert!(status_has_changed(None, Some(&old)));
        assert!(!status_has_changed(None, None));
    }
}
