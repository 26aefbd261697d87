//! Validation of a pod's resource quantities (upstream `ValidateResourceRequirements`,
//! `validateContainerResourceName`, `ValidateResourceQuantityValue` and the emptyDir
//! `sizeLimit` check in `pkg/apis/core/validation/validation.go`; the quantity grammar of
//! `resource.ParseQuantity` in `staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go`,
//! which upstream applies when it decodes the manifest).
//!
//! `k8s-openapi` keeps a quantity as the string written, so a manifest with `cpu: lots` decodes
//! here where upstream's decoder refuses it; this module refuses it at validation instead.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::validate::ValidationErrors;
use crate::resources::parse_quantity_nanos;

/// Upstream's message for a string that is not a quantity.
const QUANTITY_FMT_MSG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// Resource names a container may use without a domain (upstream
/// `standardContainerResources`, plus `hugepages-<size>`).
const STANDARD_CONTAINER_RESOURCES: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

/// `true` if `s` is a quantity as upstream `ParseQuantity` reads it: a signed decimal number
/// and one suffix (`Ki`…`Ei`, `n` `u` `m` `k` `M` `G` `T` `P` `E`, or `e`/`E` and a signed
/// integer), with no space.
pub fn is_quantity(s: &str) -> bool {
    let rest = s.strip_prefix(['+', '-']).unwrap_or(s);
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let digits = number.bytes().filter(u8::is_ascii_digit).count();
    if digits == 0 || number.matches('.').count() > 1 {
        return false;
    }
    match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T"
        | "P" | "E" => true,
        other => other.strip_prefix(['e', 'E']).is_some_and(|exp| {
            let exp = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            !exp.is_empty() && exp.bytes().all(|b| b.is_ascii_digit())
        }),
    }
}

/// A quantity's sign and value: `None` when it is not a quantity, `Some(None)` when it is one
/// too large for nano-units (still a valid, positive or negative, quantity).
fn value(q: &str) -> Option<(bool, Option<i128>)> {
    is_quantity(q).then(|| (q.starts_with('-'), parse_quantity_nanos(q)))
}

/// Checks one quantity: well-formed and not negative (upstream
/// `ValidateResourceQuantityValue` / `ValidateNonnegativeQuantity`).
fn check_quantity(errs: &mut ValidationErrors, field: &str, q: &Quantity) -> Option<i128> {
    match value(&q.0) {
        None => {
            errs.invalid(field, &q.0, QUANTITY_FMT_MSG);
            None
        }
        Some((negative, v)) if negative && v != Some(0) => {
            errs.invalid(field, &q.0, "must be greater than or equal to 0");
            None
        }
        Some((_, v)) => v,
    }
}

/// Upstream `validateContainerResourceName`: a standard container resource, `hugepages-*`, or
/// a name with a domain.
fn check_resource_name(errs: &mut ValidationErrors, field: &str, name: &str) {
    let standard = STANDARD_CONTAINER_RESOURCES.contains(&name) || name.starts_with("hugepages-");
    if !standard && !name.contains('/') {
        errs.invalid(field, name, "must be a standard resource for containers");
    }
}

/// Upstream `ValidateResourceRequirements` for one container: every limit and request is a
/// non-negative quantity of a container resource, and no request exceeds its limit.
pub(super) fn validate_container_resources(errs: &mut ValidationErrors, path: &str, c: &Container) {
    let Some(resources) = &c.resources else {
        return;
    };
    let empty = BTreeMap::new();
    let limits = resources.limits.as_ref().unwrap_or(&empty);
    for (name, q) in limits {
        let field = format!("{path}.resources.limits[{name}]");
        check_resource_name(errs, &field, name);
        check_quantity(errs, &field, q);
    }
    for (name, q) in resources.requests.iter().flatten() {
        let field = format!("{path}.resources.requests[{name}]");
        check_resource_name(errs, &field, name);
        let Some(request) = check_quantity(errs, &field, q) else {
            continue;
        };
        let limit = limits
            .get(name)
            .and_then(|l| value(&l.0))
            .and_then(|(_, v)| v);
        if limit.is_some_and(|l| request > l) {
            errs.invalid(
                &field,
                &q.0,
                &format!(
                    "must be less than or equal to {name} limit of {}",
                    limits.get(name).map_or("", |l| l.0.as_str())
                ),
            );
        }
    }
}

/// The emptyDir `sizeLimit`s of `spec.volumes`: quantities, not negative.
pub(super) fn validate_volume_quantities(errs: &mut ValidationErrors, spec: &PodSpec) {
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        if let Some(limit) = v.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref()) {
            check_quantity(
                errs,
                &format!("spec.volumes[{i}].emptyDir.sizeLimit"),
                limit,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;

    #[test]
    fn the_quantity_grammar_of_upstream() {
        for good in [
            "1", "100m", "1.5Gi", "+2e3", "-1", "0.1Ki", ".5", "5.", "1e999", "1E-3", "129e6",
        ] {
            assert!(is_quantity(good), "{good:?}");
        }
        for bad in [
            "", " 1", "1 ", "lots", "1.2.3", "1Xi", "1KiB", "e3", ".", "-", "1e", "1e+", "∞",
            "1\0", "0x10",
        ] {
            assert!(!is_quantity(bad), "{bad:?}");
        }
    }

    fn container(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> Container {
        let map = |kv: &[(&str, &str)]| -> Option<BTreeMap<String, Quantity>> {
            Some(
                kv.iter()
                    .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                    .collect(),
            )
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                limits: map(limits),
                requests: map(requests),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn errors(c: &Container) -> Vec<String> {
        let mut errs = ValidationErrors::default();
        validate_container_resources(&mut errs, "spec.containers[0]", c);
        errs.0.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn requirements_as_upstream() {
        let ok = container(
            &[("cpu", "1"), ("memory", "1Gi"), ("example.com/gpu", "1")],
            &[("cpu", "500m"), ("memory", "1Gi"), ("hugepages-2Mi", "0")],
        );
        assert_eq!(errors(&ok), Vec::<String>::new());
        assert_eq!(
            errors(&container(&[("cpu", "1")], &[("cpu", "2")])),
            [
                "spec.containers[0].resources.requests[cpu]: Invalid value: \"2\": must be less than or equal to cpu limit of 1"
            ]
        );
        assert_eq!(
            errors(&container(&[("memory", "-1")], &[])),
            [
                "spec.containers[0].resources.limits[memory]: Invalid value: \"-1\": must be greater than or equal to 0"
            ]
        );
        assert_eq!(errors(&container(&[("cpu", "lots")], &[])).len(), 1);
        assert_eq!(
            errors(&container(&[], &[("gpu", "1")])),
            [
                "spec.containers[0].resources.requests[gpu]: Invalid value: \"gpu\": must be a standard resource for containers"
            ]
        );
    }
}
