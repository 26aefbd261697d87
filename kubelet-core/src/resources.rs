//! Resource quantities, node allocatable and the downward API's resource values, shared by
//! env vars (`valueFrom.resourceFieldRef`) and downwardAPI volumes.
//!
//! Mirrors upstream `pkg/api/v1/resource/helpers.go` (`ExtractContainerResourceValue`,
//! `ExtractResourceValueByContainerName`), `pkg/kubelet/kubelet_resources.go`
//! (`defaultPodLimitsForDownwardAPI`: limits a container does not set default to node
//! allocatable) and the `Value`/`MilliValue` rounding of apimachinery's `resource.Quantity`.

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};

/// Why a `resourceFieldRef` has no value (upstream's messages).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `containerName` names no container of the pod.
    #[error("container {0} not found")]
    ContainerNotFound(String),
    /// `resource` is not `limits.*`/`requests.*` of cpu, memory, ephemeral-storage or hugepages.
    #[error("unsupported container resource : {0}")]
    UnsupportedResource(String),
    /// The container's quantity or the selector's divisor does not parse.
    #[error("invalid quantity {quantity:?} in resourceFieldRef {resource}")]
    InvalidQuantity {
        /// The quantity as written.
        quantity: String,
        /// The selector's `resource`.
        resource: String,
    },
}

/// Parses a Kubernetes quantity (`100m`, `1.5Gi`, `2e3`, `128974848`) into nano-units
/// (value × 10⁹), rounding fractions of a nano-unit up as upstream does. `None` when the
/// string is not a quantity or the value does not fit.
pub fn parse_quantity_nanos(s: &str) -> Option<i128> {
    let s = s.trim();
    let (negative, rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return None;
    }
    let mut mantissa: i128 = 0;
    for digit in int_part.bytes().chain(frac_part.bytes()) {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(digit - b'0'))?;
    }
    let frac_digits = i32::try_from(frac_part.len()).ok()?;
    let (binary_pow, decimal_exp) = match suffix {
        "Ki" => (1, 0),
        "Mi" => (2, 0),
        "Gi" => (3, 0),
        "Ti" => (4, 0),
        "Pi" => (5, 0),
        "Ei" => (6, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "" => (0, 0),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        other => {
            let exp = other.strip_prefix(['e', 'E'])?;
            (0, exp.parse::<i32>().ok()?)
        }
    };
    let mut value = mantissa.checked_mul(1024_i128.checked_pow(binary_pow)?)?;
    let exp = decimal_exp.checked_add(9)?.checked_sub(frac_digits)?;
    if exp >= 0 {
        value = value.checked_mul(10_i128.checked_pow(u32::try_from(exp).ok()?)?)?;
    } else {
        value = match 10_i128.checked_pow(u32::try_from(-exp).ok()?) {
            Some(d) => value / d + i128::from(value % d != 0),
            None => i128::from(value != 0),
        };
    }
    Some(if negative { -value } else { value })
}

/// Upstream `Quantity.Value()`: the value rounded up to an integer. `None` when `s` is not
/// a quantity.
pub fn quantity_value(s: &str) -> Option<i128> {
    parse_quantity_nanos(s).map(|n| ceil_div(n, 1_000_000_000))
}

/// Upstream `Quantity.MilliValue()`: the value in thousandths, rounded up.
pub fn quantity_milli_value(s: &str) -> Option<i128> {
    parse_quantity_nanos(s).map(|n| ceil_div(n, 1_000_000))
}

fn ceil_div(n: i128, d: i128) -> i128 {
    let q = n.div_euclid(d);
    if n.rem_euclid(d) == 0 { q } else { q + 1 }
}

/// What the node offers pods (upstream node allocatable: capacity without reservations).
/// Used for `limits.*` a container does not set and for Memory emptyDirs without sizeLimit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeAllocatable {
    /// CPU in milli-cores.
    pub cpu_millis: i128,
    /// Memory in bytes.
    pub memory_bytes: i128,
    /// Ephemeral storage in bytes; `None` when not known (then an unset limit reads as 0).
    pub ephemeral_storage_bytes: Option<i128>,
}

impl NodeAllocatable {
    /// This machine: the CPUs available to the process and `MemTotal` of `/proc/meminfo`
    /// (no reservations are configured on a standalone node).
    pub fn detect() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        Self {
            cpu_millis: i128::try_from(cpus).unwrap_or(1) * 1000,
            memory_bytes: node_memory_bytes(),
            ephemeral_storage_bytes: None,
        }
    }
}

/// `MemTotal` of `/proc/meminfo` in bytes, 0 when unreadable.
// Reviewed (issue 16): procfs is served from kernel memory (never a disk), and this runs
// when the node is built.
#[allow(clippy::disallowed_methods)]
fn node_memory_bytes() -> i128 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i128>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Upstream `ExtractResourceValueByContainerName`: the value for the container named by the
/// selector (init and app containers), with unset limits defaulted to `allocatable`.
pub fn resource_value_by_container_name(
    pod: &Pod,
    selector: &ResourceFieldSelector,
    allocatable: &NodeAllocatable,
) -> Result<String, Error> {
    let name = selector.container_name.as_deref().unwrap_or("");
    let container = pod
        .spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .find(|c| c.name == name)
        .ok_or_else(|| Error::ContainerNotFound(name.to_owned()))?;
    container_resource_value(container, selector, allocatable)
}

/// Upstream `ExtractContainerResourceValue` on the container with limits defaulted to node
/// allocatable (`defaultPodLimitsForDownwardAPI`): `limits.cpu`, `limits.memory`,
/// `limits.ephemeral-storage`, the same `requests.*`, and `hugepages-<size>` ones, divided by
/// the divisor (default 1) and rounded up. CPU is computed in milli-units as upstream.
pub fn container_resource_value(
    container: &Container,
    selector: &ResourceFieldSelector,
    allocatable: &NodeAllocatable,
) -> Result<String, Error> {
    let resources = container.resources.as_ref();
    let (is_limit, name) = match selector.resource.split_once('.') {
        Some(("limits", n)) => (true, n),
        Some(("requests", n)) => (false, n),
        _ => {
            return Err(Error::UnsupportedResource(selector.resource.clone()));
        }
    };
    if !matches!(name, "cpu" | "memory" | "ephemeral-storage") && !name.starts_with("hugepages-") {
        return Err(Error::UnsupportedResource(selector.resource.clone()));
    }
    let map = if is_limit {
        resources.and_then(|r| r.limits.as_ref())
    } else {
        resources.and_then(|r| r.requests.as_ref())
    };
    let quantity = map.and_then(|m| m.get(name)).map(|q| q.0.as_str());
    let divisor = selector
        .divisor
        .as_ref()
        .map(|d| d.0.as_str())
        .filter(|d| parse_quantity_nanos(d).is_some_and(|n| n != 0))
        .unwrap_or("1");
    let bad = |q: &str| Error::InvalidQuantity {
        quantity: q.to_owned(),
        resource: selector.resource.clone(),
    };
    if name == "cpu" {
        let value = match quantity {
            Some(q) => quantity_milli_value(q).ok_or_else(|| bad(q))?,
            None if is_limit => allocatable.cpu_millis,
            None => 0,
        };
        let div = quantity_milli_value(divisor).ok_or_else(|| bad(divisor))?;
        return Ok(ceil_ratio(value, div).to_string());
    }
    let value = match quantity {
        Some(q) => quantity_value(q).ok_or_else(|| bad(q))?,
        None if is_limit && name == "memory" => allocatable.memory_bytes,
        None if is_limit && name == "ephemeral-storage" => {
            allocatable.ephemeral_storage_bytes.unwrap_or(0)
        }
        None => 0,
    };
    let div = quantity_value(divisor).ok_or_else(|| bad(divisor))?;
    Ok(ceil_ratio(value, div).to_string())
}

/// `int64(math.Ceil(float64(value) / float64(divisor)))`, exact in integers.
fn ceil_ratio(value: i128, divisor: i128) -> i128 {
    if divisor == 0 {
        return 0;
    }
    let (q, r) = (value / divisor, value % divisor);
    if r != 0 && ((r > 0) == (divisor > 0)) {
        q + 1
    } else {
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn container(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> Container {
        let map = |v: &[(&str, &str)]| {
            (!v.is_empty()).then(|| {
                v.iter()
                    .map(|(k, q)| ((*k).to_owned(), Quantity((*q).to_owned())))
                    .collect::<BTreeMap<_, _>>()
            })
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

    fn sel(resource: &str, divisor: Option<&str>) -> ResourceFieldSelector {
        ResourceFieldSelector {
            resource: resource.into(),
            divisor: divisor.map(|d| Quantity(d.into())),
            container_name: None,
        }
    }

    const NODE: NodeAllocatable = NodeAllocatable {
        cpu_millis: 4000,
        memory_bytes: 8 * 1024 * 1024 * 1024,
        ephemeral_storage_bytes: None,
    };

    #[test]
    fn quantities_round_like_upstream() {
        assert_eq!(quantity_value("100m"), Some(1));
        assert_eq!(quantity_milli_value("100m"), Some(100));
        assert_eq!(quantity_milli_value("0.5"), Some(500));
        assert_eq!(quantity_value("64Mi"), Some(64 * 1024 * 1024));
        assert_eq!(quantity_value("1G"), Some(1_000_000_000));
        assert_eq!(quantity_value("2e3"), Some(2000));
        assert_eq!(quantity_milli_value("1n"), Some(1), "rounds up");
        assert_eq!(quantity_value("x"), None);
        assert_eq!(quantity_value("1.2.3"), None);
        assert_eq!(quantity_value(""), None);
    }

    /// Cases of upstream `TestExtractResourceValue` (pkg/api/v1/resource/helpers_test.go).
    #[test]
    fn extract_resource_value_matches_upstream() {
        let cases: &[(&str, Option<&str>, Container, &str)] = &[
            ("limits.cpu", None, container(&[("cpu", "2")], &[]), "2"),
            ("requests.cpu", None, container(&[], &[("cpu", "2")]), "2"),
            (
                "requests.cpu",
                Some("1m"),
                container(&[], &[("cpu", "1.5")]),
                "1500",
            ),
            (
                "requests.cpu",
                Some("1"),
                container(&[], &[("cpu", "1.5")]),
                "2",
            ),
            (
                "requests.cpu",
                Some("1m"),
                container(&[], &[("cpu", "100m")]),
                "100",
            ),
            (
                "requests.cpu",
                Some("1"),
                container(&[], &[("cpu", "100m")]),
                "1",
            ),
            (
                "limits.memory",
                Some("1Mi"),
                container(&[("memory", "64Mi")], &[]),
                "64",
            ),
            (
                "requests.memory",
                Some("1Mi"),
                container(&[], &[("memory", "100Ki")]),
                "1",
            ),
            (
                "limits.ephemeral-storage",
                Some("1Gi"),
                container(&[("ephemeral-storage", "1.5Gi")], &[]),
                "2",
            ),
            (
                "limits.hugepages-1Gi",
                None,
                container(&[("hugepages-1Gi", "2Gi")], &[]),
                "2147483648",
            ),
            ("requests.memory", None, container(&[], &[]), "0"),
            // Unset limits default to node allocatable.
            ("limits.cpu", None, container(&[], &[]), "4"),
            ("limits.cpu", Some("1m"), container(&[], &[]), "4000"),
            ("limits.memory", Some("1Gi"), container(&[], &[]), "8"),
        ];
        for (resource, divisor, c, want) in cases {
            assert_eq!(
                container_resource_value(c, &sel(resource, *divisor), &NODE).as_deref(),
                Ok(*want),
                "{resource} / {divisor:?}"
            );
        }
        let err = container_resource_value(&container(&[], &[]), &sel("limits.gpu", None), &NODE)
            .expect_err("unsupported");
        assert_eq!(err, Error::UnsupportedResource("limits.gpu".into()));
        assert_eq!(
            err.to_string(),
            "unsupported container resource : limits.gpu"
        );
    }

    #[test]
    fn by_container_name() {
        let mut pod = crate::testing::pod("web");
        if let Some(spec) = pod.spec.as_mut() {
            spec.containers[0] = Container {
                name: "app".into(),
                ..container(&[("memory", "1Gi")], &[])
            };
        }
        let mut s = sel("limits.memory", Some("1Mi"));
        s.container_name = Some("app".into());
        assert_eq!(
            resource_value_by_container_name(&pod, &s, &NODE).as_deref(),
            Ok("1024")
        );
        s.container_name = Some("nope".into());
        assert!(resource_value_by_container_name(&pod, &s, &NODE).is_err());
    }

    #[test]
    fn detects_this_machine() {
        let node = NodeAllocatable::detect();
        assert!(node.cpu_millis >= 1000);
        assert!(node.memory_bytes > 0);
    }
}
