//! Upstream's defaulting of a `KubeletConfiguration` file: a field whose Go type is not a
//! pointer cannot tell "unset" from "zero", so upstream's `SetDefaults_KubeletConfiguration`
//! (mirrors `pkg/kubelet/apis/config/v1beta1/defaults.go`) replaces its zero value (`0s`,
//! `0`, `""`) with the default. kubeadm writes such zeros (`syncFrequency: 0s`,
//! `runtimeRequestTimeout: 0s`, …), so a file it wrote must be read through these rules.
//!
//! Fields whose Go type is a pointer (`readOnlyPort`-like `healthzPort`, `kubeAPIQPS`,
//! `imageGCHighThresholdPercent`, …) keep an explicit zero, as upstream: there only an absent
//! field gets the default, which the settings modules apply. Flags are not defaulted here: an
//! explicit `--volume-stats-agg-period=0` keeps its meaning, as upstream.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::duration;

/// The default a zero becomes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Default {
    /// A `metav1.Duration` (`0s`, `0`, or `""` is zero); written back in Go's format.
    Duration(Duration),
    /// An integer (`0` is zero).
    Int(i64),
    /// A string (`""` is zero).
    Str(&'static str),
}

const fn secs(s: u64) -> Default {
    Default::Duration(Duration::from_secs(s))
}

/// Every field that upstream defaults when zero, by its path in the file, with the default
/// (upstream at v1.31+; `nodeStatusReportFrequency` is [`set_defaults`]'s special case).
pub const ZERO_DEFAULTS: &[(&str, Default)] = &[
    ("syncFrequency", secs(60)),
    ("fileCheckFrequency", secs(20)),
    ("httpCheckFrequency", secs(20)),
    ("address", Default::Str("0.0.0.0")),
    ("port", Default::Int(10250)),
    ("authentication.webhook.cacheTTL", secs(120)),
    ("authorization.mode", Default::Str("Webhook")),
    ("authorization.webhook.cacheAuthorizedTTL", secs(300)),
    ("authorization.webhook.cacheUnauthorizedTTL", secs(30)),
    ("registryBurst", Default::Int(10)),
    ("eventBurst", Default::Int(100)),
    ("healthzBindAddress", Default::Str("127.0.0.1")),
    ("streamingConnectionIdleTimeout", secs(4 * 3600)),
    ("nodeStatusUpdateFrequency", secs(10)),
    ("nodeLeaseDurationSeconds", Default::Int(40)),
    ("imageMinimumGCAge", secs(120)),
    ("volumeStatsAggPeriod", secs(60)),
    ("cgroupDriver", Default::Str("cgroupfs")),
    ("cpuManagerPolicy", Default::Str("none")),
    ("cpuManagerReconcilePeriod", secs(10)),
    ("memoryManagerPolicy", Default::Str("None")),
    ("topologyManagerPolicy", Default::Str("none")),
    ("topologyManagerScope", Default::Str("container")),
    ("runtimeRequestTimeout", secs(120)),
    ("hairpinMode", Default::Str("promiscuous-bridge")),
    ("maxPods", Default::Int(110)),
    ("maxOpenFiles", Default::Int(1_000_000)),
    (
        "contentType",
        Default::Str("application/vnd.kubernetes.protobuf"),
    ),
    ("kubeAPIBurst", Default::Int(100)),
    ("evictionPressureTransitionPeriod", secs(300)),
    ("containerLogMaxSize", Default::Str("10Mi")),
    (
        "configMapAndSecretChangeDetectionStrategy",
        Default::Str("Watch"),
    ),
    (
        "volumePluginDir",
        Default::Str("/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"),
    ),
    (
        "containerRuntimeEndpoint",
        Default::Str("unix:///run/containerd/containerd.sock"),
    ),
    ("podLogsDir", Default::Str("/var/log/pods")),
];

/// `nodeStatusReportFrequency` when it and `nodeStatusUpdateFrequency` are both zero.
pub const NODE_STATUS_REPORT_FREQUENCY: Duration = Duration::from_secs(300);

/// A field of the file that has the wrong type or value for its rule.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct FieldError {
    /// The field's path, e.g. `authentication.webhook.cacheTTL`.
    pub path: String,
    /// What is wrong with it.
    pub reason: String,
}

/// What kind of zero a field holds, if any.
fn is_zero(path: &str, value: &Value, default: Default) -> Result<bool, FieldError> {
    let err = |reason: String| FieldError {
        path: path.to_owned(),
        reason,
    };
    Ok(match (value, default) {
        (Value::Null, _) => true,
        (Value::String(s), Default::Duration(_)) => {
            s.is_empty()
                || duration::parse(s)
                    .map_err(|e| err(e.to_string()))?
                    .is_zero()
        }
        (Value::Number(n), Default::Duration(_) | Default::Int(_)) => {
            n.as_f64().is_some_and(|f| f == 0.0)
        }
        (Value::String(s), Default::Str(_)) => s.is_empty(),
        (other, Default::Duration(_)) => {
            return Err(err(format!(
                "expected a duration such as \"1m\", got {other}"
            )));
        }
        (other, Default::Int(_)) => {
            return Err(err(format!("expected an integer, got {other}")));
        }
        (other, Default::Str(_)) => {
            return Err(err(format!("expected a string, got {other}")));
        }
    })
}

fn to_value(default: Default) -> Value {
    match default {
        Default::Duration(d) => Value::String(duration::format(d)),
        Default::Int(i) => Value::from(i),
        Default::Str(s) => Value::String(s.to_owned()),
    }
}

/// The value at a dotted path, when every object on the way exists.
fn get_mut<'a>(config: &'a mut Map<String, Value>, path: &str) -> Option<&'a mut Value> {
    let mut parts = path.split('.');
    let mut value = config.get_mut(parts.next()?)?;
    for part in parts {
        value = value.as_object_mut()?.get_mut(part)?;
    }
    Some(value)
}

/// Replaces every zero of [`ZERO_DEFAULTS`] present in `config` (the file's top-level
/// object) with its default; an absent field stays absent (the settings modules default it).
///
/// `nodeStatusReportFrequency: 0s` becomes `nodeStatusUpdateFrequency` when that is set to
/// non-zero, else [`NODE_STATUS_REPORT_FREQUENCY`], as upstream.
pub fn set_defaults(config: &mut Map<String, Value>) -> Result<(), FieldError> {
    const REPORT: &str = "nodeStatusReportFrequency";
    const UPDATE: &str = "nodeStatusUpdateFrequency";
    let update = Default::Duration(Duration::ZERO);
    if let Some(report) = config.get(REPORT)
        && is_zero(REPORT, report, update)?
    {
        let explicit_update = match config.get(UPDATE) {
            Some(v) if !is_zero(UPDATE, v, update)? => Some(v.clone()),
            _ => None,
        };
        config.insert(
            REPORT.to_owned(),
            explicit_update
                .unwrap_or_else(|| to_value(Default::Duration(NODE_STATUS_REPORT_FREQUENCY))),
        );
    }
    for &(path, default) in ZERO_DEFAULTS {
        if let Some(value) = get_mut(config, path)
            && is_zero(path, value, default)?
        {
            *value = to_value(default);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaulted(yaml: &str) -> Result<Map<String, Value>, FieldError> {
        let mut map: Map<String, Value> = serde_saphyr::from_str(yaml).expect("yaml");
        set_defaults(&mut map)?;
        Ok(map)
    }

    #[test]
    fn zeros_become_defaults_and_other_values_stay() {
        let map = defaulted(
            "syncFrequency: 0s\nfileCheckFrequency: 5s\nmaxPods: 0\nkubeAPIBurst: 7\ncgroupDriver: \"\"\nauthentication:\n  webhook:\n    cacheTTL: 0s\nshutdownGracePeriod: 0s\n",
        )
        .expect("valid");
        assert_eq!(map["syncFrequency"], "1m0s");
        assert_eq!(map["fileCheckFrequency"], "5s");
        assert_eq!(map["maxPods"], 110);
        assert_eq!(map["kubeAPIBurst"], 7);
        assert_eq!(map["cgroupDriver"], "cgroupfs");
        assert_eq!(map["authentication"]["webhook"]["cacheTTL"], "2m0s");
        // not defaulted upstream: a zero grace period turns graceful shutdown off
        assert_eq!(map["shutdownGracePeriod"], "0s");
        assert!(!map.contains_key("port"), "absent fields stay absent");
    }

    #[test]
    fn node_status_report_frequency_follows_an_explicit_update_frequency() {
        let map = defaulted("nodeStatusReportFrequency: 0s\nnodeStatusUpdateFrequency: 4s\n")
            .expect("valid");
        assert_eq!(map["nodeStatusReportFrequency"], "4s");
        let map = defaulted("nodeStatusReportFrequency: 0s\nnodeStatusUpdateFrequency: 0s\n")
            .expect("valid");
        assert_eq!(map["nodeStatusReportFrequency"], "5m0s");
        assert_eq!(map["nodeStatusUpdateFrequency"], "10s");
    }

    #[test]
    fn a_bad_value_names_the_field_path() {
        let err = defaulted("authorization:\n  webhook:\n    cacheAuthorizedTTL: soon\n")
            .expect_err("bad duration");
        assert_eq!(err.path, "authorization.webhook.cacheAuthorizedTTL");
        let err = defaulted("maxPods: [1]\n").expect_err("bad type");
        assert!(err.to_string().starts_with("maxPods: "), "{err}");
    }
}
