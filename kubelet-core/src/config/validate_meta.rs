//! Validation of a pod's labels and annotations (upstream `ValidateObjectMeta`'s
//! `ValidateLabels` and `ValidateAnnotations`, in
//! `staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go` and
//! `staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go`, with
//! `IsQualifiedName` and `IsValidLabelValue` of `pkg/util/validation/validation.go`).

use std::collections::BTreeMap;

use super::validate::{ValidationErrors, is_dns1123_subdomain};

/// Longest name part of a qualified name, and longest label value (upstream
/// `qualifiedNameMaxLength`, `LabelValueMaxLength`).
const NAME_MAX_LEN: usize = 63;
/// Largest total size of a pod's annotations, keys and values (upstream
/// `TotalAnnotationSizeLimitB`, 256 KiB).
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

const QUALIFIED_NAME_FMT_MSG: &str = "name part must consist of alphanumeric characters, '-', \
     '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT_MSG: &str = "a valid label must be an empty string or consist of \
     alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric \
     character";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`: the name part of a qualified name, and a
/// non-empty label value.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter()
            .all(|c| alnum(c) || matches!(c, b'-' | b'_' | b'.'))
}

/// Why `key` is not a qualified name (`[prefix/]name`, upstream `IsQualifiedName`).
fn qualified_name_problems(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let name = match key.split_once('/') {
        None => key,
        Some((prefix, name)) => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_owned());
            } else if !is_dns1123_subdomain(prefix) {
                problems.push(format!(
                    "prefix part {}",
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
                     characters, '-' or '.', and must start and end with an alphanumeric \
                     character"
                ));
            }
            if name.contains('/') {
                problems.push(
                    "a qualified name must consist of alphanumeric characters, '-', '_' or '.', \
                     with an optional DNS subdomain prefix and '/'"
                        .to_owned(),
                );
                return problems;
            }
            name
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_owned());
    } else if name.len() > NAME_MAX_LEN {
        problems.push(format!(
            "name part must be no more than {NAME_MAX_LEN} characters"
        ));
    }
    if !name.is_empty() && !is_name_part(name) {
        problems.push(QUALIFIED_NAME_FMT_MSG.to_owned());
    }
    problems
}

/// Upstream `ValidateLabels`: keys are qualified names, values at most 63 characters of
/// `[A-Za-z0-9_.-]` starting and ending with an alphanumeric, or empty.
pub(super) fn validate_labels(
    errs: &mut ValidationErrors,
    field: &str,
    labels: Option<&BTreeMap<String, String>>,
) {
    for (key, value) in labels.into_iter().flatten() {
        for problem in qualified_name_problems(key) {
            errs.invalid(field, key, &problem);
        }
        if value.len() > NAME_MAX_LEN {
            errs.invalid(
                field,
                value,
                &format!("must be no more than {NAME_MAX_LEN} characters"),
            );
        } else if !value.is_empty() && !is_name_part(value) {
            errs.invalid(field, value, LABEL_VALUE_FMT_MSG);
        }
    }
}

/// Upstream `ValidateAnnotations`: keys are qualified names (checked lowercased, as
/// upstream), and keys and values together are at most [`TOTAL_ANNOTATION_SIZE_LIMIT`] bytes.
pub(super) fn validate_annotations(
    errs: &mut ValidationErrors,
    field: &str,
    annotations: Option<&BTreeMap<String, String>>,
) {
    let mut total = 0usize;
    for (key, value) in annotations.into_iter().flatten() {
        for problem in qualified_name_problems(&key.to_lowercase()) {
            errs.invalid(field, key, &problem);
        }
        total = total.saturating_add(key.len()).saturating_add(value.len());
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(
            field,
            format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Vec<String> {
        let map = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
            kv.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let mut errs = ValidationErrors::default();
        validate_labels(&mut errs, "metadata.labels", Some(&map(labels)));
        validate_annotations(&mut errs, "metadata.annotations", Some(&map(annotations)));
        errs.0.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn labels_and_annotations_as_upstream() {
        let good = [
            ("app", "web"),
            ("example.com/tier", "a.b_c-d"),
            ("k", ""),
            ("A_b.c-D", "X"),
        ];
        assert_eq!(errors(&good, &good), Vec::<String>::new());
        let long = "a".repeat(64);
        for (key, value) in [
            ("", "v"),
            ("/a", "v"),
            ("Example.com/a", "v"),
            ("a/b/c", "v"),
            ("-a", "v"),
            ("pöd", "v"),
            (long.as_str(), "v"),
            ("a", "-v"),
            ("a", "v v"),
            ("a", "ü"),
            ("a", long.as_str()),
        ] {
            assert!(
                !errors(&[(key, value)], &[]).is_empty(),
                "label {key:?}={value:?}"
            );
        }
        // Annotation values are free; keys are checked lowercased.
        assert_eq!(
            errors(&[], &[("Example.COM/Key", "ü v -")]),
            Vec::<String>::new()
        );
        assert!(!errors(&[], &[("a b", "")]).is_empty());
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT);
        let errs = errors(&[], &[("a", big.as_str())]);
        assert_eq!(
            errs,
            ["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
    }
}
