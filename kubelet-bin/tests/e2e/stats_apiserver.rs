//! Issue 14 acceptance 1 for stats, every component real: the `kubelet` binary in cluster
//! mode on a private containerd, its secure port reached by a real kube-apiserver with its
//! `--kubelet-client-certificate` (x509, then a SubjectAccessReview for `nodes/stats` and
//! `nodes/metrics`): `kubectl get --raw /api/v1/nodes/<node>/proxy/stats/summary`,
//! `…/proxy/metrics/resource` and `…/proxy/metrics/cadvisor` carry the node and a running
//! pod's container.
//!
//! Skipped when kube-apiserver is not built, unless `KUBELET_REQUIRE_APISERVER` is set (CI).

use crate::support;

use std::time::Duration;

use support::NODE;
use xtask::apiserver::Cluster;

const POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: sleeper
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
"#;

#[test]
fn stats_and_resource_metrics_through_the_api_server() {
    let Some(cluster) = Cluster::builder()
        .node(NODE)
        .kubelet_client_certificate()
        .start_or_skip()
        .expect("cluster")
    else {
        return;
    };
    let mut node = support::api_reachable_node(&cluster, "stats-apiserver");
    node.write_manifest("sleeper.yaml", POD);
    node.start_kubelet();
    let pod_name = format!("sleeper-{NODE}");
    let raw = |path: &str| {
        cluster.kubectl(&["get", "--raw", &format!("/api/v1/nodes/{NODE}/proxy{path}")])
    };

    let summary: serde_json::Value = node.wait_for(
        Duration::from_secs(120),
        "the pod in /stats/summary through the API server",
        |_| {
            let s: serde_json::Value = serde_json::from_str(&raw("/stats/summary").ok()?).ok()?;
            let has_pod = s["pods"].as_array()?.iter().any(|p| {
                p["podRef"]["name"] == pod_name.as_str()
                    && p["containers"][0]["memory"]["workingSetBytes"].is_u64()
            });
            has_pod.then_some(s)
        },
    );
    assert_eq!(summary["node"]["nodeName"], NODE);
    assert!(
        summary["node"]["cpu"]["usageCoreNanoSeconds"].is_u64(),
        "{}",
        summary["node"]
    );

    let resource = raw("/metrics/resource").expect("/metrics/resource");
    let container = format!(
        "container_memory_working_set_bytes{{container=\"app\",namespace=\"default\",pod=\"{pod_name}\"}} "
    );
    assert!(resource.contains(&container), "{resource}");
    assert!(
        resource.contains("\nnode_cpu_usage_seconds_total "),
        "{resource}"
    );
    assert!(
        resource.contains("\nresource_scrape_error 0\n"),
        "{resource}"
    );

    let cadvisor = raw("/metrics/cadvisor").expect("/metrics/cadvisor");
    assert!(
        cadvisor.lines().any(|l| l
            .starts_with("container_cpu_usage_seconds_total{container=\"app\",")
            && l.contains(&format!("pod=\"{pod_name}\""))),
        "{cadvisor}"
    );
}
