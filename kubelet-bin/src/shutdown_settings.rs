//! The `KubeletConfiguration` fields of graceful node shutdown (upstream has no flags for
//! them): `shutdownGracePeriod`, `shutdownGracePeriodCriticalPods` and
//! `shutdownGracePeriodByPodPriority`, validated as upstream's `ValidateKubeletConfiguration`;
//! errors name the field.

use std::time::Duration;

use kubelet_core::nodeshutdown::{Config, GracePeriodByPriority};

use crate::cli::config::KubeletConfiguration;
use crate::duration;
use crate::settings::UsageError;

fn period(file: Option<&str>, field: &str) -> Result<Duration, UsageError> {
    match file {
        None | Some("") => Ok(Duration::ZERO),
        Some(v) => duration::parse(v).map_err(|e| UsageError(format!("{field}: {e}"))),
    }
}

/// The node shutdown manager's configuration from the file (all zero: off).
pub fn merge(file: &KubeletConfiguration) -> Result<Config, UsageError> {
    let config = Config {
        shutdown_grace_period: period(
            file.shutdown_grace_period.as_deref(),
            "shutdownGracePeriod",
        )?,
        shutdown_grace_period_critical_pods: period(
            file.shutdown_grace_period_critical_pods.as_deref(),
            "shutdownGracePeriodCriticalPods",
        )?,
        shutdown_grace_period_by_pod_priority: file
            .shutdown_grace_period_by_pod_priority
            .iter()
            .flatten()
            .map(|p| GracePeriodByPriority {
                priority: p.priority,
                shutdown_grace_period_seconds: p.shutdown_grace_period_seconds,
            })
            .collect(),
    };
    if !config.shutdown_grace_period_by_pod_priority.is_empty()
        && (!config.shutdown_grace_period.is_zero()
            || !config.shutdown_grace_period_critical_pods.is_zero())
    {
        return Err(UsageError(
            "invalid configuration: Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time".into(),
        ));
    }
    config
        .groups()
        .map_err(|e| UsageError(format!("invalid configuration: {e}")))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::config::ShutdownGracePeriodByPodPriority;

    #[test]
    fn fields_become_the_config_and_bad_ones_are_named() {
        let file = KubeletConfiguration {
            shutdown_grace_period: Some("30s".into()),
            shutdown_grace_period_critical_pods: Some("10s".into()),
            ..Default::default()
        };
        let config = merge(&file).expect("valid");
        assert_eq!(config.shutdown_grace_period, Duration::from_secs(30));
        assert_eq!(
            config.shutdown_grace_period_critical_pods,
            Duration::from_secs(10)
        );
        assert_eq!(
            merge(&KubeletConfiguration::default()).expect("off"),
            Config::default()
        );

        let bad = KubeletConfiguration {
            shutdown_grace_period: Some("soon".into()),
            ..Default::default()
        };
        let err = merge(&bad).expect_err("not a duration");
        assert!(err.0.starts_with("shutdownGracePeriod: "), "{}", err.0);

        let over = KubeletConfiguration {
            shutdown_grace_period: Some("10s".into()),
            shutdown_grace_period_critical_pods: Some("20s".into()),
            ..Default::default()
        };
        let err = merge(&over).expect_err("critical above the whole");
        assert!(
            err.0.contains("shutdownGracePeriodCriticalPods"),
            "{}",
            err.0
        );

        let both = KubeletConfiguration {
            shutdown_grace_period: Some("10s".into()),
            shutdown_grace_period_by_pod_priority: Some(vec![ShutdownGracePeriodByPodPriority {
                priority: 0,
                shutdown_grace_period_seconds: 5,
            }]),
            ..Default::default()
        };
        let err = merge(&both).expect_err("both forms");
        assert!(err.0.contains("Cannot specify both"), "{}", err.0);
    }
}
