//! The effective `KubeletConfiguration` that `/configz` serves (upstream
//! `cmd/kubelet/app/server.go` `initConfigz`: the v1beta1 object with its kind and apiVersion
//! under `kubeletconfig`), from the merged settings: the fields this kubelet reads, with
//! upstream's names and Go's duration strings.

use serde_json::{Value, json};

use crate::duration::format;
use crate::settings::Settings;

/// `{"kubeletconfig": {...}}` of `s`.
pub fn configz(s: &Settings) -> Value {
    let pr = &s.pod_runtime;
    let c = &s.cluster;
    let ns = &s.node_status;
    let mut config = json!({
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "staticPodPath": s.pod_manifest_path.clone().unwrap_or_default(),
        "syncFrequency": format(s.sync_frequency),
        "fileCheckFrequency": format(s.file_check_frequency),
        "httpCheckFrequency": format(c.http_check_frequency),
        "staticPodURL": c.manifest_url.clone().unwrap_or_default(),
        "staticPodURLHeader": url_headers(&c.manifest_url_headers),
        "address": s.secure.ip().to_string(),
        "port": s.secure.port(),
        "readOnlyPort": s.read_only.map_or(0, |a| a.port()),
        "healthzPort": s.healthz.map_or(0, |a| a.port()),
        "healthzBindAddress": s.healthz.map(|a| a.ip().to_string()).unwrap_or_default(),
        "containerRuntimeEndpoint": s.runtime_endpoint,
        "podLogsDir": s.pod_log_dir,
        "clusterDomain": pr.cluster_domain,
        "clusterDNS": pr.cluster_dns,
        "resolvConf": pr.resolv_conf,
        "cgroupRoot": pr.cgroup_root,
        "cgroupsPerQOS": pr.cgroups_per_qos,
        "cgroupDriver": pr.cgroup_driver.as_str(),
        "kubeletCgroups": pr.kubelet_cgroups.clone().unwrap_or_default(),
        "runtimeCgroups": pr.runtime_cgroups.clone().unwrap_or_default(),
        "systemCgroups": pr.system_cgroups.clone().unwrap_or_default(),
        "volumeStatsAggPeriod": format(pr.volume_stats_agg_period),
        "cpuCFSQuota": pr.cpu_cfs_quota,
        "cpuCFSQuotaPeriod": format(std::time::Duration::from_micros(pr.cpu_cfs_quota_period_us)),
        "runtimeRequestTimeout": format(pr.runtime_request_timeout),
        "kubeAPIQPS": c.api_limits.qps,
        "kubeAPIBurst": c.api_limits.burst,
        "eventRecordQPS": c.event_limits.qps,
        "eventBurst": c.event_limits.burst,
        "nodeStatusUpdateFrequency": format(c.node_status_update_frequency),
        "nodeStatusReportFrequency": format(ns.report_frequency),
        "nodeLeaseDurationSeconds": c.node_lease_duration.as_secs(),
        "registerNode": ns.register_node,
        "registerWithTaints": ns.register_with_taints,
        "maxPods": ns.max_pods,
        "nodeStatusMaxImages": ns.max_images,
        "crashLoopBackOff": {
            "maxContainerRestartPeriod": format(s.crash_loop_backoff.1),
        },
    });
    // Each settings module shows its own fields.
    for part in [
        s.server.configz(),
        s.container_logs.configz(),
        s.node_allocatable.configz(),
        s.gc.configz(),
        json!({
            "kubeReserved": reserved(&ns.kube_reserved),
            "systemReserved": reserved(&ns.system_reserved),
        }),
    ] {
        if let (Some(all), Value::Object(part)) = (config.as_object_mut(), part) {
            all.extend(part);
        }
    }
    if let Some(all) = config.as_object_mut() {
        all.extend(eviction(&s.eviction));
    }
    // The file's other fields (after upstream's zero defaulting) as read.
    let mut shown = Value::Object(s.config_file.clone());
    overlay(&mut shown, config);
    json!({ "kubeletconfig": shown })
}

/// Puts `top` over `base`: objects merge field by field, any other value of `top` wins.
fn overlay(base: &mut Value, top: Value) {
    match (base, top) {
        (Value::Object(base), Value::Object(top)) => {
            for (key, value) in top {
                match base.get_mut(&key) {
                    Some(slot) => overlay(slot, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, top) => *base = top,
    }
}

/// `evictionHard`, `evictionSoft`, `evictionSoftGracePeriod`, `evictionMinimumReclaim`,
/// `evictionPressureTransitionPeriod`, `evictionMaxPodGracePeriod`,
/// `localStorageCapacityIsolation`.
fn eviction(e: &kubelet_core::eviction::Config) -> serde_json::Map<String, Value> {
    let (mut hard, mut soft, mut grace, mut reclaim) = (
        serde_json::Map::new(),
        serde_json::Map::new(),
        serde_json::Map::new(),
        serde_json::Map::new(),
    );
    for t in &e.thresholds {
        let signal = t.signal.as_str().to_owned();
        if t.is_hard() {
            hard.insert(signal.clone(), json!(t.value.to_string()));
        } else {
            soft.insert(signal.clone(), json!(t.value.to_string()));
            grace.insert(signal.clone(), json!(format(t.grace_period)));
        }
        if let Some(r) = t.min_reclaim {
            reclaim.insert(signal, json!(r.to_string()));
        }
    }
    let mut out = serde_json::Map::new();
    out.insert("evictionHard".into(), Value::Object(hard));
    for (key, map) in [
        ("evictionSoft", soft),
        ("evictionSoftGracePeriod", grace),
        ("evictionMinimumReclaim", reclaim),
    ] {
        if !map.is_empty() {
            out.insert(key.into(), Value::Object(map));
        }
    }
    out.insert(
        "evictionPressureTransitionPeriod".into(),
        json!(format(e.pressure_transition_period)),
    );
    out.insert(
        "evictionMaxPodGracePeriod".into(),
        json!(e.max_pod_grace_period_seconds),
    );
    out.insert(
        "localStorageCapacityIsolation".into(),
        json!(e.local_storage_capacity_isolation),
    );
    out
}

/// `kubeReserved` / `systemReserved`: resource → quantity (binary suffixes where exact).
fn reserved(r: &kubelet::cluster::node_status::Reserved) -> Value {
    use kubelet_core::quantity::{Amount, Format};
    r.0.iter()
        .map(|(name, nanos)| {
            let amount = Amount {
                nanos: *nanos,
                format: Format::BinarySi,
            };
            (name.clone(), Value::String(amount.canonical()))
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// `staticPodURLHeader`: each header's values in order (upstream `map[string][]string`).
fn url_headers(headers: &[(String, String)]) -> Value {
    let mut map = serde_json::Map::new();
    for (name, value) in headers {
        if let Value::Array(values) = map
            .entry(name.clone())
            .or_insert_with(|| Value::Array(Vec::new()))
        {
            values.push(Value::String(value.clone()));
        }
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[test]
    fn upstreams_shape_and_names() {
        let flags = crate::settings::Flags::try_parse_from([
            "kubelet",
            "--hostname-override",
            "n",
            "--port",
            "10260",
            "--sync-frequency",
            "90s",
        ])
        .expect("flags");
        let s = crate::settings::Settings::from_flags(flags).expect("valid");
        let z = super::configz(&s);
        let k = &z["kubeletconfig"];
        assert_eq!(k["kind"], "KubeletConfiguration");
        assert_eq!(k["apiVersion"], "kubelet.config.k8s.io/v1beta1");
        assert_eq!(k["port"], 10260);
        assert_eq!(k["address"], "0.0.0.0");
        assert_eq!(k["syncFrequency"], "1m30s");
        assert_eq!(k["runtimeRequestTimeout"], "2m0s");
        assert_eq!(k["readOnlyPort"], 10255);
        assert_eq!(k["authorization"]["mode"], "AlwaysAllow");
        // secure by default, unlike upstream's legacy flag default
        assert_eq!(k["authentication"]["anonymous"]["enabled"], false);
        assert_eq!(k["authentication"]["webhook"]["cacheTTL"], "2m0s");
        assert_eq!(k["tlsCertFile"], "/var/lib/kubelet/pki/kubelet.crt");
        assert_eq!(k["evictionHard"]["memory.available"], "100Mi");
        assert_eq!(k["evictionHard"]["nodefs.available"], "10%");
        assert_eq!(k["evictionPressureTransitionPeriod"], "5m0s");
        assert_eq!(k["evictionMaxPodGracePeriod"], 0);
        assert!(k.get("evictionSoft").is_none());
        assert_eq!(k["containerLogMaxSize"], "10Mi");
        assert_eq!(k["containerLogMaxFiles"], 5);
        assert_eq!(k["containerLogMonitorInterval"], "10s");
        assert_eq!(k["registerWithTaints"], serde_json::json!([]));
        assert_eq!(k["staticPodURLHeader"], serde_json::json!({}));
        assert_eq!(k["volumeStatsAggPeriod"], "1m0s");
        assert_eq!(k["kubeletCgroups"], "");
        assert_eq!(k["imageGCHighThresholdPercent"], 85);
        assert_eq!(k["imageGCLowThresholdPercent"], 80);
        assert_eq!(k["imageMinimumGCAge"], "2m0s");
        assert_eq!(k["imageMaximumGCAge"], "0s");
        assert_eq!(k["enforceNodeAllocatable"], serde_json::json!(["pods"]));
        assert_eq!(k["kubeReserved"], serde_json::json!({}));
        assert_eq!(k["systemReservedCgroup"], "");
    }

    #[test]
    fn shows_reservations_and_their_enforcement() {
        let flags = crate::settings::Flags::try_parse_from([
            "kubelet",
            "--hostname-override",
            "n",
            "--kube-reserved",
            "cpu=500m,memory=256Mi,pid=100",
            "--system-reserved",
            "memory=1Gi",
            "--enforce-node-allocatable",
            "pods,kube-reserved",
            "--kube-reserved-cgroup",
            "/kube.slice",
            "--image-gc-high-threshold",
            "90",
        ])
        .expect("flags");
        let s = crate::settings::Settings::from_flags(flags).expect("valid");
        let k = &super::configz(&s)["kubeletconfig"];
        assert_eq!(
            k["kubeReserved"],
            serde_json::json!({"cpu": "500m", "memory": "256Mi", "pid": "100"})
        );
        assert_eq!(k["systemReserved"], serde_json::json!({"memory": "1Gi"}));
        assert_eq!(
            k["enforceNodeAllocatable"],
            serde_json::json!(["pods", "kube-reserved"])
        );
        assert_eq!(k["kubeReservedCgroup"], "/kube.slice");
        assert_eq!(k["imageGCHighThresholdPercent"], 90);
    }

    #[test]
    fn shows_the_config_files_newer_fields() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "kind: KubeletConfiguration
apiVersion: kubelet.config.k8s.io/v1beta1
containerLogMaxSize: 5Mi
containerLogMaxFiles: 3
containerLogMonitorInterval: 30s
registerWithTaints:
- key: dedicated
  value: infra
  effect: NoSchedule
staticPodURLHeader:
  X-Token: [a, b]
volumeStatsAggPeriod: 0s
runtimeCgroups: /system.slice/containerd.service
",
        )
        .expect("write config");
        let flags = crate::settings::Flags::try_parse_from([
            "kubelet",
            "--hostname-override",
            "n",
            "--config",
            path.to_str().expect("utf-8 path"),
        ])
        .expect("flags");
        let s = crate::settings::Settings::from_flags(flags).expect("valid");
        let z = super::configz(&s);
        let k = &z["kubeletconfig"];
        assert_eq!(k["containerLogMaxSize"], "5Mi");
        assert_eq!(k["containerLogMaxFiles"], 3);
        assert_eq!(k["containerLogMonitorInterval"], "30s");
        assert_eq!(
            k["registerWithTaints"],
            serde_json::json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}])
        );
        assert_eq!(
            k["staticPodURLHeader"],
            serde_json::json!({"X-Token": ["a", "b"]})
        );
        // a zero in the file is upstream's default (SetDefaults_KubeletConfiguration); only
        // the flag can turn volume stats off
        assert_eq!(k["volumeStatsAggPeriod"], "1m0s");
        assert_eq!(k["runtimeCgroups"], "/system.slice/containerd.service");
    }
}
