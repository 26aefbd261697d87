//! The kubeadm file and upstream's defaults, end to end: file → settings → `/configz`.

use std::time::Duration;

use clap::Parser;
use serde_json::{Value, json};

use crate::settings::{Flags, Settings, UsageError};

/// The exact output of kubeadm v1.20.2's `config print init-defaults --component-configs
/// KubeletConfiguration` (see `tests/fixtures/README.md`).
const KUBEADM_PRINT: &str = include_str!("../../tests/fixtures/kubeadm-v1.20.2-init-defaults.yaml");

/// The document of `KUBEADM_PRINT` that kubeadm writes to `/var/lib/kubelet/config.yaml`.
fn kubeadm_kubelet_config() -> &'static str {
    KUBEADM_PRINT
        .split("\n---\n")
        .find(|doc| doc.contains("\nkind: KubeletConfiguration\n"))
        .expect("the print has a KubeletConfiguration document")
}

fn load(yaml: &str, extra: &[&str]) -> Result<Settings, UsageError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, yaml).expect("write");
    let mut argv = vec!["kubelet", "--config", path.to_str().expect("utf8")];
    argv.extend_from_slice(extra);
    Settings::from_flags(Flags::try_parse_from(argv).map_err(|e| UsageError(e.to_string()))?)
}

fn at<'a>(configz: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(&configz["kubeletconfig"], |v, part| v.get(part))
}

/// Upstream's default of every field `SetDefaults_KubeletConfiguration` defaults when zero,
/// written out from `pkg/kubelet/apis/config/v1beta1/defaults.go` (not from the rule table).
fn upstream_defaults() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("syncFrequency", "0s", json!("1m0s")),
        ("fileCheckFrequency", "0s", json!("20s")),
        ("httpCheckFrequency", "0s", json!("20s")),
        ("address", "\"\"", json!("0.0.0.0")),
        ("port", "0", json!(10250)),
        ("authentication.webhook.cacheTTL", "0s", json!("2m0s")),
        ("authorization.mode", "\"\"", json!("Webhook")),
        (
            "authorization.webhook.cacheAuthorizedTTL",
            "0s",
            json!("5m0s"),
        ),
        (
            "authorization.webhook.cacheUnauthorizedTTL",
            "0s",
            json!("30s"),
        ),
        ("registryBurst", "0", json!(10)),
        ("eventBurst", "0", json!(100)),
        ("healthzBindAddress", "\"\"", json!("127.0.0.1")),
        ("streamingConnectionIdleTimeout", "0s", json!("4h0m0s")),
        ("nodeStatusReportFrequency", "0s", json!("5m0s")),
        ("nodeStatusUpdateFrequency", "0s", json!("10s")),
        ("nodeLeaseDurationSeconds", "0", json!(40)),
        ("imageMinimumGCAge", "0s", json!("2m0s")),
        ("volumeStatsAggPeriod", "0s", json!("1m0s")),
        ("cgroupDriver", "\"\"", json!("cgroupfs")),
        ("cpuManagerPolicy", "\"\"", json!("none")),
        ("cpuManagerReconcilePeriod", "0s", json!("10s")),
        ("memoryManagerPolicy", "\"\"", json!("None")),
        ("topologyManagerPolicy", "\"\"", json!("none")),
        ("topologyManagerScope", "\"\"", json!("container")),
        ("runtimeRequestTimeout", "0s", json!("2m0s")),
        ("hairpinMode", "\"\"", json!("promiscuous-bridge")),
        ("maxPods", "0", json!(110)),
        ("maxOpenFiles", "0", json!(1_000_000)),
        (
            "contentType",
            "\"\"",
            json!("application/vnd.kubernetes.protobuf"),
        ),
        ("kubeAPIBurst", "0", json!(100)),
        ("evictionPressureTransitionPeriod", "0s", json!("5m0s")),
        ("containerLogMaxSize", "\"\"", json!("10Mi")),
        (
            "configMapAndSecretChangeDetectionStrategy",
            "\"\"",
            json!("Watch"),
        ),
        (
            "volumePluginDir",
            "\"\"",
            json!("/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"),
        ),
        (
            "containerRuntimeEndpoint",
            "\"\"",
            json!("unix:///run/containerd/containerd.sock"),
        ),
        ("podLogsDir", "\"\"", json!("/var/log/pods")),
    ]
}

/// `a.b.c: v` as nested YAML.
fn yaml_at(path: &str, value: &str) -> String {
    let mut out = String::from("kind: KubeletConfiguration\n");
    let parts: Vec<&str> = path.split('.').collect();
    for (depth, part) in parts.iter().enumerate() {
        let indent = "  ".repeat(depth);
        if depth + 1 == parts.len() {
            out.push_str(&format!("{indent}{part}: {value}\n"));
        } else {
            out.push_str(&format!("{indent}{part}:\n"));
        }
    }
    out
}

#[test]
fn every_zero_upstream_defaults_shows_its_default_in_configz() {
    assert_eq!(
        upstream_defaults().len(),
        crate::cli::defaults::ZERO_DEFAULTS.len() + 1,
        "one row per rule, plus nodeStatusReportFrequency"
    );
    for (path, zero, expected) in upstream_defaults() {
        let settings = load(&yaml_at(path, zero), &[])
            .unwrap_or_else(|e| panic!("{path}: {zero} must load: {e}"));
        let configz = crate::configz::configz(&settings);
        assert_eq!(at(&configz, path), Some(&expected), "{path}: {zero}");
    }
}

#[test]
fn an_absent_field_the_kubelet_reads_has_upstreams_default_too() {
    let settings = load("kind: KubeletConfiguration\n", &[]).expect("valid");
    let configz = crate::configz::configz(&settings);
    let mut checked = 0;
    for (path, _, expected) in upstream_defaults() {
        if let Some(shown) = at(&configz, path) {
            assert_eq!(shown, &expected, "{path} absent");
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} fields shown");
}

#[test]
fn kubeadm_v1_20_file_loads_with_upstreams_defaults() {
    let settings = load(kubeadm_kubelet_config(), &[]).expect("kubeadm's file loads");
    assert_eq!(settings.sync_frequency, Duration::from_secs(60));
    assert_eq!(settings.file_check_frequency, Duration::from_secs(20));
    assert_eq!(
        settings.pod_runtime.runtime_request_timeout,
        Duration::from_secs(120)
    );
    assert_eq!(
        settings.pod_runtime.volume_stats_agg_period,
        Duration::from_secs(60)
    );
    assert_eq!(
        settings.cluster.node_status_update_frequency,
        Duration::from_secs(10)
    );
    assert_eq!(
        settings.node_status.report_frequency,
        Duration::from_secs(300)
    );
    assert_eq!(
        settings.eviction.pressure_transition_period,
        Duration::from_secs(300)
    );
    assert_eq!(settings.read_only, None);
    let configz = crate::configz::configz(&settings);
    // every zero duration kubeadm writes, as /configz shows it
    for (path, expected) in [
        ("syncFrequency", "1m0s"),
        ("fileCheckFrequency", "20s"),
        ("httpCheckFrequency", "20s"),
        ("runtimeRequestTimeout", "2m0s"),
        ("volumeStatsAggPeriod", "1m0s"),
        ("authentication.webhook.cacheTTL", "2m0s"),
        ("authorization.webhook.cacheAuthorizedTTL", "5m0s"),
        ("authorization.webhook.cacheUnauthorizedTTL", "30s"),
        ("nodeStatusUpdateFrequency", "10s"),
        ("nodeStatusReportFrequency", "5m0s"),
        ("imageMinimumGCAge", "2m0s"),
        ("streamingConnectionIdleTimeout", "4h0m0s"),
        ("cpuManagerReconcilePeriod", "10s"),
        ("evictionPressureTransitionPeriod", "5m0s"),
        // not defaulted upstream: zero turns graceful node shutdown off
        ("shutdownGracePeriod", "0s"),
        ("shutdownGracePeriodCriticalPods", "0s"),
    ] {
        assert_eq!(at(&configz, path), Some(&json!(expected)), "{path}");
    }
    assert_eq!(
        at(&configz, "staticPodPath"),
        Some(&json!("/etc/kubernetes/manifests"))
    );
    assert_eq!(
        at(&configz, "authentication.anonymous.enabled"),
        Some(&json!(false))
    );
}

#[test]
fn a_bad_value_is_an_error_naming_the_field_path() {
    let err = load(
        "kind: KubeletConfiguration\nauthentication:\n  webhook:\n    cacheTTL: soon\n",
        &[],
    )
    .expect_err("bad duration");
    assert!(
        err.0.contains("authentication.webhook.cacheTTL"),
        "{}",
        err.0
    );
    let err = load("kind: KubeletConfiguration\nregisterNode: maybe\n", &[]).expect_err("bad bool");
    assert!(err.0.contains("registerNode"), "{}", err.0);
    let err = load(
        "kind: KubeletConfiguration\nauthentication:\n  anonymous:\n    enabled: 3\n",
        &[],
    )
    .expect_err("bad nested bool");
    assert!(
        err.0.contains("authentication.anonymous.enabled"),
        "{}",
        err.0
    );
}

#[test]
fn an_unknown_field_is_a_warning_naming_it() {
    let settings = load(
        "kind: KubeletConfiguration\nnoSuchField: 1\nauthentication:\n  x509:\n    clientCAFil: /etc/ca.crt\nevictionHard:\n  memory.available: 100Mi\nkubeReserved:\n  cpu: 100m\n",
        &[],
    )
    .expect("loads");
    for field in ["noSuchField", "authentication.x509.clientCAFil"] {
        assert!(
            settings.ignored_config_fields.contains(&field.to_owned()),
            "{field}: {:?}",
            settings.ignored_config_fields
        );
        assert!(
            crate::cli::fields::ignored_field_warning(field)
                .starts_with(&format!("unknown KubeletConfiguration field {field:?}")),
            "a warning that names {field} as unknown"
        );
    }
    assert!(
        !settings
            .ignored_config_fields
            .iter()
            .any(|f| f.starts_with("evictionHard") || f.starts_with("kubeReserved")),
        "map-valued fields take any key: {:?}",
        settings.ignored_config_fields
    );
}

/// Values upstream's `ValidateKubeletConfiguration` refuses: the error names the field path.
#[test]
fn invalid_values_name_their_field() {
    let mut unnamed = Vec::new();
    for (yaml, field) in [
        ("syncFrequency: -1s", "syncFrequency"),
        ("fileCheckFrequency: 1x", "fileCheckFrequency"),
        ("maxPods: -1", "maxPods"),
        ("port: 70000", "port"),
        ("healthzPort: -5", "healthzPort"),
        ("readOnlyPort: 70000", "readOnlyPort"),
        ("nodeLeaseDurationSeconds: -1", "nodeLeaseDurationSeconds"),
        ("kubeAPIBurst: -1", "kubeAPIBurst"),
        ("eventBurst: -1", "eventBurst"),
        (
            "imageGCHighThresholdPercent: 101",
            "imageGCHighThresholdPercent",
        ),
        (
            "imageGCLowThresholdPercent: 90\nimageGCHighThresholdPercent: 80",
            "imageGCLowThresholdPercent",
        ),
        ("cgroupDriver: upstart", "cgroupDriver"),
        ("containerLogMaxFiles: 1", "containerLogMaxFiles"),
        ("containerLogMaxSize: lots", "containerLogMaxSize"),
        ("cpuCFSQuotaPeriod: 2s", "cpuCFSQuotaPeriod"),
        ("nodeStatusMaxImages: -2", "nodeStatusMaxImages"),
        ("evictionHard:\n  memory.available: lots", "evictionHard"),
        ("evictionMaxPodGracePeriod: x", "evictionMaxPodGracePeriod"),
        ("authorization:\n  mode: RBAC", "authorization.mode"),
        ("tlsMinVersion: VersionTLS9", "tlsMinVersion"),
        (
            "enforceNodeAllocatable: [nonsense]",
            "enforceNodeAllocatable",
        ),
        (
            "registerWithTaints: [{key: a, effect: Sometimes}]",
            "registerWithTaints",
        ),
        ("clusterDNS: [not-an-ip]", "clusterDNS"),
        ("address: not-an-ip", "address"),
        ("staticPodURLHeader: {a: b}", "staticPodURLHeader"),
        (
            "crashLoopBackOff:\n  maxContainerRestartPeriod: 1h",
            "crashLoopBackOff.maxContainerRestartPeriod",
        ),
    ] {
        match load(&format!("kind: KubeletConfiguration\n{yaml}\n"), &[]) {
            Ok(_) => unnamed.push(format!("{yaml:?} loads")),
            Err(err) if !err.0.contains(field) => unnamed.push(format!("{yaml:?}: {}", err.0)),
            Err(_) => {}
        }
    }
    assert!(unnamed.is_empty(), "{unnamed:#?}");
}

#[test]
fn config_dir_drop_ins_override_the_file_and_flags_override_both() {
    let dir = tempfile::tempdir().expect("tempdir");
    let drop_ins = dir.path().join("kubelet.conf.d");
    std::fs::create_dir_all(&drop_ins).expect("mkdir");
    std::fs::write(
        drop_ins.join("50-sync.conf"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequency: 15s\nmaxPods: 30\n",
    )
    .expect("write");
    let dir_flag = drop_ins.to_str().expect("utf8");
    let s = load(
        "kind: KubeletConfiguration\nsyncFrequency: 45s\nmaxPods: 20\nfileCheckFrequency: 7s\n",
        &["--config-dir", dir_flag, "--max-pods", "40"],
    )
    .expect("valid");
    assert_eq!(s.sync_frequency, Duration::from_secs(15));
    assert_eq!(s.file_check_frequency, Duration::from_secs(7));
    assert_eq!(s.node_status.max_pods, 40);
}
