//! A pod's required node affinity against a node (upstream
//! `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`: `GetRequiredNodeAffinity`,
//! `LazyErrorNodeSelector.Match`, and the label-selector operators of apimachinery's
//! `labels.Requirement`).
//!
//! `spec.nodeSelector` must match the node's labels exactly, and, when set,
//! `requiredDuringSchedulingIgnoredDuringExecution` must match through one of its terms: a
//! term matches when all its `matchExpressions` (over labels) and `matchFields` (only
//! `metadata.name`) do; an empty or invalid term matches nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, NodeSelectorTerm, Pod};

/// Upstream `RequiredNodeAffinity.Match`: `true` when the node satisfies the pod's
/// `nodeSelector` and its required node affinity.
pub fn matches_required_node_affinity(pod: &Pod, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    if let Some(selector) = &spec.node_selector
        && !selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        None => true,
        Some(selector) => selector
            .node_selector_terms
            .iter()
            .any(|term| term_matches(term, labels, node.metadata.name.as_deref().unwrap_or(""))),
    }
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| field_matches(r, name))
}

/// One label requirement; an invalid one (unknown operator, wrong number of values) does not
/// match.
fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or(&[]);
    match r.operator.as_str() {
        "In" => !values.is_empty() && value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => !values.is_empty() && value.is_none_or(|v| values.iter().all(|x| x != v)),
        "Exists" => values.is_empty() && value.is_some(),
        "DoesNotExist" => values.is_empty() && value.is_none(),
        op @ ("Gt" | "Lt") => {
            let [bound] = values else {
                return false;
            };
            let (Ok(bound), Some(Ok(actual))) =
                (bound.parse::<i64>(), value.map(str::parse::<i64>))
            else {
                return false;
            };
            if op == "Gt" {
                actual > bound
            } else {
                actual < bound
            }
        }
        _ => false,
    }
}

/// A `matchFields` requirement: only `metadata.name` with `In`/`NotIn` and one value.
fn field_matches(r: &NodeSelectorRequirement, name: &str) -> bool {
    let values = r.values.as_deref().unwrap_or(&[]);
    if r.key != "metadata.name" || values.len() != 1 {
        return false;
    }
    match r.operator.as_str() {
        "In" => values[0] == name,
        "NotIn" => values[0] != name,
        _ => false,
    }
}
