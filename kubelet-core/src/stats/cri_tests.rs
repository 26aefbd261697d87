use std::sync::{Arc, Mutex};

use super::*;
use crate::kuberuntime::MockRuntimeService;
use crate::kuberuntime::api::FilesystemUsage;

/// `secs` seconds after a recent base (the cache drops samples older than ten minutes).
fn ts(secs: i64) -> Timestamp {
    static BASE: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(|| crate::time::now().as_second() - 200);
    Timestamp::from_second(base + secs).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn sandbox(id: &str, uid: &str, state: SandboxState, created: i64) -> api::PodSandbox {
    api::PodSandbox {
        id: id.into(),
        state,
        created_at: Some(ts(created)),
        labels: [
            (POD_NAME_LABEL, format!("pod-{uid}")),
            (POD_NAMESPACE_LABEL, "ns".to_owned()),
            (POD_UID_LABEL, uid.to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
        ..Default::default()
    }
}

fn container(
    id: &str,
    sandbox: &str,
    name: &str,
    state: ContainerState,
    created: i64,
) -> api::Container {
    api::Container {
        id: id.into(),
        sandbox_id: sandbox.into(),
        name: name.into(),
        state,
        created_at: Some(ts(created)),
        ..Default::default()
    }
}

fn stats(id: &str, at: i64, cpu: u64, ws: u64) -> api::ContainerStats {
    api::ContainerStats {
        id: id.into(),
        timestamp: Some(ts(at)),
        cpu_usage_nanos: Some(cpu),
        memory_working_set_bytes: Some(ws),
        writable_layer_bytes: Some(4096),
        writable_layer_inodes: Some(3),
        ..Default::default()
    }
}

/// A runtime with pod `u1` (an old NotReady sandbox and a Ready one whose container `app`
/// ran twice, and `side`) whose container stats are `current`.
fn runtime(current: Arc<Mutex<Vec<api::ContainerStats>>>) -> MockRuntimeService {
    let mut rt = MockRuntimeService::new();
    rt.expect_list_pod_sandbox().returning(|_| {
        Ok(vec![
            sandbox("old", "u1", SandboxState::NotReady, 10),
            sandbox("s1", "u1", SandboxState::Ready, 20),
        ])
    });
    rt.expect_list_containers().returning(|_| {
        Ok(vec![
            container("app-0", "s1", "app", ContainerState::Exited, 21),
            container("app-1", "s1", "app", ContainerState::Running, 30),
            container("side", "s1", "side", ContainerState::Running, 22),
            container("gone", "old", "app", ContainerState::Exited, 11),
        ])
    });
    rt.expect_list_container_stats()
        .returning(move |_| Ok(current.lock().map(|v| v.clone()).unwrap_or_default()));
    rt.expect_list_pod_sandbox_stats()
        .returning(|_| Err(RuntimeError::Unsupported("ListPodSandboxStats")));
    rt.expect_image_fs_info().returning(|| {
        Ok(vec![FilesystemUsage {
            mountpoint: "/".into(),
            used_bytes: 1000,
            inodes_used: 10,
        }])
    });
    rt
}

fn provider(current: Arc<Mutex<Vec<api::ContainerStats>>>) -> CriStatsProvider<MockRuntimeService> {
    let tmp = std::env::temp_dir().join("cri-stats-provider-test-none");
    CriStatsProvider::new(
        runtime(current),
        Options::new(&tmp)
            .with_pod_logs_dir(tmp.join("logs"))
            .with_cgroups("/", None),
    )
}

#[tokio::test]
async fn summary_of_the_newest_sandbox_and_containers() {
    let current = Arc::new(Mutex::new(vec![
        stats("app-1", 100, 2_000_000_000, 50 << 20),
        stats("side", 100, 1_000_000_000, 10 << 20),
    ]));
    let p = provider(current);
    let pods = p.list_pod_stats().await.unwrap_or_default();
    assert_eq!(pods.len(), 1, "{pods:?}");
    let pod = &pods[0];
    assert_eq!(
        pod.pod_ref,
        PodReference {
            name: "pod-u1".into(),
            namespace: "ns".into(),
            uid: "u1".into()
        }
    );
    assert_eq!(pod.start_time, Some(Time(ts(20))));
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["app", "side"]);
    let app = &pod.containers[0];
    assert_eq!(app.start_time, Some(Time(ts(30))), "the running instance");
    assert_eq!(
        app.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds),
        Some(2_000_000_000)
    );
    assert_eq!(
        app.cpu.as_ref().and_then(|c| c.usage_nano_cores),
        None,
        "one sample"
    );
    assert_eq!(
        app.memory.as_ref().and_then(|m| m.working_set_bytes),
        Some(50 << 20)
    );
    let rootfs = app.rootfs.clone().unwrap_or_default();
    assert_eq!(
        (rootfs.used_bytes, rootfs.inodes_used),
        (Some(4096), Some(3))
    );
    assert!(
        rootfs.capacity_bytes.unwrap_or(0) > 0,
        "the image filesystem's"
    );
    // No pod cgroup and no sandbox stats: the pod is the sum of its containers.
    assert_eq!(
        pod.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds),
        Some(3_000_000_000)
    );
    assert_eq!(
        pod.memory.as_ref().and_then(|m| m.working_set_bytes),
        Some(60 << 20)
    );
    let eph = pod.ephemeral_storage.clone().unwrap_or_default();
    assert_eq!((eph.used_bytes, eph.inodes_used), (Some(8192), Some(6)));
    let image_fs = p.image_fs_stats().await.ok().flatten().unwrap_or_default();
    assert_eq!(
        (image_fs.used_bytes, image_fs.inodes_used),
        (Some(1000), Some(10))
    );
}

#[tokio::test]
async fn usage_nano_cores_from_the_previous_full_listing() {
    let current = Arc::new(Mutex::new(vec![stats("app-1", 100, 2_000_000_000, 1)]));
    let p = provider(current.clone());
    p.list_pod_stats().await.ok();
    // 1.5 s of CPU in 2 s.
    *current.lock().unwrap_or_else(|e| e.into_inner()) =
        vec![stats("app-1", 102, 3_500_000_000, 1)];
    let cpu_only = p.list_pod_cpu_and_memory_stats().await.unwrap_or_default();
    let cores = |pods: &[PodStats]| {
        pods[0].containers[0]
            .cpu
            .as_ref()
            .and_then(|c| c.usage_nano_cores)
    };
    assert_eq!(
        cores(&cpu_only),
        None,
        "the CPU-and-memory listing does not sample"
    );
    assert!(cpu_only[0].volume.is_empty() && cpu_only[0].containers[0].rootfs.is_none());
    let full = p.list_pod_stats().await.unwrap_or_default();
    assert_eq!(cores(&full), Some(750_000_000));
    assert_eq!(
        full[0].cpu.as_ref().and_then(|c| c.usage_nano_cores),
        Some(750_000_000),
        "the pod's sum"
    );
    let cpu_only = p.list_pod_cpu_and_memory_stats().await.unwrap_or_default();
    assert_eq!(
        cores(&cpu_only),
        Some(750_000_000),
        "the last computed rate"
    );
}

#[tokio::test]
async fn sandbox_stats_give_the_pod_and_its_network() {
    let mut rt = MockRuntimeService::new();
    rt.expect_list_pod_sandbox()
        .returning(|_| Ok(vec![sandbox("s1", "u1", SandboxState::Ready, 20)]));
    rt.expect_list_containers()
        .returning(|_| Ok(vec![container("c", "s1", "c", ContainerState::Running, 21)]));
    rt.expect_list_container_stats()
        .returning(|_| Ok(vec![stats("c", 100, 5, 5)]));
    rt.expect_list_pod_sandbox_stats().returning(|_| {
        let eth0 = InterfaceUsage {
            name: "eth0".into(),
            rx_bytes: Some(100),
            tx_bytes: Some(200),
            ..Default::default()
        };
        Ok(vec![PodSandboxStats {
            id: "s1".into(),
            timestamp: Some(ts(100)),
            cpu_usage_nanos: Some(7_000),
            memory_working_set_bytes: Some(9_000),
            network: Some(NetworkUsage {
                timestamp: Some(ts(100)),
                default_interface: Some(eth0.clone()),
                interfaces: vec![eth0],
            }),
            ..Default::default()
        }])
    });
    rt.expect_image_fs_info()
        .returning(|| Err(RuntimeError::Unsupported("ImageFsInfo")));
    let p = CriStatsProvider::new(rt, Options::new("/nonexistent").with_cgroups("/", None));
    let pods = p.list_pod_stats().await.unwrap_or_default();
    let pod = &pods[0];
    assert_eq!(
        pod.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds),
        Some(7_000)
    );
    assert_eq!(
        pod.memory.as_ref().and_then(|m| m.working_set_bytes),
        Some(9_000)
    );
    let net = pod.network.clone().unwrap_or_default();
    assert_eq!(
        (net.default.name.as_str(), net.default.rx_bytes),
        ("eth0", Some(100))
    );
    assert_eq!(net.interfaces.len(), 1);
}

#[tokio::test]
async fn container_infos_label_containers_and_sandboxes() {
    let current = Arc::new(Mutex::new(vec![stats("app-1", 100, 2_000_000_000, 7)]));
    let p = provider(current);
    let infos = p.container_infos().await.unwrap_or_default();
    let rows: Vec<(&str, &str, &str)> = infos
        .iter()
        .map(|i| (i.container.as_str(), i.name.as_str(), i.cgroup.as_str()))
        .collect();
    // No pod cgroups read here: the IDs alone.
    assert_eq!(
        rows,
        [
            ("app", "app-1", "/app-1"),
            ("side", "side", "/side"),
            ("", "s1", "/s1")
        ]
    );
    assert_eq!(infos[0].pod.name, "pod-u1");
    assert_eq!(
        infos[0].memory.as_ref().and_then(|m| m.working_set_bytes),
        Some(7)
    );
    assert_eq!(
        infos[0].rootfs.as_ref().and_then(|r| r.used_bytes),
        Some(4096)
    );
    assert!(
        infos[0]
            .rootfs
            .as_ref()
            .is_some_and(|r| r.capacity_bytes.is_some())
    );
}

#[tokio::test]
async fn a_runtime_error_fails_the_listing() {
    let mut rt = MockRuntimeService::new();
    rt.expect_list_pod_sandbox()
        .returning(|_| Err(RuntimeError::Unavailable("down".into())));
    let p = CriStatsProvider::new(rt, Options::new("/nonexistent").with_cgroups("/", None));
    assert!(matches!(
        p.list_pod_stats().await,
        Err(super::super::Error::Runtime(RuntimeError::Unavailable(_)))
    ));
}
