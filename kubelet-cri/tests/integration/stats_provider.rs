//! The CRI stats provider over the wire: `CriStatsProvider` on a `CriRuntimeService` talking
//! to `FakeCriServer` (ListPodSandbox, ListContainers, ListContainerStats, ImageFsInfo; the
//! fake has no ListPodSandboxStats, so the pod is the sum of its containers).

// Test code, on the test's own runtime: blocking file calls are fine here.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_core::backoff::Backoff;
use kubelet_core::pod::{PodExt, PodUid};
use kubelet_core::runtime::{RunContainerOptions, Runtime, RuntimeHelper};
use kubelet_core::stats::cri::{CriStatsProvider, Options as StatsOptions};
use kubelet_core::stats::{Summarizer, SummaryProvider};
use kubelet_core::testing::pod_with;
use kubelet_cri::fake::FakeCriServer;
use kubelet_cri::{CriOptions, CriRuntimeService, Options};

struct Helper;

#[async_trait::async_trait]
impl RuntimeHelper for Helper {
    async fn generate_run_container_options(
        &self,
        pod: &Pod,
        _: &Container,
        _: &[String],
    ) -> Result<RunContainerOptions, kubelet_core::runtime::RunContainerOptionsError> {
        Ok(RunContainerOptions {
            hostname: pod.name_or_empty().into(),
            ..Default::default()
        })
    }
}

#[tokio::test]
async fn summary_over_the_fake_cri() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("resolv.conf"), "nameserver 192.0.2.53\n").expect("resolv");
    let server = FakeCriServer::start(dir.path()).await.expect("fake CRI");
    server.cri().add_image("busybox:1.36");
    let rt = kubelet_cri::connect(
        &server.endpoint(),
        Options::default()
            .with_pod_logs_dir(dir.path().join("logs"))
            .with_resolv_conf(dir.path().join("resolv.conf"))
            .with_request_timeout(Duration::from_secs(10)),
    )
    .expect("connect");
    let pod = pod_with("web", "Always", &["app", "side"]);
    let status = rt
        .get_pod_status(&pod.uid(), pod.name_or_empty(), pod.namespace_or_default())
        .await
        .expect("status");
    let helper: Arc<dyn RuntimeHelper> = Arc::new(Helper);
    rt.sync_pod(&pod, &status, helper, &Backoff::crash_loop_default())
        .await
        .expect("sync");
    let ids: Vec<(String, String)> = server
        .cri()
        .containers()
        .into_iter()
        .map(|c| (c.name().to_owned(), c.id.clone()))
        .collect();
    for (name, id) in &ids {
        let (cpu, ws) = if name == "app" {
            (3_000_000_000, 40 << 20)
        } else {
            (1_000_000_000, 8 << 20)
        };
        server.cri().set_container_usage(id, cpu, ws);
    }

    let service = CriRuntimeService::connect(&server.endpoint(), CriOptions::default())
        .expect("connect stats");
    let provider = Arc::new(CriStatsProvider::new(
        service,
        StatsOptions::new(dir.path())
            .with_pod_logs_dir(dir.path().join("logs"))
            .with_cgroups("/", None),
    ));
    let summary = Summarizer::new("node-1", dir.path(), provider.clone())
        .get()
        .await
        .expect("summary");
    assert_eq!(summary.node.node_name, "node-1");
    assert_eq!(summary.pods.len(), 1);
    let p = &summary.pods[0];
    assert_eq!(p.pod_ref.name, "web");
    assert_eq!(PodUid::from(p.pod_ref.uid.as_str()), pod.uid());
    let mut names: Vec<&str> = p.containers.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["app", "side"]);
    let app = p.containers.iter().find(|c| c.name == "app").expect("app");
    assert_eq!(
        app.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds),
        Some(3_000_000_000)
    );
    assert_eq!(
        app.memory.as_ref().and_then(|m| m.working_set_bytes),
        Some(40 << 20)
    );
    assert_eq!(app.rootfs.as_ref().and_then(|r| r.used_bytes), Some(4096));
    assert_eq!(
        p.cpu.as_ref().and_then(|c| c.usage_core_nano_seconds),
        Some(4_000_000_000)
    );
    assert_eq!(
        p.memory.as_ref().and_then(|m| m.working_set_bytes),
        Some(48 << 20)
    );
    let image_fs = summary
        .node
        .runtime
        .and_then(|r| r.image_fs)
        .and_then(|f| f.used_bytes);
    // 1 KiB per image the fake holds (busybox, and the sandbox image if it was pulled).
    assert!(
        image_fs.is_some_and(|b| b >= 1024 && b % 1024 == 0),
        "{image_fs:?}"
    );
}
