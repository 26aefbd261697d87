//! A node built by [`NodeBuilder`] with the real volume and status managers (fake runtime): a
//! required configMap that does not exist keeps the pod Pending in `ContainerCreating` (the
//! cause, `FailedMount`, in the message) and no sandbox, and the pod starts once the object
//! appears. Static pods cannot reference configMaps, so pods come through a
//! [`ChannelSource`], as an API-server pod source would deliver them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ConfigMapVolumeSource, Pod, Volume, VolumeMount};
use kubelet::NodeBuilder;
use kubelet_core::PodExt;
use kubelet_core::config::{ChannelSource, ChannelSourceSender, Operation};
use kubelet_core::objects::InMemoryObjectSource;
use kubelet_core::testing::{FakeRuntime, pod};
use kubelet_status::LocalStatusManager;

fn config_map_pod(optional: bool) -> Pod {
    let mut p = pod("cm");
    if let Some(spec) = p.spec.as_mut() {
        spec.host_network = Some(true);
        spec.volumes = Some(vec![Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "settings".into(),
                optional: Some(optional),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        spec.containers[0].volume_mounts = Some(vec![VolumeMount {
            name: "config".into(),
            mount_path: "/config".into(),
            ..Default::default()
        }]);
    }
    p
}

struct Setup {
    _root: tempfile::TempDir,
    objects: InMemoryObjectSource,
    runtime: FakeRuntime,
    status: Arc<LocalStatusManager>,
    pods: ChannelSourceSender,
    node: kubelet::Node,
}

async fn setup() -> Setup {
    let root = tempfile::tempdir().expect("tempdir");
    let objects = InMemoryObjectSource::new();
    let runtime = FakeRuntime::new();
    let (source, pods) = ChannelSource::new("api");
    let mut node = NodeBuilder::with_runtime(Arc::new(runtime.clone()))
        .node_name("node-a")
        .root_dir(root.path())
        .node_ips(vec!["192.0.2.1".into()])
        .object_source(Arc::new(objects.clone()))
        .source(Box::new(source))
        .no_probes()
        .build()
        .await
        .expect("node builds");
    node.spawn().await;
    let status = node
        .local_status_manager()
        .expect("the default status manager")
        .clone();
    Setup {
        _root: root,
        objects,
        runtime,
        status,
        pods,
        node,
    }
}

/// Waits (on status changes, 30 s at most) until the pod's status satisfies `cond`.
async fn wait_status(s: &Setup, p: &Pod, what: &str, cond: impl Fn(&Setup) -> bool) {
    let mut changes = s.status.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !cond(s) {
        let changed = tokio::time::timeout_at(deadline, changes.changed()).await;
        assert!(
            matches!(changed, Ok(Ok(()))),
            "{}: timed out waiting for {what}",
            p.full_name()
        );
    }
}

fn phase(s: &Setup, p: &Pod) -> Option<String> {
    s.status.versioned_status(&p.uid())?.status.phase
}

fn waiting(s: &Setup, p: &Pod) -> Option<(String, String, String)> {
    let st = s.status.versioned_status(&p.uid())?.status;
    let c = st.container_statuses.as_ref()?.first()?.clone();
    let w = c.state?.waiting?;
    Some((
        st.phase.unwrap_or_default(),
        w.reason.unwrap_or_default(),
        w.message.unwrap_or_default(),
    ))
}

#[tokio::test]
async fn a_missing_required_config_map_keeps_the_pod_creating_until_it_appears() {
    let s = setup().await;
    let p = config_map_pod(false);
    s.pods
        .send(Operation::Add, vec![p.clone()])
        .await
        .expect("node running");
    wait_status(&s, &p, "FailedMount", |s| {
        waiting(s, &p).is_some_and(|(_, _, m)| m.starts_with("FailedMount: "))
    })
    .await;
    let (phase_now, reason, message) = waiting(&s, &p).expect("waiting");
    assert_eq!(
        (phase_now.as_str(), reason.as_str()),
        ("Pending", "ContainerCreating")
    );
    assert!(
        message.contains("\"config\"") && message.contains("configmap \"settings\" not found"),
        "{message}"
    );
    assert!(s.runtime.running_pods().is_empty(), "no sandbox yet");
    s.objects.set_config_map(
        "default",
        "settings",
        ConfigMap {
            data: Some([("k".to_owned(), "v".to_owned())].into()),
            ..Default::default()
        },
    );
    // An update of the pod (as a watch delivers one) syncs it now rather than after the
    // pod worker's 10 s retry.
    let mut updated = p.clone();
    updated
        .metadata
        .labels
        .get_or_insert_default()
        .insert("touched".into(), "yes".into());
    s.pods
        .send(Operation::Update, vec![updated])
        .await
        .expect("node running");
    wait_status(&s, &p, "Running", |s| {
        phase(s, &p).as_deref() == Some("Running")
    })
    .await;
    assert_eq!(s.runtime.container_count(&p.uid()), 1);
    s.node.stop().await;
}

#[tokio::test]
async fn a_missing_optional_config_map_is_an_empty_volume() {
    let s = setup().await;
    let p = config_map_pod(true);
    s.pods
        .send(Operation::Add, vec![p.clone()])
        .await
        .expect("node running");
    wait_status(&s, &p, "Running", |s| {
        phase(s, &p).as_deref() == Some("Running")
    })
    .await;
    assert_eq!(s.runtime.container_count(&p.uid()), 1);
    s.node.stop().await;
}
