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

#[test]
fn evictions_keep_upstreams_name_without_total() {
    let openmetrics = "# HELP kubelet_evictions Cumulative number of pod evictions by eviction signal.\n\
                       # TYPE kubelet_evictions counter\n\
                       kubelet_evictions_total{eviction_signal=\"memory.available\"} 2\n\
                       kubelet_evictions_total{eviction_signal=\"emptydirfs.limit\"} 1\n\
                       # HELP kubelet_image_garbage_collected Total number of images garbage collected by the kubelet, whether through disk usage or image age.\n\
                       # TYPE kubelet_image_garbage_collected counter\n\
                       kubelet_image_garbage_collected_total{reason=\"space\"} 3\n\
                       # EOF\n";
    assert_eq!(
        to_prometheus_text(openmetrics),
        "# HELP kubelet_evictions Cumulative number of pod evictions by eviction signal.\n\
         # TYPE kubelet_evictions counter\n\
         kubelet_evictions{eviction_signal=\"memory.available\"} 2\n\
         kubelet_evictions{eviction_signal=\"emptydirfs.limit\"} 1\n\
         # HELP kubelet_image_garbage_collected_total Total number of images garbage collected by the kubelet, whether through disk usage or image age.\n\
         # TYPE kubelet_image_garbage_collected_total counter\n\
         kubelet_image_garbage_collected_total{reason=\"space\"} 3\n"
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
    metrics.record_probe(
        &kubelet_core::metrics::ProbeLabels {
            probe_type: "Liveness",
            result: "successful",
            container: "c".into(),
            pod: "p".into(),
            namespace: "default".into(),
            pod_uid: "u".into(),
        },
        Some(std::time::Duration::from_millis(20)),
    );
    metrics.record_new_pod(2);
    metrics.record_pod_started(false);
    metrics.record_container_started("container", Some("ErrImagePull"));
    metrics.record_run_podsandbox("", std::time::Duration::from_millis(5), false);
    metrics.record_pod_restarted(true);
    metrics.set_pleg_last_seen(std::time::SystemTime::now());
    metrics.set_cgroup_version(1);
    metrics.record_eviction("memory.available");
    metrics.record_image_garbage_collected("age");
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
    assert!(
        text.contains("# TYPE kubelet_evictions counter\nkubelet_evictions{eviction_signal=\"memory.available\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("kubelet_image_garbage_collected_total{reason=\"age\"} 1"),
        "{text}"
    );
    let parsed = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("prometheus text");
    let names: std::collections::HashSet<_> =
        parsed.samples.iter().map(|s| s.metric.as_str()).collect();
    for name in [
        "kubelet_node_name",
        "kubelet_runtime_operations_total",
        "process_cpu_seconds_total",
        "process_start_time_seconds",
        "kubelet_containers_per_pod_count_count",
        "kubelet_started_pods_total",
        "kubelet_started_pods_errors_total",
        "kubelet_started_containers_total",
        "kubelet_started_containers_errors_total",
        "kubelet_run_podsandbox_duration_seconds_count",
        "kubelet_restarted_pods_total",
        "kubelet_pleg_last_seen_seconds",
        "kubelet_cgroup_version",
        "kubelet_evictions",
        "kubelet_image_garbage_collected_total",
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
    assert!(
        probes.contains("# TYPE prober_probe_duration_seconds histogram"),
        "{probes}"
    );
    assert!(
        probes.contains(r#"prober_probe_duration_seconds_bucket{le="0.025",probe_type="Liveness",container="c",pod="p",namespace="default"} 1"#),
        "{probes}"
    );
    assert!(!probes.contains("kubelet_"), "{probes}");
}

#[tokio::test]
async fn certificate_manager_metrics_keep_upstreams_names() {
    let metrics = KubeletMetrics::default();
    let registries = Registries::new(&metrics);
    let (_, text) = body(render(&registries.metrics, &HeaderMap::new())).await;
    // No certificate yet: no TTL sample; the error counter starts at 0.
    assert!(
        !text.contains("kubelet_certificate_manager_client_ttl_seconds "),
        "{text}"
    );
    assert!(
        text.contains("\nkubelet_certificate_manager_client_expiration_renew_errors 0\n"),
        "{text}"
    );
    assert!(
        text.contains("\nkubelet_server_expiration_renew_errors 0\n"),
        "{text}"
    );
    assert!(
        !text.contains("kubelet_certificate_manager_server_ttl_seconds "),
        "{text}"
    );
    metrics
        .certificate_manager_client_ttl
        .set_not_after(std::time::SystemTime::now() + std::time::Duration::from_secs(3600));
    metrics.certificate_manager_client_renew_errors.inc();
    let (_, text) = body(render(&registries.metrics, &HeaderMap::new())).await;
    let parsed = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("prometheus text");
    let value = |name: &str| {
        parsed
            .samples
            .iter()
            .find(|s| s.metric == name)
            .map(|s| match s.value {
                prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            })
    };
    let ttl = value("kubelet_certificate_manager_client_ttl_seconds").expect("ttl sample");
    assert!((3590.0..=3600.0).contains(&ttl), "{ttl}");
    assert_eq!(
        value("kubelet_certificate_manager_client_expiration_renew_errors"),
        Some(1.0)
    );
}
