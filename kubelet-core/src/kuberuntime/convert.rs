//! From what a [`super::RuntimeService`] lists and reports ([`super::api`]) to the kubelet's
//! view of pods ([`crate::runtime`]), reading the engine's labels and annotations back.
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/kuberuntime_manager.go` (`GetPods`),
//! `helpers.go` (`sandboxToKubeContainer`, `containerToKubeContainer`) and the status
//! conversion of `kuberuntime_container.go` (`convertToKubeContainerStatus`).

use std::collections::HashMap;

use k8s_openapi::jiff::Timestamp;

use super::api;
use super::labels::{
    CONTAINER_HASH_ANNOTATION, CONTAINER_NAME_LABEL, ContainerAnnotations, ContainerLabels,
    POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL,
};
use crate::pod::PodUid;
use crate::runtime::{
    ContainerState, ContainerStatus, ContainerSummary, RunningPod, SandboxStatus, SandboxSummary,
};

/// Groups listed sandboxes and containers by the pod UID label into [`RunningPod`]s
/// (upstream `GetPods`). Objects without our labels are ignored. Sandboxes and containers
/// are sorted newest first, and pods by their newest sandbox, newest first (pods equally
/// new by UID).
///
/// Takes the listings by value: this runs on every PLEG relist, so IDs, names and images
/// are moved out of the listings rather than copied.
pub fn group_pods(
    sandboxes: Vec<api::PodSandbox>,
    containers: Vec<api::Container>,
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
            listed_sandboxes.push((i, sandbox_summary(s)));
        }
    }
    let mut listed_containers = Vec::with_capacity(containers.len());
    for mut c in containers {
        if let Some(i) = pod_of(&mut c.labels) {
            listed_containers.push((i, container_summary(c)));
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

fn newest(p: &RunningPod) -> Option<Timestamp> {
    let s = p.sandboxes.iter().filter_map(|s| s.created_at).max();
    let c = p.containers.iter().filter_map(|c| c.created_at).max();
    s.max(c)
}

/// A listed sandbox → [`SandboxSummary`].
pub fn sandbox_summary(s: api::PodSandbox) -> SandboxSummary {
    SandboxSummary {
        state: s.state,
        attempt: s.attempt,
        created_at: s.created_at,
        id: s.id,
    }
}

/// The container's name: its name label, else the runtime's name for it.
fn take_name(labels: &mut HashMap<String, String>, runtime_name: String) -> String {
    match labels.remove(CONTAINER_NAME_LABEL) {
        Some(name) if !name.is_empty() => name,
        _ => runtime_name,
    }
}

/// A listed container → [`ContainerSummary`], reading name and hash from its labels and
/// annotations (which the listing returns, so no per-container call is needed).
pub fn container_summary(mut c: api::Container) -> ContainerSummary {
    let hash = c
        .annotations
        .get(CONTAINER_HASH_ANNOTATION)
        .and_then(|v| u64::from_str_radix(v, 16).ok())
        .unwrap_or(0);
    ContainerSummary {
        name: take_name(&mut c.labels, c.name),
        image: c.image,
        hash,
        state: c.state,
        created_at: c.created_at,
        id: c.id,
        sandbox_id: c.sandbox_id,
    }
}

/// Full sandbox status → [`SandboxStatus`].
pub fn sandbox_status(s: api::PodSandboxStatus) -> SandboxStatus {
    SandboxStatus {
        id: s.id,
        state: s.state,
        attempt: s.attempt,
        created_at: s.created_at,
        ips: s.ips,
        host_network: s.host_network,
    }
}

/// A listed sandbox for which no full status was fetched → [`SandboxStatus`] (no IPs, host
/// network unknown and reported as `false`).
pub fn sandbox_status_from_list(s: &api::PodSandbox) -> SandboxStatus {
    SandboxStatus {
        id: s.id.clone(),
        state: s.state,
        attempt: s.attempt,
        created_at: s.created_at,
        ips: Vec::new(),
        host_network: false,
    }
}

/// Full container status → [`ContainerStatus`] (upstream `convertToKubeContainerStatus`):
/// name from the label, restart count and hash from the annotations; start time unless only
/// created; exit code, reason, message and finish time once exited.
pub fn container_status(s: &api::ContainerStatus) -> ContainerStatus {
    let labels = ContainerLabels::parse(&s.labels).unwrap_or_default();
    let annotations = ContainerAnnotations::parse(&s.annotations);
    let mut out = ContainerStatus {
        id: s.id.clone(),
        name: if labels.container_name.is_empty() {
            s.name.clone()
        } else {
            labels.container_name
        },
        state: s.state,
        created_at: s.created_at,
        image: s.image.clone(),
        image_ref: s.image_ref.clone(),
        restart_count: annotations.restart_count,
        hash: annotations.hash,
        ..Default::default()
    };
    if s.state != ContainerState::Created {
        out.started_at = s.started_at;
    }
    if s.state == ContainerState::Exited {
        out.reason = s.reason.clone();
        out.message = s.message.clone();
        out.exit_code = s.exit_code;
        out.finished_at = s.finished_at;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kuberuntime::labels::CONTAINER_RESTART_COUNT_ANNOTATION;
    use crate::runtime::SandboxState;

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

    fn at(nanos: i64) -> Option<Timestamp> {
        crate::time::from_cri_nanos(nanos)
    }

    #[test]
    fn pods_equally_new_are_ordered_by_uid() {
        let sandbox = |id: &str, uid: &str| api::PodSandbox {
            id: id.into(),
            labels: labels(uid, None),
            created_at: at(10),
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
            api::PodSandbox {
                id: "s1".into(),
                labels: labels("a", None),
                created_at: at(10),
                state: SandboxState::Ready,
                ..Default::default()
            },
            api::PodSandbox {
                id: "s2".into(),
                labels: labels("a", None),
                created_at: at(20),
                state: SandboxState::NotReady,
                ..Default::default()
            },
            api::PodSandbox {
                id: "foreign".into(),
                ..Default::default()
            },
        ];
        let containers = vec![
            api::Container {
                id: "c1".into(),
                sandbox_id: "s1".into(),
                labels: labels("a", Some("app")),
                annotations: HashMap::from([(CONTAINER_HASH_ANNOTATION.into(), "ff".into())]),
                state: ContainerState::Running,
                created_at: at(11),
                ..Default::default()
            },
            api::Container {
                id: "c2".into(),
                labels: labels("b", Some("db")),
                created_at: at(30),
                ..Default::default()
            },
            api::Container {
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
    fn container_status_exited_and_created() {
        let s = api::ContainerStatus {
            id: "c".into(),
            name: "runtime-name".into(),
            labels: labels("a", Some("app")),
            annotations: HashMap::from([
                (CONTAINER_HASH_ANNOTATION.into(), "1a".into()),
                (CONTAINER_RESTART_COUNT_ANNOTATION.into(), "4".into()),
            ]),
            state: ContainerState::Exited,
            created_at: at(1_000_000_000),
            started_at: at(2_000_000_000),
            finished_at: at(3_000_000_000),
            exit_code: 3,
            reason: "Error".into(),
            message: "boom".into(),
            image: "busybox:1.36".into(),
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
        assert_eq!(st.finished_at, at(3_000_000_000));
        assert!(st.started_at < st.finished_at);

        let created = api::ContainerStatus {
            state: ContainerState::Created,
            labels: HashMap::new(),
            ..s
        };
        let st = container_status(&created);
        assert_eq!(st.name, "runtime-name", "no label: the runtime's name");
        assert_eq!(st.started_at, None);
        assert_eq!(st.exit_code, 0);
    }
}
