//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902, the `json-patch` crate)
//! and strategic merge patch (mirrors `k8s.io/apimachinery/pkg/util/strategicpatch`: lists
//! with a merge key merge by it, `$patch: delete|replace`, `$setElementOrder/<list>`,
//! `$deleteFromPrimitiveList/<list>`, `$retainKeys`; lists without one are replaced).

use serde_json::{Map, Value};

use super::status::ApiError;

/// The PATCH flavour, from the request's `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    Merge,
    Json,
    Strategic,
}

impl PatchType {
    pub(crate) fn from_content_type(ct: &str) -> Result<Self, ApiError> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/json-patch+json" => Ok(Self::Json),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            other => Err(ApiError::unsupported_media_type(other)),
        }
    }
}

/// Applies a strategic merge `patch` to a copy of `doc`, as the fake API server does (for
/// tests of code that computes such patches).
pub fn strategic_merge(doc: &Value, patch: &Value) -> super::Result<Value> {
    Ok(apply(doc, patch, PatchType::Strategic)?)
}

/// Applies `patch` to a copy of `doc`.
pub(crate) fn apply(doc: &Value, patch: &Value, ty: PatchType) -> Result<Value, ApiError> {
    let mut out = doc.clone();
    match ty {
        PatchType::Merge => json_patch::merge(&mut out, patch),
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid json patch: {e}")))?;
            json_patch::patch(&mut out, &ops)
                .map_err(|e| ApiError::invalid(format!("json patch failed: {e}")))?;
        }
        PatchType::Strategic => {
            let Value::Object(p) = patch else {
                return Err(ApiError::bad_request(
                    "a strategic merge patch must be an object",
                ));
            };
            match &mut out {
                Value::Object(o) => merge_map(o, p)?,
                _ => return Err(ApiError::bad_request("the object is not a map")),
            }
        }
    }
    Ok(out)
}

/// The merge key of a list field (the `patchMergeKey` tags of `k8s.io/api`), by field name.
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "conditions" | "addresses" => "type",
        // `containerStatuses` and its siblings have no merge key in `k8s.io/api` (atomic
        // lists: a strategic patch replaces them whole), as the real server does.
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "volumesAttached"
        | "resourceClaims"
        | "imagePullSecrets" => "name",
        "ownerReferences" => "uid",
        "volumeMounts" | "volumeDevices" => "mountPath",
        "ports" => "containerPort",
        "podIPs" | "hostIPs" => "ip",
        "hostAliases" => "ip",
        _ => return None,
    })
}

/// Primitive lists whose patch strategy is merge (a set union).
fn merges_primitives(field: &str) -> bool {
    matches!(field, "finalizers")
}

fn merge_map(orig: &mut Map<String, Value>, patch: &Map<String, Value>) -> Result<(), ApiError> {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        *orig = patch.clone();
        orig.remove("$patch");
        return Ok(());
    }
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        orig.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, pv) in patch {
        if k.starts_with('$') {
            if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/")
                && let (Some(Value::Array(list)), Value::Array(del)) = (orig.get_mut(field), pv)
            {
                list.retain(|v| !del.contains(v));
            }
            continue;
        }
        match pv {
            Value::Null => {
                orig.remove(k);
            }
            Value::Object(pm) => match orig.get_mut(k) {
                Some(Value::Object(om)) => merge_map(om, pm)?,
                _ => {
                    let mut fresh = Map::new();
                    merge_map(&mut fresh, pm)?;
                    orig.insert(k.clone(), Value::Object(fresh));
                }
            },
            Value::Array(pl) => {
                let merged = match (orig.get(k), merge_key(k)) {
                    (Some(Value::Array(ol)), Some(key)) => merge_list(ol, pl, key)?,
                    (Some(Value::Array(ol)), None) if merges_primitives(k) => {
                        let mut out = ol.clone();
                        out.extend(pl.iter().filter(|v| !ol.contains(v)).cloned());
                        out
                    }
                    (_, Some(key)) => merge_list(&[], pl, key)?,
                    _ => pl.clone(),
                };
                orig.insert(k.clone(), Value::Array(merged));
            }
            other => {
                orig.insert(k.clone(), other.clone());
            }
        }
    }
    for (k, order) in patch {
        if let (Some(field), Value::Array(order)) = (k.strip_prefix("$setElementOrder/"), order)
            && let Some(Value::Array(list)) = orig.get_mut(field)
        {
            reorder(list, order, merge_key(field));
        }
    }
    Ok(())
}

fn key_of<'a>(item: &'a Value, key: &str) -> Option<&'a Value> {
    item.get(key)
}

fn merge_list(orig: &[Value], patch: &[Value], key: &str) -> Result<Vec<Value>, ApiError> {
    let replace = |v: &Value| v.get("$patch").and_then(Value::as_str) == Some("replace");
    // A `{"$patch": "replace"}` element: the list becomes the patch's other elements.
    let mut out: Vec<Value> = if patch.iter().any(replace) {
        Vec::new()
    } else {
        orig.to_vec()
    };
    for item in patch.iter().filter(|v| !replace(v)) {
        let Value::Object(pm) = item else {
            return Err(ApiError::bad_request(format!(
                "a list merged by {key:?} must hold objects"
            )));
        };
        let id = key_of(item, key);
        if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
            out.retain(|o| key_of(o, key) != id);
            continue;
        }
        match out
            .iter_mut()
            .find(|o| id.is_some() && key_of(o, key) == id)
        {
            Some(Value::Object(om)) => merge_map(om, pm)?,
            _ => {
                let mut fresh = Map::new();
                merge_map(&mut fresh, pm)?;
                out.push(Value::Object(fresh));
            }
        }
    }
    Ok(out)
}

/// Orders `list` as `order` says (items named there first, in that order; the rest after).
fn reorder(list: &mut [Value], order: &[Value], key: Option<&str>) {
    let id = |v: &Value| match key {
        Some(k) => v.get(k).cloned(),
        None => Some(v.clone()),
    };
    let pos = |v: &Value| {
        let me = id(v);
        order
            .iter()
            .position(|o| me.is_some() && id(o) == me)
            .unwrap_or(usize::MAX)
    };
    list.sort_by_key(pos);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merges_conditions_by_type_and_keeps_others() {
        let doc = json!({"status": {"phase": "Pending", "conditions": [
            {"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}]}});
        let patch = json!({"status": {
            "$setElementOrder/conditions": [{"type": "Initialized"}, {"type": "Ready"}, {"type": "PodScheduled"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}});
        let out = apply(&doc, &patch, PatchType::Strategic).expect("ok");
        assert_eq!(out["status"]["phase"], "Pending");
        assert_eq!(
            out["status"]["conditions"],
            json!([
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "True"},
            {"type": "PodScheduled", "status": "True"}])
        );
    }

    #[test]
    fn strategic_replaces_container_statuses_whole() {
        // Atomic in k8s.io/api: the old `waiting` entry must not survive beside `running`.
        let doc = json!({"status": {"containerStatuses": [
            {"name": "app", "state": {"waiting": {"reason": "ContainerCreating"}}},
            {"name": "gone", "state": {}}]}});
        let patch = json!({"status": {"containerStatuses": [
            {"name": "app", "state": {"running": {"startedAt": "t"}}}]}});
        let out = apply(&doc, &patch, PatchType::Strategic).expect("ok");
        assert_eq!(
            out["status"]["containerStatuses"],
            json!([{"name": "app", "state": {"running": {"startedAt": "t"}}}])
        );
    }

    #[test]
    fn strategic_delete_directive_null_and_replaced_lists() {
        let doc = json!({"status": {"addresses": [{"type": "InternalIP", "address": "1"},
            {"type": "Hostname", "address": "h"}], "images": [{"names": ["a"]}], "x": 1},
            "metadata": {"finalizers": ["a"]}});
        let patch = json!({"status": {"addresses": [{"type": "Hostname", "$patch": "delete"}],
            "images": [{"names": ["b"]}], "x": null}, "metadata": {"finalizers": ["b"]}});
        let out = apply(&doc, &patch, PatchType::Strategic).expect("ok");
        assert_eq!(
            out["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "1"}])
        );
        assert_eq!(out["status"]["images"], json!([{"names": ["b"]}]));
        assert!(out["status"].get("x").is_none());
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
    }

    #[test]
    fn a_replace_element_replaces_a_merge_list() {
        let doc = json!({"status": {"addresses": [
            {"type": "InternalIP", "address": "10.0.0.5"},
            {"type": "ExternalIP", "address": "1.2.3.4"}]}});
        let patch = json!({"status": {"addresses": [
            {"type": "InternalIP", "address": "10.0.0.6"}, {"$patch": "replace"}]}});
        let out = apply(&doc, &patch, PatchType::Strategic).unwrap_or_default();
        assert_eq!(
            out["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.6"}])
        );
    }

    #[test]
    fn merge_replaces_lists_and_json_patch_tests_values() {
        let doc = json!({"a": [1, 2], "b": {"c": 1}});
        let out = apply(&doc, &json!({"a": [3], "b": {"d": 2}}), PatchType::Merge).expect("ok");
        assert_eq!(out, json!({"a": [3], "b": {"c": 1, "d": 2}}));
        let ops = json!([{"op": "test", "path": "/b/c", "value": 1}, {"op": "add", "path": "/a/-", "value": 9}]);
        assert_eq!(
            apply(&doc, &ops, PatchType::Json).expect("ok")["a"],
            json!([1, 2, 9])
        );
        let failing = json!([{"op": "test", "path": "/b/c", "value": 2}]);
        assert_eq!(
            apply(&doc, &failing, PatchType::Json)
                .expect_err("fails")
                .code,
            422
        );
    }
}
