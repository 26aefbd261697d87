//! Conversions between CRI v1 messages and the core runtime types, so that CRI types never
//! leave this crate.
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/helpers.go` (`toKubeContainerState`,
//! `toKubeRuntimeStatus`, `sandboxToKubeContainer`), `convert.go` and the status conversion
//! of `kuberuntime_container.go` (`convertToKubeContainerStatus`). Both sides are foreign to
//! this crate, so these are functions rather than `From` impls (orphan rule).

use std::collections::HashMap;

use k8s_cri::v1 as cri;
use k8s_openapi::jiff::Timestamp;
use kubelet_core::pod::PodUid;
use kubelet_core::runtime::{
    ContainerState, ContainerStatus, ContainerSummary, Mount, MountPropagation, RunningPod,
    RuntimeStatus, SandboxState, SandboxStatus, SandboxSummary, Version,
};
use kubelet_core::time::from_cri_nanos;

use crate::labels::{
    CONTAINER_HASH_ANNOTATION, CONTAINER_NAME_LABEL, ContainerAnnotations, ContainerLabels,
    POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL,
};

/// CRI condition type: the runtime is up and ready to accept basic containers.
pub const RUNTIME_READY: &str = "RuntimeReady";
/// CRI condition type: the runtime network is up and ready to accept containers that need it.
pub const NETWORK_READY: &str = "NetworkReady";

/// `VersionResponse` → [`Version`].
pub fn version(v: &cri::VersionResponse) -> Version {
    Version {
        runtime_name: v.runtime_name.clone(),
        runtime_version: v.runtime_version.clone(),
        runtime_api_version: v.runtime_api_version.clone(),
    }
}

/// `RuntimeStatus` conditions → [`RuntimeStatus`] (upstream `toKubeRuntimeStatus`): a missing
/// condition counts as not ready; the message lists conditions that are not met.
pub fn runtime_status(s: Option<&cri::RuntimeStatus>) -> RuntimeStatus {
    let conditions = s.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let ready = |ty: &str| conditions.iter().any(|c| c.r#type == ty && c.status);
    let message = conditions
        .iter()
        .filter(|c| !c.status)
        .map(|c| {
            format!(
                "{}=false reason:{} message:{}",
                c.r#type, c.reason, c.message
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    RuntimeStatus {
        runtime_ready: ready(RUNTIME_READY),
        network_ready: ready(NETWORK_READY),
        message,
    }
}

/// CRI container state → [`ContainerState`] (upstream `toKubeContainerState`).
pub fn container_state(state: i32) -> ContainerState {
    match cri::ContainerState::try_from(state) {
        Ok(cri::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(cri::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(cri::ContainerState::ContainerExited) => ContainerState::Exited,
        Ok(cri::ContainerState::ContainerUnknown) | Err(_) => ContainerState::Unknown,
    }
}

/// CRI sandbox state → [`SandboxState`].
pub fn sandbox_state(state: i32) -> SandboxState {
    match cri::PodSandboxState::try_from(state) {
        Ok(cri::PodSandboxState::SandboxReady) => SandboxState::Ready,
        _ => SandboxState::NotReady,
    }
}

fn image_name(spec: Option<&cri::ImageSpec>) -> String {
    spec.map(|i| {
        if i.user_specified_image.is_empty() {
            i.image.clone()
        } else {
            i.user_specified_image.clone()
        }
    })
    .unwrap_or_default()
}

/// A listed sandbox → [`SandboxSummary`].
pub fn sandbox_summary(s: &cri::PodSandbox) -> SandboxSummary {
    SandboxSummary {
        id: s.id.clone(),
        state: sandbox_state(s.state),
        attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
        created_at: from_cri_nanos(s.created_at),
    }
}

/// A listed container → [`ContainerSummary`], reading name and hash from its labels and
/// annotations (which `ListContainers` returns, so no per-container call is needed).
pub fn container_summary(c: &cri::Container) -> ContainerSummary {
    let labels = ContainerLabels::parse(&c.labels).unwrap_or_default();
    let annotations = ContainerAnnotations::parse(&c.annotations);
    ContainerSummary {
        id: c.id.clone(),
        name: container_name(&labels, c.metadata.as_ref()),
        image: image_name(c.image.as_ref()),
        hash: annotations.hash,
        state: container_state(c.state),
        sandbox_id: c.pod_sandbox_id.clone(),
        created_at: from_cri_nanos(c.created_at),
    }
}

fn container_name(labels: &ContainerLabels, metadata: Option<&cri::ContainerMetadata>) -> String {
    if labels.container_name.is_empty() {
        metadata.map(|m| m.name.clone()).unwrap_or_default()
    } else {
        labels.container_name.clone()
    }
}

/// Groups listed sandboxes and containers by the pod UID label into [`RunningPod`]s
/// (upstream `GetPods`). Objects without our labels are ignored. Sandboxes and containers
/// are sorted newest first, and pods by their newest sandbox, newest first (pods equally
/// new by UID).
///
/// Takes the listings by value: this runs on every PLEG relist, so IDs, names and images
/// are moved out of the CRI messages rather than copied.
pub fn group_pods(
    sandboxes: Vec<cri::PodSandbox>,
    containers: Vec<cri::Container>,
) -> Vec<RunningPod> {
    let mut pods: Vec<RunningPod> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::with_capacity(sandboxes.len());
    let mut pod_of = |labels: &mut HashMap<String, String>| -> Option<usize> {
        let uid = labels.get(POD_UID_LABEL)?;
        if let Some(&i) = index.get(uid.as_str()) {
            return Some(i);
        }
        let uid = uid.clone();
        index.insert(uid.clone(), pods.len());
        pods.push(RunningPod {
            uid: PodUid(uid),
            name: labels.remove(POD_NAME_LABEL).unwrap_or_default(),
            namespace: labels.remove(POD_NAMESPACE_LABEL).unwrap_or_default(),
            ..Default::default()
        });
        Some(pods.len() - 1)
    };
    let mut listed_sandboxes = Vec::with_capacity(sandboxes.len());
    for mut s in sandboxes {
        if let Some(i) = pod_of(&mut s.labels) {
            listed_sandboxes.push((i, sandbox_summary_owned(s)));
        }
    }
    let mut listed_containers = Vec::with_capacity(containers.len());
    for mut c in containers {
        if let Some(i) = pod_of(&mut c.labels) {
            listed_containers.push((i, container_summary_owned(c)));
        }
    }
    for (i, s) in listed_sandboxes {
        pods[i].sandboxes.push(s);
    }
    for (i, c) in listed_containers {
        pods[i].containers.push(c);
    }
    for p in &mut pods {
        p.sandboxes.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.attempt.cmp(&a.attempt))
        });
        p.containers
            .sort_by_key(|c| std::cmp::Reverse(c.created_at));
    }
    pods.sort_by(|a, b| newest(b).cmp(&newest(a)).then_with(|| a.uid.cmp(&b.uid)));
    pods
}

/// [`sandbox_summary`] of a sandbox the caller no longer needs.
fn sandbox_summary_owned(s: cri::PodSandbox) -> SandboxSummary {
    SandboxSummary {
        state: sandbox_state(s.state),
        attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
        created_at: from_cri_nanos(s.created_at),
        id: s.id,
    }
}

/// [`container_summary`] of a container the caller no longer needs.
fn container_summary_owned(mut c: cri::Container) -> ContainerSummary {
    let hash = c
        .annotations
        .get(CONTAINER_HASH_ANNOTATION)
        .and_then(|v| u64::from_str_radix(v, 16).ok())
        .unwrap_or(0);
    let name = match c.labels.remove(CONTAINER_NAME_LABEL) {
        Some(name) if !name.is_empty() => name,
        _ => c.metadata.map(|m| m.name).unwrap_or_default(),
    };
    let image = c
        .image
        .map(|i| {
            if i.user_specified_image.is_empty() {
                i.image
            } else {
                i.user_specified_image
            }
        })
        .unwrap_or_default();
    ContainerSummary {
        name,
        image,
        hash,
        state: container_state(c.state),
        created_at: from_cri_nanos(c.created_at),
        id: c.id,
        sandbox_id: c.pod_sandbox_id,
    }
}

fn newest(p: &RunningPod) -> Option<Timestamp> {
    let s = p.sandboxes.iter().filter_map(|s| s.created_at).max();
    let c = p.containers.iter().filter_map(|c| c.created_at).max();
    s.max(c)
}

/// Pod IPs of a sandbox: the primary IP first, then the additional ones (upstream
/// `determinePodSandboxIPs`, without its IP validation).
pub fn sandbox_ips(s: &cri::PodSandboxStatus) -> Vec<String> {
    let Some(net) = s.network.as_ref() else {
        return Vec::new();
    };
    std::iter::once(net.ip.as_str())
        .chain(net.additional_ips.iter().map(|ip| ip.ip.as_str()))
        .filter(|ip| !ip.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `true` when the sandbox runs in the node's network namespace.
pub fn sandbox_host_network(s: &cri::PodSandboxStatus) -> bool {
    s.linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .and_then(|n| n.options.as_ref())
        .is_some_and(|o| o.network == cri::NamespaceMode::Node as i32)
}

/// `PodSandboxStatus` → [`SandboxStatus`].
pub fn sandbox_status(s: &cri::PodSandboxStatus) -> SandboxStatus {
    SandboxStatus {
        id: s.id.clone(),
        state: sandbox_state(s.state),
        attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
        created_at: from_cri_nanos(s.created_at),
        ips: sandbox_ips(s),
        host_network: sandbox_host_network(s),
    }
}

/// A listed sandbox for which no `PodSandboxStatus` was fetched → [`SandboxStatus`]
/// (no IPs, host network unknown and reported as `false`).
pub fn sandbox_status_from_list(s: &cri::PodSandbox) -> SandboxStatus {
    let summary = sandbox_summary(s);
    SandboxStatus {
        id: summary.id,
        state: summary.state,
        attempt: summary.attempt,
        created_at: summary.created_at,
        ips: Vec::new(),
        host_network: false,
    }
}

/// `ContainerStatus` → [`ContainerStatus`] (upstream `convertToKubeContainerStatus`): start
/// time unless only created; exit code, reason, message and finish time once exited.
pub fn container_status(s: &cri::ContainerStatus) -> ContainerStatus {
    let labels = ContainerLabels::parse(&s.labels).unwrap_or_default();
    let annotations = ContainerAnnotations::parse(&s.annotations);
    let state = container_state(s.state);
    let mut out = ContainerStatus {
        id: s.id.clone(),
        name: container_name(&labels, s.metadata.as_ref()),
        state,
        created_at: from_cri_nanos(s.created_at),
        image: image_name(s.image.as_ref()),
        image_ref: if s.image_ref.is_empty() {
            s.image_id.clone()
        } else {
            s.image_ref.clone()
        },
        restart_count: annotations.restart_count,
        hash: annotations.hash,
        ..Default::default()
    };
    if state != ContainerState::Created {
        out.started_at = from_cri_nanos(s.started_at);
    }
    if state == ContainerState::Exited {
        out.reason = s.reason.clone();
        out.message = s.message.clone();
        out.exit_code = s.exit_code;
        out.finished_at = from_cri_nanos(s.finished_at);
    }
    out
}

/// A core [`Mount`] → CRI `Mount`.
pub fn mount(m: &Mount) -> cri::Mount {
    cri::Mount {
        container_path: m.container_path.clone(),
        host_path: m.host_path.to_string_lossy().into_owned(),
        readonly: m.read_only,
        propagation: mount_propagation(m.propagation) as i32,
        ..Default::default()
    }
}

/// A core mount propagation → CRI `MountPropagation`.
pub fn mount_propagation(p: MountPropagation) -> cri::MountPropagation {
    match p {
        MountPropagation::Private => cri::MountPropagation::PropagationPrivate,
        MountPropagation::HostToContainer => cri::MountPropagation::PropagationHostToContainer,
        MountPropagation::Bidirectional => cri::MountPropagation::PropagationBidirectional,
    }
}

/// A core environment variable → CRI `KeyValue`.
pub fn key_value((key, value): &(String, String)) -> cri::KeyValue {
    cri::KeyValue {
        key: key.clone(),
        value: value.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::{
        CONTAINER_HASH_ANNOTATION, CONTAINER_NAME_LABEL, CONTAINER_RESTART_COUNT_ANNOTATION,
        POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL,
    };
    use std::collections::HashMap;

    fn labels(uid: &str, container: Option<&str>) -> HashMap<String, String> {
        let mut l = HashMap::from([
            (POD_UID_LABEL.to_owned(), uid.to_owned()),
            (POD_NAME_LABEL.to_owned(), format!("pod-{uid}")),
            (POD_NAMESPACE_LABEL.to_owned(), "ns".to_owned()),
        ]);
        if let Some(c) = container {
            l.insert(CONTAINER_NAME_LABEL.into(), c.into());
        }
        l
    }

    #[test]
    fn runtime_status_conditions() {
        let s = cri::RuntimeStatus {
            conditions: vec![
                cri::RuntimeCondition {
                    r#type: RUNTIME_READY.into(),
                    status: true,
                    ..Default::default()
                },
                cri::RuntimeCondition {
                    r#type: NETWORK_READY.into(),
                    status: false,
                    reason: "NetworkPluginNotReady".into(),
                    message: "cni config uninitialized".into(),
                },
            ],
        };
        let st = runtime_status(Some(&s));
        assert!(st.runtime_ready);
        assert!(!st.network_ready);
        assert!(st.message.contains("NetworkPluginNotReady"));
        assert_eq!(runtime_status(None), RuntimeStatus::default());
    }

    #[test]
    fn pods_equally_new_are_ordered_by_uid() {
        let sandbox = |id: &str, uid: &str| cri::PodSandbox {
            id: id.into(),
            labels: labels(uid, None),
            created_at: 10,
            ..Default::default()
        };
        let sandboxes = vec![sandbox("s1", "c"), sandbox("s2", "a"), sandbox("s3", "b")];
        let uids: Vec<_> = group_pods(sandboxes, Vec::new())
            .into_iter()
            .map(|p| p.uid.0)
            .collect();
        assert_eq!(uids, ["a", "b", "c"]);
    }

    #[test]
    fn groups_by_uid_and_ignores_foreign_objects() {
        let sandboxes = vec![
            cri::PodSandbox {
                id: "s1".into(),
                labels: labels("a", None),
                created_at: 10,
                ..Default::default()
            },
            cri::PodSandbox {
                id: "s2".into(),
                labels: labels("a", None),
                created_at: 20,
                state: cri::PodSandboxState::SandboxNotready as i32,
                ..Default::default()
            },
            cri::PodSandbox {
                id: "foreign".into(),
                ..Default::default()
            },
        ];
        let containers = vec![
            cri::Container {
                id: "c1".into(),
                pod_sandbox_id: "s1".into(),
                labels: labels("a", Some("app")),
                annotations: HashMap::from([(CONTAINER_HASH_ANNOTATION.into(), "ff".into())]),
                state: cri::ContainerState::ContainerRunning as i32,
                created_at: 11,
                ..Default::default()
            },
            cri::Container {
                id: "c2".into(),
                labels: labels("b", Some("db")),
                created_at: 30,
                ..Default::default()
            },
            cri::Container {
                id: "foreign".into(),
                ..Default::default()
            },
        ];
        let pods = group_pods(sandboxes, containers);
        assert_eq!(pods.len(), 2);
        // pod b has the newest object
        assert_eq!(pods[0].uid.as_str(), "b");
        assert!(pods[0].sandboxes.is_empty());
        let a = &pods[1];
        assert_eq!(a.name, "pod-a");
        assert_eq!(a.namespace, "ns");
        let ids: Vec<_> = a.sandboxes.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["s2", "s1"]);
        assert_eq!(a.sandboxes[0].state, SandboxState::NotReady);
        assert_eq!(a.containers.len(), 1);
        assert_eq!(a.containers[0].name, "app");
        assert_eq!(a.containers[0].hash, 0xff);
        assert_eq!(a.containers[0].state, ContainerState::Running);
        assert_eq!(a.containers[0].sandbox_id, "s1");
    }

    #[test]
    fn sandbox_status_ips_and_host_network() {
        let s = cri::PodSandboxStatus {
            id: "s".into(),
            network: Some(cri::PodSandboxNetworkStatus {
                ip: "10.0.0.2".into(),
                additional_ips: vec![cri::PodIp {
                    ip: "fd00::2".into(),
                }],
            }),
            linux: Some(cri::LinuxPodSandboxStatus {
                namespaces: Some(cri::Namespace {
                    options: Some(cri::NamespaceOption {
                        network: cri::NamespaceMode::Node as i32,
                        ..Default::default()
                    }),
                }),
            }),
            metadata: Some(cri::PodSandboxMetadata {
                attempt: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        let st = sandbox_status(&s);
        assert_eq!(st.ips, ["10.0.0.2", "fd00::2"]);
        assert!(st.host_network);
        assert_eq!(st.attempt, 2);
        assert_eq!(st.state, SandboxState::Ready);
    }

    #[test]
    fn container_status_exited_and_created() {
        let s = cri::ContainerStatus {
            id: "c".into(),
            labels: labels("a", Some("app")),
            annotations: HashMap::from([
                (CONTAINER_HASH_ANNOTATION.into(), "1a".into()),
                (CONTAINER_RESTART_COUNT_ANNOTATION.into(), "4".into()),
            ]),
            state: cri::ContainerState::ContainerExited as i32,
            created_at: 1_000_000_000,
            started_at: 2_000_000_000,
            finished_at: 3_000_000_000,
            exit_code: 3,
            reason: "Error".into(),
            message: "boom".into(),
            image: Some(cri::ImageSpec {
                image: "sha256:abc".into(),
                user_specified_image: "busybox:1.36".into(),
                ..Default::default()
            }),
            image_ref: "docker.io/library/busybox@sha256:def".into(),
            ..Default::default()
        };
        let st = container_status(&s);
        assert_eq!(st.name, "app");
        assert_eq!(st.state, ContainerState::Exited);
        assert_eq!(st.exit_code, 3);
        assert_eq!(st.reason, "Error");
        assert_eq!(st.message, "boom");
        assert_eq!(st.hash, 0x1a);
        assert_eq!(st.restart_count, 4);
        assert_eq!(st.image, "busybox:1.36");
        assert_eq!(st.image_ref, "docker.io/library/busybox@sha256:def");
        assert_eq!(st.finished_at, from_cri_nanos(3_000_000_000));
        assert!(st.started_at < st.finished_at);

        let created = cri::ContainerStatus {
            state: cri::ContainerState::ContainerCreated as i32,
            started_at: 5,
            exit_code: 9,
            ..s
        };
        let st = container_status(&created);
        assert_eq!(st.started_at, None);
        assert_eq!(st.exit_code, 0);
        assert_eq!(container_state(42), ContainerState::Unknown);
    }
}
