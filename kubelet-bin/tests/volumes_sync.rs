//! The pod syncer with the real volume manager and status manager (fake runtime): a required
//! configMap that does not exist keeps the pod Pending in `ContainerCreating` (the cause,
//! `FailedMount`, in the message) and no sandbox, and the pod starts once the object appears. Static pods cannot reference
//! configMaps, so this is the level at which an API-server pod source is exercised.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ConfigMapVolumeSource, Pod, Volume, VolumeMount};
use kubelet_core::PodExt;
use kubelet_core::backoff::Backoff;
use kubelet_core::cache::PodCache;
use kubelet_core::kubelet::{KubeletPodSyncer, KubeletRuntimeHelper, Managers, RuntimeState};
use kubelet_core::objects::InMemoryObjectSource;
use kubelet_core::pod_manager::PodManager;
use kubelet_core::runtime::{PodStatus, Runtime};
use kubelet_core::sync::{PodSyncer, SyncPodType};
use kubelet_core::testing::{FakePleg, FakeRuntime, pod};
use kubelet_core::volume::VolumeManager;
use kubelet_status::LocalStatusManager;
use kubelet_volumes::DefaultVolumeManager;

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
    syncer: KubeletPodSyncer,
}

fn setup() -> Setup {
    let root = tempfile::tempdir().expect("tempdir");
    let objects = InMemoryObjectSource::new();
    let runtime = FakeRuntime::new();
    let rt: Arc<dyn Runtime> = Arc::new(runtime.clone());
    let cache = PodCache::new();
    let pleg: Arc<dyn kubelet_core::pleg::Pleg> =
        Arc::new(FakePleg::new(rt.clone(), cache.clone()));
    let volumes: Arc<dyn VolumeManager> = Arc::new(
        DefaultVolumeManager::new(root.path().to_path_buf())
            .with_object_source(Arc::new(objects.clone())),
    );
    let status = Arc::new(LocalStatusManager::new());
    let managers = Managers {
        runtime: rt,
        volumes: volumes.clone(),
        status: status.clone(),
        pleg: pleg.clone(),
        cache,
        helper: Arc::new(KubeletRuntimeHelper::new(volumes)),
        probes: Arc::new(kubelet_core::probe::NoProbes),
        cgroups: Arc::new(kubelet_core::cm::Noop::default()),
    };
    let syncer = KubeletPodSyncer::new(
        managers,
        PodManager::new(),
        RuntimeState::new(pleg),
        Arc::new(Backoff::new(
            Duration::from_secs(10),
            Duration::from_secs(300),
        )),
        root.path().to_path_buf(),
        vec!["192.0.2.1".into()],
    );
    Setup {
        _root: root,
        objects,
        runtime,
        status,
        syncer,
    }
}

fn waiting(s: &Setup, p: &Pod) -> (String, String, String) {
    let all = s.status.all_statuses();
    let st = &all.get(&p.uid()).expect("a status").status;
    let c = st
        .container_statuses
        .as_ref()
        .and_then(|c| c.first())
        .expect("container status");
    let w = c
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .expect("waiting");
    (
        st.phase.clone().unwrap_or_default(),
        w.reason.clone().unwrap_or_default(),
        w.message.clone().unwrap_or_default(),
    )
}

#[tokio::test]
async fn a_missing_required_config_map_keeps_the_pod_creating_until_it_appears() {
    let s = setup();
    let p = config_map_pod(false);
    let empty = PodStatus::default();
    for _ in 0..2 {
        let err = s
            .syncer
            .sync_pod(SyncPodType::Create, &p, &empty)
            .await
            .expect_err("volume not ready");
        assert!(err.to_string().contains("not found"), "{err}");
        let (phase, reason, message) = waiting(&s, &p);
        assert_eq!(
            (phase.as_str(), reason.as_str()),
            ("Pending", "ContainerCreating")
        );
        assert!(
            message.starts_with("FailedMount: ")
                && message.contains("\"config\"")
                && message.contains("configmap \"settings\" not found"),
            "{message}"
        );
        assert!(s.runtime.running_pods().is_empty(), "no sandbox yet");
    }
    s.objects.set_config_map(
        "default",
        "settings",
        ConfigMap {
            data: Some([("k".to_owned(), "v".to_owned())].into()),
            ..Default::default()
        },
    );
    s.syncer
        .sync_pod(SyncPodType::Update, &p, &empty)
        .await
        .expect("starts once the configMap exists");
    assert_eq!(s.runtime.container_count(&p.uid()), 1);
}

#[tokio::test]
async fn a_missing_optional_config_map_is_an_empty_volume() {
    let s = setup();
    let p = config_map_pod(true);
    s.syncer
        .sync_pod(SyncPodType::Create, &p, &PodStatus::default())
        .await
        .expect("optional");
    assert_eq!(s.runtime.container_count(&p.uid()), 1);
}
