//! Property (acceptance 8): over any sequence of runtime observations, once the generated
//! status of a pod is in a terminal phase (`Succeeded`, `Failed`) it never leaves it, both
//! for the generator fed its own previous status and for the status manager.

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use kubelet_core::runtime::{
    ContainerStatus, ContainerSyncError, PodStatus, PodSyncResult, SandboxState,
};
use kubelet_core::status::{StatusInputs, StatusManager};
use kubelet_status::LocalStatusManager;
use proptest::prelude::*;

/// One container instance the runtime may report.
#[derive(Clone, Debug)]
enum Instance {
    Created,
    Running,
    Exited(i32),
    Unknown,
}

/// One observation: per container (apps then inits) up to two instances, the sandbox
/// state, whether the kubelet is terminating the pod, and a start failure to report.
#[derive(Clone, Debug)]
struct Observation {
    instances: Vec<Vec<Instance>>,
    sandbox_ready: bool,
    terminating: bool,
    failure: Option<(usize, &'static str)>,
}

fn instance() -> impl Strategy<Value = Instance> {
    prop_oneof![
        Just(Instance::Created),
        Just(Instance::Running),
        prop_oneof![Just(0), Just(1), Just(137)].prop_map(Instance::Exited),
        Just(Instance::Unknown),
    ]
}

fn observation(containers: usize) -> impl Strategy<Value = Observation> {
    (
        proptest::collection::vec(proptest::collection::vec(instance(), 0..=2), containers),
        any::<bool>(),
        proptest::bool::weighted(0.2),
        proptest::option::of((
            0..containers,
            prop_oneof![
                Just("CrashLoopBackOff"),
                Just("ErrImagePull"),
                Just("ImagePullBackOff"),
                Just("CreateContainerConfigError"),
            ],
        )),
    )
        .prop_map(
            |(instances, sandbox_ready, terminating, failure)| Observation {
                instances,
                sandbox_ready,
                terminating,
                failure,
            },
        )
}

/// A pod shape: restart policy, 1–2 app containers, 0–2 init containers (each maybe a
/// sidecar), and a sequence of observations of it.
fn scenario() -> impl Strategy<Value = (Pod, Vec<Observation>)> {
    (
        prop_oneof![Just("Always"), Just("OnFailure"), Just("Never")],
        1usize..=2,
        proptest::collection::vec(any::<bool>(), 0..=2),
    )
        .prop_flat_map(|(policy, apps, sidecars)| {
            let app_names: Vec<String> = (0..apps).map(|i| format!("a{i}")).collect();
            let init_names: Vec<String> = (0..sidecars.len()).map(|i| format!("i{i}")).collect();
            let apps_ref: Vec<&str> = app_names.iter().map(String::as_str).collect();
            let inits_ref: Vec<&str> = init_names.iter().map(String::as_str).collect();
            let mut p = pod(policy, &apps_ref, &inits_ref);
            if let Some(inits) = p.spec.as_mut().and_then(|s| s.init_containers.as_mut()) {
                for (c, sidecar) in inits.iter_mut().zip(&sidecars) {
                    if *sidecar {
                        c.restart_policy = Some("Always".into());
                    }
                }
            }
            let total = apps + sidecars.len();
            (
                Just(p),
                proptest::collection::vec(observation(total), 1..12),
            )
        })
}

fn names(p: &Pod) -> Vec<String> {
    let spec = p.spec.as_ref().expect("spec");
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| c.name.clone())
        .collect()
}

fn runtime_of(p: &Pod, o: &Observation, step: i64) -> PodStatus {
    let mut containers: Vec<ContainerStatus> = Vec::new();
    for (name, instances) in names(p).iter().zip(&o.instances) {
        for (n, inst) in instances.iter().enumerate() {
            let id = format!("{name}-{step}-{n}");
            let created_at = step * 100 + i64::try_from(n).unwrap_or(0) * 20;
            let mut c = match inst {
                Instance::Created => created(name, &id, created_at),
                Instance::Running => running(name, &id, created_at),
                Instance::Exited(code) => exited(name, &id, *code, created_at),
                Instance::Unknown => unknown(name, &id, created_at),
            };
            c.restart_count = u32::try_from(n).unwrap_or(0);
            containers.push(c);
        }
    }
    let mut r = runtime(containers);
    if !o.sandbox_ready {
        for s in &mut r.sandboxes {
            s.state = SandboxState::NotReady;
        }
        r.ips.clear();
    }
    r
}

fn sync_result(p: &Pod, o: &Observation) -> Option<PodSyncResult> {
    let (i, reason) = o.failure?;
    Some(PodSyncResult {
        container_errors: vec![ContainerSyncError {
            container: names(p)[i].clone(),
            reason: reason.into(),
            message: "scripted".into(),
        }],
        ..Default::default()
    })
}

fn terminal(s: &ApiPodStatus) -> Option<String> {
    s.phase
        .clone()
        .filter(|p| p == "Succeeded" || p == "Failed")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn generator_never_leaves_a_terminal_phase((p, observations) in scenario()) {
        let mut old: Option<ApiPodStatus> = None;
        let mut reached: Option<String> = None;
        for (step, o) in observations.iter().enumerate() {
            let step = i64::try_from(step).unwrap_or(0);
            let rt = runtime_of(&p, o, step);
            let result = sync_result(&p, o);
            let inputs = StatusInputs {
                sync_result: result.as_ref(),
                terminating: o.terminating,
                ..Default::default()
            };
            let new = generate(&p, &rt, &inputs, old.as_ref());
            if let Some(phase) = &reached {
                prop_assert_eq!(
                    new.phase.as_deref(),
                    Some(phase.as_str()),
                    "left terminal phase at step {} on {:?}",
                    step,
                    o
                );
            }
            reached = reached.or_else(|| terminal(&new));
            old = Some(new);
        }
    }

    #[test]
    fn status_manager_never_leaves_a_terminal_phase((p, observations) in scenario()) {
        let manager = LocalStatusManager::new();
        let mut reached: Option<String> = None;
        for (step, o) in observations.iter().enumerate() {
            let step = i64::try_from(step).unwrap_or(0);
            let rt = runtime_of(&p, o, step);
            let result = sync_result(&p, o);
            let inputs = StatusInputs {
                sync_result: result.as_ref(),
                terminating: o.terminating,
                ..Default::default()
            };
            let generated = manager.generate(&p, &rt, &inputs);
            manager.set_pod_status(&p, generated);
            let stored = manager.pod_status(&uid()).expect("stored");
            if let Some(phase) = &reached {
                prop_assert_eq!(
                    stored.phase.as_deref(),
                    Some(phase.as_str()),
                    "left terminal phase at step {} on {:?}",
                    step,
                    o
                );
                // Ready never comes back on a terminal pod.
                let ready = stored
                    .conditions
                    .iter()
                    .flatten()
                    .find(|c| c.type_ == "Ready")
                    .map(|c| c.status.clone());
                prop_assert_ne!(ready.as_deref(), Some("True"));
            }
            reached = reached.or_else(|| terminal(&stored));
        }
    }
}
