//! Client certificate rotation (client-go `util/certificate/certificate_manager.go`, started
//! by upstream `pkg/kubelet/certificate/kubelet.go` `NewKubeletClientCertificateManager` with
//! `rotateCertificates`): at a jittered 70–90 % of the current certificate's lifetime
//! ([`deadline`](super::deadline)) a new key and CertificateSigningRequest, authenticated with
//! the current certificate; the issued pair is stored, the `current` link moved, and the API
//! clients told to use it for their new connections.
//!
//! A failed renewal counts in `kubelet_certificate_manager_client_expiration_renew_errors`
//! and is retried with back-off until one succeeds; `kubelet_certificate_manager_client_ttl_seconds`
//! shows the time left on the current certificate.

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

/// The rotation of the kubelet's client certificate (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct Rotation {
    store: Store,
    template: Template,
    wait: Duration,
    fallback: Option<(PathBuf, PathBuf)>,
}

impl Rotation {
    /// Rotates the client certificate of node `node_name` kept in `cert_dir`.
    pub fn client(cert_dir: impl Into<PathBuf>, node_name: &str) -> Self {
        Self {
            store: Store::client(cert_dir),
            template: Template::client(node_name),
            wait: super::DEFAULT_WAIT_TIMEOUT,
            fallback: None,
        }
    }

    /// The certificate and key files in use while the store has none (`--kubeconfig`'s,
    /// upstream's rule "a kubeconfig's certificate seeds the store"): the first renewal is
    /// due by their certificate's lifetime.
    #[must_use]
    pub fn fallback(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.fallback = Some((cert.into(), key.into()));
        self
    }

    /// The pair in use: the store's, else the fallback files'.
    pub fn current(&self) -> Result<Option<Pair>> {
        if let Some(pair) = self.store.current()? {
            return Ok(Some(pair));
        }
        let Some((cert, key)) = &self.fallback else {
            return Ok(None);
        };
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|source| super::Error::Io {
                path: path.to_owned(),
                source,
            })
        };
        let text = format!("{}\n{}", read(cert)?, read(key)?);
        Pair::parse(cert, &text, true).map(Some)
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
        loop {
            let wait = match self.current() {
                Ok(Some(pair)) => {
                    metrics
                        .certificate_manager_client_ttl
                        .set_not_after(pair.not_after);
                    let deadline = next_rotation_deadline(pair.not_before, pair.not_after);
                    let wait = deadline
                        .duration_since(SystemTime::now())
                        .unwrap_or_default();
                    tracing::info!(
                        expiration = %super::store::offset_date_time(pair.not_after),
                        deadline = %super::store::offset_date_time(deadline),
                        "client certificate rotation deadline"
                    );
                    wait
                }
                Ok(None) => {
                    tracing::info!(dir = %self.store.current_path().display(), "no client certificate stored; requesting one");
                    Duration::ZERO
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the client certificate; requesting a new one");
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
                        metrics
                            .certificate_manager_client_ttl
                            .set_not_after(pair.not_after);
                        on_rotated(&self.store.current_path());
                        tracing::info!(certificate = %pair.path.display(), "client certificate rotated");
                        break;
                    }
                    Err(e) => {
                        metrics.certificate_manager_client_renew_errors.inc();
                        let pause = super::backoff(failures);
                        failures += 1;
                        tracing::error!(error = %e, retry_in = ?pause, "renewing the client certificate failed");
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
