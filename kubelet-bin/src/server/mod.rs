//! The kubelet's HTTP endpoints (upstream `pkg/kubelet/server/server.go`):
//!
//! * the localhost healthz port ([`healthz_router`]);
//! * the read-only port ([`read_only_router`]): unauthenticated `/pods`, `/runningpods/`,
//!   health checks;
//! * the secure port ([`SecureOptions`], 10250): `/metrics` and `/metrics/probes`
//!   ([`metrics`]) besides the read-only routes, HTTPS only ([`tls`], [`cert`]), every request
//!   authenticated ([`authn`]: x509, bearer tokens through TokenReview, anonymous) and
//!   authorized ([`authz`]: AlwaysAllow or SubjectAccessReview on `nodes/<subresource>`) by the
//!   auth filter before its route runs.
//!
//! The secure port also serves `/exec`, `/attach` and `/portForward` (`streaming`): the
//! runtime's streaming URL, and the client's upgrade request proxied to it ([`proxy`]).
//!
//! Adding an endpoint to the secure port: add its route to `routes::secure` (it is then
//! behind the auth filter), and its path to `authz::request_attributes` when upstream gives
//! it a subresource of its own (`/stats` → `nodes/stats`, …); everything else is
//! `nodes/proxy`.

pub mod authn;
pub mod authz;
mod backend;
mod cache;
mod cadvisor_metrics;
pub mod cert;
mod exposition;
#[cfg(test)]
mod fake_reviews;
mod filter;
pub mod listener;
mod logs;
pub mod metrics;
pub mod proxy;
mod resource_metrics;
mod routes;
mod run;
mod spdy;
mod stats;
mod streaming;
#[cfg(test)]
mod streaming_tests;
pub mod tls;
pub mod webhook;
mod ws_frame;
mod ws_v5;
mod x509;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use kubelet_core::kubelet::sync_loop;
use kubelet_core::pod_manager::PodManager;
use kubelet_core::runtime::Runtime;
use kubelet_core::status::StatusManager;

pub use filter::KubeletAuth;

/// What the handlers read.
#[derive(Clone)]
pub struct ServerState {
    /// Desired pods.
    pub pod_manager: PodManager,
    /// Their statuses.
    pub status: Arc<dyn StatusManager>,
    /// The runtime, for `/runningpods/`.
    pub runtime: Arc<dyn Runtime>,
    /// Sync loop liveness.
    pub syncloop: sync_loop::Health,
    /// What `/metrics` and `/metrics/probes` serve.
    pub metrics: Arc<metrics::Registries>,
    /// Whether every async worker makes progress (the stall watchdog's).
    pub stall: kubelet_core::watchdog::Health,
    /// The Summary API behind `/stats/summary` and `/metrics/{resource,cadvisor}` (`None`:
    /// those paths are not served).
    pub stats: Option<Arc<dyn kubelet_core::stats::SummaryProvider>>,
}

/// Routes of the healthz port.
pub fn healthz_router(state: ServerState) -> Router {
    routes::healthz(state)
}

/// Routes of the read-only port.
pub fn read_only_router(state: ServerState) -> Router {
    routes::read_only(state)
}

/// Routes of the secure port behind the auth filter of `auth`; `/configz` serves `configz`.
pub fn secure_router(
    state: ServerState,
    configz: Arc<serde_json::Value>,
    auth: Arc<KubeletAuth>,
) -> Router {
    routes::secure(state, configz).layer(axum::middleware::from_fn_with_state(
        auth,
        filter::auth_filter,
    ))
}

/// Why the secure port could not be set up (the kubelet does not start).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A PEM file (certificate, key, client CA) could not be read or holds nothing usable.
    #[error("{path}: {message}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The self-signed pair could not be made.
    #[error("unable to generate self signed cert: {0}")]
    SelfSigned(#[source] rcgen::Error),
    /// The self-signed pair could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// rustls rejected the configuration (e.g. a key that does not match the certificate).
    #[error("TLS configuration: {0}")]
    Tls(#[source] rustls::Error),
    /// `--tls-min-version` is not one of upstream's names.
    #[error(
        "unknown --tls-min-version {0:?} (VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13)"
    )]
    TlsVersion(String),
    /// A `--tls-cipher-suites` name is not upstream's.
    #[error("cipher suite {0} not supported or doesn't exist")]
    UnknownCipherSuite(String),
    /// A `--tls-cipher-suites` name is upstream's but rustls does not implement it.
    #[error(
        "cipher suite {0} is not supported by this kubelet (rustls: ECDHE with AES-GCM or ChaCha20-Poly1305 only)"
    )]
    UnsupportedCipherSuite(String),
    /// Webhook authentication or authorization without an API client (standalone).
    #[error("no client provided, cannot use webhook {0}")]
    NoClient(&'static str),
    /// `authorization.mode` is empty.
    #[error("no authorization mode specified")]
    NoAuthorizationMode,
    /// `authorization.mode` is not `AlwaysAllow` or `Webhook`.
    #[error("unknown authorization mode {0}")]
    AuthorizationMode(String),
}

impl Error {
    fn pem(path: &Path, message: impl std::fmt::Display) -> Self {
        Self::Pem {
            path: path.to_owned(),
            message: message.to_string(),
        }
    }
}

/// The secure port's options (upstream `KubeletConfiguration` `address`, `port`, the TLS
/// fields, `authentication`, `authorization`).
#[derive(Clone, Debug)]
pub struct SecureOptions {
    /// `address`:`port` (port 0: any free port, see `Node::secure_addr`).
    pub addr: SocketAddr,
    /// TLS.
    pub tls: tls::TlsOptions,
    /// Authentication.
    pub authn: authn::AuthnOptions,
    /// Authorization.
    pub authz: authz::AuthzOptions,
    /// What `/configz` serves (default `{"kubeletconfig": {}}`).
    pub configz: Arc<serde_json::Value>,
}

impl SecureOptions {
    /// The flags' defaults on `addr`: a self-signed pair in `cert_dir`, anonymous requests,
    /// `AlwaysAllow`.
    pub fn new(addr: SocketAddr, cert_dir: impl Into<PathBuf>) -> Self {
        Self {
            addr,
            tls: tls::TlsOptions::self_signed(cert_dir),
            authn: authn::AuthnOptions::default(),
            authz: authz::AuthzOptions::default(),
            configz: Arc::new(serde_json::json!({"kubeletconfig": {}})),
        }
    }
}

/// The secure port, set up and ready to serve once the node's state exists: its TLS config
/// and its auth filter.
pub struct Secure {
    /// The rustls config of the listener.
    pub tls: Arc<rustls::ServerConfig>,
    /// The authenticator and authorizer of the filter.
    pub auth: Arc<KubeletAuth>,
    /// What `/configz` serves.
    pub configz: Arc<serde_json::Value>,
    /// The serving certificate, replaceable while the port serves.
    pub serving: Arc<tls::ServingCertificate>,
}

impl std::fmt::Debug for Secure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secure")
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

impl Secure {
    /// Sets up the secure port of node `node_name` (upstream `InitializeTLS` + `BuildAuth`,
    /// before anything else starts): the serving pair (self-signed for the node's name and
    /// IPs), the authenticator and the authorizer; `reviews` is the API client for the
    /// webhooks (`None` standalone).
    pub fn new(
        opts: &SecureOptions,
        node_name: &str,
        node_ips: &[IpAddr],
        reviews: Option<Arc<dyn webhook::Reviews>>,
    ) -> Result<Self, Error> {
        let (certs, key) = tls::serving_pair(&opts.tls, node_name, node_ips)?;
        let (config, client_ca, serving) = tls::server_config(&opts.tls, certs, key)?;
        let auth = KubeletAuth {
            node_name: node_name.to_owned(),
            authenticator: authn::Authenticator::new(&opts.authn, client_ca, reviews.clone())?,
            authorizer: authz::Authorizer::new(&opts.authz, reviews)?,
        };
        Ok(Self {
            tls: config,
            auth: Arc::new(auth),
            configz: opts.configz.clone(),
            serving,
        })
    }

    /// The routes over `state`, behind the auth filter.
    pub fn router(&self, state: ServerState) -> Router {
        secure_router(state, self.configz.clone(), self.auth.clone())
    }
}
