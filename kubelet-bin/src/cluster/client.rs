//! The kubelet's API clients (upstream `cmd/kubelet/app/server.go` `buildKubeletClientConfig`
//! and `kubeClientConfigOverrides`).
//!
//! - The main client carries the kubelet's User-Agent, is rate limited by `--kube-api-qps`
//!   (default 50) and `--kube-api-burst` (100) through [`RateLimitLayer`], and gives up on a
//!   response whose headers do not come within [`RESPONSE_TIMEOUT`].
//! - The heartbeat client (node status and Lease) is a second client over the same config
//!   with no rate limit and a timeout of the smaller of the node status update frequency and
//!   the lease duration, as upstream, so a busy main client can never starve the heartbeat.
//! - Both count their requests in `rest_client_requests_total`
//!   ([`RequestMetricsLayer`]).
//! - After repeated heartbeat failures the heartbeat client drops its connections, so the
//!   next attempt dials anew instead of waiting on a connection that may be half dead
//!   (upstream's `OnHeartbeatFailure`, `closeAllConns` from `updateDialer`):
//!   [`ApiClients::on_heartbeat_failure`]. A `kube::Client` cannot close its pooled
//!   connections, so the heartbeat client forwards each request to an inner client that
//!   this replaces with a fresh one (a new, empty connection pool); the old connections close
//!   once their requests end. Upstream's connection-rotating dialer is shared by both
//!   clients; here only the heartbeat client (node status, Lease, events) rotates.
//! - After a client certificate rotation both clients dial new connections with the new
//!   certificate ([`ApiClients::use_client_certificate`]; upstream's transport reads the
//!   certificate manager's current pair and closes its connections the same way). Both
//!   clients forward each request to an inner `kube::Client` that is replaced for this.

use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use http::{HeaderValue, header::USER_AGENT};
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::Error;
use super::rate_limit::{Limits, RateLimitLayer};
use super::request_metrics::RequestMetricsLayer;
use kubelet_core::metrics::KubeletMetrics;

/// How long the main client waits for a response's headers once the request is sent (the
/// rate limit's wait is not counted); then the request fails and is retried, on a new
/// connection.
///
/// Upstream's client has no request timeout but a health check of its HTTP/2 connections
/// (`ReadIdleTimeout` 30 s, then a ping answered within `PingTimeout` 15 s, in
/// `k8s.io/apimachinery/pkg/util/net/http.go`): a connection silent for 45 s is closed and
/// its requests fail. Without it, a watch that was re-opened while the server accepted
/// connections and never answered (a black hole) waited for its headers forever, so the
/// node's pods were never watched again. The server sends a watch's headers at once, before
/// any event, so this never cuts a watch; a watch's quiet stream is ended by kube-runtime's
/// idle timeout instead.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(45);

/// What to do when a heartbeat (node status or Lease) failed repeatedly (upstream
/// `OnHeartbeatFailure`): drop the heartbeat client's connections.
pub type OnHeartbeatFailure = Arc<dyn Fn() + Send + Sync>;

/// The kubelet's two API clients.
#[derive(Clone)]
pub struct ApiClients {
    /// Pods, mirror pods, pod status: rate limited.
    pub client: kube::Client,
    /// Node status, the node Lease and events: not rate limited, with a short timeout.
    pub heartbeat: kube::Client,
    reconnect: Option<OnHeartbeatFailure>,
    swaps: Vec<Arc<Swappable>>,
}

impl std::fmt::Debug for ApiClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClients").finish_non_exhaustive()
    }
}

impl ApiClients {
    /// Both clients from `config`: the main one limited by `limits`, the heartbeat one
    /// unlimited and timing out after `heartbeat_timeout`, both counting their requests in
    /// `metrics`. Sets the User-Agent ([`user_agent`]) unless the config has one.
    pub fn new(
        mut config: kube::Config,
        limits: Limits,
        heartbeat_timeout: Duration,
        metrics: &KubeletMetrics,
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
        let requests = RequestMetricsLayer::new(
            metrics.clone(),
            config
                .cluster_url
                .authority()
                .map(ToString::to_string)
                .unwrap_or_default(),
        );
        let main = Swappable::new(config, None)?;
        let client = ClientBuilder::new(main.service(), main.default_namespace())
            .with_layer(&tower::timeout::TimeoutLayer::new(RESPONSE_TIMEOUT))
            .with_layer(&RateLimitLayer::new(limits))
            .with_layer(&requests)
            .build();
        let heartbeat_swap = Swappable::new(heartbeat_config, Some(requests))?;
        let heartbeat =
            kube::Client::new(heartbeat_swap.service(), heartbeat_swap.default_namespace());
        let reconnect_heartbeat = heartbeat_swap.clone();
        let reconnect: OnHeartbeatFailure = Arc::new(move || match reconnect_heartbeat.rebuild() {
            Ok(()) => {
                tracing::info!("heartbeat failed repeatedly; the next one dials a new connection");
            }
            Err(e) => tracing::warn!(error = %e, "rebuilding the heartbeat client failed"),
        });
        Ok(Self {
            client,
            heartbeat,
            reconnect: Some(reconnect),
            swaps: vec![main, heartbeat_swap],
        })
    }

    /// Makes both clients authenticate their new connections with the certificate and key in
    /// the PEM file `pem` (read now; e.g. `kubelet-client-current.pem` after a rotation), and
    /// drops their idle connections; requests in flight (watches) finish on the old ones.
    /// Clients given as they are ([`from_client`](Self::from_client)) are left alone.
    pub fn use_client_certificate(&self, pem: &Path) -> Result<(), Error> {
        for swap in &self.swaps {
            swap.use_client_certificate(pem).map_err(Error::Client)?;
        }
        Ok(())
    }

    /// One client for both roles (tests: a `kube::Client` over a mock service); it cannot
    /// drop its connections.
    pub fn from_client(client: kube::Client) -> Self {
        Self {
            heartbeat: client.clone(),
            client,
            reconnect: None,
            swaps: Vec::new(),
        }
    }

    /// Drops the heartbeat client's connections (upstream `closeAllConns`); `None` for
    /// clients given as they are ([`from_client`](Self::from_client)).
    pub fn on_heartbeat_failure(&self) -> Option<OnHeartbeatFailure> {
        self.reconnect.clone()
    }
}

/// A client whose requests go to an inner client built from a config that can change: the
/// inner client (and with it its connection pool) is replaced by a fresh one on
/// [`rebuild`](Self::rebuild) (new connections) and
/// [`use_client_certificate`](Self::use_client_certificate) (new connections with another
/// client certificate); requests in flight keep the old one until they end.
struct Swappable {
    config: RwLock<kube::Config>,
    requests: Option<RequestMetricsLayer>,
    current: RwLock<kube::Client>,
}

impl Swappable {
    fn new(
        config: kube::Config,
        requests: Option<RequestMetricsLayer>,
    ) -> Result<Arc<Self>, Error> {
        let client = build(&config, requests.as_ref()).map_err(Error::Client)?;
        Ok(Arc::new(Self {
            config: RwLock::new(config),
            requests,
            current: RwLock::new(client),
        }))
    }

    fn default_namespace(&self) -> String {
        self.config
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .default_namespace
            .clone()
    }

    /// The service forwarding each request to the current inner client.
    fn service(self: &Arc<Self>) -> SwapService {
        SwapService(self.clone())
    }

    /// A fresh inner client from the config (reads its certificate files again).
    fn rebuild(&self) -> Result<(), kube::Error> {
        self.replace(|_| {})
    }

    fn use_client_certificate(&self, pem: &Path) -> Result<(), kube::Error> {
        self.replace(|config| {
            let file = Some(pem.to_string_lossy().into_owned());
            config.auth_info.client_certificate_data = None;
            config.auth_info.client_key_data = None;
            config.auth_info.client_certificate = file.clone();
            config.auth_info.client_key = file;
        })
    }

    /// Builds a fresh inner client from the config after `edit`, then keeps both.
    fn replace(&self, edit: impl FnOnce(&mut kube::Config)) -> Result<(), kube::Error> {
        let mut config = self
            .config
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        edit(&mut config);
        let fresh = build(&config, self.requests.as_ref())?;
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = config;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = fresh;
        Ok(())
    }
}

/// See [`Swappable::service`].
#[derive(Clone)]
struct SwapService(Arc<Swappable>);

impl tower::Service<http::Request<kube::client::Body>> for SwapService {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), kube::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let client = self
            .0
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Box::pin(async move { client.send(request).await })
    }
}

fn build(
    config: &kube::Config,
    requests: Option<&RequestMetricsLayer>,
) -> Result<kube::Client, kube::Error> {
    let builder = ClientBuilder::try_from(config.clone())?;
    Ok(match requests {
        Some(layer) => builder.with_layer(layer).build(),
        None => builder.build(),
    })
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
/// `kubelet/<version> (<os>/<arch>) kubernetes/<commit>` with the targeted upstream release
/// ([`kubelet_core::version::GIT_VERSION`]), the commit from
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
        "kubelet/{} ({}/{arch}) kubernetes/{}",
        kubelet_core::version::GIT_VERSION,
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
        assert!(agent.starts_with("kubelet/v1.36.0 ("), "{agent}");
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
        ApiClients::new(
            config,
            Limits::default(),
            Duration::from_secs(10),
            &KubeletMetrics::default(),
        )
        .expect("clients");
    }
}
