//! CPU and memory math shared by pod cgroups and CRI container resources.
//!
//! Mirrors upstream `pkg/kubelet/cm/helpers_linux.go` (`MilliCPUToShares`,
//! `MilliCPUToQuota`, `ResourceConfigForPod`) and the cgroup v2 weight conversion of
//! `cgroup_manager_linux.go` (`CpuSharesToCPUWeight`).

use k8s_openapi::api::core::v1::Pod;

use crate::pod_resources::{CPU, MEMORY, milli_value, pod_limits, pod_requests, value};
use crate::qos::{BURSTABLE, GUARANTEED, pod_qos};

/// Smallest `cpu.shares` the kernel accepts.
pub const MIN_SHARES: u64 = 2;
/// Largest `cpu.shares` the kernel accepts.
pub const MAX_SHARES: u64 = 262_144;
/// `cpu.shares` of one full CPU.
pub const SHARES_PER_CPU: i64 = 1024;
/// Milli-CPUs per CPU.
pub const MILLI_CPU_TO_CPU: i64 = 1000;
/// The default CFS period in microseconds (100 ms).
pub const QUOTA_PERIOD: i64 = 100_000;
/// The smallest CFS quota in microseconds (1 ms).
pub const MIN_QUOTA_PERIOD: i64 = 1000;

/// `cpu.shares` for a milli-CPU request (upstream `MilliCPUToShares`): 2 for no request,
/// else `milli·1024/1000` clamped to `[2, 262144]`.
#[doc(alias = "MilliCPUToShares")]
pub fn milli_cpu_to_shares(milli_cpu: i64) -> u64 {
    if milli_cpu == 0 {
        return MIN_SHARES;
    }
    let shares = milli_cpu.saturating_mul(SHARES_PER_CPU) / MILLI_CPU_TO_CPU;
    match u64::try_from(shares) {
        Ok(s) => s.clamp(MIN_SHARES, MAX_SHARES),
        Err(_) => MIN_SHARES,
    }
}

/// CFS quota in microseconds for a milli-CPU limit over `period` (upstream
/// `MilliCPUToQuota`): 0 (no quota) without a limit, else `milli·period/1000`, at least 1 ms.
#[doc(alias = "MilliCPUToQuota")]
pub fn milli_cpu_to_quota(milli_cpu: i64, period: i64) -> i64 {
    if milli_cpu == 0 {
        return 0;
    }
    (milli_cpu.saturating_mul(period) / MILLI_CPU_TO_CPU).max(MIN_QUOTA_PERIOD)
}

/// cgroup v2 `cpu.weight` for v1 `cpu.shares` (upstream `CpuSharesToCPUWeight`).
pub fn shares_to_weight(shares: u64) -> u64 {
    1 + (shares.saturating_sub(2) * 9999) / 262_142
}

/// Limits applied to a cgroup; `None` leaves the kernel's value (upstream `ResourceConfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceConfig {
    /// `cpu.shares`.
    pub cpu_shares: Option<u64>,
    /// `cpu.cfs_quota_us`; −1 is unlimited.
    pub cpu_quota: Option<i64>,
    /// `cpu.cfs_period_us`.
    pub cpu_period: Option<u64>,
    /// `memory.limit_in_bytes`.
    pub memory: Option<i64>,
}

/// The limits of a pod's cgroup (upstream `ResourceConfigForPod`): requests (with overhead)
/// give the shares; Guaranteed pods get quota, period and memory limit; Burstable pods get
/// quota/period only when every container limits cpu and a memory limit only when every
/// container limits memory; BestEffort pods get the minimum shares. Without
/// `enforce_cpu_limits` the quota is −1.
#[doc(alias = "ResourceConfigForPod")]
pub fn resource_config_for_pod(
    pod: &Pod,
    enforce_cpu_limits: bool,
    cpu_period: u64,
) -> ResourceConfig {
    let requests = pod_requests(pod, true);
    let limits = pod_limits(pod, true);
    let cpu_requests = requests.get(CPU).map_or(0, |n| milli_value(*n));
    let cpu_limits = limits.limits.get(CPU).map_or(0, |n| milli_value(*n));
    let memory_limits = limits.limits.get(MEMORY).map_or(0, |n| value(*n));
    let shares = milli_cpu_to_shares(cpu_requests);
    let period = i64::try_from(cpu_period).unwrap_or(QUOTA_PERIOD);
    let quota = if enforce_cpu_limits {
        milli_cpu_to_quota(cpu_limits, period)
    } else {
        -1
    };
    match pod_qos(pod) {
        GUARANTEED => ResourceConfig {
            cpu_shares: Some(shares),
            cpu_quota: Some(quota),
            cpu_period: Some(cpu_period),
            memory: Some(memory_limits),
        },
        BURSTABLE => ResourceConfig {
            cpu_shares: Some(shares),
            cpu_quota: limits.cpu_declared.then_some(quota),
            cpu_period: limits.cpu_declared.then_some(cpu_period),
            memory: limits.memory_declared.then_some(memory_limits),
        },
        _ => ResourceConfig {
            cpu_shares: Some(MIN_SHARES),
            ..Default::default()
        },
    }
}

/// The cpu shares of the `burstable` QoS cgroup for `active_pods` (upstream
/// `setCPUCgroupConfig`): the shares of the summed cpu requests of the Burstable pods.
pub fn burstable_cpu_shares<'a>(active_pods: impl IntoIterator<Item = &'a Pod>) -> u64 {
    milli_cpu_to_shares(active_pods.into_iter().map(burstable_cpu_milli).sum())
}

/// The millicores `pod` adds to the `burstable` QoS cgroup: its cpu requests when it is
/// Burstable, else 0.
pub fn burstable_cpu_milli(pod: &Pod) -> i64 {
    if pod_qos(pod) != BURSTABLE {
        return 0;
    }
    pod_requests(pod, true)
        .get(CPU)
        .map_or(0, |n| milli_value(*n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::container_with_resources as container;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(containers: Vec<k8s_openapi::api::core::v1::Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    // Golden values of upstream helpers_linux_test.go.
    #[test]
    fn shares_and_quota() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(100), 102);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), 262_144);
        assert_eq!(milli_cpu_to_quota(0, 100_000), 0);
        assert_eq!(milli_cpu_to_quota(5, 100_000), 1000);
        assert_eq!(milli_cpu_to_quota(9, 100_000), 1000);
        assert_eq!(milli_cpu_to_quota(10, 100_000), 1000);
        assert_eq!(milli_cpu_to_quota(200, 100_000), 20_000);
        assert_eq!(milli_cpu_to_quota(500, 50_000), 25_000);
        assert_eq!(milli_cpu_to_quota(1500, 100_000), 150_000);
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
    }

    // Cases of upstream TestResourceConfigForPod.
    #[test]
    fn pod_resource_config() {
        let guaranteed = pod(vec![container(
            "a",
            &[("cpu", "100m"), ("memory", "100Mi")],
            &[("cpu", "100m"), ("memory", "100Mi")],
        )]);
        assert_eq!(
            resource_config_for_pod(&guaranteed, true, 100_000),
            ResourceConfig {
                cpu_shares: Some(102),
                cpu_quota: Some(10_000),
                cpu_period: Some(100_000),
                memory: Some(100 << 20),
            }
        );
        assert_eq!(
            resource_config_for_pod(&guaranteed, false, 100_000).cpu_quota,
            Some(-1)
        );
        let burstable_no_limits = pod(vec![container(
            "a",
            &[("cpu", "100m"), ("memory", "100Mi")],
            &[],
        )]);
        assert_eq!(
            resource_config_for_pod(&burstable_no_limits, true, 100_000),
            ResourceConfig {
                cpu_shares: Some(102),
                ..Default::default()
            }
        );
        let burstable_limits = pod(vec![
            container(
                "a",
                &[("cpu", "100m"), ("memory", "100Mi")],
                &[("cpu", "200m"), ("memory", "200Mi")],
            ),
            container(
                "b",
                &[("cpu", "100m"), ("memory", "100Mi")],
                &[("cpu", "200m"), ("memory", "200Mi")],
            ),
        ]);
        assert_eq!(
            resource_config_for_pod(&burstable_limits, true, 50_000),
            ResourceConfig {
                cpu_shares: Some(204),
                cpu_quota: Some(20_000),
                cpu_period: Some(50_000),
                memory: Some(400 << 20),
            }
        );
        let partial = pod(vec![
            container("a", &[("cpu", "100m")], &[("cpu", "200m")]),
            container("b", &[("memory", "100Mi")], &[]),
        ]);
        assert_eq!(
            resource_config_for_pod(&partial, true, 100_000),
            ResourceConfig {
                cpu_shares: Some(102),
                ..Default::default()
            }
        );
        assert_eq!(
            burstable_cpu_shares(&[
                burstable_limits.clone(),
                partial.clone(),
                guaranteed.clone()
            ]),
            307
        );
        assert_eq!(burstable_cpu_shares(std::slice::from_ref(&guaranteed)), 2);
        let best_effort = pod(vec![container("a", &[], &[])]);
        assert_eq!(
            resource_config_for_pod(&best_effort, true, 100_000),
            ResourceConfig {
                cpu_shares: Some(2),
                ..Default::default()
            }
        );
    }
}
