//! Field and label selectors as the API server parses them from `fieldSelector` and
//! `labelSelector` (mirrors `k8s.io/apimachinery/pkg/fields` and `pkg/labels`). Field paths
//! are dotted JSON paths (`spec.nodeName`, `metadata.name`, `status.phase`); a missing field
//! reads as `""`.

use serde_json::Value;

use super::status::ApiError;

/// One requirement of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    path: String,
    value: String,
    equal: bool,
}

/// A parsed `fieldSelector`; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<FieldRequirement>);

impl FieldSelector {
    pub(crate) fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (path, value, equal) = if let Some((p, v)) = term.split_once("!=") {
                (p, v, false)
            } else if let Some((p, v)) = term.split_once("==") {
                (p, v, true)
            } else if let Some((p, v)) = term.split_once('=') {
                (p, v, true)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector: {term:?}"
                )));
            };
            reqs.push(FieldRequirement {
                path: path.trim().to_owned(),
                value: value.trim().to_owned(),
                equal,
            });
        }
        Ok(Self(reqs))
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|r| (field(obj, &r.path) == r.value) == r.equal)
    }
}

/// The string value of a dotted field path (`""` when missing; numbers and booleans print).
fn field(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelRequirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed `labelSelector`; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<LabelRequirement>);

impl LabelSelector {
    pub(crate) fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for term in split_terms(s) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let bad = || ApiError::bad_request(format!("invalid label selector: {term:?}"));
            let req = if let Some((k, v)) = term.split_once("!=") {
                LabelRequirement::NotIn(k.trim().into(), vec![v.trim().into()])
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                LabelRequirement::In(k.trim().into(), vec![v.trim().into()])
            } else if let Some((k, set)) = term.split_once(" notin ") {
                LabelRequirement::NotIn(k.trim().into(), parse_set(set).ok_or_else(bad)?)
            } else if let Some((k, set)) = term.split_once(" in ") {
                LabelRequirement::In(k.trim().into(), parse_set(set).ok_or_else(bad)?)
            } else if let Some(k) = term.strip_prefix('!') {
                LabelRequirement::DoesNotExist(k.trim().into())
            } else if term.contains([' ', '(', ')']) {
                return Err(bad());
            } else {
                LabelRequirement::Exists(term.into())
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelRequirement::In(k, vs) => label(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            LabelRequirement::NotIn(k, vs) => !label(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            LabelRequirement::Exists(k) => label(k).is_some(),
            LabelRequirement::DoesNotExist(k) => label(k).is_none(),
        })
    }
}

/// Splits on commas outside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let (mut terms, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&s[start..]);
    terms
}

fn parse_set(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_owned()).collect())
}

/// Both selectors of a list or watch.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selectors {
    pub(crate) fields: FieldSelector,
    pub(crate) labels: LabelSelector,
}

impl Selectors {
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.fields.matches(obj) && self.labels.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "fe"}},
               "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    }

    #[test]
    fn field_selectors_match_dotted_paths_and_missing_fields_read_empty() {
        let p = pod();
        assert!(
            FieldSelector::parse("spec.nodeName=n1,status.phase==Running")
                .expect("ok")
                .matches(&p)
        );
        assert!(
            !FieldSelector::parse("spec.nodeName=n2")
                .expect("ok")
                .matches(&p)
        );
        assert!(
            FieldSelector::parse("spec.nodeName!=n2")
                .expect("ok")
                .matches(&p)
        );
        assert!(
            FieldSelector::parse("metadata.namespace=")
                .expect("ok")
                .matches(&p)
        );
        assert!(FieldSelector::parse("bogus").is_err());
    }

    #[test]
    fn label_selectors_support_equality_sets_and_existence() {
        let p = pod();
        let m = |s: &str| LabelSelector::parse(s).expect("ok").matches(&p);
        assert!(m("app=web,tier in (fe, be)"));
        assert!(!m("app in (db)"));
        assert!(m("app notin (db),!missing,tier"));
        assert!(!m("app!=web"));
        assert!(!m("missing"));
        assert!(m(""));
    }
}
