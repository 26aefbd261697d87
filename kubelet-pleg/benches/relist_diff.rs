//! Criterion micro-benchmark of the PLEG's diff (`compute_events`) over 500 pods / 1,000
//! containers: the pure part of every relist, with nothing changed and with 100 containers
//! exited. `cargo bench -p kubelet-pleg` or `cargo xtask bench --micro`.

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kubelet_core::PodUid;
use kubelet_core::runtime::{
    ContainerState, ContainerSummary, RunningPod, SandboxState, SandboxSummary,
};
use kubelet_pleg::events::compute_events;

/// `pods` pods of two running containers and a ready sandbox each.
fn listing(pods: usize) -> Vec<RunningPod> {
    (0..pods)
        .map(|i| RunningPod {
            uid: PodUid::from(format!("uid-{i}")),
            name: format!("pod-{i}"),
            namespace: "default".into(),
            sandboxes: vec![SandboxSummary {
                id: format!("sandbox-{i}"),
                state: SandboxState::Ready,
                ..Default::default()
            }],
            containers: ["app", "sidecar"]
                .iter()
                .map(|name| ContainerSummary {
                    id: format!("{name}-{i}"),
                    name: (*name).into(),
                    image: "busybox:1.36".into(),
                    hash: 42,
                    state: ContainerState::Running,
                    sandbox_id: format!("sandbox-{i}"),
                    created_at: None,
                })
                .collect(),
        })
        .collect()
}

fn diff_all(old: &[RunningPod], new: &[RunningPod]) -> usize {
    old.iter()
        .zip(new)
        .map(|(o, n)| compute_events(&o.uid, Some(o), Some(n)).len())
        .sum()
}

fn relist_diff(c: &mut Criterion) {
    let old = listing(500);
    let same = old.clone();
    let mut changed = old.clone();
    for pod in changed.iter_mut().take(100) {
        pod.containers[0].state = ContainerState::Exited;
    }
    assert_eq!(diff_all(&old, &same), 0);
    assert_eq!(diff_all(&old, &changed), 100);
    c.bench_function("compute_events, 1000 containers, no change", |b| {
        b.iter(|| diff_all(black_box(&old), black_box(&same)))
    });
    c.bench_function("compute_events, 1000 containers, 100 exited", |b| {
        b.iter(|| diff_all(black_box(&old), black_box(&changed)))
    });
}

criterion_group!(benches, relist_diff);
criterion_main!(benches);
