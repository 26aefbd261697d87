//! Flags of container garbage collection (upstream `--maximum-dead-containers-per-container`,
//! `--maximum-dead-containers`, `--minimum-container-ttl-duration`: deprecated flags of
//! `cmd/kubelet/app/options/options.go` that upstream still honours, with no
//! `KubeletConfiguration` field), merged into a [`kubelet_core::container_gc::Policy`].

use std::time::Duration;

use kubelet_core::container_gc::{CONTAINER_GC_PERIOD, Policy};

use crate::duration;
use crate::settings::UsageError;

/// The flags of this module.
#[derive(Debug, Default, clap::Args)]
#[group(id = "garbage-collection")]
pub struct Flags {
    /// Most dead instances of one container (per pod) kept (default 1; negative: no limit).
    /// Deprecated upstream in favour of eviction, still honoured.
    #[arg(long, allow_hyphen_values = true)]
    pub maximum_dead_containers_per_container: Option<i32>,
    /// Most dead containers kept on the node (default -1: no limit). Deprecated upstream in
    /// favour of eviction, still honoured.
    #[arg(long, allow_hyphen_values = true)]
    pub maximum_dead_containers: Option<i32>,
    /// Minimum age of a dead container before it is collected (e.g. 1m; default 0).
    /// Deprecated upstream in favour of eviction, still honoured.
    #[arg(long, value_parser = duration::parse)]
    pub minimum_container_ttl_duration: Option<Duration>,
    /// How often dead containers are collected (upstream: 1 m, not configurable; for
    /// tests; 0 turns container GC off).
    #[arg(long, hide = true, value_parser = duration::parse)]
    pub experimental_container_gc_period: Option<Duration>,
}

/// Merged garbage collection settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Which dead containers are collected.
    pub container_gc: Policy,
    /// How often; zero: never.
    pub container_gc_period: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            container_gc: Policy::default(),
            container_gc_period: CONTAINER_GC_PERIOD,
        }
    }
}

impl Settings {
    /// Merges `flags` over the defaults.
    pub fn merge(flags: Flags) -> Result<Self, UsageError> {
        let defaults = Policy::default();
        Ok(Self {
            container_gc: Policy {
                min_age: flags
                    .minimum_container_ttl_duration
                    .unwrap_or(defaults.min_age),
                max_per_pod_container: flags
                    .maximum_dead_containers_per_container
                    .unwrap_or(defaults.max_per_pod_container),
                max_containers: flags
                    .maximum_dead_containers
                    .unwrap_or(defaults.max_containers),
            },
            container_gc_period: flags
                .experimental_container_gc_period
                .unwrap_or(CONTAINER_GC_PERIOD),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_upstreams_and_flags_set_the_policy() {
        let s = Settings::merge(Flags::default()).expect("valid");
        assert_eq!(s, Settings::default());
        assert_eq!(s.container_gc, Policy::default());
        assert_eq!(s.container_gc_period, Duration::from_secs(60));
        let s = Settings::merge(Flags {
            maximum_dead_containers_per_container: Some(3),
            maximum_dead_containers: Some(100),
            minimum_container_ttl_duration: Some(Duration::from_secs(60)),
            experimental_container_gc_period: None,
        })
        .expect("valid");
        assert_eq!(
            s.container_gc,
            Policy {
                min_age: Duration::from_secs(60),
                max_per_pod_container: 3,
                max_containers: 100,
            }
        );
    }
}
