//! The strategic merge patch of a pod status (upstream `statusutil.PatchPodStatus` in
//! `pkg/util/pod/pod.go`, which calls `strategicpatch.CreateTwoWayMergePatch`).
//!
//! [`status_patch`] diffs what the API has against what it should have and carries the pod's
//! UID as a precondition (`metadata.uid`): a pod deleted and created again under the same name
//! answers 409 instead of taking another pod's status. Changed fields are set, removed ones
//! are `null`. `conditions` are merged by `type` and `podIPs`/`hostIPs` by `ip` (their
//! `patchMergeKey`s): only changed elements are sent, with their key, and elements that went
//! away are `{"$patch": "delete"}`. Every other list (`containerStatuses`, ...) is atomic and
//! sent whole when it changed. Unlike upstream, no `$setElementOrder` directive is sent: the
//! order of conditions carries no meaning.

use k8s_openapi::api::core::v1::PodStatus as ApiPodStatus;
use serde_json::{Map, Value, json};

/// The lists of `v1.PodStatus` merged by a key (`patchStrategy:"merge"`), with the key.
pub const MERGE_KEYS: [(&str, &str); 3] =
    [("conditions", "type"), ("podIPs", "ip"), ("hostIPs", "ip")];

/// The patch that turns `old` into `new` for the pod with `uid`, or `None` when they do not
/// differ (upstream's `unchanged`).
pub fn status_patch(
    uid: &str,
    old: &ApiPodStatus,
    new: &ApiPodStatus,
) -> Result<Option<Value>, serde_json::Error> {
    let (old, new) = (to_object(old)?, to_object(new)?);
    let diff = two_way_merge_patch(&old, &new, &MERGE_KEYS);
    if diff.is_empty() {
        return Ok(None);
    }
    Ok(Some(json!({ "metadata": { "uid": uid }, "status": diff })))
}

fn to_object(status: &ApiPodStatus) -> Result<Map<String, Value>, serde_json::Error> {
    Ok(match serde_json::to_value(status)? {
        Value::Object(map) => map,
        _ => Map::new(),
    })
}

fn merge_key(field: &str) -> Option<&'static str> {
    MERGE_KEYS
        .iter()
        .find(|(name, _)| *name == field)
        .map(|(_, key)| *key)
}

/// Lists merged by a key: `(field, key)` pairs.
pub type MergeKeys<'a> = &'a [(&'a str, &'a str)];

/// The strategic merge patch that turns the object `old` into `new` (upstream
/// `strategicpatch.CreateTwoWayMergePatch`, without `$setElementOrder`): changed fields are
/// set, removed ones `null`, nested objects are diffed in turn; the lists of `old`/`new` named
/// in `merge_keys` send only the elements that changed (with their key), came, or went
/// (`{"<key>": …, "$patch": "delete"}`); every other list is sent whole when it changed.
/// Empty when nothing differs. Also the node status patch's diff (kubelet-bin).
pub fn two_way_merge_patch(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    merge_keys: MergeKeys<'_>,
) -> Map<String, Value> {
    diff_object(old, new, Some(merge_keys))
}

/// The fields of `new` that differ from `old`; `keys` are the merge keys of these maps' lists
/// (`None` below the top, where none apply).
fn diff_object(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    keys: Option<MergeKeys<'_>>,
) -> Map<String, Value> {
    let mut out = Map::new();
    for (field, value) in new {
        match old.get(field) {
            Some(previous) if previous == value => {}
            Some(previous) => {
                out.insert(field.clone(), diff_value(field, previous, value, keys));
            }
            None => {
                out.insert(field.clone(), value.clone());
            }
        }
    }
    for field in old.keys().filter(|f| !new.contains_key(*f)) {
        out.insert(field.clone(), Value::Null);
    }
    out
}

fn diff_value(field: &str, old: &Value, new: &Value, keys: Option<MergeKeys<'_>>) -> Value {
    let key = keys
        .and_then(|keys| keys.iter().find(|(name, _)| *name == field))
        .map(|(_, key)| *key);
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => Value::Object(diff_object(o, n, None)),
        (Value::Array(o), Value::Array(n)) => match key {
            Some(key) => diff_keyed_list(o, n, key).unwrap_or_else(|| new.clone()),
            None => new.clone(),
        },
        _ => new.clone(),
    }
}

/// The elements of a merge list that changed, came or went; `None` when an element lacks its
/// key (the list is then sent whole).
fn diff_keyed_list(old: &[Value], new: &[Value], key: &str) -> Option<Value> {
    let key_of = |v: &Value| v.get(key).cloned();
    if old.iter().chain(new).any(|v| key_of(v).is_none()) {
        return None;
    }
    let mut out = Vec::new();
    for element in new {
        let k = key_of(element)?;
        match old.iter().find(|o| key_of(o).as_ref() == Some(&k)) {
            Some(previous) if previous == element => {}
            Some(Value::Object(previous)) => {
                let Value::Object(element) = element else {
                    out.push(element.clone());
                    continue;
                };
                let mut changed = diff_object(previous, element, None);
                changed.insert(key.to_owned(), k);
                out.push(Value::Object(changed));
            }
            _ => out.push(element.clone()),
        }
    }
    for previous in old {
        let k = key_of(previous)?;
        if !new.iter().any(|n| key_of(n).as_ref() == Some(&k)) {
            out.push(json!({ key: k, "$patch": "delete" }));
        }
    }
    Some(Value::Array(out))
}

/// Applies a strategic merge patch made by [`status_patch`] to a status in JSON form, as the
/// API server does for the fields this module writes (for tests and fakes).
pub fn apply_status_patch(status: &mut Value, patch: &Value) {
    merge_object(status, patch, true);
}

fn merge_object(target: &mut Value, patch: &Value, top: bool) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(map) = target else { return };
    for (field, value) in patch {
        match value {
            Value::Null => {
                map.remove(field);
            }
            Value::Object(_) => merge_object(
                map.entry(field.clone()).or_insert(Value::Null),
                value,
                false,
            ),
            Value::Array(elements) => match merge_key(field).filter(|_| top) {
                Some(key) => {
                    let list = map
                        .entry(field.clone())
                        .or_insert_with(|| Value::Array(Vec::new()));
                    merge_keyed_list(list, elements, key);
                }
                None => {
                    map.insert(field.clone(), value.clone());
                }
            },
            _ => {
                map.insert(field.clone(), value.clone());
            }
        }
    }
}

fn merge_keyed_list(target: &mut Value, patch: &[Value], key: &str) {
    if !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let Value::Array(list) = target else { return };
    for element in patch {
        let k = element.get(key);
        let position = list.iter().position(|e| e.get(key) == k);
        let delete = element.get("$patch").and_then(Value::as_str) == Some("delete");
        match (position, delete) {
            (Some(i), true) => {
                list.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => merge_object(&mut list[i], element, false),
            (None, false) => list.push(element.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus,
        PodCondition, PodIP,
    };

    fn condition(type_: &str, status: &str, reason: Option<&str>) -> PodCondition {
        PodCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.map(Into::into),
            ..Default::default()
        }
    }

    fn container(state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            name: "app".into(),
            image: "busybox".into(),
            state: Some(state),
            ..Default::default()
        }
    }

    fn waiting() -> ContainerState {
        ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ContainerCreating".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn running() -> ContainerState {
        ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        }
    }

    fn roundtrip(old: &ApiPodStatus, new: &ApiPodStatus) -> ApiPodStatus {
        let mut applied = serde_json::to_value(old).expect("encodes");
        if let Some(patch) = status_patch("u1", old, new).expect("patch") {
            assert_eq!(patch["metadata"]["uid"], "u1");
            apply_status_patch(&mut applied, &patch["status"]);
        }
        serde_json::from_value(applied).expect("decodes")
    }

    #[test]
    fn an_unchanged_status_needs_no_patch() {
        let s = ApiPodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![condition("Ready", "True", None)]),
            ..Default::default()
        };
        assert_eq!(status_patch("u1", &s, &s).expect("patch"), None);
    }

    #[test]
    fn pending_to_running_sends_only_what_changed() {
        let old = ApiPodStatus {
            phase: Some("Pending".into()),
            host_ip: Some("10.0.0.1".into()),
            conditions: Some(vec![
                condition("PodScheduled", "True", None),
                condition("Ready", "False", Some("ContainersNotReady")),
                condition("example.com/gate", "True", None),
            ]),
            container_statuses: Some(vec![container(waiting())]),
            ..Default::default()
        };
        let new = ApiPodStatus {
            phase: Some("Running".into()),
            host_ip: Some("10.0.0.1".into()),
            pod_ips: Some(vec![PodIP {
                ip: "10.1.0.5".into(),
            }]),
            conditions: Some(vec![
                condition("PodScheduled", "True", None),
                condition("Ready", "True", None),
                condition("example.com/gate", "True", None),
            ]),
            container_statuses: Some(vec![container(running())]),
            ..Default::default()
        };
        let patch = status_patch("u1", &old, &new)
            .expect("patch")
            .expect("changed");
        let status = &patch["status"];
        assert_eq!(status["phase"], "Running");
        assert!(status.get("hostIP").is_none(), "{status}");
        // Only the Ready condition, with its key, and its reason removed.
        assert_eq!(
            status["conditions"],
            json!([{ "type": "Ready", "status": "True", "reason": null }])
        );
        // containerStatuses are atomic: sent whole.
        assert_eq!(status["containerStatuses"][0]["name"], "app");
        assert!(status["containerStatuses"][0]["state"]["waiting"].is_null());
        assert_eq!(roundtrip(&old, &new), new);
    }

    #[test]
    fn removed_merge_list_elements_are_deleted_by_key() {
        let old = ApiPodStatus {
            conditions: Some(vec![
                condition("Ready", "True", None),
                condition("DisruptionTarget", "True", None),
            ]),
            pod_ips: Some(vec![PodIP { ip: "a".into() }, PodIP { ip: "b".into() }]),
            ..Default::default()
        };
        let new = ApiPodStatus {
            conditions: Some(vec![condition("Ready", "True", None)]),
            pod_ips: Some(vec![PodIP { ip: "a".into() }]),
            ..Default::default()
        };
        let patch = status_patch("u1", &old, &new)
            .expect("patch")
            .expect("changed");
        assert_eq!(
            patch["status"]["conditions"],
            json!([{ "type": "DisruptionTarget", "$patch": "delete" }])
        );
        assert_eq!(roundtrip(&old, &new), new);
    }

    #[test]
    fn a_field_gone_is_null_and_a_new_list_is_sent_whole() {
        let old = ApiPodStatus {
            reason: Some("Evicted".into()),
            ..Default::default()
        };
        let new = ApiPodStatus {
            conditions: Some(vec![condition("Ready", "False", None)]),
            ..Default::default()
        };
        let patch = status_patch("u1", &old, &new)
            .expect("patch")
            .expect("changed");
        assert!(patch["status"]["reason"].is_null());
        assert_eq!(patch["status"]["conditions"][0]["type"], "Ready");
        assert_eq!(roundtrip(&old, &new), new);
    }
}
