//! Flags and `KubeletConfiguration` fields of the eviction manager (upstream
//! `--eviction-soft`, `--eviction-soft-grace-period`, `--eviction-minimum-reclaim`,
//! `--eviction-max-pod-grace-period`, `--eviction-pressure-transition-period`, and the
//! fields `evictionSoft`, `evictionSoftGracePeriod`, `evictionMinimumReclaim`,
//! `evictionMaxPodGracePeriod`, `evictionPressureTransitionPeriod`,
//! `localStorageCapacityIsolation`), merged as the other settings: defaults < file < flags.
//! The hard thresholds (`--eviction-hard`) come from `node_status_flags`, which also holds
//! them back from allocatable. Errors name the flag or field and the bad statement.

use std::collections::BTreeMap;
use std::time::Duration;

use kubelet::cluster::node_status::EvictionHard;
use kubelet_core::eviction::{self, api};

use crate::cli::config::KubeletConfiguration;
use crate::cli::map_flags;
use crate::duration;
use crate::settings::UsageError;

/// The flags of this module.
#[derive(Debug, Default, clap::Args)]
#[group(id = "eviction")]
pub struct Flags {
    /// Soft eviction thresholds (`memory.available<1.5Gi,…`), each with a grace period;
    /// repeated flags add up and replace the file's `evictionSoft`.
    #[arg(long, action = map_flags::ACTION)]
    pub eviction_soft: Vec<String>,
    /// How long each soft threshold must hold before pods are evicted
    /// (`memory.available=1m30s,…`); repeated flags add up and replace the file's
    /// `evictionSoftGracePeriod`.
    #[arg(long, action = map_flags::ACTION)]
    pub eviction_soft_grace_period: Vec<String>,
    /// Once a threshold is met, evict until this much more is available
    /// (`memory.available=0Mi,nodefs.available=500Mi,…`); repeated flags add up and replace
    /// the file's `evictionMinimumReclaim`.
    #[arg(long, action = map_flags::ACTION)]
    pub eviction_minimum_reclaim: Vec<String>,
    /// The grace period of pods evicted for a soft threshold, in seconds (default 0).
    #[arg(long, allow_negative_numbers = true)]
    pub eviction_max_pod_grace_period: Option<i64>,
    /// How long a pressure condition stays after it was last seen (default 5m).
    #[arg(long, value_parser = duration::parse)]
    pub eviction_pressure_transition_period: Option<Duration>,
}

fn usage(what: &str) -> impl Fn(eviction::Error) -> UsageError + '_ {
    move |e| UsageError(format!("{what}: {e}"))
}

/// A `key<sep>value` list from its flag, else its config field.
fn map(
    flag: Option<&str>,
    flag_name: &str,
    separator: char,
    file: Option<BTreeMap<String, String>>,
) -> Result<BTreeMap<String, String>, UsageError> {
    match flag {
        Some(s) => api::parse_flag_map(s, separator).map_err(usage(flag_name)),
        None => Ok(file.unwrap_or_default()),
    }
}

/// Merges `flags` over `file` into the eviction manager's configuration, with the hard
/// thresholds of `hard`.
pub fn merge(
    flags: Flags,
    file: &KubeletConfiguration,
    hard: &EvictionHard,
) -> Result<eviction::Config, UsageError> {
    let soft_flag = map_flags::joined(&flags.eviction_soft);
    let grace_flag = map_flags::joined(&flags.eviction_soft_grace_period);
    let reclaim_flag = map_flags::joined(&flags.eviction_minimum_reclaim);
    let soft = map(
        soft_flag.as_deref(),
        "--eviction-soft",
        '<',
        file.eviction_soft.clone(),
    )?;
    let grace_name = if grace_flag.is_some() {
        "--eviction-soft-grace-period"
    } else {
        "evictionSoftGracePeriod"
    };
    let grace = map(
        grace_flag.as_deref(),
        grace_name,
        '=',
        file.eviction_soft_grace_period.clone(),
    )?
    .into_iter()
    .map(|(signal, v)| {
        duration::parse(&v)
            .map(|d| (signal.clone(), d))
            .map_err(|e| UsageError(format!("{grace_name}: {signal}={v}: {e}")))
    })
    .collect::<Result<BTreeMap<_, _>, _>>()?;
    let reclaim_name = if reclaim_flag.is_some() {
        "--eviction-minimum-reclaim"
    } else {
        "evictionMinimumReclaim"
    };
    let reclaim = map(
        reclaim_flag.as_deref(),
        reclaim_name,
        '=',
        file.eviction_minimum_reclaim.clone(),
    )?;
    let soft_name = if soft_flag.is_some() {
        "--eviction-soft"
    } else {
        "evictionSoft"
    };
    let mut thresholds = hard.0.clone();
    thresholds.extend(
        api::parse_threshold_config(&BTreeMap::new(), &soft, &grace, &BTreeMap::new())
            .map_err(usage(soft_name))?,
    );
    api::apply_min_reclaims(&mut thresholds, &reclaim).map_err(usage(reclaim_name))?;
    let transition = match (
        flags.eviction_pressure_transition_period,
        file.eviction_pressure_transition_period.as_deref(),
    ) {
        (Some(d), _) => d,
        (None, Some(v)) => duration::parse(v)
            .map_err(|e| UsageError(format!("evictionPressureTransitionPeriod: {e}")))?,
        (None, None) => eviction::DEFAULT_PRESSURE_TRANSITION_PERIOD,
    };
    Ok(eviction::Config {
        thresholds,
        pressure_transition_period: transition,
        max_pod_grace_period_seconds: flags
            .eviction_max_pod_grace_period
            .or(file.eviction_max_pod_grace_period)
            .unwrap_or(0),
        local_storage_capacity_isolation: file.local_storage_capacity_isolation.unwrap_or(true),
        ..eviction::Config::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_upstreams() {
        let c = merge(
            Flags::default(),
            &KubeletConfiguration::default(),
            &EvictionHard::default(),
        )
        .expect("valid");
        assert_eq!(c.thresholds.len(), 5);
        assert!(c.thresholds.iter().all(|t| t.is_hard()));
        assert_eq!(c.pressure_transition_period, Duration::from_secs(300));
        assert_eq!(c.max_pod_grace_period_seconds, 0);
        assert!(c.local_storage_capacity_isolation);
    }

    #[test]
    fn soft_thresholds_grace_periods_and_reclaims_from_flags_over_the_file() {
        let file: KubeletConfiguration = serde_json::from_value(serde_json::json!({
            "evictionSoft": {"nodefs.available": "20%"},
            "evictionSoftGracePeriod": {"nodefs.available": "1h"},
            "evictionPressureTransitionPeriod": "1m",
            "evictionMaxPodGracePeriod": 60,
        }))
        .expect("config");
        let flags = Flags {
            eviction_soft: vec!["memory.available<1Gi".into()],
            eviction_soft_grace_period: vec!["memory.available=1m30s".into()],
            eviction_minimum_reclaim: vec!["memory.available=500Mi".into()],
            ..Flags::default()
        };
        let hard: EvictionHard = "memory.available<100Mi".parse().expect("hard");
        let c = merge(flags, &file, &hard).expect("valid");
        assert_eq!(c.thresholds.len(), 2);
        assert!(c.thresholds[0].is_hard());
        assert_eq!(c.thresholds[1].grace_period, Duration::from_secs(90));
        assert!(c.thresholds.iter().all(|t| t.min_reclaim.is_some()));
        assert_eq!(c.pressure_transition_period, Duration::from_secs(60));
        assert_eq!(c.max_pod_grace_period_seconds, 60);
    }

    /// Upstream's `cliflag.MapStringString`: repetitions add up, a later key wins, and a
    /// flag replaces the file's whole map.
    #[test]
    fn repeated_map_flags_add_up_and_replace_the_files_maps() {
        let file: KubeletConfiguration = serde_json::from_value(serde_json::json!({
            "evictionSoft": {"nodefs.available": "20%"},
            "evictionSoftGracePeriod": {"nodefs.available": "1h"},
            "evictionMinimumReclaim": {"nodefs.available": "1Gi"},
        }))
        .expect("config");
        let flags = Flags {
            eviction_soft: vec![
                "memory.available<1Gi".into(),
                "memory.available<2Gi,imagefs.available<10%".into(),
            ],
            eviction_soft_grace_period: vec![
                "memory.available=1m".into(),
                "imagefs.available=2m".into(),
            ],
            eviction_minimum_reclaim: vec![
                "memory.available=100Mi".into(),
                "memory.available=200Mi".into(),
            ],
            ..Flags::default()
        };
        let c = merge(flags, &file, &EvictionHard(Vec::new())).expect("valid");
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let mut expected = api::parse_threshold_config(
            &BTreeMap::new(),
            &map(&[("memory.available", "2Gi"), ("imagefs.available", "10%")]),
            &BTreeMap::from([
                ("memory.available".to_owned(), Duration::from_secs(60)),
                ("imagefs.available".to_owned(), Duration::from_secs(120)),
            ]),
            &BTreeMap::new(),
        )
        .expect("expected thresholds");
        api::apply_min_reclaims(&mut expected, &map(&[("memory.available", "200Mi")]))
            .expect("reclaims");
        assert_eq!(c.thresholds, expected, "no nodefs.available from the file");
    }

    #[test]
    fn errors_name_the_flag_and_the_statement() {
        let err = |flags: Flags| {
            merge(
                flags,
                &KubeletConfiguration::default(),
                &EvictionHard::default(),
            )
            .map(|_| ())
            .expect_err("invalid")
            .0
        };
        let e = err(Flags {
            eviction_soft: vec!["memory.available<1Gi".into()],
            ..Flags::default()
        });
        assert_eq!(
            e,
            "--eviction-soft: grace period must be specified for the soft eviction threshold memory.available"
        );
        let e = err(Flags {
            eviction_soft_grace_period: vec!["memory.available=soon".into()],
            ..Flags::default()
        });
        assert!(
            e.starts_with("--eviction-soft-grace-period: memory.available=soon"),
            "{e}"
        );
        let e = err(Flags {
            eviction_minimum_reclaim: vec!["memory.available".into()],
            ..Flags::default()
        });
        assert!(
            e.contains("--eviction-minimum-reclaim") && e.contains("\"memory.available\""),
            "{e}"
        );
    }
}
