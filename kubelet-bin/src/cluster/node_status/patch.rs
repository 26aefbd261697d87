//! The node status patch (upstream `nodeutil.PatchNodeStatus` and
//! `preparePatchBytesforNodeStatus` in `pkg/util/node/node.go`): a strategic merge patch of
//! `nodes/<n>/status` computed as a two-way merge of the Node as read and the Node with its
//! new status ([`kubelet_status::api::patch::two_way_merge_patch`]):
//! - only what changed is sent: a heartbeat is the conditions' `lastHeartbeatTime`s, each
//!   with its `type`;
//! - `conditions` merge by `type`, so conditions others own (e.g. `NetworkUnavailable`)
//!   stay, and a condition the kubelet no longer sets is deleted;
//! - `addresses` carry the same merge key in `k8s.io/api`, which is wrong for them (two
//!   addresses may share a type); when they changed, upstream sends the new list whole with a
//!   `{"$patch": "replace"}` element (`fixupPatchForNodeStatusAddresses`), and so does this;
//! - maps (`capacity`, `allocatable`) send changed keys, `null` for removed ones; atomic
//!   lists (`images`) are sent whole when they changed.

use k8s_openapi::api::core::v1::NodeStatus;
use kubelet_status::api::patch::two_way_merge_patch;
use serde_json::{Map, Value, json};

/// The lists of `v1.NodeStatus` merged by a key in the patch.
const MERGE_KEYS: [(&str, &str); 1] = [("conditions", "type")];

/// The patch of `nodes/<n>/status` that turns `old` into `new`; `{}` when they do not differ
/// (upstream sends it all the same when a report is due: the write is the report).
pub fn node_status_patch(
    old: Option<&NodeStatus>,
    new: Option<&NodeStatus>,
) -> Result<Value, serde_json::Error> {
    let (old, new) = (to_object(old)?, to_object(new)?);
    let mut diff = two_way_merge_patch(&old, &new, &MERGE_KEYS);
    let addresses = |m: &Map<String, Value>| match m.get("addresses") {
        Some(Value::Array(list)) => list.clone(),
        _ => Vec::new(),
    };
    let (old_addresses, mut new_addresses) = (addresses(&old), addresses(&new));
    if !old_addresses.is_empty() && old_addresses != new_addresses {
        new_addresses.push(json!({"$patch": "replace"}));
        diff.insert("addresses".to_owned(), Value::Array(new_addresses));
    }
    Ok(if diff.is_empty() {
        json!({})
    } else {
        json!({ "status": diff })
    })
}

fn to_object(status: Option<&NodeStatus>) -> Result<Map<String, Value>, serde_json::Error> {
    Ok(match status.map(serde_json::to_value).transpose()? {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(value: Value) -> NodeStatus {
        serde_json::from_value(value).unwrap_or_default()
    }

    fn base() -> Value {
        json!({
            "conditions": [
                {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "lastHeartbeatTime": "2026-01-01T00:00:00Z"},
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.5"},
                          {"type": "Hostname", "address": "node-a"}],
            "capacity": {"cpu": "2", "hugepages-2Mi": "0"},
            "images": [{"names": ["a"], "sizeBytes": 1}],
        })
    }

    #[test]
    fn unchanged_is_empty_and_a_heartbeat_sends_only_its_times() {
        let old = status(base());
        assert_eq!(
            node_status_patch(Some(&old), Some(&old)).ok(),
            Some(json!({}))
        );
        let mut new = base();
        new["conditions"][1]["lastHeartbeatTime"] = json!("2026-01-01T00:00:10Z");
        let patch = node_status_patch(Some(&old), Some(&status(new))).ok();
        assert_eq!(
            patch,
            Some(json!({"status": {"conditions": [
                {"type": "Ready", "lastHeartbeatTime": "2026-01-01T00:00:10Z"}]}}))
        );
    }

    #[test]
    fn removed_conditions_and_keys_are_deleted_and_images_replaced() {
        let old = status(base());
        let mut new = base();
        new["conditions"] = json!([new["conditions"][0].clone()]);
        new["capacity"] = json!({"cpu": "4"});
        new["images"] = json!([{"names": ["b"], "sizeBytes": 2}]);
        let patch = node_status_patch(Some(&old), Some(&status(new))).ok();
        assert_eq!(
            patch,
            Some(json!({"status": {
                "conditions": [{"type": "Ready", "$patch": "delete"}],
                "capacity": {"cpu": "4", "hugepages-2Mi": null},
                "images": [{"names": ["b"], "sizeBytes": 2}],
            }}))
        );
    }

    #[test]
    fn changed_addresses_replace_the_list_as_upstream() {
        let old = status(base());
        let mut new = base();
        new["addresses"] = json!([{"type": "InternalIP", "address": "10.0.0.6"},
                                  {"type": "Hostname", "address": "node-a"}]);
        let patch = node_status_patch(Some(&old), Some(&status(new))).ok();
        assert_eq!(
            patch,
            Some(json!({"status": {"addresses": [
                {"type": "InternalIP", "address": "10.0.0.6"},
                {"type": "Hostname", "address": "node-a"},
                {"$patch": "replace"},
            ]}}))
        );
        // A first write has nothing to replace: the list goes as it is.
        let patch = node_status_patch(None, Some(&old)).ok();
        assert_eq!(
            patch.map(|p| p["status"]["addresses"].clone()),
            Some(base()["addresses"].clone())
        );
    }
}
