use super::*;

#[test]
fn counters_take_their_sample_name_in_prometheus_text() {
    let openmetrics = "# HELP kubelet_runtime_operations Cumulative number of runtime operations by operation type.\n\
                       # TYPE kubelet_runtime_operations counter\n\
                       kubelet_runtime_operations_total{operation_type=\"version\"} 1\n\
                       # HELP kubelet_running_pods Number of pods that have a running pod sandbox\n\
                       # TYPE kubelet_running_pods gauge\n\
                       kubelet_running_pods 2\n\
                       # EOF\n";
    assert_eq!(
        to_prometheus_text(openmetrics),
        "# HELP kubelet_runtime_operations_total Cumulative number of runtime operations by operation type.\n\
         # TYPE kubelet_runtime_operations_total counter\n\
         kubelet_runtime_operations_total{operation_type=\"version\"} 1\n\
         # HELP kubelet_running_pods Number of pods that have a running pod sandbox\n\
         # TYPE kubelet_running_pods gauge\n\
         kubelet_running_pods 2\n"
    );
}

async fn body(response: Response) -> (String, String) {
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (
        content_type,
        String::from_utf8(bytes.to_vec()).expect("utf-8"),
    )
}

#[tokio::test]
async fn serves_the_format_the_scraper_asks_for() {
    let metrics = KubeletMetrics::default();
    metrics.set_node_name("node-1");
    metrics.record_runtime_operation("version", std::time::Duration::from_millis(1), false);
    metrics.record_probe(&kubelet_core::metrics::ProbeLabels {
        probe_type: "Liveness",
        result: "successful",
        container: "c".into(),
        pod: "p".into(),
        namespace: "default".into(),
        pod_uid: "u".into(),
    });
    let registries = Registries::new(&metrics);

    let (content_type, text) = body(render(&registries.metrics, &HeaderMap::new())).await;
    assert_eq!(content_type, TEXT_CONTENT_TYPE);
    assert!(!text.contains("# EOF"), "{text}");
    assert!(
        text.contains("# TYPE kubelet_runtime_operations_total counter"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE process_cpu_seconds_total counter"),
        "{text}"
    );
    assert!(text.contains("process_resident_memory_bytes "), "{text}");
    let parsed = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("prometheus text");
    let names: std::collections::HashSet<_> =
        parsed.samples.iter().map(|s| s.metric.as_str()).collect();
    for name in [
        "kubelet_node_name",
        "kubelet_runtime_operations_total",
        "process_cpu_seconds_total",
        "process_start_time_seconds",
    ] {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }

    let mut accept = HeaderMap::new();
    accept.insert(
        header::ACCEPT,
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
            .parse()
            .expect("header"),
    );
    let (content_type, text) = body(render(&registries.metrics, &accept)).await;
    assert_eq!(content_type, OPENMETRICS_CONTENT_TYPE);
    assert!(text.ends_with("# EOF\n"), "{text}");

    let (_, probes) = body(render(&registries.probes, &HeaderMap::new())).await;
    assert!(
        probes.contains("# TYPE prober_probe_total counter"),
        "{probes}"
    );
    assert!(!probes.contains("kubelet_"), "{probes}");
}
