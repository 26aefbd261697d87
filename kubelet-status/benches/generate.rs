//! Criterion micro-benchmark of status generation (`generate_api_pod_status`, upstream
//! `generateAPIPodStatus`), which runs on every pod sync: a running two-container pod, first
//! sync (no previous status) and steady state (previous status given). `cargo bench -p
//! kubelet-status` or `cargo xtask bench --micro`.

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::jiff::Timestamp;
use kubelet_core::pod::PodExt;
use kubelet_core::runtime::{
    ContainerState, ContainerStatus, PodStatus, SandboxState, SandboxStatus,
};
use kubelet_core::status::StatusInputs;
use kubelet_core::testing::pod_with;
use kubelet_status::generate_api_pod_status;

fn generate(c: &mut Criterion) {
    let pod = pod_with("web", "Always", &["app", "sidecar"]);
    let now = Some(Timestamp::UNIX_EPOCH);
    let runtime = PodStatus {
        uid: pod.uid(),
        name: "web".into(),
        namespace: "default".into(),
        ips: vec!["10.88.0.7".into()],
        sandboxes: vec![SandboxStatus {
            id: "sandbox-1".into(),
            state: SandboxState::Ready,
            created_at: now,
            ips: vec!["10.88.0.7".into()],
            ..Default::default()
        }],
        containers: ["app", "sidecar"]
            .iter()
            .map(|name| ContainerStatus {
                id: format!("{name}-1"),
                name: (*name).into(),
                state: ContainerState::Running,
                created_at: now,
                started_at: now,
                image: "busybox:1.36".into(),
                image_ref: "sha256:0123".into(),
                ..Default::default()
            })
            .collect(),
    };
    let host_ips = vec!["192.0.2.1".to_owned()];
    let inputs = StatusInputs {
        host_ips: &host_ips,
        ..Default::default()
    };
    let first = generate_api_pod_status(&pod, &runtime, &inputs, None);
    assert_eq!(first.phase.as_deref(), Some("Running"));
    c.bench_function(
        "generate_api_pod_status, 2 running containers, first sync",
        |b| b.iter(|| generate_api_pod_status(black_box(&pod), black_box(&runtime), &inputs, None)),
    );
    c.bench_function(
        "generate_api_pod_status, 2 running containers, steady",
        |b| {
            b.iter(|| {
                generate_api_pod_status(black_box(&pod), black_box(&runtime), &inputs, Some(&first))
            })
        },
    );
}

criterion_group!(benches, generate);
criterion_main!(benches);
