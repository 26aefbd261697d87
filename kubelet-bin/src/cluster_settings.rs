//! Flags and `KubeletConfiguration` fields of cluster mode (upstream `--kubeconfig`,
//! `--kube-api-qps`, `--kube-api-burst`, `--node-status-update-frequency`, and the fields
//! `kubeAPIQPS`, `kubeAPIBurst`, `nodeLeaseDurationSeconds`, `nodeStatusUpdateFrequency`;
//! `--event-qps`/`eventRecordQPS` and `--event-burst`/`eventBurst` for event writes),
//! merged as the other settings: defaults < file < flags. Without `--kubeconfig` the kubelet
//! is standalone. The TLS bootstrap and rotation: `--bootstrap-kubeconfig`,
//! `--rotate-certificates`/`rotateCertificates`, `serverTLSBootstrap` (the certificates go to
//! `--cert-dir`, a flag of the secure port's settings).

use std::path::PathBuf;
use std::time::Duration;

use kubelet::cluster::{self, ClusterOptions, Limits};

use crate::cli::config::KubeletConfiguration;
use crate::duration;
use crate::settings::UsageError;

/// client-go's QPS when the configured one is 0 (`rest.DefaultQPS`).
const CLIENT_GO_DEFAULT_QPS: f32 = 5.0;
/// client-go's burst when the configured one is 0 (`rest.DefaultBurst`).
const CLIENT_GO_DEFAULT_BURST: u32 = 10;

/// The flags of this module.
#[derive(Debug, Default, clap::Args)]
#[group(id = "cluster")]
pub struct Flags {
    /// Kubeconfig of the API server to join; without it the kubelet is standalone.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Requests per second to the API server (default 50; 0: client-go's 5; negative: no limit).
    #[arg(long, allow_negative_numbers = true)]
    pub kube_api_qps: Option<i32>,
    /// Requests at once to the API server (default 100).
    #[arg(long, allow_negative_numbers = true)]
    pub kube_api_burst: Option<i32>,
    /// How often the node status is computed and posted when changed (default 10s).
    #[arg(long, value_parser = duration::parse)]
    pub node_status_update_frequency: Option<Duration>,
    /// Event creations per second (default 50; 0: client-go's 5; negative: no limit).
    #[arg(long, allow_negative_numbers = true)]
    pub event_qps: Option<i32>,
    /// Event creations at once (default 100).
    #[arg(long)]
    pub event_burst: Option<i32>,
    /// URL of static pods (one pod or a PodList), read every --http-check-frequency; works
    /// standalone too.
    #[arg(long)]
    pub manifest_url: Option<String>,
    /// HTTP headers for --manifest-url, `name:value` separated by commas; repeatable, and
    /// a name given twice is sent twice.
    #[arg(long, value_delimiter = ',')]
    pub manifest_url_header: Vec<String>,
    /// How often --manifest-url is read (default 20s).
    #[arg(long, value_parser = duration::parse)]
    pub http_check_frequency: Option<Duration>,
    /// Kubeconfig for the TLS bootstrap: when --kubeconfig is missing or its client
    /// certificate is not usable, a certificate is requested with these credentials, stored
    /// in --cert-dir and --kubeconfig written to point at it.
    #[arg(long)]
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// Renew the client certificate through a CertificateSigningRequest as it nears its
    /// expiry (`rotateCertificates`, default false).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub rotate_certificates: Option<bool>,
    /// Request the serving certificate through CertificateSigningRequests
    /// (`serverTLSBootstrap`, default false).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub rotate_server_certificates: Option<bool>,
}

/// Merged cluster settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `--kubeconfig`; `None`: standalone.
    pub kubeconfig: Option<PathBuf>,
    /// The main API client's rate limit.
    pub api_limits: Limits,
    /// `nodeLeaseDurationSeconds`.
    pub node_lease_duration: Duration,
    /// `nodeStatusUpdateFrequency`.
    pub node_status_update_frequency: Duration,
    /// The event writes' rate limit (`--event-qps`, `--event-burst`).
    pub event_limits: Limits,
    /// `--manifest-url` / `staticPodURL`.
    pub manifest_url: Option<String>,
    /// `--manifest-url-header` / `staticPodURLHeader`, in order.
    pub manifest_url_headers: Vec<(String, String)>,
    /// `--http-check-frequency` / `httpCheckFrequency`.
    pub http_check_frequency: Duration,
    /// `--bootstrap-kubeconfig` (needs `--kubeconfig`): the kubeconfig (with a bootstrap
    /// token) that the TLS bootstrap (upstream `pkg/kubelet/certificate/bootstrap`) uses to
    /// obtain a client certificate when `kubeconfig` is missing or not usable.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `--rotate-certificates` / `rotateCertificates` (default false): renew the client
    /// certificate through CSRs.
    pub rotate_certificates: bool,
    /// `--rotate-server-certificates` / `serverTLSBootstrap` (default false): the serving
    /// certificate from CSRs.
    pub server_tls_bootstrap: bool,
}

impl Settings {
    /// Merges `flags` over `file`; errors name the flag or field.
    pub fn merge(flags: Flags, file: &KubeletConfiguration) -> Result<Self, UsageError> {
        let qps = flags.kube_api_qps.or(file.kube_api_qps);
        let burst = flags.kube_api_burst.or(file.kube_api_burst);
        let api_limits = limits(qps, burst)
            .map_err(|e| UsageError(format!("--kube-api-burst/kubeAPIBurst: {}", e.0)))?;
        let event_limits = limits(
            flags.event_qps.or(file.event_record_qps),
            flags.event_burst.or(file.event_burst),
        )
        .map_err(|e| UsageError(format!("--event-burst/eventBurst: {}", e.0)))?;
        let lease_seconds = file
            .node_lease_duration_seconds
            .unwrap_or(cluster::DEFAULT_NODE_LEASE_DURATION.as_secs() as i32);
        let node_lease_duration = u64::try_from(lease_seconds)
            .ok()
            .filter(|s| *s > 0)
            .map(Duration::from_secs)
            .ok_or_else(|| UsageError("nodeLeaseDurationSeconds must be greater than 0".into()))?;
        let node_status_update_frequency = match flags.node_status_update_frequency {
            Some(d) => d,
            None => match file.node_status_update_frequency.as_deref() {
                Some(v) => duration::parse(v)
                    .map_err(|e| UsageError(format!("nodeStatusUpdateFrequency: {e}")))?,
                None => cluster::DEFAULT_NODE_STATUS_UPDATE_FREQUENCY,
            },
        };
        if node_status_update_frequency.is_zero() {
            return Err(UsageError(
                "--node-status-update-frequency must be greater than 0".into(),
            ));
        }
        let manifest_url_headers = if flags.manifest_url_header.is_empty() {
            file.static_pod_url_header
                .clone()
                .unwrap_or_default()
                .into_iter()
                .flat_map(|(name, values)| values.into_iter().map(move |v| (name.clone(), v)))
                .collect()
        } else {
            flags
                .manifest_url_header
                .iter()
                .map(|h| {
                    h.split_once(':')
                        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
                        .ok_or_else(|| {
                            UsageError(format!("--manifest-url-header {h:?}: expected name:value"))
                        })
                })
                .collect::<Result<_, _>>()?
        };
        let http_check_frequency = match flags.http_check_frequency {
            Some(d) => d,
            None => match file.http_check_frequency.as_deref() {
                Some(v) => duration::parse(v)
                    .map_err(|e| UsageError(format!("httpCheckFrequency: {e}")))?,
                None => kubelet::cluster::http_source::DEFAULT_CHECK_FREQUENCY,
            },
        };
        if http_check_frequency.is_zero() {
            return Err(UsageError(
                "--http-check-frequency must be greater than 0".into(),
            ));
        }
        if flags.bootstrap_kubeconfig.is_some() && flags.kubeconfig.is_none() {
            return Err(UsageError(
                "--bootstrap-kubeconfig needs --kubeconfig (the file the TLS bootstrap writes)"
                    .into(),
            ));
        }
        Ok(Self {
            manifest_url: flags
                .manifest_url
                .or(file.static_pod_url.clone())
                .filter(|u| !u.is_empty()),
            manifest_url_headers,
            http_check_frequency,
            bootstrap_kubeconfig: flags.bootstrap_kubeconfig,
            rotate_certificates: flags
                .rotate_certificates
                .or(file.rotate_certificates)
                .unwrap_or(false),
            server_tls_bootstrap: flags
                .rotate_server_certificates
                .or(file.server_tls_bootstrap)
                .unwrap_or(false),
            kubeconfig: flags.kubeconfig,
            api_limits,
            node_lease_duration,
            node_status_update_frequency,
            event_limits,
        })
    }

    /// The builder options of a kubelet joining the cluster of `config`.
    pub fn options(&self, config: kube::Config) -> ClusterOptions {
        ClusterOptions::new(config)
            .api_limits(self.api_limits)
            .node_lease_duration(self.node_lease_duration)
            .node_status_update_frequency(self.node_status_update_frequency)
            .event_limits(self.event_limits)
    }
}

/// The client's limits as client-go reads them: unset is the kubelet's default, 0 is
/// client-go's default, a negative QPS disables the limit.
fn limits(qps: Option<i32>, burst: Option<i32>) -> Result<Limits, UsageError> {
    let burst = match burst {
        None => Limits::DEFAULT_BURST,
        Some(0) => CLIENT_GO_DEFAULT_BURST,
        Some(b) => {
            u32::try_from(b).map_err(|_| UsageError("the burst must not be negative".into()))?
        }
    };
    let qps = match qps {
        None => Limits::DEFAULT_QPS,
        Some(0) => CLIENT_GO_DEFAULT_QPS,
        Some(q) if q < 0 => return Ok(Limits::UNLIMITED),
        Some(q) => q as f32,
    };
    Ok(Limits { qps, burst })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(yaml: &str) -> KubeletConfiguration {
        serde_saphyr::from_str(yaml).expect("valid yaml")
    }

    #[test]
    fn defaults_are_upstreams() {
        let s = Settings::merge(Flags::default(), &KubeletConfiguration::default()).expect("valid");
        assert_eq!(s.kubeconfig, None);
        assert_eq!(
            s.api_limits,
            Limits {
                qps: 50.0,
                burst: 100
            }
        );
        assert_eq!(s.node_lease_duration, Duration::from_secs(40));
        assert_eq!(s.node_status_update_frequency, Duration::from_secs(10));
        assert_eq!(s.event_limits, Limits::default());
    }

    #[test]
    fn event_limits_from_the_config_and_flags() {
        let cfg = file("eventRecordQPS: 20\neventBurst: 30\n");
        let flags = Flags {
            event_burst: Some(40),
            ..Flags::default()
        };
        let s = Settings::merge(flags, &cfg).expect("valid");
        assert_eq!(
            s.event_limits,
            Limits {
                qps: 20.0,
                burst: 40
            }
        );
        assert_eq!(s.api_limits, Limits::default());
        let flags = Flags {
            event_burst: Some(-1),
            ..Flags::default()
        };
        let err = Settings::merge(flags, &KubeletConfiguration::default()).expect_err("bad");
        assert!(err.0.contains("--event-burst"), "{}", err.0);
    }

    #[test]
    fn config_fields_with_flags_on_top() {
        let cfg = file(
            "kubeAPIQPS: 20\nkubeAPIBurst: 30\nnodeLeaseDurationSeconds: 60\nnodeStatusUpdateFrequency: 4s\n",
        );
        let flags = Flags {
            kube_api_qps: Some(7),
            ..Flags::default()
        };
        let s = Settings::merge(flags, &cfg).expect("valid");
        assert_eq!(
            s.api_limits,
            Limits {
                qps: 7.0,
                burst: 30
            }
        );
        assert_eq!(s.node_lease_duration, Duration::from_secs(60));
        assert_eq!(s.node_status_update_frequency, Duration::from_secs(4));
    }

    #[test]
    fn client_go_reads_zero_as_its_default_and_negative_as_unlimited() {
        assert_eq!(
            limits(Some(0), Some(0)).expect("valid"),
            Limits {
                qps: 5.0,
                burst: 10
            }
        );
        assert!(!limits(Some(-1), None).expect("valid").is_limited());
        assert!(limits(None, Some(-1)).is_err());
    }

    #[test]
    fn manifest_url_from_flags_or_config() {
        let s = Settings::merge(Flags::default(), &KubeletConfiguration::default()).expect("valid");
        assert_eq!(
            (s.manifest_url, s.http_check_frequency),
            (None, Duration::from_secs(20))
        );
        let cfg = file(
            "staticPodURL: http://m/pods\nstaticPodURLHeader:\n  a: [x, y]\nhttpCheckFrequency: 5s\n",
        );
        let s = Settings::merge(Flags::default(), &cfg).expect("valid");
        assert_eq!(s.manifest_url.as_deref(), Some("http://m/pods"));
        assert_eq!(
            s.manifest_url_headers,
            vec![("a".into(), "x".into()), ("a".into(), "y".into())]
        );
        assert_eq!(s.http_check_frequency, Duration::from_secs(5));
        let flags = Flags {
            manifest_url_header: vec!["b: 1".into(), "b:2".into()],
            ..Flags::default()
        };
        let s = Settings::merge(flags, &KubeletConfiguration::default()).expect("valid");
        assert_eq!(
            s.manifest_url_headers,
            vec![("b".into(), "1".into()), ("b".into(), "2".into())]
        );
        let flags = Flags {
            manifest_url_header: vec!["nocolon".into()],
            ..Flags::default()
        };
        assert!(Settings::merge(flags, &KubeletConfiguration::default()).is_err());
    }

    #[test]
    fn bad_values_name_the_field() {
        let err = Settings::merge(Flags::default(), &file("nodeLeaseDurationSeconds: 0\n"))
            .expect_err("bad");
        assert!(err.0.contains("nodeLeaseDurationSeconds"), "{}", err.0);
        let err = Settings::merge(Flags::default(), &file("nodeStatusUpdateFrequency: soon\n"))
            .expect_err("bad");
        assert!(err.0.contains("nodeStatusUpdateFrequency"), "{}", err.0);
    }

    #[test]
    fn tls_bootstrap_flags() {
        let s = Settings::merge(
            Flags::default(),
            &file("rotateCertificates: true\nserverTLSBootstrap: true\n"),
        )
        .expect("valid");
        assert!(s.rotate_certificates && s.server_tls_bootstrap);
        let flags = Flags {
            rotate_certificates: Some(false),
            kubeconfig: Some("/k".into()),
            bootstrap_kubeconfig: Some("/b".into()),
            ..Flags::default()
        };
        let s = Settings::merge(flags, &file("rotateCertificates: true\n")).expect("valid");
        assert!(!s.rotate_certificates);
        assert_eq!(s.bootstrap_kubeconfig, Some("/b".into()));
        let flags = Flags {
            bootstrap_kubeconfig: Some("/b".into()),
            ..Flags::default()
        };
        let err =
            Settings::merge(flags, &KubeletConfiguration::default()).expect_err("no --kubeconfig");
        assert!(err.0.contains("--bootstrap-kubeconfig"), "{}", err.0);
    }
}
