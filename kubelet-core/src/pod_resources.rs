//! Compute resources of containers and pods as the kubelet aggregates them, and the
//! containers' `oom_score_adj`.
//!
//! Mirrors upstream `k8s.io/component-helpers/resource/helpers.go` (`PodRequests`,
//! `PodLimits` with restartable init containers and pod overhead) and
//! `pkg/kubelet/qos/policy.go` (`GetContainerOOMScoreAdjust`). Amounts are kept in
//! nano-units (see [`crate::qos::parse_quantity`]); [`milli_value`] and [`value`] round up as
//! upstream's `Quantity.MilliValue()` and `Quantity.Value()` do.
//!
//! Pods from the API server have their requests defaulted to their limits; static pods read
//! from files may not be, so a missing request of a resource that has a limit is taken as
//! the limit here, as the API's defaulting (`SetDefaults_Pod`) would make it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::PodExt;
use crate::qos::{BEST_EFFORT, GUARANTEED, parse_quantity, pod_qos};

/// The `cpu` resource name.
pub const CPU: &str = "cpu";
/// The `memory` resource name.
pub const MEMORY: &str = "memory";

/// Resource name → amount in nano-units.
pub type Amounts = BTreeMap<String, i128>;

/// `oom_score_adj` of Guaranteed (and node-critical) containers.
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
/// `oom_score_adj` of BestEffort containers.
pub const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;
/// Upstream `scheduling.SystemNodeCritical`.
pub const SYSTEM_NODE_CRITICAL: &str = "system-node-critical";
/// Upstream `scheduling.SystemCriticalPriority`.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// `ceil(nanos / 10⁶)`: the amount in milli-units (upstream `MilliValue`).
pub fn milli_value(nanos: i128) -> i64 {
    ceil_div(nanos, 1_000_000)
}

/// `ceil(nanos / 10⁹)`: the amount in units, e.g. bytes (upstream `Value`).
pub fn value(nanos: i128) -> i64 {
    ceil_div(nanos, 1_000_000_000)
}

fn ceil_div(nanos: i128, unit: i128) -> i64 {
    let q = nanos.div_euclid(unit) + i128::from(nanos.rem_euclid(unit) != 0);
    i64::try_from(q).unwrap_or(if q < 0 { i64::MIN } else { i64::MAX })
}

fn amounts(list: Option<&BTreeMap<String, Quantity>>) -> Amounts {
    list.into_iter()
        .flatten()
        .filter_map(|(k, q)| parse_quantity(&q.0).map(|v| (k.clone(), v)))
        .collect()
}

/// The requests of a container, with missing requests defaulted to the limits.
pub fn container_requests(container: &Container) -> Amounts {
    let resources = container.resources.as_ref();
    let mut requests = amounts(resources.and_then(|r| r.requests.as_ref()));
    for (name, limit) in amounts(resources.and_then(|r| r.limits.as_ref())) {
        requests.entry(name).or_insert(limit);
    }
    requests
}

/// The limits of a container.
pub fn container_limits(container: &Container) -> Amounts {
    amounts(container.resources.as_ref().and_then(|r| r.limits.as_ref()))
}

fn add(into: &mut Amounts, from: &Amounts) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

fn max_into(into: &mut Amounts, from: &Amounts) {
    for (k, v) in from {
        let e = into.entry(k.clone()).or_insert(*v);
        if *v > *e {
            *e = *v;
        }
    }
}

fn is_restartable_init(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// Aggregates per-container amounts as upstream `AggregateContainerRequests`/`Limits`: the
/// sum over app and restartable init containers, at least each regular init container plus
/// the restartable ones before it. `each` sees every container's contribution.
fn aggregate(
    pod: &Pod,
    per_container: fn(&Container) -> Amounts,
    mut each: impl FnMut(&Amounts),
) -> Amounts {
    let mut total = Amounts::new();
    for c in pod.containers() {
        let amounts = per_container(c);
        add(&mut total, &amounts);
        each(&amounts);
    }
    let mut restartable = Amounts::new();
    let mut init_max = Amounts::new();
    for c in pod.init_containers() {
        let amounts = per_container(c);
        let effective = if is_restartable_init(c) {
            add(&mut total, &amounts);
            add(&mut restartable, &amounts);
            restartable.clone()
        } else {
            let mut tmp = amounts;
            add(&mut tmp, &restartable);
            tmp
        };
        each(&effective);
        max_into(&mut init_max, &effective);
    }
    max_into(&mut total, &init_max);
    total
}

fn overhead(pod: &Pod) -> Amounts {
    amounts(pod.spec.as_ref().and_then(|s| s.overhead.as_ref()))
}

/// The pod's effective requests (upstream `PodRequests`), with `spec.overhead` added when
/// `with_overhead`.
pub fn pod_requests(pod: &Pod, with_overhead: bool) -> Amounts {
    let mut requests = aggregate(pod, container_requests, |_| {});
    if with_overhead {
        add(&mut requests, &overhead(pod));
    }
    requests
}

/// Pod limits and whether every container declares a cpu / memory limit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodLimits {
    /// The pod's effective limits (upstream `PodLimits`).
    pub limits: Amounts,
    /// Every container (and init container step) has a non-zero cpu limit.
    pub cpu_declared: bool,
    /// Every container (and init container step) has a non-zero memory limit.
    pub memory_declared: bool,
}

/// The pod's effective limits (upstream `PodLimits` with its `ContainerFn` tracking declared
/// limits), with `spec.overhead` added to the resources that have a limit when
/// `with_overhead`.
pub fn pod_limits(pod: &Pod, with_overhead: bool) -> PodLimits {
    let mut cpu_declared = true;
    let mut memory_declared = true;
    let mut limits = aggregate(pod, container_limits, |l| {
        if l.get(CPU).copied().unwrap_or(0) == 0 {
            cpu_declared = false;
        }
        if l.get(MEMORY).copied().unwrap_or(0) == 0 {
            memory_declared = false;
        }
    });
    if with_overhead {
        for (k, v) in overhead(pod) {
            if let Some(l) = limits.get_mut(&k) {
                *l += v;
            }
        }
    }
    PodLimits {
        limits,
        cpu_declared,
        memory_declared,
    }
}

/// Upstream `IsCriticalPod`: static and mirror pods, and pods at or above the system-critical
/// priority.
pub fn is_critical_pod(pod: &Pod) -> bool {
    let priority = pod.spec.as_ref().and_then(|s| s.priority);
    crate::pod::is_static_pod(pod)
        || crate::pod::is_mirror_pod(pod)
        || priority.is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
}

/// Upstream `IsNodeCriticalPod`: a critical pod of priority class `system-node-critical`.
pub fn is_node_critical_pod(pod: &Pod) -> bool {
    is_critical_pod(pod)
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref())
            == Some(SYSTEM_NODE_CRITICAL)
}

/// The `oom_score_adj` of a container (upstream `GetContainerOOMScoreAdjust`): −997 for
/// node-critical and Guaranteed pods, 1000 for BestEffort, and for Burstable
/// `1000 − 1000·request/capacity` clamped to `[3, 999]` (a sidecar never above the smallest
/// app container's value).
#[doc(alias = "GetContainerOOMScoreAdjust")]
pub fn container_oom_score_adj(pod: &Pod, container: &Container, memory_capacity: i64) -> i64 {
    if is_node_critical_pod(pod) {
        return GUARANTEED_OOM_SCORE_ADJ;
    }
    match pod_qos(pod) {
        GUARANTEED => return GUARANTEED_OOM_SCORE_ADJ,
        BEST_EFFORT => return BEST_EFFORT_OOM_SCORE_ADJ,
        _ => {}
    }
    let capacity = memory_capacity.max(1);
    let memory_request = |c: &Container| {
        container_requests(c)
            .get(MEMORY)
            .map(|n| value(*n))
            .unwrap_or(0)
    };
    let adj = |request: i64| 1000 - (1000_i128 * i128::from(request)) / i128::from(capacity);
    let mut score = adj(memory_request(container));
    let is_sidecar = is_restartable_init(container)
        && pod
            .init_containers()
            .iter()
            .any(|c| c.name == container.name);
    if is_sidecar && let Some(min) = pod.containers().iter().map(memory_request).min() {
        score = score.min(adj(min));
    }
    let floor = 1000 + i128::from(GUARANTEED_OOM_SCORE_ADJ);
    if score < floor {
        return floor as i64;
    }
    if score == i128::from(BEST_EFFORT_OOM_SCORE_ADJ) {
        return BEST_EFFORT_OOM_SCORE_ADJ - 1;
    }
    score as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{
        container_with_resources as container, pod_of as pod, resource_list as list,
    };

    #[test]
    fn rounding_up_like_quantity() {
        assert_eq!(milli_value(parse_quantity("100m").expect("q")), 100);
        assert_eq!(milli_value(parse_quantity("0.0001").expect("q")), 1);
        assert_eq!(value(parse_quantity("1.5Gi").expect("q")), 1_610_612_736);
        assert_eq!(value(parse_quantity("100m").expect("q")), 1);
        assert_eq!(value(0), 0);
    }

    // Cases of upstream TestPodResourceRequests / TestPodResourceLimits (component-helpers).
    #[test]
    fn requests_with_init_and_sidecars() {
        // Regular init container larger than the app containers wins.
        let p = pod(
            vec![container("a", &[("cpu", "1")], &[])],
            vec![container("i", &[("cpu", "2")], &[])],
        );
        assert_eq!(milli_value(pod_requests(&p, false)[CPU]), 2000);
        // Sidecar adds to the app containers and to later init containers.
        let mut side = container("s", &[("cpu", "1")], &[]);
        side.restart_policy = Some("Always".into());
        let p = pod(
            vec![container("a", &[("cpu", "1")], &[])],
            vec![side, container("i", &[("cpu", "1500m")], &[])],
        );
        assert_eq!(milli_value(pod_requests(&p, false)[CPU]), 2500);
        // Overhead is added to requests.
        let mut p = pod(vec![container("a", &[("cpu", "1")], &[])], vec![]);
        p.spec.as_mut().expect("spec").overhead = list(&[("cpu", "250m"), ("memory", "64Mi")]);
        let r = pod_requests(&p, true);
        assert_eq!(milli_value(r[CPU]), 1250);
        assert_eq!(value(r[MEMORY]), 64 << 20);
        assert_eq!(milli_value(pod_requests(&p, false)[CPU]), 1000);
    }

    #[test]
    fn limits_and_declared_flags() {
        let mut p = pod(
            vec![
                container("a", &[], &[("cpu", "1"), ("memory", "1Gi")]),
                container("b", &[], &[("cpu", "500m")]),
            ],
            vec![],
        );
        p.spec.as_mut().expect("spec").overhead = list(&[("cpu", "100m"), ("memory", "10Mi")]);
        let l = pod_limits(&p, true);
        assert_eq!(milli_value(l.limits[CPU]), 1600);
        assert_eq!(value(l.limits[MEMORY]), (1 << 30) + (10 << 20));
        assert!(l.cpu_declared);
        assert!(!l.memory_declared);
        // Missing request defaults to the limit.
        assert_eq!(milli_value(pod_requests(&p, false)[CPU]), 1500);
    }

    #[test]
    fn oom_score_adj_per_qos() {
        // Golden values of upstream policy_test.go with memoryCapacity 4000000000.
        const CAP: i64 = 4_000_000_000;
        let guaranteed = pod(
            vec![container("a", &[], &[("cpu", "1"), ("memory", "1G")])],
            vec![],
        );
        let c = &guaranteed.containers()[0];
        assert_eq!(container_oom_score_adj(&guaranteed, c, CAP), -997);
        let best = pod(vec![container("a", &[], &[])], vec![]);
        assert_eq!(
            container_oom_score_adj(&best, &best.containers()[0], CAP),
            1000
        );
        // Burstable: 1000 - 1000*request/capacity.
        let burst = pod(vec![container("a", &[("memory", "2G")], &[])], vec![]);
        assert_eq!(
            container_oom_score_adj(&burst, &burst.containers()[0], CAP),
            500
        );
        // Tiny request: 1000 → 999.
        let tiny = pod(vec![container("a", &[("cpu", "1")], &[])], vec![]);
        assert_eq!(
            container_oom_score_adj(&tiny, &tiny.containers()[0], CAP),
            999
        );
        // Huge request: clamped to 3.
        let huge = pod(vec![container("a", &[("memory", "4G")], &[])], vec![]);
        assert_eq!(
            container_oom_score_adj(&huge, &huge.containers()[0], CAP),
            3
        );
        // Sidecar never above the smallest app container.
        let mut side = container("s", &[("memory", "1G")], &[]);
        side.restart_policy = Some("Always".into());
        let p = pod(
            vec![container("a", &[("memory", "3G")], &[])],
            vec![side.clone()],
        );
        assert_eq!(container_oom_score_adj(&p, &side, CAP), 250);
        // Static pod of class system-node-critical: like Guaranteed.
        let mut critical = burst.clone();
        critical.metadata.annotations = Some(BTreeMap::from([(
            "kubernetes.io/config.source".to_owned(),
            "file".to_owned(),
        )]));
        critical.spec.as_mut().expect("spec").priority_class_name =
            Some(SYSTEM_NODE_CRITICAL.into());
        assert_eq!(
            container_oom_score_adj(&critical, &critical.containers()[0], CAP),
            -997
        );
    }
}
