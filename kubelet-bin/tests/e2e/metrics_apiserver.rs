//! Issue 14 acceptance 1 and 4 for `/metrics` with every component real: the `kubelet` binary
//! in cluster mode on a private containerd, reached by the real kube-apiserver with its kubelet
//! client certificate: `kubectl get --raw /api/v1/nodes/<node>/proxy/metrics` parses as
//! Prometheus text and carries upstream's names, with values from what the node did (a pod
//! started, its readiness probe run, an image pull that failed, API requests).
//!
//! Skipped when kube-apiserver is not built, unless `KUBELET_REQUIRE_APISERVER` is set (CI).

use crate::support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use support::NODE;
use xtask::apiserver::Cluster;

/// A static pod: a busybox with an exec readiness probe.
const PROBED: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: probed\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: docker.io/library/busybox:1.36\n    imagePullPolicy: IfNotPresent\n    command: [sleep, '3600']\n    readinessProbe:\n      exec:\n        command: ['true']\n      periodSeconds: 1\n";

/// A static pod whose image cannot be pulled: a failed CRI call for
/// `kubelet_runtime_operations_errors_total`.
const UNPULLABLE: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: unpullable\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: missing\n    image: registry.invalid/nothing:1\n    imagePullPolicy: IfNotPresent\n";

/// The samples of a Prometheus text, by metric name (a histogram under its family's name).
fn samples(text: &str) -> HashMap<String, Vec<prometheus_parse::Sample>> {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("Prometheus text");
    let mut by_name: HashMap<String, Vec<prometheus_parse::Sample>> = HashMap::new();
    for sample in scrape.samples {
        by_name
            .entry(sample.metric.clone())
            .or_default()
            .push(sample);
    }
    by_name
}

fn count(samples: &[prometheus_parse::Sample], labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => 0.0,
        })
        .sum()
}

#[test]
fn metrics_through_the_api_server_carry_upstream_names() {
    let Some(cluster) = Cluster::builder()
        .node(NODE)
        .kubelet_client_certificate()
        .start_or_skip()
        .expect("cluster")
    else {
        return;
    };
    let mut node = support::api_reachable_node(&cluster, "metrics");
    node.write_manifest("probed.yaml", PROBED);
    node.write_manifest("unpullable.yaml", UNPULLABLE);
    node.start_kubelet();
    let raw = |path: &str| {
        cluster
            .kubectl(&["get", "--raw", &format!("/api/v1/nodes/{NODE}/proxy{path}")])
            .ok()
    };
    let probe_labels = [
        ("probe_type", "Readiness"),
        ("result", "successful"),
        ("container", "app"),
        ("pod", "probed-it-node"),
        ("namespace", "default"),
    ];
    // Until the pod runs (seen by a relist), its probe has succeeded and the pull has failed.
    let (text, by_name, probes) = node.wait_for(
        Duration::from_secs(120),
        "the pod's start, probe and failed pull in /metrics",
        |_| {
            let text = raw("/metrics")?;
            let by_name = samples(&text);
            let errors = by_name.get("kubelet_runtime_operations_errors_total")?;
            let started = by_name.get("kubelet_pod_start_duration_seconds")?;
            // A relist after the start (the pod worker's own, per pod, is not counted).
            let running = by_name.get("kubelet_running_containers")?;
            let probes = raw("/metrics/probes")?;
            let probed = count(samples(&probes).get("prober_probe_total")?, &probe_labels);
            (count(errors, &[("operation_type", "pull_image")]) >= 1.0
                && count(started, &[]) >= 1.0
                && count(running, &[("container_state", "running")]) >= 1.0
                && probed >= 1.0)
                .then_some((text, by_name, probes))
        },
    );
    let names: HashSet<&str> = by_name.keys().map(String::as_str).collect();
    for name in [
        "kubelet_node_name",
        "kubelet_pod_start_duration_seconds",
        "kubelet_pod_worker_duration_seconds",
        "kubelet_pleg_relist_duration_seconds",
        "kubelet_pleg_relist_interval_seconds",
        "kubelet_running_pods",
        "kubelet_running_containers",
        "kubelet_runtime_operations_total",
        "kubelet_runtime_operations_errors_total",
        "kubelet_runtime_operations_duration_seconds",
        "rest_client_requests_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_virtual_memory_bytes",
        "process_virtual_memory_max_bytes",
        "process_start_time_seconds",
    ] {
        assert!(names.contains(name), "{name} missing from\n{text}");
    }
    assert_eq!(count(&by_name["kubelet_node_name"], &[("node", NODE)]), 1.0);
    assert!(
        count(&by_name["kubelet_running_pods"], &[]) >= 1.0,
        "{text}"
    );
    assert!(
        count(
            &by_name["kubelet_running_containers"],
            &[("container_state", "running")]
        ) >= 1.0,
        "{text}"
    );
    for operation in [
        "run_podsandbox",
        "create_container",
        "start_container",
        "list_containers",
    ] {
        assert!(
            count(
                &by_name["kubelet_runtime_operations_total"],
                &[("operation_type", operation)]
            ) >= 1.0,
            "{operation}: {text}"
        );
    }
    assert!(
        count(
            &by_name["kubelet_pod_worker_duration_seconds"],
            &[("operation_type", "create")]
        ) >= 1.0,
        "{text}"
    );
    // The API server's host, as the node's kubeconfig names it, and upstream's labels.
    let requests = &by_name["rest_client_requests_total"];
    assert!(
        requests
            .iter()
            .any(|s| s.labels.get("code") == Some("200") && s.labels.get("method") == Some("GET")),
        "{text}"
    );
    assert!(
        requests.iter().all(|s| s.labels.get("host").is_some()),
        "{text}"
    );

    // `/metrics/probes` holds the prober's series alone.
    assert!(!probes.contains("kubelet_"), "{probes}");
}
