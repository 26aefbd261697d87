//! Certificate rotation (client-go `util/certificate/certificate_manager.go`, started by
//! upstream `pkg/kubelet/certificate/kubelet.go` `NewKubeletClientCertificateManager` with
//! `rotateCertificates` and `NewKubeletServerCertificateManager` with `serverTLSBootstrap`):
//! at a jittered 70–90 % of the current certificate's lifetime ([`deadline`](super::deadline))
//! a new key and CertificateSigningRequest, made through the API client (for the client
//! certificate: authenticated with the current one); the issued pair is stored, the `current`
//! link moved, and the users told ([`OnRotated`]: the API clients dial new connections with
//! it, the secure port serves it).
//!
//! A failed renewal counts in `kubelet_certificate_manager_client_expiration_renew_errors`
//! (serving: `kubelet_server_expiration_renew_errors`) and is retried with back-off until one
//! succeeds; `kubelet_certificate_manager_client_ttl_seconds` (serving:
//! `kubelet_certificate_manager_server_ttl_seconds`) shows the time left on the current
//! certificate.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kubelet_core::metrics::KubeletMetrics;
use tokio_util::sync::CancellationToken;

use super::Result;
use super::csr::{self, Template};
use super::deadline::next_rotation_deadline;
use super::store::{Pair, Store};

/// What to do once a new pair is current: the path of the `current` link.
pub type OnRotated = Arc<dyn Fn(&Path) + Send + Sync>;

/// Which certificate a [`Rotation`] renews.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The client certificate (`rotateCertificates`).
    Client,
    /// The secure port's serving certificate (`serverTLSBootstrap`).
    Serving,
}

/// The rotation of the kubelet's client or serving certificate (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct Rotation {
    kind: Kind,
    store: Store,
    template: Template,
    wait: Duration,
    seed: Option<(String, String)>,
}

impl Rotation {
    /// Rotates the client certificate of node `node_name` kept in `cert_dir`.
    pub fn client(cert_dir: impl Into<PathBuf>, node_name: &str) -> Self {
        Self {
            kind: Kind::Client,
            store: Store::client(cert_dir),
            template: Template::client(node_name),
            wait: super::DEFAULT_WAIT_TIMEOUT,
            seed: None,
        }
    }

    /// The certificate and key (PEM) of `--kubeconfig`, which seed the store when it holds no
    /// valid pair; the seeded pair is renewed at once (client-go
    /// `getCurrentCertificateOrBootstrap`: kubeadm hands a control-plane node's kubelet a
    /// certificate it signed itself in `kubelet.conf` and expects `kubelet-client-current.pem`
    /// to exist, and the certificate to be rotated out, right away).
    #[must_use]
    pub fn seed(mut self, cert_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
        self.seed = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// The stored pair in use.
    pub fn current(&self) -> Result<Option<Pair>> {
        self.store.current()
    }

    /// Writes the seed as the current pair when the store has no valid one; whether it did.
    fn seed_store(&self) -> bool {
        let Some((cert, key)) = &self.seed else {
            return false;
        };
        if let Ok(Some(pair)) = self.store.current()
            && pair.is_valid_at(SystemTime::now())
        {
            return false;
        }
        match self.store.update(cert, key) {
            Ok(pair) => {
                tracing::info!(kind = ?self.kind, certificate = %pair.path.display(), "stored the kubeconfig's certificate; renewing it at once");
                true
            }
            Err(e) => {
                tracing::warn!(kind = ?self.kind, error = %e, "cannot store the kubeconfig's certificate");
                false
            }
        }
    }

    /// Requests and renews the serving certificate of node `node_name` (upstream
    /// `NewKubeletServerCertificateManager`; signer `kubernetes.io/kubelet-serving`), kept in
    /// `cert_dir` as `kubelet-server-*.pem`. Its alternative names are the node's addresses
    /// ([`addresses`](Self::addresses); the cluster fills them in from the node status).
    pub fn serving(cert_dir: impl Into<PathBuf>, node_name: &str) -> Self {
        Self {
            kind: Kind::Serving,
            store: Store::new(cert_dir, super::store::SERVER_PREFIX),
            template: Template::serving(node_name, Vec::new(), Vec::new()),
            wait: super::DEFAULT_WAIT_TIMEOUT,
            seed: None,
        }
    }

    /// Which certificate this renews.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Sets the alternative names requested: host names and IPs.
    #[must_use]
    pub fn addresses(mut self, hostnames: Vec<String>, ips: Vec<std::net::IpAddr>) -> Self {
        self.template.dns_names = hostnames;
        self.template.ips = ips;
        self
    }

    /// How long each request waits for its certificate (default 15 min).
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The store the certificates are kept in.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Renews the certificate until `token` is cancelled, requesting through `client`,
    /// recording in `metrics` and calling `on_rotated` after each renewal.
    pub async fn run(
        self,
        client: kube::Client,
        metrics: KubeletMetrics,
        on_rotated: OnRotated,
        token: CancellationToken,
    ) {
        let (ttl, errors) = match self.kind {
            Kind::Client => (
                &metrics.certificate_manager_client_ttl,
                &metrics.certificate_manager_client_renew_errors,
            ),
            Kind::Serving => (
                &metrics.certificate_manager_server_ttl,
                &metrics.server_expiration_renew_errors,
            ),
        };
        // A stored serving certificate is served from the start (the secure port began
        // with its own pair).
        if self.kind == Kind::Serving
            && let Ok(Some(pair)) = self.store.current()
            && pair.is_valid_at(SystemTime::now())
        {
            on_rotated(&self.store.current_path());
        }
        let mut renew_now = self.seed_store();
        loop {
            let wait = match self.current() {
                Ok(Some(pair)) if std::mem::take(&mut renew_now) => {
                    ttl.set_not_after(pair.not_after);
                    Duration::ZERO
                }
                Ok(Some(pair)) => {
                    ttl.set_not_after(pair.not_after);
                    let deadline = next_rotation_deadline(pair.not_before, pair.not_after);
                    let wait = deadline
                        .duration_since(SystemTime::now())
                        .unwrap_or_default();
                    tracing::info!(
                        expiration = %super::store::offset_date_time(pair.not_after),
                        deadline = %super::store::offset_date_time(deadline),
                        kind = ?self.kind,
                        "certificate rotation deadline"
                    );
                    wait
                }
                Ok(None) => {
                    tracing::info!(kind = ?self.kind, dir = %self.store.current_path().display(), "no certificate stored; requesting one");
                    Duration::ZERO
                }
                Err(e) => {
                    tracing::warn!(kind = ?self.kind, error = %e, "cannot read the certificate; requesting a new one");
                    Duration::ZERO
                }
            };
            tokio::select! {
                biased;
                _ = token.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            let mut failures = 0;
            loop {
                let attempt = tokio::select! {
                    biased;
                    _ = token.cancelled() => return,
                    r = self.rotate(client.clone()) => r,
                };
                match attempt {
                    Ok(pair) => {
                        ttl.set_not_after(pair.not_after);
                        on_rotated(&self.store.current_path());
                        tracing::info!(kind = ?self.kind, certificate = %pair.path.display(), "certificate rotated");
                        break;
                    }
                    Err(e) => {
                        errors.inc();
                        let pause = super::backoff(failures);
                        failures += 1;
                        tracing::error!(kind = ?self.kind, error = %e, retry_in = ?pause, "renewing the certificate failed");
                        tokio::select! {
                            biased;
                            _ = token.cancelled() => return,
                            _ = tokio::time::sleep(pause) => {}
                        }
                    }
                }
            }
        }
    }

    /// One renewal: request, wait, store.
    pub async fn rotate(&self, client: kube::Client) -> Result<Pair> {
        let (cert, key) = csr::request_certificate(client, &self.template, self.wait).await?;
        self.store.update(&cert, &key.serialize_pem())
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
