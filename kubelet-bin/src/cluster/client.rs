//! The kubelet's API clients (upstream `cmd/kubelet/app/server.go` `buildKubeletClientConfig`
//! and `kubeClientConfigOverrides`).
//!
//! - The main client carries the kubelet's User-Agent and is rate limited by `--kube-api-qps`
//!   (default 50) and `--kube-api-burst` (100) through [`RateLimitLayer`].
//! - The heartbeat client (node status and Lease) is a second client over the same config
//!   with no rate limit and a timeout of the smaller of the node status update frequency and
//!   the lease duration, as upstream, so a busy main client can never starve the heartbeat.

use std::path::Path;
use std::time::Duration;

use http::{HeaderValue, header::USER_AGENT};
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::Error;
use super::rate_limit::{Limits, RateLimitLayer};

/// The kubelet's two API clients.
#[derive(Clone)]
pub struct ApiClients {
    /// Pods, mirror pods, pod status, events: rate limited.
    pub client: kube::Client,
    /// Node status and the node Lease: not rate limited, with a short timeout.
    pub heartbeat: kube::Client,
}

impl std::fmt::Debug for ApiClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClients").finish_non_exhaustive()
    }
}

impl ApiClients {
    /// Both clients from `config`: the main one limited by `limits`, the heartbeat one
    /// unlimited and timing out after `heartbeat_timeout`. Sets the User-Agent
    /// ([`user_agent`]) unless the config has one.
    pub fn new(
        mut config: kube::Config,
        limits: Limits,
        heartbeat_timeout: Duration,
    ) -> Result<Self, Error> {
        if !config.headers.iter().any(|(name, _)| name == USER_AGENT) {
            let agent =
                HeaderValue::from_str(&user_agent()).map_err(|e| Error::Config(e.to_string()))?;
            config.headers.push((USER_AGENT, agent));
        }
        let mut heartbeat_config = config.clone();
        heartbeat_config.read_timeout = Some(heartbeat_timeout);
        heartbeat_config.write_timeout = Some(heartbeat_timeout);
        heartbeat_config.connect_timeout = Some(heartbeat_timeout);
        let client = ClientBuilder::try_from(config)
            .map_err(Error::Client)?
            .with_layer(&RateLimitLayer::new(limits))
            .build();
        let heartbeat = ClientBuilder::try_from(heartbeat_config)
            .map_err(Error::Client)?
            .build();
        Ok(Self { client, heartbeat })
    }

    /// One client for both roles (tests: a `kube::Client` over a mock service).
    pub fn from_client(client: kube::Client) -> Self {
        Self {
            heartbeat: client.clone(),
            client,
        }
    }
}

/// Whether a failed request may succeed later: transport failures, throttling and server
/// errors (client-go retries these; a request the server rejected is not retried).
pub fn retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) => false,
        _ => true,
    }
}

/// The config of a kubeconfig file (`--kubeconfig`), with its current context.
pub async fn load_kubeconfig(path: &Path) -> Result<kube::Config, Error> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Kubeconfig {
            path: path.to_owned(),
            message: e.to_string(),
        })
}

/// The kubelet's User-Agent, as upstream's `rest.DefaultKubernetesUserAgent`:
/// `kubelet/v<version> (<os>/<arch>) kubernetes/<commit>`, the commit from
/// `KUBELET_GIT_COMMIT` at build time or `unknown`.
pub fn user_agent() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    format!(
        "kubelet/v{} ({}/{arch}) kubernetes/{}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        option_env!("KUBELET_GIT_COMMIT").unwrap_or("unknown"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agent_is_upstreams_shape() {
        let agent = user_agent();
        assert!(agent.starts_with("kubelet/v0."), "{agent}");
        #[cfg(target_arch = "x86_64")]
        assert!(agent.contains(" (linux/amd64) kubernetes/"), "{agent}");
    }

    #[tokio::test]
    async fn kubeconfig_errors_name_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("missing");
        let err = load_kubeconfig(&path).await.expect_err("missing");
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[tokio::test]
    async fn a_kubeconfig_gives_two_clients() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:1\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: abc\n",
        )
        .expect("write");
        let config = load_kubeconfig(&path).await.expect("valid");
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:1/");
        ApiClients::new(config, Limits::default(), Duration::from_secs(10)).expect("clients");
    }
}
