//! The `KubeletConfiguration` file (`kubelet.config.k8s.io/v1beta1`, mirrors
//! `staging/src/k8s.io/kubelet/config/v1beta1/types.go`): every upstream field in one struct,
//! read by [`KubeletConfiguration::load_with_drop_ins`] (`--config`, `--config-dir`) through upstream's zero defaulting
//! ([`set_defaults`](KubeletConfiguration::set_defaults), the rule in [`super::defaults`]) and
//! validation ([`validate`](KubeletConfiguration::validate)); the settings modules read their
//! fields from it and merge their flags on top.
//!
//! Every field is an `Option`: `None` is "not in the file", so each settings module applies
//! its default (the flags' one without a file). Durations stay Go duration strings here; the
//! settings modules parse them with the field's name in the error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::defaults;

/// Why a config file does not load; each names the file, and the field where there is one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not YAML (or JSON) with an object at the top.
    #[error("{}: invalid KubeletConfiguration: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// Another kind or API version.
    #[error("{}: {message}", path.display())]
    Kind {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A field with the wrong type or an invalid value.
    #[error("{}: invalid KubeletConfiguration: {field}: {message}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// The field's path, e.g. `authentication.webhook.cacheTTL`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// `authentication`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct Authentication {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x509: Option<X509Authentication>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookAuthentication>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anonymous: Option<AnonymousAuthentication>,
}

/// `authentication.x509`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[allow(missing_docs)]
pub struct X509Authentication {
    #[serde(rename = "clientCAFile", skip_serializing_if = "Option::is_none")]
    pub client_ca_file: Option<PathBuf>,
}

/// `authentication.webhook`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[allow(missing_docs)]
pub struct WebhookAuthentication {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(rename = "cacheTTL", skip_serializing_if = "Option::is_none")]
    pub cache_ttl: Option<String>,
}

/// `authentication.anonymous`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[allow(missing_docs)]
pub struct AnonymousAuthentication {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `authorization`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[allow(missing_docs)]
pub struct Authorization {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookAuthorization>,
}

/// `authorization.webhook`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[allow(missing_docs)]
pub struct WebhookAuthorization {
    #[serde(rename = "cacheAuthorizedTTL", skip_serializing_if = "Option::is_none")]
    pub cache_authorized_ttl: Option<String>,
    #[serde(
        rename = "cacheUnauthorizedTTL",
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_unauthorized_ttl: Option<String>,
}

/// `crashLoopBackOff`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct CrashLoopBackOff {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_container_restart_period: Option<String>,
}

/// `memorySwap`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct MemorySwap {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_behavior: Option<String>,
}

/// One entry of `shutdownGracePeriodByPodPriority`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct ShutdownGracePeriodByPodPriority {
    pub priority: i32,
    pub shutdown_grace_period_seconds: i64,
}

/// One entry of `reservedMemory`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct MemoryReservation {
    pub numa_node: i32,
    #[serde(default)]
    pub limits: BTreeMap<String, String>,
}

/// `userNamespaces`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct UserNamespaces {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ids_per_pod: Option<i64>,
}

/// Declares the struct with `skip_serializing_if` on every field.
macro_rules! kubelet_configuration {
    ($( $(#[$attr:meta])* $name:ident : $ty:ty, )*) => {
        /// Upstream's `KubeletConfiguration`, every field (upstream's names and meanings; see
        /// upstream's `types.go` for each), plus `runtimeCgroups`, which this kubelet reads
        /// as the `--runtime-cgroups` flag.
        ///
        /// Fields of the file that are not fields here, at any depth, are not an error: a
        /// loaded file lists them as [`Loaded::unknown_fields`], as upstream's lenient
        /// decoding warns and loads.
        #[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
        #[serde(rename_all = "camelCase")]
        pub struct KubeletConfiguration {
            $(
                $(#[$attr])*
                #[serde(skip_serializing_if = "Option::is_none")]
                #[allow(missing_docs)]
                pub $name: Option<$ty>,
            )*
        }
    };
}

kubelet_configuration! {
    kind: String,
    api_version: String,
    enable_server: bool,
    static_pod_path: PathBuf,
    pod_logs_dir: PathBuf,
    sync_frequency: String,
    file_check_frequency: String,
    http_check_frequency: String,
    #[serde(rename = "staticPodURL")]
    static_pod_url: String,
    #[serde(rename = "staticPodURLHeader")]
    static_pod_url_header: BTreeMap<String, Vec<String>>,
    address: String,
    port: u16,
    read_only_port: u16,
    tls_cert_file: PathBuf,
    tls_private_key_file: PathBuf,
    tls_cipher_suites: Vec<String>,
    tls_curve_preferences: Vec<i32>,
    tls_min_version: String,
    rotate_certificates: bool,
    #[serde(rename = "serverTLSBootstrap")]
    server_tls_bootstrap: bool,
    authentication: Authentication,
    authorization: Authorization,
    #[serde(rename = "registryPullQPS")]
    registry_pull_qps: i32,
    registry_burst: i32,
    image_pull_credentials_verification_policy: String,
    preloaded_images_verification_allowlist: Vec<String>,
    #[serde(rename = "eventRecordQPS")]
    event_record_qps: i32,
    event_burst: i32,
    enable_debugging_handlers: bool,
    enable_contention_profiling: bool,
    healthz_port: u16,
    healthz_bind_address: String,
    oom_score_adj: i32,
    cluster_domain: String,
    #[serde(rename = "clusterDNS")]
    cluster_dns: Vec<String>,
    streaming_connection_idle_timeout: String,
    node_status_update_frequency: String,
    node_status_report_frequency: String,
    node_lease_duration_seconds: i32,
    #[serde(rename = "imageMinimumGCAge")]
    image_minimum_gc_age: String,
    #[serde(rename = "imageMaximumGCAge")]
    image_maximum_gc_age: String,
    #[serde(rename = "imageGCHighThresholdPercent")]
    image_gc_high_threshold_percent: i32,
    #[serde(rename = "imageGCLowThresholdPercent")]
    image_gc_low_threshold_percent: i32,
    volume_stats_agg_period: String,
    kubelet_cgroups: String,
    runtime_cgroups: String,
    system_cgroups: String,
    cgroup_root: String,
    #[serde(rename = "cgroupsPerQOS")]
    cgroups_per_qos: bool,
    cgroup_driver: String,
    cpu_manager_policy: String,
    #[serde(rename = "singleProcessOOMKill")]
    single_process_oom_kill: bool,
    cpu_manager_policy_options: BTreeMap<String, String>,
    cpu_manager_reconcile_period: String,
    dra_manager_reconcile_period: String,
    memory_manager_policy: String,
    topology_manager_policy: String,
    topology_manager_scope: String,
    topology_manager_policy_options: BTreeMap<String, String>,
    qos_reserved: BTreeMap<String, String>,
    runtime_request_timeout: String,
    hairpin_mode: String,
    max_pods: u32,
    #[serde(rename = "podCIDR")]
    pod_cidr: String,
    pod_pids_limit: i64,
    resolv_conf: PathBuf,
    run_once: bool,
    #[serde(rename = "cpuCFSQuota")]
    cpu_cfs_quota: bool,
    #[serde(rename = "cpuCFSQuotaPeriod")]
    cpu_cfs_quota_period: String,
    node_status_max_images: i32,
    max_open_files: i64,
    content_type: String,
    #[serde(rename = "kubeAPIQPS")]
    kube_api_qps: i32,
    #[serde(rename = "kubeAPIBurst")]
    kube_api_burst: i32,
    serialize_image_pulls: bool,
    max_parallel_image_pulls: i32,
    eviction_hard: BTreeMap<String, String>,
    eviction_soft: BTreeMap<String, String>,
    eviction_soft_grace_period: BTreeMap<String, String>,
    eviction_pressure_transition_period: String,
    eviction_max_pod_grace_period: i64,
    eviction_minimum_reclaim: BTreeMap<String, String>,
    merge_default_eviction_settings: bool,
    pods_per_core: i32,
    enable_controller_attach_detach: bool,
    protect_kernel_defaults: bool,
    #[serde(rename = "makeIPTablesUtilChains")]
    make_iptables_util_chains: bool,
    iptables_masquerade_bit: i32,
    iptables_drop_bit: i32,
    feature_gates: BTreeMap<String, bool>,
    fail_swap_on: bool,
    memory_swap: MemorySwap,
    container_log_max_size: String,
    container_log_max_files: i64,
    container_log_max_workers: i32,
    container_log_monitor_interval: String,
    config_map_and_secret_change_detection_strategy: String,
    system_reserved: BTreeMap<String, String>,
    kube_reserved: BTreeMap<String, String>,
    #[serde(rename = "reservedSystemCPUs")]
    reserved_system_cpus: String,
    show_hidden_metrics_for_version: String,
    system_reserved_cgroup: String,
    kube_reserved_cgroup: String,
    enforce_node_allocatable: Vec<String>,
    allowed_unsafe_sysctls: Vec<String>,
    volume_plugin_dir: String,
    #[serde(rename = "providerID")]
    provider_id: String,
    kernel_memcg_notification: bool,
    logging: Value,
    enable_system_log_handler: bool,
    enable_system_log_query: bool,
    shutdown_grace_period: String,
    shutdown_grace_period_critical_pods: String,
    shutdown_grace_period_by_pod_priority: Vec<ShutdownGracePeriodByPodPriority>,
    crash_loop_back_off: CrashLoopBackOff,
    reserved_memory: Vec<MemoryReservation>,
    enable_profiling_handler: bool,
    enable_debug_flags_handler: bool,
    seccomp_default: bool,
    memory_throttling_factor: f64,
    memory_reservation_policy: String,
    register_with_taints: Vec<Taint>,
    register_node: bool,
    tracing: Value,
    local_storage_capacity_isolation: bool,
    container_runtime_endpoint: String,
    image_service_endpoint: String,
    #[serde(rename = "failCgroupV1")]
    fail_cgroup_v1: bool,
    user_namespaces: UserNamespaces,
    pod_housekeeping_period: String,
}

/// Top-level fields this kubelet reads besides upstream's (the tests check the struct's
/// fields against upstream's list plus these).
#[cfg(test)]
pub const EXTENSION_FIELDS: &[&str] = &["runtimeCgroups"];

/// A loaded file: the configuration and its unknown fields (ignored, each worth a
/// warning).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Loaded {
    /// The configuration, defaulted and validated.
    pub config: KubeletConfiguration,
    /// Unknown fields by their path (`syncFrequncy`, `authentication.x509.clientCAFil`,
    /// `registerWithTaints[0].efect`), in key order: the fields the typed
    /// configuration has no place for, so map-valued fields (`evictionHard`, …) have none.
    pub unknown_fields: Vec<String>,
}

impl KubeletConfiguration {
    /// Reads the `--config` file (if any) with the drop-ins of `--config-dir` (if any) merged
    /// on top, as upstream since v1.30 (`mergeKubeletConfigurations`): every `*.conf` file
    /// under `dir`, subdirectories included, in lexical order, each a JSON merge patch
    /// (RFC 7386: objects merge field by field, lists and other values replace, `null`
    /// removes); then defaults and validates the result. Field errors name `dir` when there
    /// are drop-ins.
    pub fn load_with_drop_ins(path: Option<&Path>, dir: Option<&Path>) -> Result<Loaded, Error> {
        let mut object = match path {
            Some(path) => parse_object(path, &read(path)?)?,
            None => Map::new(),
        };
        let mut named = path.map(Path::to_owned).unwrap_or_default();
        if let Some(dir) = dir {
            let mut drop_ins = Vec::new();
            collect_drop_ins(dir, &mut drop_ins)?;
            for drop_in in &drop_ins {
                merge_patch(&mut object, parse_object(drop_in, &read(drop_in)?)?);
            }
            if !drop_ins.is_empty() {
                named = dir.to_owned();
            }
        }
        Self::from_object(&named, object)
    }

    /// The configuration of `text`, errors naming `path` (a file without drop-ins).
    #[cfg(test)]
    pub fn from_text(path: &Path, text: &str) -> Result<Loaded, Error> {
        Self::from_object(path, parse_object(path, text)?)
    }

    /// The configuration of a parsed file: typed, its unknown fields set apart ([`typed`]),
    /// defaulted and validated; errors name `path`.
    fn from_object(path: &Path, object: Map<String, Value>) -> Result<Loaded, Error> {
        let field_error = |e: defaults::FieldError| Error::Field {
            path: path.to_owned(),
            field: e.path,
            message: e.reason,
        };
        let (mut config, unknown_fields) = typed(object).map_err(|e| Error::Field {
            path: path.to_owned(),
            field: e.path().to_string(),
            message: e.inner().to_string(),
        })?;
        config.set_defaults().map_err(field_error)?;
        config.validate().map_err(field_error)?;
        Ok(Loaded {
            config,
            unknown_fields,
        })
    }

    /// Upstream's `SetDefaults_KubeletConfiguration` for zeros ([`defaults::set_defaults`]):
    /// a zero that upstream defaults becomes the default; absent fields stay absent.
    pub fn set_defaults(&mut self) -> Result<(), defaults::FieldError> {
        let mut object = match serde_json::to_value(&*self) {
            Ok(Value::Object(object)) => object,
            _ => return Ok(()),
        };
        defaults::set_defaults(&mut object)?;
        *self =
            serde_json::from_value(Value::Object(object)).map_err(|e| defaults::FieldError {
                path: ".".into(),
                reason: e.to_string(),
            })?;
        Ok(())
    }

    /// Upstream's `ValidateKubeletConfiguration` for the fields whose settings module does not
    /// check them when merging its flags on top (most of them are not implemented): ranges and
    /// enumerations, naming the field.
    pub fn validate(&self) -> Result<(), defaults::FieldError> {
        let bad = |path: &str, reason: String| {
            Err(defaults::FieldError {
                path: path.to_owned(),
                reason,
            })
        };
        for (path, value, min, max) in [
            (
                "registryPullQPS",
                self.registry_pull_qps.map(i64::from),
                0,
                i64::MAX,
            ),
            (
                "registryBurst",
                self.registry_burst.map(i64::from),
                0,
                i64::MAX,
            ),
            (
                "oomScoreAdj",
                self.oom_score_adj.map(i64::from),
                -1000,
                1000,
            ),
            (
                "podsPerCore",
                self.pods_per_core.map(i64::from),
                0,
                i64::MAX,
            ),
            ("maxOpenFiles", self.max_open_files, 0, i64::MAX),
            (
                "nodeStatusMaxImages",
                self.node_status_max_images.map(i64::from),
                -1,
                i64::MAX,
            ),
            (
                "containerLogMaxWorkers",
                self.container_log_max_workers.map(i64::from),
                1,
                i64::MAX,
            ),
            (
                "iptablesMasqueradeBit",
                self.iptables_masquerade_bit.map(i64::from),
                0,
                31,
            ),
            (
                "iptablesDropBit",
                self.iptables_drop_bit.map(i64::from),
                0,
                31,
            ),
            (
                "maxParallelImagePulls",
                self.max_parallel_image_pulls.map(i64::from),
                1,
                i64::MAX,
            ),
        ] {
            if let Some(value) = value.filter(|v| !(min..=max).contains(v)) {
                let range = if max == i64::MAX {
                    format!("at least {min}")
                } else {
                    format!("between {min} and {max}")
                };
                return bad(path, format!("{value} must be {range}"));
            }
        }
        if let Some(f) = self
            .memory_throttling_factor
            .filter(|f| !(*f > 0.0 && *f <= 1.0))
        {
            return bad("memoryThrottlingFactor", format!("{f} must be in (0, 1]"));
        }
        for (path, value, allowed) in [
            (
                "hairpinMode",
                &self.hairpin_mode,
                &["promiscuous-bridge", "hairpin-veth", "none"][..],
            ),
            (
                "topologyManagerScope",
                &self.topology_manager_scope,
                &["container", "pod"],
            ),
            (
                "topologyManagerPolicy",
                &self.topology_manager_policy,
                &["none", "best-effort", "restricted", "single-numa-node"],
            ),
            (
                "cpuManagerPolicy",
                &self.cpu_manager_policy,
                &["none", "static"],
            ),
            (
                "memoryManagerPolicy",
                &self.memory_manager_policy,
                &["None", "Static"],
            ),
            (
                "configMapAndSecretChangeDetectionStrategy",
                &self.config_map_and_secret_change_detection_strategy,
                &["Get", "Cache", "Watch"],
            ),
            (
                "memorySwap.swapBehavior",
                &self
                    .memory_swap
                    .as_ref()
                    .and_then(|m| m.swap_behavior.clone()),
                &["", "NoSwap", "LimitedSwap"],
            ),
        ] {
            if let Some(value) = value.as_deref().filter(|v| !allowed.contains(v)) {
                return bad(path, format!("{value:?} is not one of {allowed:?}"));
            }
        }
        if self.serialize_image_pulls == Some(true)
            && self.max_parallel_image_pulls.is_some_and(|n| n > 1)
        {
            return bad(
                "maxParallelImagePulls",
                "must be 1 or unset when serializeImagePulls is true".into(),
            );
        }
        for (i, taint) in self.register_with_taints.iter().flatten().enumerate() {
            if taint.key.is_empty()
                || !matches!(
                    taint.effect.as_str(),
                    "NoSchedule" | "PreferNoSchedule" | "NoExecute"
                )
            {
                return bad(
                    &format!("registerWithTaints[{i}]"),
                    format!(
                        "taint {:?} (effect {:?}): the key must not be empty and the effect must be NoSchedule, PreferNoSchedule or NoExecute",
                        taint.key, taint.effect
                    ),
                );
            }
        }
        Ok(())
    }
}

/// `object` as a [`KubeletConfiguration`], with the paths of its unknown fields: the one rule
/// for them, at every depth, is "a field the typed configuration has no place for" (serde's
/// ignored fields, found by `serde_ignored`), so the structs are the schema. Map-valued
/// fields (`evictionHard`, `kubeReserved`, `featureGates`, …) take any key, and the free-form
/// `logging` and `tracing` any content; neither has unknown fields. Upstream's strict
/// decoding reports the same fields, and its lenient fallback loads the file.
fn typed(
    object: Map<String, Value>,
) -> Result<(KubeletConfiguration, Vec<String>), serde_path_to_error::Error<serde_json::Error>> {
    let mut unknown = Vec::new();
    let mut record = |path: serde_ignored::Path<'_>| unknown.push(field_path(&path));
    let config = serde_path_to_error::deserialize(serde_ignored::Deserializer::new(
        Value::Object(object),
        &mut record,
    ))?;
    Ok((config, unknown))
}

/// A field path as the file's errors write it (`authentication.x509.clientCAFile`,
/// `registerWithTaints[0].key`): map keys joined by dots, list indexes in brackets, and
/// `Option`/newtype layers left out.
fn field_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Map { parent, key } => match field_path(parent) {
            parent if parent.is_empty() => key.clone(),
            parent => format!("{parent}.{key}"),
        },
        Path::Seq { parent, index } => format!("{}[{index}]", field_path(parent)),
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => field_path(parent),
    }
}

/// The text of `path`.
fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}

/// `text` as a JSON object, checked to be a `KubeletConfiguration` (an absent kind or
/// apiVersion is accepted).
fn parse_object(path: &Path, text: &str) -> Result<Map<String, Value>, Error> {
    let object: Map<String, Value> = if text.trim().is_empty() {
        Map::new()
    } else {
        serde_saphyr::from_str(text).map_err(|e| Error::Syntax {
            path: path.to_owned(),
            message: e.to_string(),
        })?
    };
    let kind = object.get("kind").and_then(Value::as_str);
    if let Some(kind) = kind.filter(|k| *k != "KubeletConfiguration") {
        return Err(Error::Kind {
            path: path.to_owned(),
            message: format!("kind must be KubeletConfiguration, not {kind:?}"),
        });
    }
    let api_version = object.get("apiVersion").and_then(Value::as_str);
    if api_version.is_some_and(|v| v != "kubelet.config.k8s.io/v1beta1") {
        return Err(Error::Kind {
            path: path.to_owned(),
            message: "apiVersion must be kubelet.config.k8s.io/v1beta1".into(),
        });
    }
    Ok(object)
}

/// The `*.conf` files under `dir` in Go's `filepath.WalkDir` order (lexical, depth first).
fn collect_drop_ins(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let read_dir = |source| Error::Read {
        path: dir.to_owned(),
        source,
    };
    let mut entries = std::fs::read_dir(dir)
        .map_err(read_dir)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_dir)?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            collect_drop_ins(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "conf") {
            out.push(path);
        }
    }
    Ok(())
}

/// RFC 7386 JSON merge patch of `patch` onto `target`.
fn merge_patch(target: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (key, value) in patch {
        match value {
            Value::Null => {
                target.remove(&key);
            }
            Value::Object(inner) => {
                let slot = target
                    .entry(key)
                    .or_insert_with(|| Value::Object(Map::new()));
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                if let Value::Object(slot) = slot {
                    merge_patch(slot, inner);
                }
            }
            other => {
                target.insert(key, other);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::fields;

    fn load(text: &str) -> Result<Loaded, Error> {
        KubeletConfiguration::from_text(Path::new("/etc/kubelet.yaml"), text)
    }

    #[test]
    fn every_upstream_field_is_a_field_of_the_struct() {
        // a name without a field (or a misspelt rename) would be an unknown field
        let all: Map<String, Value> = fields::UPSTREAM_FIELDS
            .iter()
            .chain(EXTENSION_FIELDS)
            .map(|f| ((*f).to_owned(), Value::Null))
            .collect();
        let (_, unknown) = typed(all).expect("nulls are absent fields");
        assert_eq!(unknown, Vec::<String>::new());
    }

    /// Unknown fields at every depth are named by their path; map-valued and free-form
    /// fields take any key.
    #[test]
    fn unknown_nested_fields_are_named_by_their_path() {
        let loaded = load(
            "kind: KubeletConfiguration\n\
             syncFrequncy: 3s\n\
             authentication:\n  x509:\n    clientCAFil: /etc/ca.crt\n    clientCAFile: /etc/kubernetes/ca.crt\n  webhok: {enabled: true}\n\
             registerWithTaints: [{key: a, effect: NoSchedule, efect: NoExecute}]\n\
             reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}, limit: 2}]\n\
             crashLoopBackOff: {maxContainerRestartPeriod: 10s, initialPeriod: 1s}\n\
             evictionHard: {memory.available: 100Mi, any.signal: 1%}\n\
             kubeReserved: {cpu: 100m, anything: \"1\"}\n\
             featureGates: {NoSuchGate: true}\n\
             staticPodURLHeader: {X-Any: [a]}\n\
             logging: {format: text, options: {json: {infoBufferSize: \"0\"}}}\n",
        )
        .expect("unknown fields are not an error");
        assert_eq!(
            loaded.unknown_fields,
            [
                "authentication.webhok",
                "authentication.x509.clientCAFil",
                "crashLoopBackOff.initialPeriod",
                "registerWithTaints[0].efect",
                "reservedMemory[0].limit",
                "syncFrequncy",
            ],
        );
        let auth = loaded.config.authentication.unwrap_or_default();
        assert_eq!(
            auth.x509.and_then(|x| x.client_ca_file),
            Some(PathBuf::from("/etc/kubernetes/ca.crt")),
            "the known sibling is read"
        );
        assert_eq!(loaded.config.eviction_hard.map(|m| m.len()), Some(2));
    }

    #[test]
    fn serializes_with_upstreams_names() {
        let yaml = "kind: KubeletConfiguration\nmaxPods: 7\nclusterDNS: [10.0.0.10]\nimageGCHighThresholdPercent: 90\nregisterWithTaints: [{key: a, effect: NoSchedule}]\n";
        let loaded = load(yaml).expect("valid");
        let value = serde_json::to_value(&loaded.config).expect("serialize");
        for key in value.as_object().expect("object").keys() {
            assert!(
                fields::is_upstream_field(key) || EXTENSION_FIELDS.contains(&key.as_str()),
                "{key}"
            );
        }
        assert_eq!(loaded.config.max_pods, Some(7));
        assert_eq!(loaded.config.image_gc_high_threshold_percent, Some(90));
    }

    #[test]
    fn zeros_are_defaulted_unknown_fields_set_apart() {
        let loaded = load("syncFrequency: 0s\nmaxPods: 0\nsyncFrequncy: 3s\n").expect("valid");
        assert_eq!(loaded.config.sync_frequency.as_deref(), Some("1m0s"));
        assert_eq!(loaded.config.max_pods, Some(110));
        assert_eq!(loaded.unknown_fields, vec!["syncFrequncy".to_owned()]);
        let mut config = KubeletConfiguration {
            runtime_request_timeout: Some("0s".into()),
            ..KubeletConfiguration::default()
        };
        config.set_defaults().expect("defaults");
        assert_eq!(config.runtime_request_timeout.as_deref(), Some("2m0s"));
    }

    #[test]
    fn errors_name_the_file_and_the_field_path() {
        let err = load("authentication:\n  anonymous:\n    enabled: maybe\n").expect_err("bad");
        assert!(
            err.to_string()
                .starts_with("/etc/kubelet.yaml: invalid KubeletConfiguration: authentication.anonymous.enabled: "),
            "{err}"
        );
        for (yaml, field) in [
            ("oomScoreAdj: 2000", "oomScoreAdj"),
            ("hairpinMode: sideways", "hairpinMode"),
            ("memoryThrottlingFactor: 1.5", "memoryThrottlingFactor"),
            (
                "serializeImagePulls: true\nmaxParallelImagePulls: 3",
                "maxParallelImagePulls",
            ),
            (
                "registerWithTaints: [{key: a, effect: Sometimes}]",
                "registerWithTaints[0]",
            ),
            (
                "memorySwap: {swapBehavior: Unlimited}",
                "memorySwap.swapBehavior",
            ),
            ("maxPods: -1", "maxPods"),
        ] {
            match load(yaml) {
                Err(Error::Field { field: f, .. }) => assert_eq!(f, field, "{yaml}"),
                other => panic!("{yaml}: {other:?}"),
            }
        }
        assert!(matches!(load("kind: Pod\n"), Err(Error::Kind { .. })));
        assert!(matches!(load("- a\n"), Err(Error::Syntax { .. })));
    }

    #[test]
    fn drop_ins_merge_in_lexical_order_as_json_merge_patches() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().join("config.yaml");
        std::fs::write(
            &base,
            "kind: KubeletConfiguration\nmaxPods: 50\nclusterDNS: [10.0.0.10]\nevictionHard:\n  memory.available: 100Mi\nsyncFrequency: 30s\n",
        )
        .expect("write");
        let drop_ins = dir.path().join("config.d");
        std::fs::create_dir_all(drop_ins.join("20-sub")).expect("mkdir");
        std::fs::write(
            drop_ins.join("10-a.conf"),
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 60\nclusterDNS: [10.0.0.53]\nevictionHard:\n  nodefs.available: 5%\n",
        )
        .expect("write");
        std::fs::write(
            drop_ins.join("20-sub/x.conf"),
            "maxPods: 70\nsyncFrequency: null\n",
        )
        .expect("write");
        std::fs::write(drop_ins.join("30-ignored.yaml"), "maxPods: 80\n").expect("write");
        let loaded =
            KubeletConfiguration::load_with_drop_ins(Some(&base), Some(&drop_ins)).expect("valid");
        let c = loaded.config;
        assert_eq!(
            c.max_pods,
            Some(70),
            "the last drop-in wins; *.yaml is not one"
        );
        assert_eq!(
            c.cluster_dns,
            Some(vec!["10.0.0.53".to_owned()]),
            "lists replace"
        );
        let hard = c.eviction_hard.unwrap_or_default();
        assert_eq!(hard.len(), 2, "objects merge: {hard:?}");
        assert_eq!(c.sync_frequency, None, "null removes");

        std::fs::write(drop_ins.join("40-bad.conf"), "maxPods: lots\n").expect("write");
        let err = KubeletConfiguration::load_with_drop_ins(Some(&base), Some(&drop_ins))
            .expect_err("bad drop-in");
        assert!(err.to_string().contains("maxPods"), "{err}");
        let alone = KubeletConfiguration::load_with_drop_ins(None, Some(&drop_ins.join("20-sub")))
            .expect("a drop-in directory alone");
        assert_eq!(alone.config.max_pods, Some(70));
    }
}
