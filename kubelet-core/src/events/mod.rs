//! Events: what the kubelet tells users about pods and the node (`kubectl describe`).
//!
//! Mirrors the kubelet's side of client-go `tools/record` (`EventRecorder.Event`) and
//! `pkg/kubelet/events/event.go` (the reasons, in [`reasons`]), plus the object references
//! of `pkg/kubelet/container/ref.go` (`GenerateContainerRef`) and the node reference of
//! `kubelet.go`. Recording never blocks and never fails: a recorder that writes to the API
//! server queues, aggregates and rate-limits on its own (kubelet-bin's `ApiEventRecorder`);
//! in standalone mode the [`LogRecorder`] turns events into log lines.

pub mod reasons;

use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod};

use crate::pod::PodExt;

/// `Event.type`: `Normal` or `Warning` (upstream `v1.EventTypeNormal`, `v1.EventTypeWarning`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something the user may need to act on.
    Warning,
}

impl EventType {
    /// The API value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Records events about objects (upstream `record.EventRecorder`). Implementations return
/// at once: a slow or unreachable sink drops events rather than hold up the kubelet.
pub trait EventRecorder: Send + Sync + 'static {
    /// Records one event about `object` with a `reason` from [`reasons`] and a
    /// human-readable `message`.
    fn event(&self, object: &ObjectReference, event_type: EventType, reason: &str, message: &str);
}

impl std::fmt::Debug for dyn EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventRecorder")
    }
}

/// Drops every event.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopRecorder;

impl EventRecorder for NoopRecorder {
    fn event(&self, _: &ObjectReference, _: EventType, _: &str, _: &str) {}
}

/// Turns events into log lines (`info` for `Normal`, `warn` for `Warning`): the recorder of a
/// kubelet without an API server.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogRecorder;

impl EventRecorder for LogRecorder {
    fn event(&self, object: &ObjectReference, event_type: EventType, reason: &str, message: &str) {
        let kind = object.kind.as_deref().unwrap_or("");
        let namespace = object.namespace.as_deref().unwrap_or("");
        let name = object.name.as_deref().unwrap_or("");
        let field_path = object.field_path.as_deref().unwrap_or("");
        match event_type {
            EventType::Normal => {
                tracing::info!(target: "kubelet::event", kind, namespace, name, field_path, reason, "{message}");
            }
            EventType::Warning => {
                tracing::warn!(target: "kubelet::event", kind, namespace, name, field_path, reason, "{message}");
            }
        }
    }
}

/// A reference to `pod` (upstream `ref.GetReference`): kind `Pod`, apiVersion `v1`, name,
/// namespace, uid and resourceVersion.
pub fn pod_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: Some(pod.namespace_or_default().to_owned()),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// A reference to one container of `pod` (upstream `GenerateContainerRef`): the pod's
/// reference with `fieldPath` `spec.containers{name}`, `spec.initContainers{name}` or
/// `spec.ephemeralContainers{name}`; a container the spec does not have refers to the pod.
pub fn container_ref(pod: &Pod, container: &Container) -> ObjectReference {
    container_ref_by_name(pod, &container.name)
}

/// [`container_ref`] for the container called `name`.
pub fn container_ref_by_name(pod: &Pod, name: &str) -> ObjectReference {
    let mut reference = pod_ref(pod);
    reference.field_path = container_field_path(pod, name);
    reference
}

fn container_field_path(pod: &Pod, name: &str) -> Option<String> {
    if pod.containers().iter().any(|c| c.name == name) {
        return Some(format!("spec.containers{{{name}}}"));
    }
    if pod.init_containers().iter().any(|c| c.name == name) {
        return Some(format!("spec.initContainers{{{name}}}"));
    }
    let ephemeral = pod
        .spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_ref())
        .is_some_and(|e| e.iter().any(|c| c.name == name));
    ephemeral.then(|| format!("spec.ephemeralContainers{{{name}}}"))
}

/// The reference the kubelet records node events on (upstream `kubelet.go` `nodeRef`): kind
/// `Node`, the node's name as name and uid, no namespace.
pub fn node_ref(node_name: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("Node".into()),
        name: Some(node_name.to_owned()),
        uid: Some(node_name.to_owned()),
        namespace: Some(String::new()),
        ..Default::default()
    }
}

/// Upstream `format.Pod`: `<name>_<namespace>(<uid>)`, as event messages name pods.
pub fn format_pod(pod: &Pod) -> String {
    format!("{}({})", pod.full_name(), pod.uid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::CollectingRecorder;

    fn pod() -> Pod {
        let mut pod = crate::testing::pod("web");
        if let Some(spec) = pod.spec.as_mut() {
            spec.init_containers = Some(vec![Container {
                name: "setup".into(),
                ..Default::default()
            }]);
        }
        pod
    }

    #[test]
    fn container_refs_name_the_field_as_upstream() {
        let pod = pod();
        let app = pod.containers()[0].name.clone();
        let r = container_ref_by_name(&pod, &app);
        assert_eq!(r.kind.as_deref(), Some("Pod"));
        assert_eq!(r.api_version.as_deref(), Some("v1"));
        assert_eq!(r.uid, pod.metadata.uid);
        assert_eq!(r.field_path, Some(format!("spec.containers{{{app}}}")));
        let r = container_ref_by_name(&pod, "setup");
        assert_eq!(r.field_path.as_deref(), Some("spec.initContainers{setup}"));
        assert_eq!(container_ref_by_name(&pod, "gone").field_path, None);
    }

    #[test]
    fn node_ref_uses_the_name_as_uid() {
        let r = node_ref("node-1");
        assert_eq!(r.kind.as_deref(), Some("Node"));
        assert_eq!(r.uid.as_deref(), Some("node-1"));
        assert_eq!(r.namespace.as_deref(), Some(""));
    }

    #[test]
    fn collecting_recorder_keeps_events_in_order() {
        let recorder = CollectingRecorder::default();
        let pod = pod();
        recorder.event(
            &pod_ref(&pod),
            EventType::Normal,
            reasons::PULLING_IMAGE,
            "a",
        );
        recorder.event(
            &node_ref("n"),
            EventType::Warning,
            reasons::NODE_NOT_READY,
            "b",
        );
        assert_eq!(
            recorder.reasons(),
            [reasons::PULLING_IMAGE, reasons::NODE_NOT_READY]
        );
        assert_eq!(recorder.events()[1].event_type, EventType::Warning);
        assert!(recorder.has(reasons::NODE_NOT_READY, "b"));
    }
}
