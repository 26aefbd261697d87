//! Which pod goes first, and what its eviction message says (upstream `rankMemoryPressure`,
//! `rankPIDPressure`, `rankDiskPressureFunc`, `podDiskUsage`, `evictionMessage` and
//! `getThresholdMetInfo` in `pkg/kubelet/eviction/helpers.go`).
//!
//! Memory: pods using more than their requests first, then lower priority, then the most
//! usage above requests. Disk (bytes or inodes): the same with the disk usage the signal
//! measures. PIDs: lower priority, then more processes. A pod without stats goes first.

use std::cmp::Ordering;
use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use super::api::{Signal, Threshold};
use super::observations::Observations;
use crate::PodExt;
use crate::pod_resources::{pod_requests, value};
use crate::quantity::{Amount, Format};
use crate::stats::v1alpha1::{FsStats, PodStats};

/// The pods' stats by UID (upstream `statsFunc`).
pub type StatsByUid = HashMap<String, PodStats>;

/// The filesystem usage a disk signal counts (upstream `fsStatsType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsStatsType {
    /// The containers' writable layers.
    Root,
    /// The containers' logs.
    Logs,
    /// Local volumes: emptyDir on disk, configMap, gitRepo, hostPath.
    LocalVolumeSource,
}

/// What a disk signal measures (upstream `buildSignalToRankFunc`): with a dedicated image
/// filesystem, nodefs counts logs and local volumes and imagefs the writable layers; on one
/// filesystem both count everything.
pub fn fs_stats_to_measure(signal: Signal, dedicated_image_fs: bool) -> &'static [FsStatsType] {
    use FsStatsType::{LocalVolumeSource, Logs, Root};
    match (signal, dedicated_image_fs) {
        (Signal::NodeFsAvailable | Signal::NodeFsInodesFree, true) => &[Logs, LocalVolumeSource],
        (Signal::ImageFsAvailable | Signal::ImageFsInodesFree, true) => &[Root],
        _ => &[Root, Logs, LocalVolumeSource],
    }
}

fn bytes(fs: Option<&FsStats>) -> u64 {
    fs.and_then(|f| f.used_bytes).unwrap_or(0)
}

fn inodes(fs: Option<&FsStats>) -> u64 {
    fs.and_then(|f| f.inodes_used).unwrap_or(0)
}

/// The names of the pod's volumes on local disk (upstream `localVolumeNames`: hostPath and
/// `IsLocalEphemeralVolume`).
fn local_volume_names(pod: &Pod) -> Vec<&str> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter(|v| {
            v.host_path.is_some()
                || v.git_repo.is_some()
                || v.config_map.is_some()
                || v.empty_dir
                    .as_ref()
                    .is_some_and(|e| e.medium.as_deref().unwrap_or("").is_empty())
        })
        .map(|v| v.name.as_str())
        .collect()
}

/// `(bytes, inodes)` the pod uses of what `measure` names (upstream `podDiskUsage`).
pub fn pod_disk_usage(stats: &PodStats, pod: &Pod, measure: &[FsStatsType]) -> (u64, u64) {
    let (mut disk, mut inode) = (0_u64, 0_u64);
    for c in &stats.containers {
        if measure.contains(&FsStatsType::Root) {
            disk += bytes(c.rootfs.as_ref());
            inode += inodes(c.rootfs.as_ref());
        }
        if measure.contains(&FsStatsType::Logs) {
            disk += bytes(c.logs.as_ref());
            inode += inodes(c.logs.as_ref());
        }
    }
    if measure.contains(&FsStatsType::LocalVolumeSource) {
        for name in local_volume_names(pod) {
            if let Some(v) = stats.volume.iter().find(|v| v.name == name) {
                disk += bytes(Some(&v.fs));
                inode += inodes(Some(&v.fs));
            }
        }
    }
    (disk, inode)
}

fn request_bytes(pod: &Pod, resource: &str) -> i64 {
    pod_requests(pod, true)
        .get(resource)
        .map_or(0, |n| value(*n))
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// `true` before `false` (upstream `cmpBool`).
fn cmp_bool(a: bool, b: bool) -> Ordering {
    b.cmp(&a)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Orders `pods` for eviction under `signal`'s pressure, first to evict first.
pub fn rank(signal: Signal, pods: &mut [Pod], stats: &StatsByUid, dedicated_image_fs: bool) {
    let found = |p: &Pod| stats.get(p.uid().as_str());
    // Pods without stats first, then `by` on the pods that have them.
    let with_stats = |a: &Pod, b: &Pod, by: &dyn Fn(&PodStats, &PodStats) -> Ordering| match (
        found(a),
        found(b),
    ) {
        (Some(sa), Some(sb)) => by(sa, sb),
        (sa, sb) => cmp_bool(sa.is_none(), sb.is_none()),
    };
    let by_priority = |a: &Pod, b: &Pod| priority(a).cmp(&priority(b));
    match signal {
        Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => {
            let usage = |s: &PodStats| {
                to_i64(
                    s.memory
                        .as_ref()
                        .and_then(|m| m.working_set_bytes)
                        .unwrap_or(0),
                )
            };
            pods.sort_by(|a, b| {
                let exceeds = |p: &Pod, s: &PodStats| usage(s) > request_bytes(p, "memory");
                with_stats(a, b, &|sa, sb| cmp_bool(exceeds(a, sa), exceeds(b, sb)))
                    .then_with(|| by_priority(a, b))
                    .then_with(|| {
                        with_stats(a, b, &|sa, sb| {
                            let above_a = usage(sa) - request_bytes(a, "memory");
                            let above_b = usage(sb) - request_bytes(b, "memory");
                            above_b.cmp(&above_a)
                        })
                    })
            });
        }
        Signal::PidAvailable => {
            let processes = |s: &PodStats| {
                s.process_stats
                    .as_ref()
                    .and_then(|p| p.process_count)
                    .unwrap_or(0)
            };
            pods.sort_by(|a, b| {
                by_priority(a, b)
                    .then_with(|| with_stats(a, b, &|sa, sb| processes(sb).cmp(&processes(sa))))
            });
        }
        disk => {
            let measure = fs_stats_to_measure(disk, dedicated_image_fs);
            let inodes = matches!(disk.resource(), "inodes");
            let usage = |p: &Pod, s: &PodStats| {
                let (bytes, count) = pod_disk_usage(s, p, measure);
                to_i64(if inodes { count } else { bytes })
            };
            // Inodes have no requests: upstream compares against a zero request.
            let request = |p: &Pod| {
                if inodes {
                    0
                } else {
                    request_bytes(p, "ephemeral-storage")
                }
            };
            pods.sort_by(|a, b| {
                let exceeds = |p: &Pod, s: &PodStats| usage(p, s) > request(p);
                with_stats(a, b, &|sa, sb| cmp_bool(exceeds(a, sa), exceeds(b, sb)))
                    .then_with(|| by_priority(a, b))
                    .then_with(|| {
                        with_stats(a, b, &|sa, sb| {
                            let above_a = usage(a, sa) - request_bytes(a, "ephemeral-storage");
                            let above_b = usage(b, sb) - request_bytes(b, "ephemeral-storage");
                            above_b.cmp(&above_a)
                        })
                    })
            });
        }
    }
}

/// The threshold quantity and what was available, for the first of `thresholds` that
/// starves `resource` (upstream `getThresholdMetInfo`).
fn threshold_met_info(
    resource: &str,
    thresholds: &[&Threshold],
    observations: &Observations,
) -> Option<(Amount, Amount)> {
    thresholds
        .iter()
        .filter(|t| t.signal.resource() == resource)
        .find_map(|t| {
            let o = observations.get(&t.signal)?;
            Some((
                t.value.quantity(o.capacity),
                Amount::new(i128::from(o.available), t.signal.format()),
            ))
        })
}

/// The message of a pod evicted to reclaim `resource` (upstream `evictionMessage`), e.g.
/// `The node was low on resource: memory. Threshold quantity: 100Mi, available: 92800Ki.
/// Container app was using 1Gi, request is 0, has larger consumption of memory. `
pub fn eviction_message(
    resource: &str,
    pod: &Pod,
    stats: &StatsByUid,
    thresholds: &[&Threshold],
    observations: &Observations,
) -> String {
    let mut message = format!("The node was low on resource: {resource}. ");
    if let Some((quantity, available)) = threshold_met_info(resource, thresholds, observations) {
        message += &format!(
            "Threshold quantity: {}, available: {}. ",
            quantity.canonical(),
            available.canonical()
        );
    }
    let Some(pod_stats) = stats.get(pod.uid().as_str()) else {
        return message;
    };
    let containers: Vec<_> = pod
        .containers()
        .iter()
        .chain(pod.init_containers())
        .collect();
    for cs in &pod_stats.containers {
        let Some(container) = containers.iter().find(|c| c.name == cs.name) else {
            continue;
        };
        let request = container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(resource))
            .and_then(|q| Amount::parse(&q.0))
            .unwrap_or(Amount::new(0, Format::DecimalSi));
        let usage = match resource {
            "ephemeral-storage" => match (
                cs.rootfs.as_ref().and_then(|f| f.used_bytes),
                cs.logs.as_ref().and_then(|f| f.used_bytes),
            ) {
                (Some(r), Some(l)) => Some(r + l),
                _ => None,
            },
            "memory" => cs.memory.as_ref().and_then(|m| m.working_set_bytes),
            _ => None,
        };
        if let Some(usage) = usage.map(|u| Amount::new(i128::from(u), Format::BinarySi))
            && usage.nanos > request.nanos
        {
            message += &format!(
                "Container {} was using {}, request is {}, has larger consumption of {resource}. ",
                container.name,
                usage.canonical(),
                request.canonical()
            );
        }
    }
    message
}

#[cfg(test)]
#[path = "rank_tests.rs"]
mod tests;
