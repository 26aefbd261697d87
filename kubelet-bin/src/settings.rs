//! Command-line flags and the `KubeletConfiguration` file, merged into [`Settings`]
//! (upstream `cmd/kubelet/app/options` and `kubelet.config.k8s.io/v1beta1`).
//!
//! Precedence as upstream: defaults < `--config` file < flags given on the command line.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use serde_json::Value;

use crate::cli::config::KubeletConfiguration;
use crate::duration;

/// Default safety-net relist period of the evented PLEG.
const EVENTED_PLEG_RELIST_PERIOD: Duration = Duration::from_secs(60);

/// Exit status for bad flags or config (`EX_USAGE`).
pub const EXIT_USAGE: i32 = 64;

/// Flags, with upstream's names.
#[derive(Debug, Parser)]
#[command(
    name = "kubelet",
    about = "A Rust kubelet: runs static pods on a CRI runtime",
    // `--version` prints upstream's `Kubernetes vX.Y.Z` (kubeadm's preflight parses it).
    disable_version_flag = true,
    // A repeated flag: the last value wins, as upstream (KUBELET_EXTRA_ARGS relies on it);
    // map and list flags (`ArgAction::Append`) add up instead (`cli::map_flags`).
    args_override_self = true
)]
pub struct Flags {
    /// Print the targeted upstream release (`Kubernetes vX.Y.Z`) and exit.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = ["true", "false", "raw"]
    )]
    pub version: Option<String>,
    /// Path to a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) file; flags win over it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Directory of KubeletConfiguration drop-ins (`*.conf`, lexical order, subdirectories
    /// included), each merged over --config as a JSON merge patch (upstream v1.30+).
    #[arg(long)]
    pub config_dir: Option<PathBuf>,
    /// Directory (or file) of static pod manifests.
    #[arg(long)]
    pub pod_manifest_path: Option<PathBuf>,
    /// CRI endpoint, e.g. unix:///run/containerd/containerd.sock.
    #[arg(long)]
    pub container_runtime_endpoint: Option<String>,
    /// Directory for kubelet files (pod directories, volumes).
    #[arg(long)]
    pub root_dir: Option<PathBuf>,
    /// Root of pod log directories (upstream: /var/log/pods, not a flag there).
    #[arg(long)]
    pub pod_log_dir: Option<PathBuf>,
    /// Node name to use instead of the hostname.
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// The node's IPs, comma-separated: one address, or a dual-stack pair (one IPv4, one
    /// IPv6; the first is the primary), reported as the Node's InternalIP addresses and the
    /// pods' hostIPs. A string flag upstream: given twice, the last one counts.
    #[arg(long)]
    pub node_ip: Option<String>,
    /// Address the secure port (default 0.0.0.0) and the read-only port (default 127.0.0.1)
    /// listen on.
    #[arg(long)]
    pub address: Option<IpAddr>,
    /// Read-only port (/pods, /runningpods/, /healthz); 0 disables it.
    #[arg(long)]
    pub read_only_port: Option<u16>,
    /// Port of the localhost healthz endpoint; 0 disables it.
    #[arg(long)]
    pub healthz_port: Option<u16>,
    /// Address of the healthz endpoint.
    #[arg(long)]
    pub healthz_bind_address: Option<IpAddr>,
    /// Resync period of running pods (e.g. 1m).
    #[arg(long, value_parser = duration::parse)]
    pub sync_frequency: Option<Duration>,
    /// Rescan period of the manifest path (e.g. 20s).
    #[arg(long, value_parser = duration::parse)]
    pub file_check_frequency: Option<Duration>,
    /// First container restart backoff window (upstream: 10 s, not configurable; for tests).
    #[arg(long, hide = true, value_parser = duration::parse)]
    pub experimental_crash_loop_initial_backoff: Option<Duration>,
    /// First image pull backoff window (upstream: 10 s, not configurable; for tests).
    #[arg(long, hide = true, value_parser = duration::parse)]
    pub experimental_image_pull_initial_backoff: Option<Duration>,
    /// Largest image pull backoff window (upstream: 300 s, not configurable; for tests).
    #[arg(long, hide = true, value_parser = duration::parse)]
    pub experimental_image_pull_max_backoff: Option<Duration>,
    /// Learn of container changes from containerd's native events when the runtime is
    /// containerd, relisting only as a safety net (default true; false: relist every 1 s).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub evented_pleg: Option<bool>,
    /// Relist period while containerd's events flow (e.g. 60s); must stay below the PLEG
    /// health threshold of 3m.
    #[arg(long, value_parser = duration::parse)]
    pub evented_pleg_relist_period: Option<Duration>,
    /// Log verbosity as upstream's klog.V(N): 0–1 info, 2–4 debug, 5+ trace of the kubelet's
    /// own lines; other crates' info from 4 (default 0, or the file's logging.verbosity);
    /// RUST_LOG, when set, replaces this filter.
    #[arg(short = 'v', long = "v")]
    pub verbosity: Option<u8>,
    /// Log line format: `text` (klog's header, default) or `json` (upstream's JSON keys).
    #[arg(long, value_enum)]
    pub logging_format: Option<crate::log_format::Format>,
    /// Pod cgroup, CPU limit and DNS flags.
    #[command(flatten)]
    pub pod_runtime: crate::pod_runtime::Flags,
    /// Cluster mode flags (`--kubeconfig`, the API client's limits).
    #[command(flatten)]
    pub cluster: crate::cluster_settings::Flags,
    /// Node registration and node status flags (labels, taints, reservations, …).
    #[command(flatten)]
    pub node_status: crate::node_status_flags::Flags,
    /// The secure port's TLS, authentication and authorization flags.
    #[command(flatten)]
    pub server: crate::server_settings::Flags,
    /// Container log rotation flags.
    #[command(flatten)]
    pub container_logs: crate::container_log_settings::Flags,
    /// Eviction manager flags (soft thresholds, grace periods, minimum reclaims, …).
    #[command(flatten)]
    pub eviction: crate::eviction_settings::Flags,
    /// Container and image garbage collection flags.
    #[command(flatten)]
    pub gc: crate::gc_settings::Flags,
    /// Node allocatable enforcement flags.
    #[command(flatten)]
    pub node_allocatable: crate::node_allocatable::Flags,
    /// Pod security flags (seccomp default, unsafe sysctls).
    #[command(flatten)]
    pub security: crate::security_settings::Flags,
    /// Flags installers pass that are accepted and ignored with a warning.
    #[command(flatten)]
    pub accepted: crate::cli::accepted_flags::Flags,
}

/// Upstream's first container restart backoff window.
const CRASH_LOOP_INITIAL: Duration = Duration::from_secs(10);
/// Upstream's default and largest `crashLoopBackOff.maxContainerRestartPeriod`.
const CRASH_LOOP_MAX: Duration = Duration::from_secs(300);

/// Effective settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Static pod manifests.
    pub pod_manifest_path: Option<PathBuf>,
    /// CRI socket path (from a `unix://` endpoint).
    pub runtime_socket: PathBuf,
    /// The endpoint as given.
    pub runtime_endpoint: String,
    /// Kubelet root directory.
    pub root_dir: PathBuf,
    /// Root of pod log directories.
    pub pod_log_dir: PathBuf,
    /// Node name.
    pub node_name: String,
    /// Node IPs.
    pub node_ips: Vec<String>,
    /// The secure port's address (`--address`, default 0.0.0.0, and `--port`).
    pub secure: std::net::SocketAddr,
    /// The secure port's TLS, authentication and authorization.
    pub server: crate::server_settings::Settings,
    /// Read-only server address (None = disabled).
    pub read_only: Option<std::net::SocketAddr>,
    /// Healthz server address (None = disabled).
    pub healthz: Option<std::net::SocketAddr>,
    /// Pod resync period.
    pub sync_frequency: Duration,
    /// Manifest rescan period.
    pub file_check_frequency: Duration,
    /// First and largest container restart (CrashLoopBackOff) windows.
    pub crash_loop_backoff: (Duration, Duration),
    /// First and largest image pull (ImagePullBackOff) windows.
    pub image_pull_backoff: (Duration, Duration),
    /// Use containerd's events for the PLEG when the runtime is containerd.
    pub evented_pleg: bool,
    /// Safety-net relist period of the evented PLEG.
    pub evented_pleg_relist_period: Duration,
    /// Log verbosity (`-v`, else `logging.verbosity`, else 0).
    pub verbosity: u8,
    /// Log line format (`--logging-format`, else `logging.format`, else text).
    pub logging_format: crate::log_format::Format,
    /// One warning per flag given that is accepted but not implemented (logged at start).
    pub flag_warnings: Vec<String>,
    /// Config-file fields this kubelet does not use (warned about at start).
    pub ignored_config_fields: Vec<String>,
    /// The config file as read, after upstream's zero defaulting (empty without a file):
    /// `/configz` shows it under the effective values.
    pub config_file: serde_json::Map<String, Value>,
    /// Pod cgroup, CPU limit and DNS settings.
    pub pod_runtime: crate::pod_runtime::Settings,
    /// Cluster mode settings (standalone without a kubeconfig).
    pub cluster: crate::cluster_settings::Settings,
    /// Node registration and node status options (used in cluster mode).
    pub node_status: kubelet::cluster::node_status::NodeStatusOptions,
    /// Container log rotation.
    pub container_logs: crate::container_log_settings::Settings,
    /// The eviction manager's thresholds and timings.
    pub eviction: kubelet_core::eviction::Config,
    /// Graceful node shutdown's grace periods (all zero: off).
    pub node_shutdown: kubelet_core::nodeshutdown::Config,
    /// Container and image garbage collection.
    pub gc: crate::gc_settings::Settings,
    /// Where node allocatable is enforced.
    pub node_allocatable: crate::node_allocatable::Settings,
    /// Pod security: seccomp default, allowed sysctls.
    pub security: crate::security_settings::Settings,
}

/// A bad flag or config value; the binary exits with [`EXIT_USAGE`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The `--config` file as the settings use it.
#[derive(Default)]
struct ConfigFile {
    /// The configuration, defaulted and validated.
    config: KubeletConfiguration,
    /// Its fields that no settings module reads: unknown ones and upstream's that are not
    /// implemented (each worth a warning).
    ignored_fields: Vec<String>,
    /// The configuration as a JSON object, which `/configz` shows under the effective values.
    object: serde_json::Map<String, Value>,
}

/// Reads the `--config` file and the `--config-dir` drop-ins
/// ([`KubeletConfiguration::load_with_drop_ins`]).
fn read_config(path: Option<&Path>, dir: Option<&Path>) -> Result<ConfigFile, UsageError> {
    let flag = if path.is_some() {
        "--config"
    } else {
        "--config-dir"
    };
    let loaded = KubeletConfiguration::load_with_drop_ins(path, dir)
        .map_err(|e| UsageError(format!("{flag} {e}")))?;
    let object = match serde_json::to_value(&loaded.config) {
        Ok(Value::Object(object)) => object,
        _ => serde_json::Map::new(),
    };
    let mut ignored_fields = loaded.unknown_fields;
    ignored_fields.extend(
        object
            .keys()
            .filter(|k| !crate::cli::fields::is_implemented(k))
            .cloned(),
    );
    Ok(ConfigFile {
        config: loaded.config,
        ignored_fields,
        object,
    })
}

/// An address field of the file (`address`, `healthzBindAddress`).
fn config_ip(field: &str, value: Option<&str>) -> Result<Option<IpAddr>, UsageError> {
    value
        .map(|v| {
            v.parse()
                .map_err(|_| UsageError(format!("{field}: {v:?} is not an IP address")))
        })
        .transpose()
}

fn config_duration(
    path: &Path,
    field: &str,
    value: Option<&str>,
) -> Result<Option<Duration>, UsageError> {
    value
        .map(|v| {
            duration::parse(v)
                .map_err(|e| UsageError(format!("--config {}: {field}: {e}", path.display())))
        })
        .transpose()
}

/// The container restart windows (upstream `newCrashLoopBackOff`): the maximum comes from
/// `crashLoopBackOff.maxContainerRestartPeriod` (1 s to 300 s, default 300 s); the first
/// window is 10 s, or `initial` when given, and never more than the maximum.
fn crash_loop_backoff(
    path: &Path,
    max: Option<&str>,
    initial: Option<Duration>,
) -> Result<(Duration, Duration), UsageError> {
    let max = config_duration(path, "crashLoopBackOff.maxContainerRestartPeriod", max)?
        .unwrap_or(CRASH_LOOP_MAX);
    if !(Duration::from_secs(1)..=CRASH_LOOP_MAX).contains(&max) {
        return Err(UsageError(format!(
            "--config {}: crashLoopBackOff.maxContainerRestartPeriod must be between 1s and 300s, got {max:?}",
            path.display()
        )));
    }
    let initial = initial.unwrap_or(CRASH_LOOP_INITIAL);
    if initial.is_zero() {
        return Err(UsageError(
            "--experimental-crash-loop-initial-backoff must be greater than 0".into(),
        ));
    }
    Ok((initial.min(max), max))
}

/// `--node-ip` as upstream's `nodeutil.ParseNodeIPArgument`: comma-separated, each entry
/// trimmed; entries that are not IPs are ignored (returned second, for a warning); one IP
/// or a dual-stack pair, whose IPs must not be `0.0.0.0` or `::`. A single unspecified IP
/// means "detect" (empty list).
fn node_ips(value: Option<&str>) -> Result<(Vec<IpAddr>, Vec<String>), UsageError> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok((Vec::new(), Vec::new()));
    };
    let (mut ips, mut invalid) = (Vec::new(), Vec::new());
    for entry in value.split(',').map(str::trim) {
        match entry.parse::<IpAddr>() {
            Ok(ip) => ips.push(ip),
            Err(_) => invalid.push(entry.to_owned()),
        }
    }
    let bad = |reason: &str| Err(UsageError(format!("bad --node-ip {value:?}: {reason}")));
    if ips.len() > 2 || (ips.len() == 2 && ips[0].is_ipv6() == ips[1].is_ipv6()) {
        return bad("must contain either a single IP or a dual-stack pair of IPs");
    }
    if ips.len() == 2 && ips.iter().any(IpAddr::is_unspecified) {
        return bad("dual-stack node IP cannot include '0.0.0.0' or '::'");
    }
    ips.retain(|ip| !ip.is_unspecified());
    Ok((ips, invalid))
}

/// `--logging-format` and `-v` over the file's `logging.format` and `logging.verbosity`
/// (upstream's `LoggingConfiguration`; its other fields are not read).
fn logging(
    path: &Path,
    flags: (Option<crate::log_format::Format>, Option<u8>),
    file: Option<&Value>,
) -> Result<(crate::log_format::Format, u8), UsageError> {
    let field = |name: &str| file.and_then(|l| l.get(name)).filter(|v| !v.is_null());
    let bad = |name: &str, v: &Value, want: &str| {
        UsageError(format!(
            "--config {}: logging.{name}: {v} is not {want}",
            path.display()
        ))
    };
    let format = match (flags.0, field("format")) {
        (Some(format), _) => format,
        (None, Some(v)) => v
            .as_str()
            .and_then(crate::log_format::Format::from_name)
            .ok_or_else(|| bad("format", v, "one of \"text\", \"json\""))?,
        (None, None) => crate::log_format::Format::default(),
    };
    let verbosity = match (flags.1, field("verbosity")) {
        (Some(v), _) => v,
        (None, Some(v)) => v
            .as_u64()
            .map(|n| u8::try_from(n).unwrap_or(u8::MAX))
            .ok_or_else(|| bad("verbosity", v, "a number"))?,
        (None, None) => 0,
    };
    Ok((format, verbosity))
}

fn socket_from_endpoint(endpoint: &str) -> Result<PathBuf, UsageError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if endpoint.contains("://") && !endpoint.starts_with("unix://") {
        return Err(UsageError(format!(
            "--container-runtime-endpoint {endpoint:?}: only unix:// endpoints are supported"
        )));
    }
    if !path.starts_with('/') {
        return Err(UsageError(format!(
            "--container-runtime-endpoint {endpoint:?}: the socket path must be absolute"
        )));
    }
    Ok(PathBuf::from(path))
}

impl Settings {
    /// Where containers' log symlinks go: `containers` beside the pod log root
    /// (`/var/log/containers` for the default `/var/log/pods`, upstream's fixed path).
    pub fn container_log_links_dir(&self) -> Option<PathBuf> {
        self.pod_log_dir
            .parent()
            .map(|parent| parent.join("containers"))
    }

    /// How the PLEG is chosen.
    pub fn pleg_choice(&self) -> kubelet::pleg::Choice {
        kubelet::pleg::Choice {
            evented: self.evented_pleg,
            safety_net_period: self.evented_pleg_relist_period,
            socket: self.runtime_socket.clone(),
        }
    }

    /// Merges defaults, the config file and flags.
    pub fn from_flags(flags: Flags) -> Result<Self, UsageError> {
        let ConfigFile {
            config: file,
            ignored_fields: ignored_config_fields,
            object: config_object,
        } = match (&flags.config, &flags.config_dir) {
            (None, None) => ConfigFile::default(),
            (path, dir) => read_config(path.as_deref(), dir.as_deref())?,
        };
        let file_address = config_ip("address", file.address.as_deref())?;
        let file_healthz_address =
            config_ip("healthzBindAddress", file.healthz_bind_address.as_deref())?;
        let cfg_path = flags.config.clone().unwrap_or_default();
        let endpoint = flags
            .container_runtime_endpoint
            .or(file.container_runtime_endpoint.clone())
            .unwrap_or_else(|| "unix:///run/containerd/containerd.sock".into());
        let sync_frequency = match flags.sync_frequency {
            Some(d) => d,
            None => config_duration(&cfg_path, "syncFrequency", file.sync_frequency.as_deref())?
                .unwrap_or(Duration::from_secs(60)),
        };
        let file_check_frequency = match flags.file_check_frequency {
            Some(d) => d,
            None => config_duration(
                &cfg_path,
                "fileCheckFrequency",
                file.file_check_frequency.as_deref(),
            )?
            .unwrap_or(Duration::from_secs(20)),
        };
        if sync_frequency.is_zero() {
            return Err(UsageError("--sync-frequency must be greater than 0".into()));
        }
        if file_check_frequency.is_zero() {
            return Err(UsageError(
                "--file-check-frequency must be greater than 0".into(),
            ));
        }
        let crash_loop_backoff = crash_loop_backoff(
            &cfg_path,
            file.crash_loop_back_off
                .as_ref()
                .and_then(|c| c.max_container_restart_period.as_deref()),
            flags.experimental_crash_loop_initial_backoff,
        )?;
        let image_pull_backoff = (
            flags
                .experimental_image_pull_initial_backoff
                .unwrap_or(kubelet_core::kuberuntime::pull_backoff::DEFAULT_INITIAL),
            flags
                .experimental_image_pull_max_backoff
                .unwrap_or(kubelet_core::kuberuntime::pull_backoff::DEFAULT_MAX),
        );
        if image_pull_backoff.0.is_zero() || image_pull_backoff.1 < image_pull_backoff.0 {
            return Err(UsageError(
                "--experimental-image-pull-initial-backoff must be greater than 0 and at most --experimental-image-pull-max-backoff".into(),
            ));
        }
        let evented_pleg_relist_period = flags
            .evented_pleg_relist_period
            .unwrap_or(EVENTED_PLEG_RELIST_PERIOD);
        if evented_pleg_relist_period.is_zero()
            || evented_pleg_relist_period >= kubelet_pleg::Config::default().relist_threshold
        {
            return Err(UsageError(
                "--evented-pleg-relist-period must be greater than 0 and less than 3m (the PLEG health threshold)"
                    .into(),
            ));
        }
        let localhost: IpAddr = [127, 0, 0, 1].into();
        // Upstream's legacy flag default 10255; the config file's default is 0 (off).
        let from_config = flags.config.is_some();
        let read_only_port = flags
            .read_only_port
            .or(file.read_only_port)
            .unwrap_or(if from_config { 0 } else { 10255 });
        let secure_address = flags
            .address
            .or(file_address)
            .unwrap_or([0, 0, 0, 0].into());
        let address = flags.address.or(file_address).unwrap_or(localhost);
        let healthz_port = flags.healthz_port.or(file.healthz_port).unwrap_or(10248);
        let healthz_address = flags
            .healthz_bind_address
            .or(file_healthz_address)
            .unwrap_or(localhost);
        let node_name = flags
            .hostname_override
            .map(|h| h.trim().to_lowercase())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(kubelet::node::hostname);
        let root_dir = flags
            .root_dir
            .unwrap_or_else(|| PathBuf::from("/var/lib/kubelet"));
        let mut node_status =
            crate::node_status_flags::merge(flags.node_status, &file, &node_name)?;
        let (node_ips, invalid_node_ips) = node_ips(flags.node_ip.as_deref())?;
        // With an external cloud provider, only the given IPs count (none: the provider's).
        node_status.node_ips.clone_from(&node_ips);
        if node_status.port == 0 {
            return Err(UsageError(
                "--port must be between 1 and 65535, inclusive".into(),
            ));
        }
        let pod_runtime = crate::pod_runtime::Settings::merge(flags.pod_runtime, &file)?;
        let cluster = crate::cluster_settings::Settings::merge(flags.cluster, &file)?;
        let (logging_format, verbosity) = logging(
            &cfg_path,
            (flags.logging_format, flags.verbosity),
            file.logging.as_ref(),
        )?;
        let eviction =
            crate::eviction_settings::merge(flags.eviction, &file, &node_status.eviction_hard)?;
        Ok(Self {
            eviction,
            node_shutdown: crate::shutdown_settings::merge(&file)?,
            secure: (secure_address, node_status.port).into(),
            server: crate::server_settings::Settings::merge(
                flags.server,
                &file,
                from_config,
                &root_dir,
            )?,
            pod_manifest_path: flags.pod_manifest_path.or(file.static_pod_path.clone()),
            runtime_socket: socket_from_endpoint(&endpoint)?,
            runtime_endpoint: endpoint,
            root_dir,
            pod_log_dir: flags
                .pod_log_dir
                .or(file.pod_logs_dir.clone())
                .unwrap_or_else(|| PathBuf::from("/var/log/pods")),
            node_name,
            node_ips: node_ips.iter().map(ToString::to_string).collect(),
            read_only: (read_only_port != 0).then(|| (address, read_only_port).into()),
            healthz: (healthz_port != 0).then(|| (healthz_address, healthz_port).into()),
            sync_frequency,
            file_check_frequency,
            crash_loop_backoff,
            image_pull_backoff,
            evented_pleg: flags.evented_pleg.unwrap_or(true),
            evented_pleg_relist_period,
            verbosity,
            logging_format,
            ignored_config_fields,
            flag_warnings: flags
                .accepted
                .warnings()
                .into_iter()
                .chain((!invalid_node_ips.is_empty()).then(|| {
                    format!("could not parse some node IP(s), ignoring them: {invalid_node_ips:?}")
                }))
                .collect(),
            config_file: config_object,
            node_allocatable: crate::node_allocatable::Settings::merge(
                flags.node_allocatable,
                &file,
                pod_runtime.cgroups_per_qos,
            )?,
            pod_runtime,
            cluster,
            node_status,
            container_logs: crate::container_log_settings::Settings::merge(
                flags.container_logs,
                &file,
            )?,
            gc: crate::gc_settings::Settings::merge(flags.gc, &file)?,
            security: crate::security_settings::Settings::merge(flags.security, &file)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Settings, UsageError> {
        let mut argv = vec!["kubelet"];
        argv.extend_from_slice(args);
        Settings::from_flags(Flags::try_parse_from(argv).map_err(|e| UsageError(e.to_string()))?)
    }

    #[test]
    fn defaults_are_upstreams() {
        let s = parse(&["--hostname-override", "Node-A"]).expect("valid");
        assert_eq!(s.node_name, "node-a");
        assert_eq!(s.read_only, Some("127.0.0.1:10255".parse().expect("addr")));
        assert_eq!(s.secure, "0.0.0.0:10250".parse().expect("addr"));
        assert_eq!(s.healthz, Some("127.0.0.1:10248".parse().expect("addr")));
        assert_eq!(s.sync_frequency, Duration::from_secs(60));
        assert_eq!(s.file_check_frequency, Duration::from_secs(20));
        assert_eq!(
            s.crash_loop_backoff,
            (Duration::from_secs(10), Duration::from_secs(300))
        );
        assert_eq!(
            s.image_pull_backoff,
            (Duration::from_secs(10), Duration::from_secs(300))
        );
        assert_eq!(
            s.runtime_socket,
            PathBuf::from("/run/containerd/containerd.sock")
        );
    }

    #[test]
    fn flags_win_over_config_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("config.yaml");
        std::fs::write(
            &cfg,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /etc/kubernetes/manifests\nsyncFrequency: 30s\nfileCheckFrequency: 5s\nreadOnlyPort: 0\nhealthzPort: 11248\nmaxPods: 50\ntopologyManagerPolicy: none\n",
        )
        .expect("write");
        let s = parse(&[
            "--config",
            cfg.to_str().expect("utf8"),
            "--sync-frequency",
            "2s",
        ])
        .expect("valid");
        assert_eq!(s.sync_frequency, Duration::from_secs(2));
        assert_eq!(s.file_check_frequency, Duration::from_secs(5));
        assert_eq!(s.read_only, None);
        assert_eq!(s.healthz.map(|a| a.port()), Some(11248));
        assert_eq!(
            s.pod_manifest_path,
            Some(PathBuf::from("/etc/kubernetes/manifests"))
        );
        assert_eq!(s.node_status.max_pods, 50);
        assert_eq!(
            s.ignored_config_fields,
            vec!["topologyManagerPolicy".to_owned()]
        );
    }

    #[test]
    fn crash_loop_backoff_from_config_and_flags() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("config.yaml");
        let path = cfg.to_str().expect("utf8");
        std::fs::write(
            &cfg,
            "kind: KubeletConfiguration\ncrashLoopBackOff:\n  maxContainerRestartPeriod: 4s\n",
        )
        .expect("write");
        // a maximum below 10 s is also the first window, as upstream
        let s = parse(&["--config", path]).expect("valid");
        assert_eq!(
            s.crash_loop_backoff,
            (Duration::from_secs(4), Duration::from_secs(4))
        );
        let s = parse(&[
            "--config",
            path,
            "--experimental-crash-loop-initial-backoff",
            "250ms",
            "--experimental-image-pull-initial-backoff",
            "1s",
            "--experimental-image-pull-max-backoff",
            "8s",
        ])
        .expect("valid");
        assert_eq!(
            s.crash_loop_backoff,
            (Duration::from_millis(250), Duration::from_secs(4))
        );
        assert_eq!(
            s.image_pull_backoff,
            (Duration::from_secs(1), Duration::from_secs(8))
        );
        std::fs::write(
            &cfg,
            "crashLoopBackOff:\n  maxContainerRestartPeriod: 500ms\n",
        )
        .expect("write");
        let err = parse(&["--config", path]).expect_err("below 1s");
        assert!(
            err.0.contains("crashLoopBackOff.maxContainerRestartPeriod"),
            "{}",
            err.0
        );
    }

    #[test]
    fn evented_pleg_flags() {
        let s = parse(&[]).expect("valid");
        assert!(s.evented_pleg);
        assert_eq!(s.evented_pleg_relist_period, Duration::from_secs(60));
        let s = parse(&[
            "--evented-pleg=false",
            "--evented-pleg-relist-period",
            "30s",
        ])
        .expect("valid");
        assert!(!s.evented_pleg);
        assert_eq!(s.pleg_choice().safety_net_period, Duration::from_secs(30));
        let err = parse(&["--evented-pleg-relist-period", "5m"]).expect_err("bad");
        assert!(err.0.contains("--evented-pleg-relist-period"), "{}", err.0);
    }

    #[test]
    fn logging_format_and_verbosity_from_flags_and_the_file() {
        use crate::log_format::Format;
        let s = parse(&[]).expect("valid");
        assert_eq!((s.logging_format, s.verbosity), (Format::Text, 0));
        let s = parse(&["--logging-format=json", "-v", "3"]).expect("valid");
        assert_eq!((s.logging_format, s.verbosity), (Format::Json, 3));
        let s = parse(&["--logging-format", "text"]).expect("valid");
        assert_eq!(s.logging_format, Format::Text);
        let err = parse(&["--logging-format=xml"]).expect_err("bad");
        assert!(err.0.contains("--logging-format"), "{}", err.0);

        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("c.yaml");
        let config = cfg.to_str().expect("utf8");
        std::fs::write(&cfg, "logging:\n  format: json\n  verbosity: 4\n").expect("write");
        let s = parse(&["--config", config]).expect("valid");
        assert_eq!((s.logging_format, s.verbosity), (Format::Json, 4));
        assert!(!s.ignored_config_fields.contains(&"logging".to_owned()));
        // Flags win over the file.
        let s = parse(&["--config", config, "--logging-format=text", "--v=1"]).expect("valid");
        assert_eq!((s.logging_format, s.verbosity), (Format::Text, 1));
        std::fs::write(&cfg, "logging:\n  format: text\n").expect("write");
        let s = parse(&["--config", config]).expect("valid");
        assert_eq!(s.logging_format, Format::Text);
        std::fs::write(&cfg, "logging:\n  format: xml\n").expect("write");
        let err = parse(&["--config", config]).expect_err("bad");
        assert!(err.0.contains("logging.format"), "{}", err.0);
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_field() {
        let err = parse(&["--sync-frequency", "ten"]).expect_err("bad");
        assert!(err.0.contains("sync-frequency"), "{}", err.0);
        let err = parse(&["--container-runtime-endpoint", "tcp://1.2.3.4:1"]).expect_err("bad");
        assert!(err.0.contains("unix://"), "{}", err.0);
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("c.yaml");
        std::fs::write(&cfg, "kind: Pod\n").expect("write");
        let err = parse(&["--config", cfg.to_str().expect("utf8")]).expect_err("bad");
        assert!(err.0.contains("KubeletConfiguration"), "{}", err.0);
        std::fs::write(&cfg, "syncFrequency: soon\n").expect("write");
        let err = parse(&["--config", cfg.to_str().expect("utf8")]).expect_err("bad");
        assert!(err.0.contains("syncFrequency"), "{}", err.0);
    }
}
