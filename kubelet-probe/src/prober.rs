//! Running one probe of one container (upstream `pkg/kubelet/prober/prober.go`): picks the
//! handler, resolves named ports and the default host (the pod IP), applies the timeout and
//! retries errors up to three times.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use kubelet_core::container::resolve_port;
use kubelet_core::runtime::Runtime;

use crate::Error;

/// Tries of a probe that errors (upstream `maxProbeRetries`).
pub const MAX_RETRIES: usize = 3;

/// What a handler observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The probe passed.
    pub success: bool,
    /// Output or the reason of the failure, for logs and events.
    pub output: String,
}

impl Outcome {
    /// A success with `output`.
    pub fn success(output: String) -> Self {
        Self {
            success: true,
            output,
        }
    }

    /// A failure with `output`.
    pub fn failure(output: String) -> Self {
        Self {
            success: false,
            output,
        }
    }
}

/// A probe's settings with upstream's defaults applied (`SetDefaults_Probe`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// `initialDelaySeconds` (default 0).
    pub initial_delay: Duration,
    /// `periodSeconds` (default 10).
    pub period: Duration,
    /// `timeoutSeconds` (default 1).
    pub timeout: Duration,
    /// `successThreshold` (default 1).
    pub success_threshold: u32,
    /// `failureThreshold` (default 3).
    pub failure_threshold: u32,
}

fn secs(v: Option<i32>, default: u64) -> Duration {
    Duration::from_secs(
        v.and_then(|v| u64::try_from(v).ok())
            .filter(|v| *v > 0)
            .unwrap_or(default),
    )
}

impl Timing {
    /// Settings of `probe`, defaults for unset or non-positive values.
    pub fn of(probe: &Probe) -> Self {
        let count = |v: Option<i32>, d: u32| {
            v.and_then(|v| u32::try_from(v).ok())
                .filter(|v| *v > 0)
                .unwrap_or(d)
        };
        Self {
            initial_delay: Duration::from_secs(
                probe
                    .initial_delay_seconds
                    .and_then(|v| u64::try_from(v).ok())
                    .unwrap_or(0),
            ),
            period: secs(probe.period_seconds, 10),
            timeout: secs(probe.timeout_seconds, 1),
            success_threshold: count(probe.success_threshold, 1),
            failure_threshold: count(probe.failure_threshold, 3),
        }
    }
}

fn host_or_pod_ip(host: Option<&String>, pod_ip: Option<&str>) -> Result<String, Error> {
    match host.filter(|h| !h.is_empty()) {
        Some(h) => Ok(h.clone()),
        None => pod_ip.map(str::to_owned).ok_or(Error::NoPodIp),
    }
}

/// Expands `$(VAR)` in an exec probe's command with the container's literal `env` values
/// (upstream `ExpandContainerCommandOnlyStatic`): `$$` is a literal `$`, unknown variables and
/// unterminated references stay as written.
pub fn expand_command(command: &[String], container: &Container) -> Vec<String> {
    let env: std::collections::HashMap<&str, &str> = container
        .env
        .iter()
        .flatten()
        .filter(|e| e.value_from.is_none())
        .map(|e| (e.name.as_str(), e.value.as_deref().unwrap_or("")))
        .collect();
    command
        .iter()
        .map(|arg| {
            kubelet_core::expansion::expand(arg, |name| env.get(name).map(|v| (*v).to_owned()))
        })
        .collect()
}

/// Runs `probe` once (with retries on errors). `pod_ip` is the default host of network
/// probes (the node's IP for `hostNetwork` pods). `Err` is a probe error: upstream throws the
/// result away and keeps the previous one.
pub async fn run(
    runtime: &dyn Runtime,
    probe: &Probe,
    container: &Container,
    container_id: &str,
    pod_ip: Option<&str>,
) -> Result<Outcome, Error> {
    let mut attempt = 1;
    loop {
        let result = run_once(runtime, probe, container, container_id, pod_ip).await;
        if result.is_ok() || attempt >= MAX_RETRIES {
            return result;
        }
        attempt += 1;
    }
}

async fn run_once(
    runtime: &dyn Runtime,
    probe: &Probe,
    container: &Container,
    container_id: &str,
    pod_ip: Option<&str>,
) -> Result<Outcome, Error> {
    let timeout = Timing::of(probe).timeout;
    if let Some(exec) = &probe.exec {
        let command = expand_command(exec.command.as_deref().unwrap_or_default(), container);
        return crate::exec::probe(runtime, container_id, &command, timeout).await;
    }
    if let Some(h) = &probe.http_get {
        let port = resolve_port(&h.port, container)?;
        let host = host_or_pod_ip(h.host.as_ref(), pod_ip)?;
        let path = h.path.clone().unwrap_or_default();
        let target = crate::http::Target {
            https: h
                .scheme
                .as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case("https")),
            host,
            port,
            path: if path.starts_with('/') {
                path
            } else {
                format!("/{path}")
            },
            headers: h
                .http_headers
                .iter()
                .flatten()
                .map(|hd| (hd.name.clone(), hd.value.clone()))
                .collect(),
        };
        return Ok(crate::http::probe(&target, timeout).await);
    }
    if let Some(t) = &probe.tcp_socket {
        let port = resolve_port(&t.port, container)?;
        let host = host_or_pod_ip(t.host.as_ref(), pod_ip)?;
        return Ok(crate::tcp::probe(&host, port, timeout).await);
    }
    if let Some(g) = &probe.grpc {
        let port = u16::try_from(g.port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or(Error::InvalidGrpcPort(g.port))?;
        let host = host_or_pod_ip(None, pod_ip)?;
        let service = g.service.clone().unwrap_or_default();
        #[cfg(feature = "grpc")]
        return Ok(crate::grpc::probe(&host, port, &service, timeout).await);
        #[cfg(not(feature = "grpc"))]
        {
            let _ = (host, port, service);
            return Err(Error::GrpcNotBuilt);
        }
    }
    Err(Error::MissingHandler)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    #[test]
    fn exec_command_expansion() {
        use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};
        let c = Container {
            env: Some(vec![
                EnvVar {
                    name: "FILE".into(),
                    value: Some("/tmp/healthy".into()),
                    ..Default::default()
                },
                EnvVar {
                    name: "DYN".into(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.name".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let cmd: Vec<String> = [
            "cat", "$(FILE)", "$$(FILE)", "$(DYN)", "$(NOPE)x", "a$b", "$(open",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            expand_command(&cmd, &c),
            [
                "cat",
                "/tmp/healthy",
                "$(FILE)",
                "$(DYN)",
                "$(NOPE)x",
                "a$b",
                "$(open"
            ]
        );
    }

    #[test]
    fn defaults_and_named_ports() {
        let t = Timing::of(&Probe::default());
        assert_eq!(
            (
                t.initial_delay,
                t.period,
                t.timeout,
                t.success_threshold,
                t.failure_threshold
            ),
            (
                Duration::ZERO,
                Duration::from_secs(10),
                Duration::from_secs(1),
                1,
                3
            )
        );
        let c = Container {
            name: "app".into(),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &c),
            Ok(8080)
        );
        assert_eq!(resolve_port(&IntOrString::String("81".into()), &c), Ok(81));
        assert_eq!(resolve_port(&IntOrString::Int(80), &c), Ok(80));
        assert!(resolve_port(&IntOrString::String("nope".into()), &c).is_err());
        assert!(resolve_port(&IntOrString::Int(0), &c).is_err());
    }
}
