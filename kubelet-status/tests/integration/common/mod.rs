//! Fixtures shared by the status tests.
#![allow(dead_code, missing_docs)]

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus as ApiContainerStatus, Pod, PodCondition, PodSpec,
    PodStatus as ApiPodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kubelet_core::PodUid;
use kubelet_core::runtime::{
    ContainerState, ContainerStatus, PodStatus, SandboxState, SandboxStatus,
};
use kubelet_core::status::StatusInputs;
use kubelet_status::generate::{Options, generate_api_pod_status_with};

pub const POD_IP: &str = "10.244.0.5";

/// A fixed point in time `secs` seconds after a base.
pub fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).expect("valid timestamp")
}

pub fn time(secs: i64) -> Time {
    Time(ts(secs))
}

/// The "now" the generation tests run at.
pub const NOW: i64 = 1_000;

fn container(name: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(format!("registry.example/{name}:1")),
        ..Default::default()
    }
}

/// Pod `web` (UID `uid-web`) with the given restart policy, app and init containers.
pub fn pod(policy: &str, app: &[&str], init: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("uid-web".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(policy.into()),
            containers: app.iter().map(|n| container(n)).collect(),
            init_containers: (!init.is_empty())
                .then(|| init.iter().map(|n| container(n)).collect()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn uid() -> PodUid {
    PodUid::from("uid-web")
}

fn runtime_container(name: &str, id: &str, state: ContainerState, created: i64) -> ContainerStatus {
    ContainerStatus {
        id: id.into(),
        name: name.into(),
        state,
        created_at: Some(ts(created)),
        image: format!("registry.example/{name}:1"),
        image_ref: format!("sha256:{name}"),
        ..Default::default()
    }
}

/// A running container created at `created` and started one second later.
pub fn running(name: &str, id: &str, created: i64) -> ContainerStatus {
    ContainerStatus {
        started_at: Some(ts(created + 1)),
        ..runtime_container(name, id, ContainerState::Running, created)
    }
}

/// An exited container created at `created`, started a second later, finished at `created + 10`.
pub fn exited(name: &str, id: &str, code: i32, created: i64) -> ContainerStatus {
    ContainerStatus {
        started_at: Some(ts(created + 1)),
        finished_at: Some(ts(created + 10)),
        exit_code: code,
        ..runtime_container(name, id, ContainerState::Exited, created)
    }
}

pub fn created(name: &str, id: &str, created: i64) -> ContainerStatus {
    runtime_container(name, id, ContainerState::Created, created)
}

pub fn unknown(name: &str, id: &str, created: i64) -> ContainerStatus {
    runtime_container(name, id, ContainerState::Unknown, created)
}

/// The runtime's view: one ready sandbox with [`POD_IP`] and the given containers.
pub fn runtime(containers: Vec<ContainerStatus>) -> PodStatus {
    PodStatus {
        uid: uid(),
        name: "web".into(),
        namespace: "default".into(),
        ips: vec![POD_IP.into()],
        sandboxes: vec![SandboxStatus {
            id: "sandbox-1".into(),
            state: SandboxState::Ready,
            ips: vec![POD_IP.into()],
            ..Default::default()
        }],
        containers,
    }
}

/// Nothing in the runtime yet.
pub fn empty_runtime() -> PodStatus {
    PodStatus {
        uid: uid(),
        name: "web".into(),
        namespace: "default".into(),
        ..Default::default()
    }
}

pub fn generate(
    pod: &Pod,
    runtime: &PodStatus,
    inputs: &StatusInputs<'_>,
    old: Option<&ApiPodStatus>,
) -> ApiPodStatus {
    generate_api_pod_status_with(pod, runtime, inputs, old, &Options::new().now(ts(NOW)))
}

pub fn gen_simple(pod: &Pod, runtime: &PodStatus) -> ApiPodStatus {
    generate(pod, runtime, &StatusInputs::default(), None)
}

pub fn phase(s: &ApiPodStatus) -> &str {
    s.phase.as_deref().unwrap_or("")
}

pub fn container_status<'a>(s: &'a ApiPodStatus, name: &str) -> &'a ApiContainerStatus {
    s.container_statuses
        .iter()
        .flatten()
        .chain(s.init_container_statuses.iter().flatten())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no status for container {name}"))
}

pub fn condition<'a>(s: &'a ApiPodStatus, type_: &str) -> &'a PodCondition {
    s.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no condition {type_}"))
}

/// `(status, reason, message)` of a condition.
pub fn cond<'a>(s: &'a ApiPodStatus, type_: &str) -> (&'a str, Option<&'a str>, Option<&'a str>) {
    let c = condition(s, type_);
    (c.status.as_str(), c.reason.as_deref(), c.message.as_deref())
}

/// `(reason, message)` of a waiting container.
pub fn waiting<'a>(s: &'a ApiPodStatus, name: &str) -> (Option<&'a str>, Option<&'a str>) {
    let w = container_status(s, name)
        .state
        .as_ref()
        .and_then(|st| st.waiting.as_ref())
        .unwrap_or_else(|| panic!("container {name} is not waiting"));
    (w.reason.as_deref(), w.message.as_deref())
}

pub fn terminated<'a>(
    s: &'a ApiPodStatus,
    name: &str,
) -> &'a k8s_openapi::api::core::v1::ContainerStateTerminated {
    container_status(s, name)
        .state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .unwrap_or_else(|| panic!("container {name} is not terminated"))
}
