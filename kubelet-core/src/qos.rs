//! The pod's QoS class (upstream `pkg/apis/core/v1/helper/qos/qos.go`, `GetPodQOS`).
//!
//! Only `cpu` and `memory` count. A pod is `BestEffort` when no container requests or limits
//! either, `Guaranteed` when every container limits both and the pod's summed requests equal
//! its summed limits, and `Burstable` otherwise.
//!
//! Pods from the API server have their requests defaulted to their limits; pods from static
//! files may not be, so a missing request of a resource that has a limit counts as equal to
//! the limit here, as the API server's defaulting would make it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::PodExt;

/// `Guaranteed`.
pub const GUARANTEED: &str = "Guaranteed";
/// `Burstable`.
pub const BURSTABLE: &str = "Burstable";
/// `BestEffort`.
pub const BEST_EFFORT: &str = "BestEffort";

const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// The QoS class of `pod` (upstream `GetPodQOS`): one of [`GUARANTEED`], [`BURSTABLE`],
/// [`BEST_EFFORT`].
#[doc(alias = "GetPodQOS")]
pub fn pod_qos(pod: &Pod) -> &'static str {
    let mut requests: BTreeMap<&str, i128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i128> = BTreeMap::new();
    let mut guaranteed = true;
    for container in pod.containers().iter().chain(pod.init_containers()) {
        let (container_requests, container_limits) = effective_resources(container);
        for (name, value) in container_requests {
            *requests.entry(name).or_default() += value;
        }
        let mut limited = 0;
        for (name, value) in container_limits {
            limited += 1;
            *limits.entry(name).or_default() += value;
        }
        if limited != QOS_RESOURCES.len() {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return BEST_EFFORT;
    }
    if guaranteed
        && requests.len() == limits.len()
        && requests
            .iter()
            .all(|(name, req)| limits.get(name) == Some(req))
    {
        return GUARANTEED;
    }
    BURSTABLE
}

/// `(resource, nano-units)` pairs.
type Amounts = Vec<(&'static str, i128)>;

/// Positive cpu/memory requests and limits of one container, in nano-units. A missing
/// request defaults to the limit, as API defaulting does.
fn effective_resources(container: &Container) -> (Amounts, Amounts) {
    let resources = container.resources.as_ref();
    let lookup = |list: Option<&BTreeMap<String, Quantity>>, name: &str| {
        list.and_then(|l| l.get(name)).map(|q| parse_quantity(&q.0))
    };
    let mut requests = Vec::new();
    let mut limits = Vec::new();
    for name in QOS_RESOURCES {
        let limit = lookup(resources.and_then(|r| r.limits.as_ref()), name);
        let request = lookup(resources.and_then(|r| r.requests.as_ref()), name);
        let request = match (request, limit) {
            (Some(r), _) => r,
            (None, Some(l)) => l,
            (None, None) => None,
        };
        if let Some(v) = request.filter(|v| *v > 0) {
            requests.push((name, v));
        }
        if let Some(v) = limit.flatten().filter(|v| *v > 0) {
            limits.push((name, v));
        }
    }
    (requests, limits)
}

/// Parses a Kubernetes quantity into nano-units: [`crate::resources::parse_quantity_nanos`].
pub fn parse_quantity(s: &str) -> Option<i128> {
    crate::resources::parse_quantity_nanos(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{container_with_resources, pod_of as pod};

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        container_with_resources("c", requests, limits)
    }

    #[test]
    fn parses_quantities() {
        assert_eq!(parse_quantity("1"), Some(1_000_000_000));
        assert_eq!(parse_quantity("100m"), Some(100_000_000));
        assert_eq!(parse_quantity("0.1"), Some(100_000_000));
        assert_eq!(parse_quantity("1Ki"), Some(1024 * 1_000_000_000));
        assert_eq!(parse_quantity("1.5Gi"), Some(1_610_612_736 * 1_000_000_000));
        assert_eq!(parse_quantity("1G"), Some(1_000_000_000 * 1_000_000_000));
        assert_eq!(parse_quantity("2e3"), Some(2_000 * 1_000_000_000));
        assert_eq!(parse_quantity("1n"), Some(1));
        assert_eq!(parse_quantity("0.1n"), Some(1), "rounds up");
        assert_eq!(parse_quantity("-1m"), Some(-1_000_000));
        assert_eq!(parse_quantity("0"), Some(0));
        assert_eq!(parse_quantity(""), None);
        assert_eq!(parse_quantity("abc"), None);
        assert_eq!(parse_quantity("1Xi"), None);
        assert_eq!(parse_quantity("1e999"), None);
    }

    #[test]
    fn best_effort_without_requests_or_limits() {
        assert_eq!(
            pod_qos(&pod(vec![container(&[], &[])], vec![])),
            BEST_EFFORT
        );
        // Zero and non-compute resources do not count.
        let c = container(&[("cpu", "0"), ("ephemeral-storage", "1Gi")], &[]);
        assert_eq!(pod_qos(&pod(vec![c], vec![])), BEST_EFFORT);
    }

    #[test]
    fn guaranteed_when_requests_equal_limits_everywhere() {
        let both = [("cpu", "500m"), ("memory", "128Mi")];
        let equal_spelled_differently = [("cpu", "0.5"), ("memory", "134217728")];
        let p = pod(
            vec![
                container(&both, &equal_spelled_differently),
                container(&[], &both),
            ],
            vec![container(&both, &both)],
        );
        assert_eq!(pod_qos(&p), GUARANTEED);
    }

    #[test]
    fn burstable_cases() {
        let both = [("cpu", "1"), ("memory", "1Gi")];
        // Request lower than limit.
        let p = pod(
            vec![container(&[("cpu", "500m"), ("memory", "1Gi")], &both)],
            vec![],
        );
        assert_eq!(pod_qos(&p), BURSTABLE);
        // Only a cpu limit.
        let p = pod(vec![container(&[], &[("cpu", "1")])], vec![]);
        assert_eq!(pod_qos(&p), BURSTABLE);
        // One guaranteed container and one best-effort container.
        let p = pod(vec![container(&both, &both), container(&[], &[])], vec![]);
        assert_eq!(pod_qos(&p), BURSTABLE);
        // Init container without limits.
        let p = pod(
            vec![container(&both, &both)],
            vec![container(&[("cpu", "1")], &[])],
        );
        assert_eq!(pod_qos(&p), BURSTABLE);
    }
}
