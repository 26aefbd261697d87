//! TLS bootstrap (upstream `pkg/kubelet/certificate/bootstrap/bootstrap.go` `LoadClientCert`):
//! with `--bootstrap-kubeconfig` and no usable `--kubeconfig`, the kubelet requests its client
//! certificate with the bootstrap credentials, stores it in `--cert-dir` and writes
//! `--kubeconfig` pointing at it.
//!
//! In order: a `--kubeconfig` whose client certificate is readable and not expired is used as
//! it is; else a valid `kubelet-client-current.pem` in the certificate directory is reused
//! (the kubeconfig is rewritten to point at it); else a CertificateSigningRequest named after
//! its key (upstream `digestedName`), retried with back-off while the request is denied,
//! fails or times out. The key waits in `kubelet-client.key.tmp` until the certificate is
//! stored, so a restart waits for the same request; a denied or failed one gets a new key.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use http::{HeaderValue, header::USER_AGENT};
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::csr::{self, Template};
use super::store::{Pair, Store};
use super::{Error, Result};

/// The key of a request still waiting for its certificate (upstream's file name).
pub const PENDING_KEY_FILE: &str = "kubelet-client.key.tmp";

/// What [`Bootstrap::load_client_cert`] did.
#[derive(Debug)]
#[non_exhaustive]
pub enum Outcome {
    /// `--kubeconfig` was usable as it is.
    KubeconfigValid,
    /// The certificate directory's current pair was valid; the kubeconfig now points at it.
    Reused(Pair),
    /// A new certificate was issued and stored; the kubeconfig now points at it.
    Issued(Pair),
}

/// The TLS bootstrap of one node.
#[derive(Clone, Debug)]
pub struct Bootstrap {
    kubeconfig: PathBuf,
    bootstrap_kubeconfig: PathBuf,
    store: Store,
    node_name: String,
    wait: Duration,
}

impl Bootstrap {
    /// Bootstraps `kubeconfig` with the credentials of `bootstrap_kubeconfig`, keeping the
    /// certificates in `cert_dir`, for node `node_name`.
    pub fn new(
        kubeconfig: impl Into<PathBuf>,
        bootstrap_kubeconfig: impl Into<PathBuf>,
        cert_dir: impl Into<PathBuf>,
        node_name: impl Into<String>,
    ) -> Self {
        Self {
            kubeconfig: kubeconfig.into(),
            bootstrap_kubeconfig: bootstrap_kubeconfig.into(),
            store: Store::client(cert_dir),
            node_name: node_name.into(),
            wait: super::DEFAULT_WAIT_TIMEOUT,
        }
    }

    /// How long each request waits for its certificate (default 15 min).
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Makes `--kubeconfig` usable (see the [module docs](self)). Retries requests that were
    /// denied, failed or timed out, with back-off, until one succeeds; returns the errors
    /// that a retry cannot fix (unreadable bootstrap kubeconfig, unwritable files).
    ///
    /// Cancel safe: dropping the future leaves at most a pending request behind.
    pub async fn load_client_cert(&self) -> Result<Outcome> {
        match kubeconfig_still_valid(&self.kubeconfig) {
            Ok(()) => {
                tracing::info!(kubeconfig = %self.kubeconfig.display(), "kubeconfig exists and is valid, skipping bootstrap");
                return Ok(Outcome::KubeconfigValid);
            }
            Err(reason) => {
                tracing::info!(kubeconfig = %self.kubeconfig.display(), %reason, "kubeconfig not usable; bootstrapping the client certificate");
            }
        }
        let bootstrap = Kubeconfig::read_from(&self.bootstrap_kubeconfig)
            .map_err(|e| self.bootstrap_error(e.to_string()))?;
        match self.store.current() {
            Ok(Some(pair)) if pair.is_valid_at(SystemTime::now()) => {
                tracing::info!(certificate = %pair.path.display(), "reusing the valid client certificate");
                self.write_kubeconfig(&bootstrap)?;
                return Ok(Outcome::Reused(pair));
            }
            Ok(Some(pair)) => {
                tracing::info!(certificate = %pair.path.display(), "the stored client certificate is not valid now; requesting a new one");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the stored client certificate; requesting a new one")
            }
        }
        let mut config =
            kube::Config::from_custom_kubeconfig(bootstrap.clone(), &KubeConfigOptions::default())
                .await
                .map_err(|e| self.bootstrap_error(e.to_string()))?;
        let agent = HeaderValue::from_str(&crate::cluster::client::user_agent())
            .map_err(|e| self.bootstrap_error(e.to_string()))?;
        config.headers.push((USER_AGENT, agent));
        let client =
            kube::Client::try_from(config).map_err(|e| self.bootstrap_error(e.to_string()))?;
        let template = Template::client(&self.node_name);
        let mut failures = 0;
        let (cert, key) = loop {
            // The key is kept until the certificate is stored, so that a restart waits for
            // the same request (upstream `kubelet-client.key.tmp`).
            let key = self.pending_key()?;
            let name = template.digested_name(&key);
            match csr::request_certificate_for(
                client.clone(),
                &template,
                &key,
                Some(&name),
                self.wait,
            )
            .await
            {
                Ok(cert) => break (cert, key),
                Err(e) if e.is_retryable() => {
                    if !matches!(e, Error::Timeout { .. } | Error::Api { .. }) {
                        // Denied, failed or unusable: the next request needs a new key (and
                        // with it a new name).
                        self.discard_pending_key()?;
                    }
                    let pause = super::backoff(failures);
                    failures += 1;
                    tracing::error!(error = %e, retry_in = ?pause, "TLS bootstrap: no client certificate yet");
                    tokio::time::sleep(pause).await;
                }
                Err(e) => return Err(e),
            }
        };
        let pair = self.store.update(&cert, &key.serialize_pem())?;
        self.discard_pending_key()?;
        self.write_kubeconfig(&bootstrap)?;
        tracing::info!(certificate = %pair.path.display(), kubeconfig = %self.kubeconfig.display(), "TLS bootstrap done");
        Ok(Outcome::Issued(pair))
    }

    /// `<cert-dir>/kubelet-client.key.tmp`: the key of the pending request.
    fn pending_key_path(&self) -> PathBuf {
        self.store.dir().join(PENDING_KEY_FILE)
    }

    /// The pending request's key: read back, or made and written (0600).
    fn pending_key(&self) -> Result<rcgen::KeyPair> {
        let path = self.pending_key_path();
        if let Ok(text) = std::fs::read_to_string(&path) {
            match rcgen::KeyPair::from_pem(&text) {
                Ok(key) => return Ok(key),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "unusable pending key; making a new one")
                }
            }
        }
        let key =
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(Error::Key)?;
        write_private(&path, &key.serialize_pem())?;
        Ok(key)
    }

    fn discard_pending_key(&self) -> Result<()> {
        let path = self.pending_key_path();
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::Io { path, source }),
        }
    }

    fn bootstrap_error(&self, message: String) -> Error {
        Error::Kubeconfig {
            path: self.bootstrap_kubeconfig.clone(),
            message,
        }
    }

    /// Writes `--kubeconfig` (mode 0600, atomically): the server and CA of the bootstrap
    /// kubeconfig's current context, the client certificate and key from the store's current
    /// link (upstream `writeKubeconfigFromBootstrapping`).
    fn write_kubeconfig(&self, bootstrap: &Kubeconfig) -> Result<()> {
        let cluster = current_cluster(bootstrap).map_err(|e| self.bootstrap_error(e))?;
        let text = kubeconfig_text(&cluster, &self.store.current_path());
        write_private(&self.kubeconfig, &text)
    }
}

/// The server and CA of a kubeconfig's current context.
#[derive(Debug, Default)]
struct ClusterInfo {
    server: String,
    ca_file: Option<String>,
    ca_data: Option<String>,
    insecure: bool,
    tls_server_name: Option<String>,
}

fn current_cluster(config: &Kubeconfig) -> std::result::Result<ClusterInfo, String> {
    let context_name = config
        .current_context
        .as_deref()
        .ok_or("no current-context")?;
    let context = config
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| format!("no context {context_name:?}"))?;
    let cluster = config
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| format!("no cluster {:?}", context.cluster))?;
    Ok(ClusterInfo {
        server: cluster.server.clone().ok_or("the cluster has no server")?,
        ca_file: cluster.certificate_authority.clone(),
        ca_data: cluster.certificate_authority_data.clone(),
        insecure: cluster.insecure_skip_tls_verify.unwrap_or(false),
        tls_server_name: cluster.tls_server_name.clone(),
    })
}

/// The kubeconfig upstream writes after bootstrapping (names `default-cluster`,
/// `default-auth`, `default-context`; namespace `default`).
fn kubeconfig_text(cluster: &ClusterInfo, pem: &Path) -> String {
    let quote = |s: &str| serde_json::Value::from(s).to_string();
    let mut text = String::from("apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n");
    if let Some(file) = &cluster.ca_file {
        text.push_str(&format!("    certificate-authority: {}\n", quote(file)));
    }
    if let Some(data) = &cluster.ca_data {
        text.push_str(&format!(
            "    certificate-authority-data: {}\n",
            quote(data)
        ));
    }
    if cluster.insecure {
        text.push_str("    insecure-skip-tls-verify: true\n");
    }
    text.push_str(&format!("    server: {}\n", quote(&cluster.server)));
    if let Some(name) = &cluster.tls_server_name {
        text.push_str(&format!("    tls-server-name: {}\n", quote(name)));
    }
    let pem = quote(&pem.to_string_lossy());
    text.push_str(&format!(
        "  name: default-cluster\ncontexts:\n- context:\n    cluster: default-cluster\n    namespace: default\n    user: default-auth\n  name: default-context\n\
         current-context: default-context\npreferences: {{}}\nusers:\n- name: default-auth\n  user:\n    client-certificate: {pem}\n    client-key: {pem}\n"
    ));
    text
}

/// Writes `text` to `path` with mode 0600, through a temporary file renamed over it.
fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { path, source }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(text.as_bytes()).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// Whether the kubeconfig at `path` exists and its current user's client certificate and
/// key are readable and the certificate is not expired (upstream `isClientConfigStillValid`);
/// the reason when not.
pub fn kubeconfig_still_valid(path: &Path) -> std::result::Result<(), String> {
    if !path.exists() {
        return Err("it does not exist".into());
    }
    let config = Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    let context_name = config
        .current_context
        .as_deref()
        .ok_or("no current-context")?;
    let user_name = config
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.clone())
        .ok_or_else(|| format!("no user in context {context_name:?}"))?;
    let user = config
        .auth_infos
        .iter()
        .find(|a| a.name == user_name)
        .and_then(|a| a.auth_info.as_ref())
        .ok_or_else(|| format!("no user {user_name:?}"))?;
    let (cert, key) = user_pem(user)?;
    let pair = Pair::parse(path, &format!("{cert}\n{key}"), true).map_err(|e| e.to_string())?;
    if SystemTime::now() > pair.not_after {
        return Err(format!(
            "its client certificate expired at {}",
            super::store::offset_date_time(pair.not_after)
        ));
    }
    Ok(())
}

/// The client certificate and key PEM of a kubeconfig user (`client-certificate-data` or
/// `client-certificate`, likewise the key), for example to seed the certificate store with the
/// certificate kubeadm embeds in a control-plane node's `kubelet.conf`. `kubeconfig` names the
/// file in the error; `Ok(None)` when the user has no client certificate.
pub fn client_pair_pem(
    kubeconfig: &Path,
    user: &kube::config::AuthInfo,
) -> Result<Option<(String, String)>> {
    if user.client_certificate_data.is_none() && user.client_certificate.is_none() {
        return Ok(None);
    }
    user_pem(user)
        .map(Some)
        .map_err(|message| Error::Kubeconfig {
            path: kubeconfig.to_owned(),
            message,
        })
}

/// The user's client certificate and key PEM; the reason when either is missing or unreadable.
fn user_pem(user: &kube::config::AuthInfo) -> std::result::Result<(String, String), String> {
    let cert = pem_of(
        user.client_certificate_data.as_deref(),
        user.client_certificate.as_deref(),
    )?
    .ok_or("no client certificate")?;
    let key_data = user.client_key_data.as_ref().map(|k| {
        use secrecy::ExposeSecret as _;
        k.expose_secret().to_owned()
    });
    let key = pem_of(key_data.as_deref(), user.client_key.as_deref())?.ok_or("no client key")?;
    Ok((cert, key))
}

/// PEM text from base64 `data` or the file `file`.
fn pem_of(data: Option<&str>, file: Option<&str>) -> std::result::Result<Option<String>, String> {
    use base64::Engine as _;
    if let Some(data) = data {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| format!("client certificate or key data: {e}"))?;
        return String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| "client certificate or key data is not text".into());
    }
    match file {
        Some(file) => std::fs::read_to_string(file)
            .map(Some)
            .map_err(|e| format!("{file}: {e}")),
        None => Ok(None),
    }
}

#[cfg(test)]
#[path = "bootstrap_tests.rs"]
mod tests;
