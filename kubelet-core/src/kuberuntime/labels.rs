//! Labels and annotations the pod engine stores on sandboxes and containers (through
//! [`super::api`]), and their parsing back.
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/labels.go` and the label names of
//! `pkg/kubelet/types/labels.go`. Labels identify the pod and container (and are used in
//! `ListPodSandbox`/`ListContainers` filters); annotations carry what the kubelet needs to
//! restore later: spec hash, restart count, grace periods, termination message settings,
//! the preStop handler and ports ([`restore_specs`]: enough of the pod and container to stop
//! a container whose pod the kubelet no longer knows, e.g. after a restart).

use std::collections::HashMap;

pub use super::api::ContainerType;
use crate::container::hash_container;
use crate::pod::{PodExt, PodUid};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Lifecycle, LifecycleHandler, Pod, PodSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Pod name label (upstream `KubernetesPodNameLabel`).
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
/// Pod namespace label (upstream `KubernetesPodNamespaceLabel`).
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
/// Pod UID label (upstream `KubernetesPodUIDLabel`); objects without it are not ours.
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// Container name label (upstream `KubernetesContainerNameLabel`).
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// Annotation: the pod's `metadata.deletionGracePeriodSeconds` when the container was created.
pub const POD_DELETION_GRACE_PERIOD_ANNOTATION: &str = "io.kubernetes.pod.deletionGracePeriod";
/// Annotation: the pod's `spec.terminationGracePeriodSeconds`.
pub const POD_TERMINATION_GRACE_PERIOD_ANNOTATION: &str =
    "io.kubernetes.pod.terminationGracePeriod";
/// Annotation: [`hash_container`] of the spec, lowercase hex (Go `strconv.FormatUint(h, 16)`).
pub const CONTAINER_HASH_ANNOTATION: &str = "io.kubernetes.container.hash";
/// Annotation: the restart count of this container instance, decimal.
pub const CONTAINER_RESTART_COUNT_ANNOTATION: &str = "io.kubernetes.container.restartCount";
/// Annotation: the container's `terminationMessagePath`.
pub const CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION: &str =
    "io.kubernetes.container.terminationMessagePath";
/// Annotation: the container's `terminationMessagePolicy`.
pub const CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION: &str =
    "io.kubernetes.container.terminationMessagePolicy";
/// Annotation: the container's preStop handler as JSON (upstream
/// `containerPreStopHandlerLabel`).
pub const CONTAINER_PRE_STOP_HANDLER_ANNOTATION: &str = "io.kubernetes.container.preStopHandler";
/// Annotation: the container's ports as JSON (upstream `containerPortsLabel`), for named
/// ports in a restored preStop handler.
pub const CONTAINER_PORTS_ANNOTATION: &str = "io.kubernetes.container.ports";
/// Annotation: `init`, `container` or `ephemeral` (upstream `containerTypeLabel`).
pub const CONTAINER_TYPE_ANNOTATION: &str = "io.kubernetes.container.type";

impl ContainerType {
    /// The annotation value (upstream's container type values).
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerType::Init => "init",
            ContainerType::Regular => "container",
            ContainerType::Ephemeral => "ephemeral",
        }
    }

    /// Parses an annotation value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "init" => Some(ContainerType::Init),
            "container" => Some(ContainerType::Regular),
            "ephemeral" => Some(ContainerType::Ephemeral),
            _ => None,
        }
    }
}

/// Labels of a pod sandbox: the pod's own labels plus name, namespace and UID
/// (upstream `newPodLabels`).
pub fn new_pod_labels(pod: &Pod) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    insert_pod_identity(&mut labels, pod);
    labels
}

/// Annotations of a pod sandbox: the pod's annotations (upstream `newPodAnnotations`).
pub fn new_pod_annotations(pod: &Pod) -> HashMap<String, String> {
    pod.metadata
        .annotations
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn insert_pod_identity(labels: &mut HashMap<String, String>, pod: &Pod) {
    labels.insert(POD_NAME_LABEL.into(), pod.name_or_empty().into());
    labels.insert(
        POD_NAMESPACE_LABEL.into(),
        pod.namespace_or_default().into(),
    );
    labels.insert(POD_UID_LABEL.into(), pod.uid().0);
}

/// Labels of a container (upstream `newContainerLabels`).
pub fn new_container_labels(container: &Container, pod: &Pod) -> HashMap<String, String> {
    let mut labels = HashMap::with_capacity(4);
    insert_pod_identity(&mut labels, pod);
    labels.insert(CONTAINER_NAME_LABEL.into(), container.name.clone());
    labels
}

/// Annotations of a container (upstream `newContainerAnnotations`).
pub fn new_container_annotations(
    container: &Container,
    pod: &Pod,
    restart_count: u32,
    container_type: ContainerType,
) -> HashMap<String, String> {
    let mut a = HashMap::with_capacity(8);
    a.insert(
        CONTAINER_HASH_ANNOTATION.into(),
        format!("{:x}", hash_container(container)),
    );
    a.insert(
        CONTAINER_RESTART_COUNT_ANNOTATION.into(),
        restart_count.to_string(),
    );
    a.insert(
        CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION.into(),
        super::termination::termination_message_path(container)
            .unwrap_or_default()
            .to_owned(),
    );
    a.insert(
        CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION.into(),
        container
            .termination_message_policy
            .clone()
            .unwrap_or_else(|| "File".to_owned()),
    );
    if let Some(g) = pod.metadata.deletion_grace_period_seconds {
        a.insert(POD_DELETION_GRACE_PERIOD_ANNOTATION.into(), g.to_string());
    }
    if let Some(g) = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
    {
        a.insert(
            POD_TERMINATION_GRACE_PERIOD_ANNOTATION.into(),
            g.to_string(),
        );
    }
    if let Some(pre_stop) = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        && let Ok(json) = serde_json::to_string(pre_stop)
    {
        a.insert(CONTAINER_PRE_STOP_HANDLER_ANNOTATION.into(), json);
    }
    if let Some(ports) = container.ports.as_ref().filter(|p| !p.is_empty())
        && let Ok(json) = serde_json::to_string(ports)
    {
        a.insert(CONTAINER_PORTS_ANNOTATION.into(), json);
    }
    a.insert(
        CONTAINER_TYPE_ANNOTATION.into(),
        container_type.as_str().into(),
    );
    a
}

/// What a sandbox's labels say about its pod (upstream `labeledPodSandboxInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxLabels {
    /// Pod name.
    pub pod_name: String,
    /// Pod namespace.
    pub pod_namespace: String,
    /// Pod UID.
    pub pod_uid: PodUid,
    /// The pod's own labels (ours removed).
    pub labels: HashMap<String, String>,
}

impl SandboxLabels {
    /// Parses sandbox labels; `None` when the UID label is missing (not a kubelet sandbox).
    pub fn parse(labels: &HashMap<String, String>) -> Option<Self> {
        let uid = labels.get(POD_UID_LABEL)?;
        Some(Self {
            pod_name: labels.get(POD_NAME_LABEL).cloned().unwrap_or_default(),
            pod_namespace: labels.get(POD_NAMESPACE_LABEL).cloned().unwrap_or_default(),
            pod_uid: PodUid(uid.clone()),
            labels: labels
                .iter()
                .filter(|(k, _)| {
                    ![POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL].contains(&k.as_str())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
    }
}

/// What a container's labels say (upstream `labeledContainerInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerLabels {
    /// Container name from the pod spec.
    pub container_name: String,
    /// Pod name.
    pub pod_name: String,
    /// Pod namespace.
    pub pod_namespace: String,
    /// Pod UID.
    pub pod_uid: PodUid,
}

impl ContainerLabels {
    /// Parses container labels; `None` when the UID label is missing (not a kubelet container).
    pub fn parse(labels: &HashMap<String, String>) -> Option<Self> {
        let uid = labels.get(POD_UID_LABEL)?;
        Some(Self {
            container_name: labels
                .get(CONTAINER_NAME_LABEL)
                .cloned()
                .unwrap_or_default(),
            pod_name: labels.get(POD_NAME_LABEL).cloned().unwrap_or_default(),
            pod_namespace: labels.get(POD_NAMESPACE_LABEL).cloned().unwrap_or_default(),
            pod_uid: PodUid(uid.clone()),
        })
    }
}

/// What a container's annotations say (upstream `annotatedContainerInfo`). Missing or
/// malformed values read as zero/`None`, as upstream (old or foreign containers).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerAnnotations {
    /// Spec hash.
    pub hash: u64,
    /// Restart count of this instance.
    pub restart_count: u32,
    /// The pod's deletion grace period when the container was created.
    pub pod_deletion_grace_period: Option<i64>,
    /// The pod's termination grace period.
    pub pod_termination_grace_period: Option<i64>,
    /// `terminationMessagePath`.
    pub termination_message_path: String,
    /// `terminationMessagePolicy`.
    pub termination_message_policy: String,
    /// Init or regular container, when recorded.
    pub container_type: Option<ContainerType>,
    /// The preStop handler, when the container had one.
    pub pre_stop_handler: Option<LifecycleHandler>,
    /// The container's ports.
    pub container_ports: Vec<ContainerPort>,
}

impl ContainerAnnotations {
    /// Parses container annotations.
    pub fn parse(annotations: &HashMap<String, String>) -> Self {
        let get = |k: &str| annotations.get(k).map(String::as_str);
        Self {
            hash: get(CONTAINER_HASH_ANNOTATION)
                .and_then(|v| u64::from_str_radix(v, 16).ok())
                .unwrap_or(0),
            restart_count: get(CONTAINER_RESTART_COUNT_ANNOTATION)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            pod_deletion_grace_period: get(POD_DELETION_GRACE_PERIOD_ANNOTATION)
                .and_then(|v| v.parse().ok()),
            pod_termination_grace_period: get(POD_TERMINATION_GRACE_PERIOD_ANNOTATION)
                .and_then(|v| v.parse().ok()),
            termination_message_path: get(CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION)
                .unwrap_or_default()
                .to_owned(),
            termination_message_policy: get(CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION)
                .unwrap_or_default()
                .to_owned(),
            container_type: get(CONTAINER_TYPE_ANNOTATION).and_then(ContainerType::parse),
            pre_stop_handler: get(CONTAINER_PRE_STOP_HANDLER_ANNOTATION)
                .and_then(|v| serde_json::from_str(v).ok()),
            container_ports: get(CONTAINER_PORTS_ANNOTATION)
                .and_then(|v| serde_json::from_str(v).ok())
                .unwrap_or_default(),
        }
    }
}

/// The parts of a pod and container that stopping the container needs, rebuilt from its
/// labels and annotations when the kubelet no longer knows the pod (upstream
/// `restoreSpecsFromContainerLabels`): identity, grace periods, termination message path,
/// ports and the preStop handler. Nothing else is set; `None` without our pod UID label.
pub fn restore_specs(
    labels: &HashMap<String, String>,
    annotations: &HashMap<String, String>,
) -> Option<(Pod, Container)> {
    let l = ContainerLabels::parse(labels)?;
    let a = ContainerAnnotations::parse(annotations);
    let pod = Pod {
        metadata: ObjectMeta {
            uid: Some(l.pod_uid.0),
            name: Some(l.pod_name),
            namespace: Some(l.pod_namespace),
            deletion_grace_period_seconds: a.pod_deletion_grace_period,
            ..Default::default()
        },
        spec: Some(PodSpec {
            termination_grace_period_seconds: a.pod_termination_grace_period,
            ..Default::default()
        }),
        ..Default::default()
    };
    let container = Container {
        name: l.container_name,
        ports: (!a.container_ports.is_empty()).then_some(a.container_ports),
        termination_message_path: Some(a.termination_message_path).filter(|p| !p.is_empty()),
        lifecycle: a.pre_stop_handler.map(|pre_stop| Lifecycle {
            pre_stop: Some(pre_stop),
            ..Default::default()
        }),
        ..Default::default()
    };
    Some((pod, container))
}

/// The label selector that picks every object of one pod.
pub fn pod_uid_selector(uid: &PodUid) -> HashMap<String, String> {
    HashMap::from([(POD_UID_LABEL.to_owned(), uid.0.clone())])
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use std::collections::BTreeMap;

    fn pod() -> Pod {
        let mut pod = crate::testing::pod("web");
        pod.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
        pod.metadata.annotations = Some(BTreeMap::from([("note".into(), "x".into())]));
        pod.metadata.deletion_grace_period_seconds = Some(5);
        if let Some(spec) = pod.spec.as_mut() {
            spec.termination_grace_period_seconds = Some(45);
        }
        pod
    }

    #[test]
    fn sandbox_labels_round_trip() {
        let pod = pod();
        let labels = new_pod_labels(&pod);
        assert_eq!(labels[POD_UID_LABEL], "uid-web");
        let parsed = SandboxLabels::parse(&labels).expect("ours");
        assert_eq!(parsed.pod_name, "web");
        assert_eq!(parsed.pod_namespace, "default");
        assert_eq!(parsed.pod_uid, PodUid::from("uid-web"));
        assert_eq!(
            parsed.labels,
            HashMap::from([("app".to_owned(), "web".to_owned())])
        );
        assert_eq!(new_pod_annotations(&pod)["note"], "x");
        assert!(SandboxLabels::parse(&HashMap::new()).is_none());
    }

    #[test]
    fn container_labels_and_annotations_round_trip() {
        let pod = pod();
        let mut c = pod.containers()[0].clone();
        c.termination_message_path = Some("/dev/termination-log".into());
        c.termination_message_policy = Some("File".into());
        let labels = new_container_labels(&c, &pod);
        let parsed = ContainerLabels::parse(&labels).expect("ours");
        assert_eq!(parsed.container_name, "app");
        assert_eq!(parsed.pod_uid.as_str(), "uid-web");

        let ann = new_container_annotations(&c, &pod, 3, ContainerType::Regular);
        assert_eq!(
            ann[CONTAINER_HASH_ANNOTATION],
            format!("{:x}", hash_container(&c))
        );
        assert_eq!(ann[CONTAINER_RESTART_COUNT_ANNOTATION], "3");
        let parsed = ContainerAnnotations::parse(&ann);
        assert_eq!(
            parsed,
            ContainerAnnotations {
                hash: hash_container(&c),
                restart_count: 3,
                pod_deletion_grace_period: Some(5),
                pod_termination_grace_period: Some(45),
                termination_message_path: "/dev/termination-log".into(),
                termination_message_policy: "File".into(),
                container_type: Some(ContainerType::Regular),
                ..Default::default()
            }
        );
    }

    #[test]
    fn specs_restored_from_labels_and_annotations_stop_like_the_original() {
        use k8s_openapi::api::core::v1::{ExecAction, HTTPGetAction};
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let mut pod = pod();
        let mut c = pod.containers()[0].clone();
        c.ports = Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: 8080,
            ..Default::default()
        }]);
        c.lifecycle = Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                http_get: Some(HTTPGetAction {
                    path: Some("/drain".into()),
                    port: IntOrString::String("http".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            post_start: Some(LifecycleHandler {
                exec: Some(ExecAction {
                    command: Some(vec!["true".into()]),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        pod.metadata.deletion_grace_period_seconds = None;
        let labels = new_container_labels(&c, &pod);
        let annotations = new_container_annotations(&c, &pod, 0, ContainerType::Regular);
        let (p, restored) = restore_specs(&labels, &annotations).expect("ours");
        assert_eq!(p.uid(), pod.uid());
        assert_eq!(p.full_name(), pod.full_name());
        assert_eq!(
            p.spec.and_then(|s| s.termination_grace_period_seconds),
            Some(45)
        );
        assert_eq!(restored.name, "app");
        assert_eq!(restored.ports, c.ports);
        let lifecycle = restored.lifecycle.expect("a preStop handler");
        assert_eq!(
            lifecycle.pre_stop,
            c.lifecycle.as_ref().and_then(|l| l.pre_stop.clone())
        );
        assert_eq!(lifecycle.post_start, None, "only what stopping needs");
        // Not ours, or made before these annotations existed.
        assert!(restore_specs(&HashMap::new(), &annotations).is_none());
        let (_, bare) = restore_specs(&labels, &HashMap::new()).expect("ours");
        assert!(bare.lifecycle.is_none() && bare.ports.is_none());
    }

    #[test]
    fn hash_is_go_hex() {
        // `strconv.FormatUint(h, 16)`: lowercase, no padding, no prefix.
        let c = Container {
            name: "app".into(),
            image: Some("busybox:1.36".into()),
            ..Default::default()
        };
        let pod = Pod {
            spec: Some(PodSpec::default()),
            ..Default::default()
        };
        let ann = new_container_annotations(&c, &pod, 0, ContainerType::Init);
        assert_eq!(ann[CONTAINER_HASH_ANNOTATION], "47615a6e");
        assert_eq!(ann[CONTAINER_TYPE_ANNOTATION], "init");
        assert!(!ann.contains_key(POD_TERMINATION_GRACE_PERIOD_ANNOTATION));
    }

    #[test]
    fn malformed_annotations_read_as_zero() {
        let ann = HashMap::from([
            (CONTAINER_HASH_ANNOTATION.to_owned(), "not-hex".to_owned()),
            (
                CONTAINER_RESTART_COUNT_ANNOTATION.to_owned(),
                "-1".to_owned(),
            ),
        ]);
        let parsed = ContainerAnnotations::parse(&ann);
        assert_eq!(parsed.hash, 0);
        assert_eq!(parsed.restart_count, 0);
        assert_eq!(parsed.container_type, None);
    }
}
