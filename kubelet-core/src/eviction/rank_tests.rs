use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, ResourceRequirements, Volume};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::eviction::api::ThresholdValue;
use crate::eviction::observations::Observation;
use crate::stats::v1alpha1::{ContainerStats, MemoryStats, PodReference, VolumeStats};
use crate::testing::pod;

/// A pod whose `app` container requests `memory` (and limits it, when `guaranteed`).
pub(crate) fn pod_requesting(name: &str, memory: Option<&str>, priority: i32) -> Pod {
    let mut p = pod(name);
    if let Some(spec) = p.spec.as_mut() {
        spec.priority = Some(priority);
        if let Some(m) = memory {
            let list: BTreeMap<String, Quantity> =
                [("memory".to_owned(), Quantity(m.to_owned()))].into();
            spec.containers[0].resources = Some(ResourceRequirements {
                requests: Some(list),
                ..Default::default()
            });
        }
    }
    p
}

/// Stats of `p` whose `app` container's working set is `working_set` bytes.
pub(crate) fn memory_stats(p: &Pod, working_set: u64) -> PodStats {
    let memory = Some(MemoryStats {
        working_set_bytes: Some(working_set),
        ..Default::default()
    });
    PodStats {
        pod_ref: PodReference {
            name: p.name_or_empty().to_owned(),
            namespace: "default".into(),
            uid: p.uid().as_str().to_owned(),
        },
        containers: vec![ContainerStats {
            name: "app".into(),
            memory: memory.clone(),
            ..Default::default()
        }],
        memory,
        ..Default::default()
    }
}

fn names(pods: &[Pod]) -> Vec<&str> {
    pods.iter().map(PodExt::name_or_empty).collect()
}

#[test]
fn memory_ranks_by_exceeding_requests_then_priority_then_usage_above_requests() {
    const MI: u64 = 1 << 20;
    let within = pod_requesting("within", Some("512Mi"), 0);
    let low_prio_small = pod_requesting("low-small", None, -10);
    let big = pod_requesting("big", None, 0);
    let small = pod_requesting("small", None, 0);
    let no_stats = pod_requesting("no-stats", Some("1Gi"), 1000);
    let stats: StatsByUid = [
        (&within, 400 * MI),
        (&low_prio_small, MI),
        (&big, 300 * MI),
        (&small, 10 * MI),
    ]
    .into_iter()
    .map(|(p, ws)| (p.uid().as_str().to_owned(), memory_stats(p, ws)))
    .collect();
    let mut pods = vec![within, small, no_stats, big, low_prio_small];
    rank(Signal::MemoryAvailable, &mut pods, &stats, false);
    assert_eq!(
        names(&pods),
        ["no-stats", "low-small", "big", "small", "within"]
    );
}

#[test]
fn pid_pressure_ranks_by_priority_only_then_processes() {
    let a = pod_requesting("a", None, 10);
    let b = pod_requesting("b", None, 0);
    let mut pods = vec![a, b];
    rank(Signal::PidAvailable, &mut pods, &StatsByUid::new(), false);
    assert_eq!(names(&pods), ["b", "a"]);
}

#[test]
fn disk_usage_counts_local_volumes_on_disk_only() {
    let mut p = pod("p");
    if let Some(spec) = p.spec.as_mut() {
        spec.volumes = Some(vec![
            Volume {
                name: "disk".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            },
            Volume {
                name: "ram".into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    medium: Some("Memory".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ]);
    }
    let fs = |b| FsStats {
        used_bytes: Some(b),
        inodes_used: Some(1),
        ..Default::default()
    };
    let stats = PodStats {
        containers: vec![ContainerStats {
            name: "app".into(),
            rootfs: Some(fs(100)),
            logs: Some(fs(10)),
            ..Default::default()
        }],
        volume: vec![
            VolumeStats {
                name: "disk".into(),
                fs: fs(1000),
            },
            VolumeStats {
                name: "ram".into(),
                fs: fs(5000),
            },
        ],
        ..Default::default()
    };
    let all = fs_stats_to_measure(Signal::NodeFsAvailable, false);
    assert_eq!(pod_disk_usage(&stats, &p, all), (1110, 3));
    let nodefs = fs_stats_to_measure(Signal::NodeFsAvailable, true);
    assert_eq!(pod_disk_usage(&stats, &p, nodefs), (1010, 2));
}

#[test]
fn the_message_is_upstreams() {
    let p = pod_requesting("hog", Some("64Mi"), 0);
    let stats: StatsByUid = [(p.uid().as_str().to_owned(), memory_stats(&p, 300 << 20))].into();
    let threshold = Threshold {
        signal: Signal::MemoryAvailable,
        value: ThresholdValue::Quantity(Amount::parse("100Mi").expect("q")),
        grace_period: Duration::ZERO,
        min_reclaim: None,
    };
    let observations: Observations = [(
        Signal::MemoryAvailable,
        Observation {
            available: 92_800 * 1024,
            capacity: 4 << 30,
        },
    )]
    .into();
    assert_eq!(
        eviction_message("memory", &p, &stats, &[&threshold], &observations),
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 92800Ki. \
         Container app was using 300Mi, request is 64Mi, has larger consumption of memory. "
    );
    let best_effort = pod_requesting("be", None, 0);
    let stats: StatsByUid = [(
        best_effort.uid().as_str().to_owned(),
        memory_stats(&best_effort, 4096),
    )]
    .into();
    assert_eq!(
        eviction_message("memory", &best_effort, &stats, &[], &observations),
        "The node was low on resource: memory. \
         Container app was using 4Ki, request is 0, has larger consumption of memory. "
    );
}
