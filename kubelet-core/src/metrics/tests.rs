use super::*;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

fn render(metrics: &KubeletMetrics) -> String {
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    encode(&mut text, &registry).expect("encode");
    text
}

#[test]
fn runtime_operations_count_calls_errors_and_durations() {
    let metrics = KubeletMetrics::default();
    metrics.record_runtime_operation("list_containers", Duration::from_millis(2), false);
    metrics.record_runtime_operation("list_containers", Duration::from_millis(2), true);
    assert_eq!(metrics.runtime_operations_total("list_containers"), 2);
    assert_eq!(
        metrics.runtime_operations_errors_total("list_containers"),
        1
    );
    assert_eq!(metrics.runtime_operations_errors_total("version"), 0);
    let text = render(&metrics);
    assert!(
        text.contains(r#"kubelet_runtime_operations_total{operation_type="list_containers"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"kubelet_runtime_operations_errors_total{operation_type="list_containers"} 1"#
        ),
        "{text}"
    );
    // Upstream's buckets: ExponentialBuckets(.005, 2.5, 14), the last one 0.005 * 2.5^13.
    for le in ["0.005", "745.0580596923828", "+Inf"] {
        let bucket = format!(
            r#"kubelet_runtime_operations_duration_seconds_bucket{{le="{le}",operation_type="list_containers"}} 2"#
        );
        assert!(text.contains(&bucket), "{bucket} missing from\n{text}");
    }
}

fn running_pod(sandbox: SandboxState, containers: &[ContainerState]) -> RunningPod {
    RunningPod {
        sandboxes: vec![crate::runtime::SandboxSummary {
            state: sandbox,
            ..Default::default()
        }],
        containers: containers
            .iter()
            .map(|state| crate::runtime::ContainerSummary {
                state: *state,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn running_pods_and_containers_follow_the_relist() {
    use ContainerState::{Exited, Running};
    let metrics = KubeletMetrics::default();
    metrics.set_running(&[
        running_pod(SandboxState::Ready, &[Running, Running]),
        running_pod(SandboxState::Ready, &[Running, Exited]),
        running_pod(SandboxState::NotReady, &[Exited]),
    ]);
    assert_eq!(metrics.running_pods.get(), 2);
    assert_eq!(metrics.running_containers("running"), 3);
    assert_eq!(metrics.running_containers("exited"), 2);
    assert_eq!(metrics.running_containers("created"), 0);
    // A state no container is in any more goes back to 0.
    metrics.set_running(&[running_pod(SandboxState::NotReady, &[Exited])]);
    assert_eq!(metrics.running_pods.get(), 0);
    assert_eq!(metrics.running_containers("running"), 0);
    assert_eq!(metrics.running_containers("exited"), 1);
}

#[test]
fn exposes_upstream_names() {
    let metrics = KubeletMetrics::default();
    metrics.set_node_name("node-1");
    metrics.record_relist(Duration::from_millis(5), None);
    metrics.record_pod_worker("create", Duration::from_millis(5));
    metrics.record_pod_start(Duration::from_secs(2));
    metrics.record_rest_client_request(&RestClientLabels {
        code: "200".into(),
        method: "GET".into(),
        host: "127.0.0.1:6443".into(),
    });
    let text = render(&metrics);
    for line in [
        r#"kubelet_node_name{node="node-1"} 1"#,
        "kubelet_pleg_relist_duration_seconds_count 1",
        "kubelet_pleg_relist_interval_seconds_count 0",
        r#"kubelet_pod_worker_duration_seconds_count{operation_type="create"} 1"#,
        "kubelet_pod_start_duration_seconds_count 1",
        "# TYPE kubelet_running_pods gauge",
        r#"rest_client_requests_total{code="200",method="GET",host="127.0.0.1:6443"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    assert!(!text.contains("prober_probe"), "{text}");
}

#[test]
fn probes_are_counted_and_removed() {
    let metrics = KubeletMetrics::default();
    let labels = ProbeLabels {
        probe_type: "Readiness",
        result: "successful",
        container: "c".into(),
        pod: "p".into(),
        namespace: "default".into(),
        pod_uid: "u".into(),
    };
    metrics.record_probe(&labels, Some(Duration::from_millis(30)));
    metrics.record_probe(&labels, None);
    assert_eq!(metrics.probe_total(&labels), 2);
    let timed = ProbeDurationLabels::from(&labels);
    assert_eq!(metrics.probe_duration_count(&timed), 1);
    let mut registry = Registry::default();
    metrics.register_probes(&mut registry);
    let mut text = String::new();
    encode(&mut text, &registry).expect("encode");
    assert!(
        text.contains(r#"prober_probe_total{probe_type="Readiness",result="successful",container="c",pod="p",namespace="default",pod_uid="u"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"prober_probe_duration_seconds_bucket{le="0.05",probe_type="Readiness",container="c",pod="p",namespace="default"} 1"#),
        "{text}"
    );
    metrics.remove_probe(&labels);
    assert_eq!(metrics.probe_total(&labels), 0);
    assert_eq!(metrics.probe_duration_count(&timed), 0);
}
