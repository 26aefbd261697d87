//! Flags and `KubeletConfiguration` fields of container log rotation (upstream
//! `--container-log-max-size`, `--container-log-max-files`, `containerLogMaxSize`,
//! `containerLogMaxFiles`, `containerLogMonitorInterval`), merged with the same precedence as
//! the other settings: defaults < file < flags; validated as upstream
//! `pkg/kubelet/apis/config/validation`.

use std::time::Duration;

use kubelet_core::logs::rotation::{DEFAULT_MAX_FILES, DEFAULT_MONITOR_INTERVAL, Policy};

use crate::cli::config::KubeletConfiguration;
use crate::duration;
use crate::settings::UsageError;

/// Upstream's default `containerLogMaxSize`, as written.
const DEFAULT_MAX_SIZE_TEXT: &str = "10Mi";

/// Upstream's smallest `containerLogMonitorInterval`.
const MIN_MONITOR_INTERVAL: Duration = Duration::from_secs(3);

/// The flags of this module.
#[derive(Debug, Default, clap::Args)]
#[group(id = "container-logs")]
pub struct Flags {
    /// A container's log is rotated when it reaches this size (a quantity, default 10Mi;
    /// negative: never).
    #[arg(long, allow_hyphen_values = true)]
    pub container_log_max_size: Option<String>,
    /// At most this many log files per container, the live one included (default 5, at
    /// least 2).
    #[arg(long, allow_hyphen_values = true)]
    pub container_log_max_files: Option<i64>,
}

/// Merged container log rotation settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The rotation policy; `None` when `containerLogMaxSize` is negative (no rotation).
    pub policy: Option<Policy>,
    /// `containerLogMaxSize` as given (a quantity, default `10Mi`).
    pub max_size: String,
    /// `containerLogMaxFiles`.
    pub max_files: i64,
    /// How often logs are checked.
    pub monitor_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            policy: Some(Policy::default()),
            max_size: DEFAULT_MAX_SIZE_TEXT.into(),
            max_files: DEFAULT_MAX_FILES as i64,
            monitor_interval: DEFAULT_MONITOR_INTERVAL,
        }
    }
}

impl Settings {
    /// Merges `flags` over `file` over the defaults.
    pub fn merge(flags: Flags, file: &KubeletConfiguration) -> Result<Self, UsageError> {
        let max_files = flags
            .container_log_max_files
            .or(file.container_log_max_files)
            .unwrap_or(DEFAULT_MAX_FILES as i64);
        if max_files < 2 {
            return Err(UsageError(format!(
                "invalid configuration: containerLogMaxFiles must be greater than 1, got {max_files}"
            )));
        }
        let monitor_interval = match file.container_log_monitor_interval.clone() {
            Some(v) => duration::parse(&v).map_err(|e| {
                UsageError(format!(
                    "invalid configuration: containerLogMonitorInterval: {e}"
                ))
            })?,
            None => DEFAULT_MONITOR_INTERVAL,
        };
        if monitor_interval < MIN_MONITOR_INTERVAL {
            return Err(UsageError(
                "invalid configuration: containerLogMonitorInterval must be a positive time duration greater than or equal to 3s".into(),
            ));
        }
        let max_size_text = flags
            .container_log_max_size
            .or(file.container_log_max_size.clone())
            .unwrap_or_else(|| DEFAULT_MAX_SIZE_TEXT.into());
        let max_size =
            kubelet_core::resources::quantity_value(&max_size_text).ok_or_else(|| {
                UsageError(format!(
                    "--container-log-max-size/containerLogMaxSize: failed to parse container log max size {max_size_text:?}: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
                ))
            })?;
        let policy = match u64::try_from(max_size) {
            Ok(max_size) => Some(Policy {
                max_size,
                max_files: usize::try_from(max_files).unwrap_or(usize::MAX),
            }),
            // Negative: rotation off (upstream's stub manager).
            Err(_) => None,
        };
        Ok(Self {
            policy,
            max_size: max_size_text,
            max_files,
            monitor_interval,
        })
    }

    /// The `KubeletConfiguration` fields of these settings, as `/configz` shows them.
    pub fn configz(&self) -> serde_json::Value {
        serde_json::json!({
            "containerLogMaxSize": self.max_size,
            "containerLogMaxFiles": self.max_files,
            "containerLogMonitorInterval": duration::format(self.monitor_interval),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merge(flags: Flags, file: &str) -> Result<Settings, UsageError> {
        let file: KubeletConfiguration = serde_json::from_str(file).expect("test config");
        Settings::merge(flags, &file)
    }

    #[test]
    fn defaults_are_upstreams() {
        let s = merge(Flags::default(), "{}").expect("valid");
        assert_eq!(
            s.policy,
            Some(Policy {
                max_size: 10 * 1024 * 1024,
                max_files: 5
            })
        );
        assert_eq!(s.monitor_interval, Duration::from_secs(10));
        assert_eq!(
            s.configz(),
            serde_json::json!({
                "containerLogMaxSize": "10Mi",
                "containerLogMaxFiles": 5,
                "containerLogMonitorInterval": "10s",
            })
        );
        assert_eq!(s, Settings::default());
    }

    #[test]
    fn flags_win_over_the_file() {
        let flags = Flags {
            container_log_max_size: Some("1Mi".into()),
            container_log_max_files: None,
        };
        let s = merge(
            flags,
            r#"{"containerLogMaxSize": "5Mi", "containerLogMaxFiles": 3, "containerLogMonitorInterval": "3s"}"#,
        )
        .expect("valid");
        assert_eq!(
            s.policy,
            Some(Policy {
                max_size: 1024 * 1024,
                max_files: 3
            })
        );
        assert_eq!(s.monitor_interval, Duration::from_secs(3));
    }

    #[test]
    fn bad_values_are_refused_and_a_negative_size_disables_rotation() {
        let size = |s: &str| Flags {
            container_log_max_size: Some(s.into()),
            container_log_max_files: None,
        };
        assert_eq!(merge(size("-1"), "{}").expect("valid").policy, None);
        assert!(merge(size("ten"), "{}").is_err());
        let files = Flags {
            container_log_max_size: None,
            container_log_max_files: Some(1),
        };
        assert!(merge(files, "{}").is_err());
        assert!(merge(Flags::default(), r#"{"containerLogMonitorInterval": "1s"}"#).is_err());
    }
}
