//! CPU and memory settings of containers and sandboxes in CRI form.
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/kuberuntime_container_linux.go`
//! (`generateLinuxContainerResources`, `calculateLinuxResources`) and
//! `kuberuntime_sandbox_linux.go` (`calculateSandboxResources`,
//! `convertOverheadToLinuxResources`). The math is in [`kubelet_core::cm::helpers`] and
//! [`kubelet_core::pod_resources`]. Hugepage limits, swap and cgroup v2 `unified` settings are
//! not set.

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_core::cm::helpers::{QUOTA_PERIOD, milli_cpu_to_quota, milli_cpu_to_shares};
use kubelet_core::pod_resources::{
    CPU, MEMORY, container_limits, container_oom_score_adj, milli_value, pod_limits, pod_requests,
    value,
};

/// How CPU limits are enforced (upstream `--cpu-cfs-quota`, `--cpu-cfs-quota-period`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CfsQuota {
    /// Set `cpu_quota`/`cpu_period` at all.
    pub enforce: bool,
    /// The CFS period in microseconds.
    pub period_us: i64,
}

impl Default for CfsQuota {
    fn default() -> Self {
        Self {
            enforce: true,
            period_us: QUOTA_PERIOD,
        }
    }
}

/// Upstream `calculateLinuxResources`: shares from the cpu request (from the limit when only
/// a limit is given, 2 with neither), quota from the cpu limit, the memory limit.
/// Amounts are milli-CPUs and bytes; `None` is "not specified".
pub fn calculate_linux_resources(
    cpu_request: Option<i64>,
    cpu_limit: i64,
    memory_limit: i64,
    cfs: CfsQuota,
) -> cri::LinuxContainerResources {
    let shares = match cpu_request {
        None | Some(0) if cpu_limit != 0 => milli_cpu_to_shares(cpu_limit),
        request => milli_cpu_to_shares(request.unwrap_or(0)),
    };
    let mut r = cri::LinuxContainerResources {
        cpu_shares: i64::try_from(shares).unwrap_or(i64::MAX),
        memory_limit_in_bytes: memory_limit.max(0),
        ..Default::default()
    };
    if cfs.enforce {
        r.cpu_quota = milli_cpu_to_quota(cpu_limit, cfs.period_us);
        r.cpu_period = cfs.period_us;
    }
    r
}

/// The resources of one container (upstream `generateLinuxContainerResources`), with the
/// `oom_score_adj` of its QoS class for a node of `memory_capacity` bytes.
#[doc(alias = "generateLinuxContainerResources")]
pub fn container_resources(
    pod: &Pod,
    container: &Container,
    memory_capacity: i64,
    cfs: CfsQuota,
) -> cri::LinuxContainerResources {
    let requested = container
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(CPU))
        .and_then(|q| kubelet_core::qos::parse_quantity(&q.0))
        .map(milli_value);
    let limits = container_limits(container);
    let mut r = calculate_linux_resources(
        requested,
        limits.get(CPU).map_or(0, |n| milli_value(*n)),
        limits.get(MEMORY).map_or(0, |n| value(*n)),
        cfs,
    );
    r.oom_score_adj = container_oom_score_adj(pod, container, memory_capacity);
    r
}

/// The sandbox's `LinuxPodSandboxConfig.resources`: the pod's requests and limits without
/// overhead (upstream `calculateSandboxResources`).
pub fn sandbox_resources(pod: &Pod, cfs: CfsQuota) -> cri::LinuxContainerResources {
    let requests = pod_requests(pod, false);
    let limits = pod_limits(pod, false).limits;
    calculate_linux_resources(
        requests.get(CPU).map(|n| milli_value(*n)),
        limits.get(CPU).map_or(0, |n| milli_value(*n)),
        limits.get(MEMORY).map_or(0, |n| value(*n)),
        cfs,
    )
}

/// The sandbox's `LinuxPodSandboxConfig.overhead`: `spec.overhead` as requests equal to
/// limits (upstream `convertOverheadToLinuxResources`); empty without overhead.
pub fn overhead_resources(pod: &Pod, cfs: CfsQuota) -> cri::LinuxContainerResources {
    let Some(overhead) = pod.spec.as_ref().and_then(|s| s.overhead.as_ref()) else {
        return cri::LinuxContainerResources::default();
    };
    let get = |name: &str| {
        overhead
            .get(name)
            .and_then(|q| kubelet_core::qos::parse_quantity(&q.0))
            .unwrap_or(0)
    };
    let cpu = milli_value(get(CPU));
    calculate_linux_resources(Some(cpu), cpu, value(get(MEMORY)), cfs)
}

/// Sets the sandbox's cgroup parent (when `cgroup_parent` is not empty), resources and
/// overhead (upstream `generatePodSandboxLinuxConfig` with `applySandboxResources`).
pub fn apply_to_sandbox(
    config: &mut cri::PodSandboxConfig,
    pod: &Pod,
    cgroup_parent: &str,
    cfs: CfsQuota,
) {
    let linux = config.linux.get_or_insert_with(Default::default);
    if !cgroup_parent.is_empty() {
        linux.cgroup_parent = cgroup_parent.to_owned();
    }
    linux.resources = Some(sandbox_resources(pod, cfs));
    linux.overhead = Some(overhead_resources(pod, cfs));
}

/// The machine's memory in bytes from `/proc/meminfo` (`MemTotal`), for the Burstable
/// `oom_score_adj` formula.
pub fn machine_memory_capacity() -> Option<i64> {
    // Reviewed: procfs is served from kernel memory (never a disk), and this runs once, when
    // the runtime is built.
    #[allow(clippy::disallowed_methods)]
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_total(&text)
}

fn parse_mem_total(text: &str) -> Option<i64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use kubelet_core::testing::{pod, resource_list};

    fn with_resources(req: &[(&str, &str)], lim: &[(&str, &str)]) -> Pod {
        let mut p = pod("r");
        p.spec.as_mut().expect("spec").containers[0].resources = Some(ResourceRequirements {
            requests: resource_list(req),
            limits: resource_list(lim),
            ..Default::default()
        });
        p
    }

    const GI: i64 = 1 << 30;

    // Cases of upstream TestCalculateLinuxResources.
    #[test]
    fn calculate() {
        let cfs = CfsQuota::default();
        let r = calculate_linux_resources(Some(1000), 2000, 0, cfs);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.cpu_period),
            (1024, 200_000, 100_000)
        );
        assert_eq!(r.memory_limit_in_bytes, 0);
        let r = calculate_linux_resources(None, 2000, 0, cfs);
        assert_eq!((r.cpu_shares, r.cpu_quota), (2048, 200_000));
        let r = calculate_linux_resources(Some(0), 2000, 0, cfs);
        assert_eq!(r.cpu_shares, 2048);
        let r = calculate_linux_resources(None, 0, 0, cfs);
        assert_eq!((r.cpu_shares, r.cpu_quota, r.cpu_period), (2, 0, 100_000));
        let r = calculate_linux_resources(Some(5), 5, GI, cfs);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
            (5, 1000, GI)
        );
        let off = CfsQuota {
            enforce: false,
            ..cfs
        };
        let r = calculate_linux_resources(Some(1000), 2000, 0, off);
        assert_eq!((r.cpu_quota, r.cpu_period), (0, 0));
    }

    // Cases of upstream TestGenerateLinuxContainerResources (memory capacity 4 GiB).
    #[test]
    fn container_by_qos() {
        let cfs = CfsQuota::default();
        let g = with_resources(&[], &[("cpu", "500m"), ("memory", "128Mi")]);
        let r = container_resources(&g, &g.spec.as_ref().expect("s").containers[0], 4 * GI, cfs);
        assert_eq!(r.cpu_shares, 512);
        assert_eq!((r.cpu_quota, r.cpu_period), (50_000, 100_000));
        assert_eq!(r.memory_limit_in_bytes, 128 << 20);
        assert_eq!(r.oom_score_adj, -997);

        let b = with_resources(&[("cpu", "250m"), ("memory", "1Gi")], &[("memory", "2Gi")]);
        let r = container_resources(&b, &b.spec.as_ref().expect("s").containers[0], 4 * GI, cfs);
        assert_eq!((r.cpu_shares, r.cpu_quota), (256, 0));
        assert_eq!(r.memory_limit_in_bytes, 2 * GI);
        assert_eq!(r.oom_score_adj, 750);

        let be = with_resources(&[], &[]);
        let r = container_resources(
            &be,
            &be.spec.as_ref().expect("s").containers[0],
            4 * GI,
            cfs,
        );
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
            (2, 0, 0)
        );
        assert_eq!(r.oom_score_adj, 1000);
    }

    #[test]
    fn mem_total() {
        assert_eq!(
            parse_mem_total("MemFree: 1 kB\nMemTotal:       16384 kB\n"),
            Some(16 << 20)
        );
        assert_eq!(parse_mem_total("nothing"), None);
        assert!(machine_memory_capacity().is_some_and(|m| m > 0));
    }

    #[test]
    fn sandbox_linux_config() {
        let p = with_resources(&[("cpu", "1")], &[]);
        let mut config = cri::PodSandboxConfig::default();
        apply_to_sandbox(
            &mut config,
            &p,
            "/kubepods/burstable/poduid-r",
            CfsQuota::default(),
        );
        let linux = config.linux.expect("linux");
        assert_eq!(linux.cgroup_parent, "/kubepods/burstable/poduid-r");
        assert_eq!(linux.resources.map(|r| r.cpu_shares), Some(1024));
        assert_eq!(
            linux.overhead,
            Some(cri::LinuxContainerResources::default())
        );
    }

    #[test]
    fn sandbox_and_overhead() {
        let cfs = CfsQuota::default();
        let mut p = with_resources(&[("cpu", "1")], &[("cpu", "2"), ("memory", "1Gi")]);
        let r = sandbox_resources(&p, cfs);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
            (1024, 200_000, GI)
        );
        assert_eq!(
            overhead_resources(&p, cfs),
            cri::LinuxContainerResources::default()
        );
        p.spec.as_mut().expect("spec").overhead =
            resource_list(&[("cpu", "100m"), ("memory", "64Mi")]);
        let o = overhead_resources(&p, cfs);
        assert_eq!(
            (o.cpu_shares, o.cpu_quota, o.memory_limit_in_bytes),
            (102, 10_000, 64 << 20)
        );
        // Overhead is not part of the sandbox resources.
        assert_eq!(sandbox_resources(&p, cfs).cpu_shares, 1024);
    }
}
