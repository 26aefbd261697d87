//! Pod field paths of the downward API (upstream `pkg/fieldpath/fieldpath.go`), shared by
//! env vars (`valueFrom.fieldRef`) and downwardAPI volumes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

/// Why a field path cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The path is not one of the supported pod fields (upstream's message).
    #[error("unsupported fieldPath: {0}")]
    UnsupportedFieldPath(String),
}

/// Upstream `fieldpath.ExtractFieldPathAsString` on a pod: `metadata.name`, `namespace`,
/// `uid`, `labels`, `annotations` and the subscripted `metadata.labels['k']` /
/// `metadata.annotations['k']` (a missing key gives an empty string).
pub fn extract_field_path_as_string(pod: &Pod, path: &str) -> Result<String, Error> {
    let meta = &pod.metadata;
    let empty = BTreeMap::new();
    let labels = meta.labels.as_ref().unwrap_or(&empty);
    let annotations = meta.annotations.as_ref().unwrap_or(&empty);
    if let Some(k) = subscript(path, "metadata.labels") {
        return Ok(labels.get(k).cloned().unwrap_or_default());
    }
    if let Some(k) = subscript(path, "metadata.annotations") {
        return Ok(annotations.get(k).cloned().unwrap_or_default());
    }
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_else(|| "default".into()),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(labels),
        "metadata.annotations" => format_map(annotations),
        other => return Err(Error::UnsupportedFieldPath(other.to_owned())),
    })
}

fn subscript<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    path.strip_prefix(prefix)?
        .strip_prefix("['")?
        .strip_suffix("']")
}

/// Upstream `fieldpath.FormatMap`: `key="value"` lines sorted by key, values quoted as Go's
/// `%q`, no trailing newline.
pub fn format_map(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Go's `strconv.Quote`.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                let n = c as u32;
                if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_map_matches_upstream() {
        let m: BTreeMap<String, String> = [
            ("b".to_owned(), "two \"q\"\n".to_owned()),
            ("a".to_owned(), "one".to_owned()),
        ]
        .into();
        assert_eq!(format_map(&m), "a=\"one\"\nb=\"two \\\"q\\\"\\n\"");
        assert_eq!(format_map(&BTreeMap::new()), "");
    }

    #[test]
    fn extracts_metadata_fields() {
        let mut pod = crate::testing::pod("web");
        pod.metadata.labels = Some([("app".to_owned(), "x".to_owned())].into());
        pod.metadata.annotations = Some([("a/b".to_owned(), "y".to_owned())].into());
        let get = |p: &str| extract_field_path_as_string(&pod, p);
        assert_eq!(get("metadata.name").as_deref(), Ok("web"));
        assert_eq!(get("metadata.labels['app']").as_deref(), Ok("x"));
        assert_eq!(get("metadata.labels['none']").as_deref(), Ok(""));
        assert_eq!(get("metadata.annotations['a/b']").as_deref(), Ok("y"));
        assert_eq!(get("metadata.labels").as_deref(), Ok("app=\"x\""));
        let err = get("spec.nodeName").expect_err("unsupported");
        assert_eq!(err, Error::UnsupportedFieldPath("spec.nodeName".into()));
        assert_eq!(err.to_string(), "unsupported fieldPath: spec.nodeName");
    }
}
