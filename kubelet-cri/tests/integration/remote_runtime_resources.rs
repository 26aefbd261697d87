//! Wire-level tests of what `RemoteRuntime` sends for resources, cgroups, hostname and DNS:
//! the sandbox and container configs `FakeCriServer` receives.

// Test code, on the test's own runtime: blocking file calls are fine here.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubelet_core::backoff::Backoff;
use kubelet_core::kuberuntime::ClusterDns;
use kubelet_core::pod::PodExt;
use kubelet_core::runtime::{Runtime, RuntimeHelper};
use kubelet_core::testing::{FakeRuntimeHelper, pod};
use kubelet_cri::Options;
use kubelet_cri::fake::FakeCriServer;

const GI: i64 = 1 << 30;

fn quantities(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect(),
    )
}

fn burstable_pod() -> Pod {
    let mut p = pod("web");
    let spec = p.spec.as_mut().expect("spec");
    spec.hostname = Some("h".into());
    spec.subdomain = Some("sub".into());
    spec.set_hostname_as_fqdn = Some(true);
    spec.containers[0].resources = Some(ResourceRequirements {
        requests: quantities(&[("cpu", "500m"), ("memory", "1Gi")]),
        limits: quantities(&[("cpu", "1"), ("memory", "2Gi")]),
        ..Default::default()
    });
    p
}

#[tokio::test]
async fn sandbox_and_container_carry_resources_cgroup_parent_hostname_and_dns() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("resolv.conf"),
        "nameserver 192.0.2.53\nsearch example.com\n",
    )
    .expect("resolv.conf");
    let server = FakeCriServer::start(dir.path()).await.expect("fake CRI");
    server.cri().add_image("busybox:1.36");
    let opts = Options::default()
        .with_pod_logs_dir(dir.path().join("logs"))
        .with_resolv_conf(dir.path().join("resolv.conf"))
        .with_request_timeout(Duration::from_secs(10))
        .with_memory_capacity(4 * GI)
        .with_cluster_dns(ClusterDns {
            servers: vec!["10.96.0.10".into()],
            domain: "cluster.local".into(),
        });
    let rt = kubelet_cri::connect(&server.endpoint(), opts).expect("connect");
    let p = burstable_pod();
    let helper: Arc<dyn RuntimeHelper> = Arc::new(FakeRuntimeHelper);
    let status = rt
        .get_pod_status(&p.uid(), p.name_or_empty(), p.namespace_or_default())
        .await
        .expect("status");
    let result = rt
        .sync_pod(&p, &status, helper, &Backoff::crash_loop_default())
        .await
        .expect("sync");
    assert!(result.is_ok(), "{result:?}");

    let sandboxes = server.cri().sandboxes();
    let sb = &sandboxes[0].config;
    assert_eq!(sb.hostname, "h.sub.default.svc.cluster.local");
    let dns = sb.dns_config.as_ref().expect("dns");
    assert_eq!(dns.servers, ["10.96.0.10"]);
    assert_eq!(
        dns.searches,
        [
            "default.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
            "example.com"
        ]
    );
    assert_eq!(dns.options, ["ndots:5"]);
    let linux = sb.linux.as_ref().expect("linux");
    assert_eq!(linux.cgroup_parent, "/kubepods/burstable/poduid-web");
    let res = linux.resources.as_ref().expect("sandbox resources");
    assert_eq!(
        (res.cpu_shares, res.cpu_quota, res.cpu_period),
        (512, 100_000, 100_000)
    );
    assert_eq!(res.memory_limit_in_bytes, 2 * GI);

    let containers = server.cri().containers();
    let res = containers[0]
        .config
        .linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .expect("container resources");
    assert_eq!(
        (res.cpu_shares, res.cpu_quota, res.cpu_period),
        (512, 100_000, 100_000)
    );
    assert_eq!(res.memory_limit_in_bytes, 2 * GI);
    // Burstable: 1000 - 1000 × 1 GiB / 4 GiB.
    assert_eq!(res.oom_score_adj, 750);
}
