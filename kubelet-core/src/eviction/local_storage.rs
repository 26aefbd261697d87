//! Local storage isolation: a pod using more local disk than it may (upstream
//! `localStorageEviction`, `emptyDirLimitEviction`, `podEphemeralStorageLimitEviction` and
//! `containerEphemeralStorageLimitEviction` in `pkg/kubelet/eviction/eviction_manager.go`).
//!
//! In that order, the first that applies: an emptyDir used past its `sizeLimit`, the pod's
//! `ephemeral-storage` usage (writable layers, logs, local volumes) past the sum of its
//! containers' limits, one container's writable layer and logs past its own limit (logs
//! only with a dedicated image filesystem, where writable layers live).

use k8s_openapi::api::core::v1::Pod;

use crate::PodExt;
use crate::pod_resources::pod_limits;
use crate::quantity::Amount;
use crate::stats::v1alpha1::PodStats;

/// The resource name.
const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

fn used(fs: Option<&crate::stats::v1alpha1::FsStats>) -> i128 {
    i128::from(fs.and_then(|f| f.used_bytes).unwrap_or(0))
}

fn nanos(bytes: i128) -> i128 {
    bytes.saturating_mul(1_000_000_000)
}

/// Upstream `signalEmptyDirFsLimit`: the `kubelet_evictions` label of an emptyDir past its
/// `sizeLimit`.
pub const SIGNAL_EMPTY_DIR_FS_LIMIT: &str = "emptydirfs.limit";
/// Upstream `signalEphemeralPodFsLimit`: a pod past its summed `ephemeral-storage` limits.
pub const SIGNAL_EPHEMERAL_POD_FS_LIMIT: &str = "ephemeralpodfs.limit";
/// Upstream `signalEphemeralContainerFsLimit`: a container past its `ephemeral-storage`
/// limit.
pub const SIGNAL_EPHEMERAL_CONTAINER_FS_LIMIT: &str = "ephemeralcontainerfs.limit";

/// A pod over a local storage limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which limit (one of the `SIGNAL_*` constants, the `kubelet_evictions` label).
    pub signal: &'static str,
    /// Why the pod must go, as upstream words it.
    pub message: String,
}

/// Why `pod` must go, or `None` when it keeps within its limits.
pub fn local_storage_violation(
    pod: &Pod,
    stats: &PodStats,
    dedicated_image_fs: bool,
) -> Option<Violation> {
    let violation = |signal| move |message| Violation { signal, message };
    empty_dir_limit(pod, stats)
        .map(violation(SIGNAL_EMPTY_DIR_FS_LIMIT))
        .or_else(|| {
            pod_ephemeral_storage_limit(pod, stats).map(violation(SIGNAL_EPHEMERAL_POD_FS_LIMIT))
        })
        .or_else(|| {
            container_ephemeral_storage_limit(pod, stats, dedicated_image_fs)
                .map(violation(SIGNAL_EPHEMERAL_CONTAINER_FS_LIMIT))
        })
}

/// Upstream `emptyDirLimitEviction`.
fn empty_dir_limit(pod: &Pod, stats: &PodStats) -> Option<String> {
    let volumes = pod.spec.as_ref()?.volumes.as_ref()?;
    volumes.iter().find_map(|v| {
        let limit = Amount::parse(&v.empty_dir.as_ref()?.size_limit.as_ref()?.0)?;
        let usage = stats.volume.iter().find(|s| s.name == v.name)?;
        let usage = nanos(used(Some(&usage.fs)));
        (limit.nanos > 0 && usage > limit.nanos).then(|| {
            format!(
                "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                v.name,
                limit.canonical()
            )
        })
    })
}

/// Upstream `podEphemeralStorageLimitEviction`: the pod's summed `ephemeral-storage` stat
/// against `PodLimits`.
fn pod_ephemeral_storage_limit(pod: &Pod, stats: &PodStats) -> Option<String> {
    let limit = *pod_limits(pod, false).limits.get(EPHEMERAL_STORAGE)?;
    let usage = nanos(used(stats.ephemeral_storage.as_ref()));
    (usage > limit).then(|| {
        // A sum of quantities prints in the format of the first one (upstream `Add`).
        let format = pod
            .containers()
            .iter()
            .chain(pod.init_containers())
            .find_map(|c| {
                let q = c
                    .resources
                    .as_ref()?
                    .limits
                    .as_ref()?
                    .get(EPHEMERAL_STORAGE)?;
                Amount::parse(&q.0)
            })
            .map_or(crate::quantity::Format::BinarySi, |a| a.format);
        let limit = Amount {
            nanos: limit,
            format,
        };
        format!(
            "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
            limit.canonical()
        )
    })
}

/// Upstream `containerEphemeralStorageLimitEviction`.
fn container_ephemeral_storage_limit(
    pod: &Pod,
    stats: &PodStats,
    dedicated_image_fs: bool,
) -> Option<String> {
    let containers = &pod.spec.as_ref()?.containers;
    stats.containers.iter().find_map(|cs| {
        let container = containers.iter().find(|c| c.name == cs.name)?;
        let limit = container
            .resources
            .as_ref()?
            .limits
            .as_ref()?
            .get(EPHEMERAL_STORAGE)
            .and_then(|q| Amount::parse(&q.0))
            .filter(|a| a.nanos != 0)?;
        let mut usage = used(cs.logs.as_ref());
        if !dedicated_image_fs {
            usage += used(cs.rootfs.as_ref());
        }
        (nanos(usage) > limit.nanos).then(|| {
            format!(
                "Container {} exceeded its local ephemeral storage limit {:?}. ",
                cs.name,
                limit.canonical()
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, ResourceRequirements, Volume};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::stats::v1alpha1::{ContainerStats, FsStats, VolumeStats};
    use crate::testing::pod;

    fn fs(bytes: u64) -> Option<FsStats> {
        Some(FsStats {
            used_bytes: Some(bytes),
            ..Default::default()
        })
    }

    fn with_empty_dir(limit: &str) -> Pod {
        let mut p = pod("p");
        if let Some(spec) = p.spec.as_mut() {
            spec.volumes = Some(vec![Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    size_limit: Some(Quantity(limit.into())),
                    ..Default::default()
                }),
                ..Default::default()
            }]);
        }
        p
    }

    fn with_limit(limit: &str) -> Pod {
        let mut p = pod("p");
        if let Some(spec) = p.spec.as_mut() {
            let list: BTreeMap<String, Quantity> =
                [(EPHEMERAL_STORAGE.to_owned(), Quantity(limit.into()))].into();
            spec.containers[0].resources = Some(ResourceRequirements {
                limits: Some(list),
                ..Default::default()
            });
        }
        p
    }

    #[test]
    fn an_empty_dir_past_its_size_limit() {
        let p = with_empty_dir("1Mi");
        let mut stats = PodStats {
            volume: vec![VolumeStats {
                name: "scratch".into(),
                fs: fs(1 << 20).unwrap_or_default(),
            }],
            ..Default::default()
        };
        assert_eq!(
            local_storage_violation(&p, &stats, false),
            None,
            "at the limit"
        );
        stats.volume[0].fs.used_bytes = Some(4 << 20);
        assert_eq!(
            local_storage_violation(&p, &stats, false),
            Some(Violation {
                signal: "emptydirfs.limit",
                message: "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ".into()
            })
        );
    }

    #[test]
    fn a_pod_past_its_summed_limit_then_a_container_past_its_own() {
        let p = with_limit("2Mi");
        let stats = PodStats {
            ephemeral_storage: fs(3 << 20),
            ..Default::default()
        };
        assert_eq!(
            local_storage_violation(&p, &stats, false),
            Some(Violation {
                signal: "ephemeralpodfs.limit",
                message:
                    "Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. "
                        .into()
            })
        );
        let stats = PodStats {
            containers: vec![ContainerStats {
                name: "app".into(),
                rootfs: fs(3 << 20),
                logs: fs(1024),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            local_storage_violation(&p, &stats, false),
            Some(Violation {
                signal: "ephemeralcontainerfs.limit",
                message: "Container app exceeded its local ephemeral storage limit \"2Mi\". "
                    .into()
            })
        );
        assert_eq!(
            local_storage_violation(&p, &stats, true),
            None,
            "with a dedicated image filesystem only logs count"
        );
    }
}
