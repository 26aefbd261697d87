//! Flags and `KubeletConfiguration` fields for pod cgroups, CPU limits and DNS (upstream
//! `--cgroups-per-qos`, `--cgroup-root`, `--cgroup-driver`, `--cpu-cfs-quota`,
//! `--cpu-cfs-quota-period`, `--cluster-dns`, `--cluster-domain`, `--resolv-conf`) and the
//! CRI deadline (`--runtime-request-timeout`), the system containers' cgroups of the Summary
//! API (`--kubelet-cgroups`, `--runtime-cgroups`, `--system-cgroups`) and how often volumes
//! are walked for it (`--volume-stats-agg-period`), merged with the same precedence as the
//! other settings: defaults < file < flags.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::config::KubeletConfiguration;
use crate::duration;
use crate::settings::UsageError;

/// The flags of this module.
#[derive(Debug, Default, clap::Args)]
#[group(id = "pod-runtime")]
pub struct Flags {
    /// Put pods in the `kubepods` QoS cgroup hierarchy (default true).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub cgroups_per_qos: Option<bool>,
    /// Root cgroup of the pod cgroups (default `/`).
    #[arg(long)]
    pub cgroup_root: Option<String>,
    /// Cgroup driver: `cgroupfs` (default) or `systemd` (slices through systemd over D-Bus;
    /// the runtime must use the same driver, containerd's `SystemdCgroup = true`).
    #[arg(long)]
    pub cgroup_driver: Option<String>,
    /// Enforce CPU limits with CFS quota (default true).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub cpu_cfs_quota: Option<bool>,
    /// CFS quota period (default 100ms).
    #[arg(long, value_parser = duration::parse)]
    pub cpu_cfs_quota_period: Option<Duration>,
    /// Comma-separated cluster DNS server IPs for `ClusterFirst` pods.
    #[arg(long, value_delimiter = ',')]
    pub cluster_dns: Vec<IpAddr>,
    /// Cluster domain added to the search paths of `ClusterFirst` pods.
    #[arg(long)]
    pub cluster_domain: Option<String>,
    /// Resolver configuration of `Default` pods (default `/etc/resolv.conf`; empty for none).
    #[arg(long)]
    pub resolv_conf: Option<String>,
    /// Deadline of each CRI call except image pulls (default 2m; `RunPodSandbox` gets twice
    /// this, `StopContainer` this plus the grace period).
    #[arg(long, value_parser = duration::parse)]
    pub runtime_request_timeout: Option<Duration>,
    /// The kubelet's cgroup, reported as the `kubelet` system container (default: the
    /// cgroup the kubelet runs in).
    #[arg(long)]
    pub kubelet_cgroups: Option<String>,
    /// The runtime's cgroup, reported as the `runtime` system container (default: the
    /// cgroup of the process serving the CRI socket).
    #[arg(long)]
    pub runtime_cgroups: Option<String>,
    /// The cgroup of the other system processes, reported as the `misc` system container.
    #[arg(long)]
    pub system_cgroups: Option<String>,
    /// How often each pod's volumes are walked for their usage (default 1m; 0 disables
    /// volume stats).
    #[arg(long, value_parser = duration::parse)]
    pub volume_stats_agg_period: Option<Duration>,
}

/// How pod cgroups are made (upstream `--cgroup-driver`, `cgroupDriver`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CgroupDriver {
    /// Directories of the cgroup filesystem.
    #[default]
    Cgroupfs,
    /// Transient slice units of systemd, over D-Bus.
    Systemd,
}

impl CgroupDriver {
    /// The upstream name: `cgroupfs` or `systemd`.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }
}

/// Merged pod cgroup and DNS settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `--cgroups-per-qos`.
    pub cgroups_per_qos: bool,
    /// `--cgroup-driver`.
    pub cgroup_driver: CgroupDriver,
    /// `--cgroup-root`, `/` by default.
    pub cgroup_root: String,
    /// Enforce CPU limits.
    pub cpu_cfs_quota: bool,
    /// CFS period in microseconds.
    pub cpu_cfs_quota_period_us: u64,
    /// Cluster DNS servers.
    pub cluster_dns: Vec<String>,
    /// Cluster domain.
    pub cluster_domain: String,
    /// Host resolv.conf; empty for none.
    pub resolv_conf: PathBuf,
    /// `--runtime-request-timeout`: the deadline of each CRI call.
    pub runtime_request_timeout: Duration,
    /// `--kubelet-cgroups` (`None`: the kubelet's own cgroup).
    pub kubelet_cgroups: Option<String>,
    /// `--runtime-cgroups` (`None`: the CRI socket's server's cgroup).
    pub runtime_cgroups: Option<String>,
    /// `--system-cgroups` (`None`: no `misc` system container).
    pub system_cgroups: Option<String>,
    /// `--volume-stats-agg-period` (zero: no volume stats).
    pub volume_stats_agg_period: Duration,
}

impl Settings {
    /// Merges `flags` over `file`; errors name the flag or field.
    pub fn merge(flags: Flags, file: &KubeletConfiguration) -> Result<Self, UsageError> {
        let cgroup_driver = match flags
            .cgroup_driver
            .or(file.cgroup_driver.clone())
            .as_deref()
            .unwrap_or("cgroupfs")
        {
            "cgroupfs" => CgroupDriver::Cgroupfs,
            "systemd" => CgroupDriver::Systemd,
            other => {
                return Err(UsageError(format!(
                    "--cgroup-driver/cgroupDriver {other:?}: must be \"cgroupfs\" or \"systemd\""
                )));
            }
        };
        let cgroup_root = flags
            .cgroup_root
            .or(file.cgroup_root.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "/".into());
        if !cgroup_root.starts_with('/') {
            return Err(UsageError(format!(
                "--cgroup-root {cgroup_root:?}: must be an absolute cgroup path"
            )));
        }
        let period = match flags.cpu_cfs_quota_period {
            Some(d) => d,
            None => match file.cpu_cfs_quota_period.as_deref() {
                Some(v) => {
                    duration::parse(v).map_err(|e| UsageError(format!("cpuCFSQuotaPeriod: {e}")))?
                }
                None => Duration::from_millis(100),
            },
        };
        let period_us = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
        if !(1000..=1_000_000).contains(&period_us) {
            return Err(UsageError(
                "--cpu-cfs-quota-period/cpuCFSQuotaPeriod must be between 1ms and 1s".into(),
            ));
        }
        let cluster_dns = if flags.cluster_dns.is_empty() {
            let list = file.cluster_dns.clone().unwrap_or_default();
            for ip in &list {
                ip.parse::<IpAddr>()
                    .map_err(|_| UsageError(format!("clusterDNS: {ip:?} is not an IP address")))?;
            }
            list
        } else {
            flags.cluster_dns.iter().map(ToString::to_string).collect()
        };
        let runtime_request_timeout = match flags.runtime_request_timeout {
            Some(d) => d,
            None => match file.runtime_request_timeout.as_deref() {
                Some(v) => duration::parse(v)
                    .map_err(|e| UsageError(format!("runtimeRequestTimeout: {e}")))?,
                None => kubelet_cri::DEFAULT_REQUEST_TIMEOUT,
            },
        };
        if runtime_request_timeout.is_zero() {
            return Err(UsageError(
                "--runtime-request-timeout must be greater than 0".into(),
            ));
        }
        Ok(Self {
            cgroup_driver,
            cgroups_per_qos: flags
                .cgroups_per_qos
                .or(file.cgroups_per_qos)
                .unwrap_or(true),
            cgroup_root,
            cpu_cfs_quota: flags.cpu_cfs_quota.or(file.cpu_cfs_quota).unwrap_or(true),
            cpu_cfs_quota_period_us: period_us,
            cluster_dns,
            cluster_domain: flags
                .cluster_domain
                .or(file.cluster_domain.clone())
                .unwrap_or_default()
                .trim_end_matches('.')
                .to_owned(),
            resolv_conf: flags
                .resolv_conf
                .map(PathBuf::from)
                .or(file.resolv_conf.clone())
                .unwrap_or_else(|| PathBuf::from("/etc/resolv.conf")),
            runtime_request_timeout,
            kubelet_cgroups: non_empty(flags.kubelet_cgroups.or(file.kubelet_cgroups.clone())),
            runtime_cgroups: non_empty(flags.runtime_cgroups.or(file.runtime_cgroups.clone())),
            system_cgroups: non_empty(flags.system_cgroups.or(file.system_cgroups.clone())),
            volume_stats_agg_period: match flags.volume_stats_agg_period {
                Some(d) => d,
                None => match file.volume_stats_agg_period.as_deref() {
                    Some(v) => duration::parse(v)
                        .map_err(|e| UsageError(format!("volumeStatsAggPeriod: {e}")))?,
                    None => kubelet_core::stats::fs_resource_analyzer::DEFAULT_PERIOD,
                },
            },
        })
    }
}

/// An empty cgroup name is no name (upstream skips empty ones).
fn non_empty(name: Option<String>) -> Option<String> {
    name.filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: Flags,
    }

    fn parse(args: &[&str], file: &str) -> Result<Settings, UsageError> {
        let mut argv = vec!["kubelet"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| UsageError(e.to_string()))?;
        let file: KubeletConfiguration =
            serde_saphyr::from_str(if file.is_empty() { "{}" } else { file })
                .map_err(|e| UsageError(e.to_string()))?;
        Settings::merge(cli.flags, &file)
    }

    #[test]
    fn defaults_are_upstreams() {
        let s = parse(&[], "").expect("valid");
        assert!(s.cgroups_per_qos);
        assert_eq!(s.cgroup_root, "/");
        assert!(s.cpu_cfs_quota);
        assert_eq!(s.cpu_cfs_quota_period_us, 100_000);
        assert!(s.cluster_dns.is_empty());
        assert_eq!(s.resolv_conf, PathBuf::from("/etc/resolv.conf"));
        assert_eq!(s.runtime_request_timeout, Duration::from_secs(120));
    }

    #[test]
    fn runtime_request_timeout_from_file_and_flag() {
        let s = parse(&[], "runtimeRequestTimeout: 30s").expect("valid");
        assert_eq!(s.runtime_request_timeout, Duration::from_secs(30));
        let s = parse(
            &["--runtime-request-timeout", "5s"],
            "runtimeRequestTimeout: 30s",
        )
        .expect("valid");
        assert_eq!(s.runtime_request_timeout, Duration::from_secs(5));
        let e = parse(&[], "runtimeRequestTimeout: soon").expect_err("bad duration");
        assert!(e.0.contains("runtimeRequestTimeout"), "{}", e.0);
        let e = parse(&["--runtime-request-timeout", "0s"], "").expect_err("zero");
        assert!(e.0.contains("--runtime-request-timeout"), "{}", e.0);
    }

    #[test]
    fn flags_over_file() {
        let file = "cgroupsPerQOS: false\ncgroupRoot: /file\nclusterDNS: [10.0.0.10]\nclusterDomain: cluster.local\ncpuCFSQuotaPeriod: 50ms\n";
        let s = parse(&[], file).expect("valid");
        assert!(!s.cgroups_per_qos);
        assert_eq!(s.cgroup_root, "/file");
        assert_eq!(s.cluster_dns, ["10.0.0.10"]);
        assert_eq!(s.cluster_domain, "cluster.local");
        assert_eq!(s.cpu_cfs_quota_period_us, 50_000);
        let s = parse(
            &[
                "--cgroups-per-qos",
                "--cgroup-root",
                "/flag",
                "--cluster-dns",
                "10.96.0.10,10.96.0.11",
            ],
            file,
        )
        .expect("valid");
        assert!(s.cgroups_per_qos);
        assert_eq!(s.cgroup_root, "/flag");
        assert_eq!(s.cluster_dns, ["10.96.0.10", "10.96.0.11"]);
        let s = parse(&["--cgroups-per-qos=false", "--resolv-conf="], "").expect("valid");
        assert!(!s.cgroups_per_qos);
        assert_eq!(s.resolv_conf, PathBuf::new());
    }

    #[test]
    fn rejects_bad_values() {
        let e = parse(&["--cgroup-driver", "cgroupv2"], "").expect_err("unknown");
        assert!(e.0.contains("\"cgroupfs\" or \"systemd\""), "{}", e.0);
        assert_eq!(
            parse(&["--cgroup-driver", "systemd"], "")
                .expect("systemd")
                .cgroup_driver,
            CgroupDriver::Systemd
        );
        let s = parse(&[], "cgroupDriver: systemd").expect("systemd");
        assert_eq!(s.cgroup_driver.as_str(), "systemd");
        assert_eq!(
            parse(&[], "").expect("default").cgroup_driver,
            CgroupDriver::Cgroupfs
        );
        assert!(parse(&["--cgroup-root", "relative"], "").is_err());
        let e = parse(&[], "clusterDNS: [nope]").expect_err("ip");
        assert!(e.0.contains("clusterDNS"), "{}", e.0);
        assert!(parse(&["--cpu-cfs-quota-period", "2s"], "").is_err());
    }
}
