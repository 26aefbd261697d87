//! Flags and `KubeletConfiguration` fields of garbage collection, merged with the same
//! precedence as the other settings (defaults < file < flags) and validated as upstream
//! `pkg/kubelet/apis/config/validation`:
//!
//! * containers: `--maximum-dead-containers-per-container`, `--maximum-dead-containers`,
//!   `--minimum-container-ttl-duration` (deprecated flags of
//!   `cmd/kubelet/app/options/options.go` that upstream still honours, with no config field)
//!   into a [`kubelet_core::container_gc::Policy`];
//! * images: `--image-gc-high-threshold` / `imageGCHighThresholdPercent`,
//!   `--image-gc-low-threshold` / `imageGCLowThresholdPercent`,
//!   `--minimum-image-ttl-duration` / `imageMinimumGCAge`, `imageMaximumGCAge` into a
//!   [`kubelet_core::image_gc::Policy`], and `--pod-infra-container-image` (the sandbox
//!   image image GC never removes).

use std::time::Duration;

use kubelet_core::container_gc::{CONTAINER_GC_PERIOD, Policy};
use kubelet_core::image_gc::{self, IMAGE_GC_PERIOD};

use crate::cli::config::KubeletConfiguration;
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
    /// Image filesystem usage (percent) at or above which unused images are collected
    /// (default 85; 100 turns image GC off unless imageMaximumGCAge is set).
    #[arg(long, allow_hyphen_values = true)]
    pub image_gc_high_threshold: Option<i32>,
    /// Usage image GC frees down to (default 80; below the high threshold).
    #[arg(long, allow_hyphen_values = true)]
    pub image_gc_low_threshold: Option<i32>,
    /// Minimum age of an unused image before it is collected (default 2m).
    #[arg(long, value_parser = duration::parse)]
    pub minimum_image_ttl_duration: Option<Duration>,
    /// The sandbox image, never removed by image GC (default registry.k8s.io/pause:3.10).
    #[arg(long)]
    pub pod_infra_container_image: Option<String>,
    /// How often images are collected (upstream: 5 m, not configurable; for tests).
    #[arg(long, hide = true, value_parser = duration::parse)]
    pub experimental_image_gc_period: Option<Duration>,
}

/// Upstream's default sandbox image (`--pod-infra-container-image`).
pub const DEFAULT_POD_INFRA_CONTAINER_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// Merged garbage collection settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Which dead containers are collected.
    pub container_gc: Policy,
    /// How often; zero: never.
    pub container_gc_period: Duration,
    /// When unused images are collected.
    pub image_gc: image_gc::Policy,
    /// How often.
    pub image_gc_period: Duration,
    /// The sandbox image image GC keeps.
    pub pod_infra_container_image: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            container_gc: Policy::default(),
            container_gc_period: CONTAINER_GC_PERIOD,
            image_gc: image_gc::Policy::default(),
            image_gc_period: IMAGE_GC_PERIOD,
            pod_infra_container_image: DEFAULT_POD_INFRA_CONTAINER_IMAGE.to_owned(),
        }
    }
}

fn config_duration(field: &str, value: Option<String>) -> Result<Option<Duration>, UsageError> {
    value
        .map(|v| {
            duration::parse(&v)
                .map_err(|e| UsageError(format!("invalid configuration: {field}: {e}")))
        })
        .transpose()
}

/// The image GC policy of `flags` over `file` over the defaults, validated as upstream.
fn image_gc_policy(
    flags: &Flags,
    file: &KubeletConfiguration,
) -> Result<image_gc::Policy, UsageError> {
    let defaults = image_gc::Policy::default();
    let high = flags
        .image_gc_high_threshold
        .or(file.image_gc_high_threshold_percent)
        .unwrap_or(defaults.high_threshold_percent);
    let low = flags
        .image_gc_low_threshold
        .or(file.image_gc_low_threshold_percent)
        .unwrap_or(defaults.low_threshold_percent);
    let min_age = match flags.minimum_image_ttl_duration {
        Some(d) => d,
        None => config_duration("imageMinimumGCAge", file.image_minimum_gc_age.clone())?
            .unwrap_or(defaults.min_age),
    };
    let max_age = config_duration("imageMaximumGCAge", file.image_maximum_gc_age.clone())?
        .unwrap_or(defaults.max_age);
    if !(0..=100).contains(&high) {
        return Err(UsageError(format!(
            "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) {high} must be between 0 and 100, inclusive"
        )));
    }
    if !(0..=100).contains(&low) {
        return Err(UsageError(format!(
            "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be between 0 and 100, inclusive"
        )));
    }
    if low >= high {
        return Err(UsageError(format!(
            "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {high}"
        )));
    }
    if !max_age.is_zero() && max_age <= min_age {
        return Err(UsageError(format!(
            "invalid configuration: imageMaximumGCAge {} must be greater than imageMinimumGCAge {}",
            duration::format(max_age),
            duration::format(min_age)
        )));
    }
    Ok(image_gc::Policy {
        high_threshold_percent: high,
        low_threshold_percent: low,
        min_age,
        max_age,
    })
}

impl Settings {
    /// The `KubeletConfiguration` fields of these settings, as `/configz` shows them (the
    /// container GC flags have no field upstream).
    pub fn configz(&self) -> serde_json::Value {
        let p = &self.image_gc;
        serde_json::json!({
            "imageGCHighThresholdPercent": p.high_threshold_percent,
            "imageGCLowThresholdPercent": p.low_threshold_percent,
            "imageMinimumGCAge": duration::format(p.min_age),
            "imageMaximumGCAge": duration::format(p.max_age),
        })
    }

    /// Merges `flags` over `file` over the defaults.
    pub fn merge(flags: Flags, file: &KubeletConfiguration) -> Result<Self, UsageError> {
        let defaults = Policy::default();
        let image_gc = image_gc_policy(&flags, file)?;
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
            image_gc,
            image_gc_period: flags
                .experimental_image_gc_period
                .unwrap_or(IMAGE_GC_PERIOD),
            pod_infra_container_image: flags
                .pod_infra_container_image
                .unwrap_or_else(|| DEFAULT_POD_INFRA_CONTAINER_IMAGE.to_owned()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_upstreams_and_flags_set_the_policy() {
        let s = Settings::merge(Flags::default(), &KubeletConfiguration::default()).expect("valid");
        assert_eq!(s, Settings::default());
        assert_eq!(s.container_gc, Policy::default());
        assert_eq!(s.container_gc_period, Duration::from_secs(60));
        let s = Settings::merge(
            Flags {
                maximum_dead_containers_per_container: Some(3),
                maximum_dead_containers: Some(100),
                minimum_container_ttl_duration: Some(Duration::from_secs(60)),
                ..Flags::default()
            },
            &KubeletConfiguration::default(),
        )
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

    fn file(json: &str) -> KubeletConfiguration {
        serde_json::from_str(json).expect("test config")
    }

    #[test]
    fn image_gc_defaults_are_upstreams_and_flags_win_over_the_file() {
        let s = Settings::merge(Flags::default(), &KubeletConfiguration::default()).expect("valid");
        assert_eq!(s.image_gc, image_gc::Policy::default());
        assert_eq!(s.image_gc_period, Duration::from_secs(300));
        assert_eq!(s.pod_infra_container_image, "registry.k8s.io/pause:3.10");
        let config = r#"{"imageGCHighThresholdPercent": 70, "imageGCLowThresholdPercent": 60,
            "imageMinimumGCAge": "1m", "imageMaximumGCAge": "1h"}"#;
        let s = Settings::merge(Flags::default(), &file(config)).expect("valid");
        assert_eq!(
            s.image_gc,
            image_gc::Policy {
                high_threshold_percent: 70,
                low_threshold_percent: 60,
                min_age: Duration::from_secs(60),
                max_age: Duration::from_secs(3600),
            }
        );
        let flags = Flags {
            image_gc_high_threshold: Some(90),
            minimum_image_ttl_duration: Some(Duration::from_secs(5)),
            ..Flags::default()
        };
        let s = Settings::merge(flags, &file(config)).expect("valid");
        assert_eq!(s.image_gc.high_threshold_percent, 90);
        assert_eq!(s.image_gc.low_threshold_percent, 60);
        assert_eq!(s.image_gc.min_age, Duration::from_secs(5));
    }

    #[test]
    fn bad_image_gc_settings_are_refused_with_upstreams_messages() {
        let err =
            |flags: Flags, json: &str| Settings::merge(flags, &file(json)).expect_err("invalid").0;
        let high = |h| Flags {
            image_gc_high_threshold: Some(h),
            ..Flags::default()
        };
        assert_eq!(
            err(high(101), "{}"),
            "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100, inclusive"
        );
        assert_eq!(
            err(high(80), "{}"),
            "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 80 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 80"
        );
        assert_eq!(
            err(Flags::default(), r#"{"imageMaximumGCAge": "1m"}"#),
            "invalid configuration: imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s"
        );
    }
}
