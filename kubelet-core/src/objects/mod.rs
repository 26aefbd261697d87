//! Where the kubelet gets the API objects that volumes and env vars project into pods:
//! configMaps, secrets and service-account tokens (upstream `pkg/kubelet/configmap`,
//! `pkg/kubelet/secret` and `pkg/kubelet/token`).
//!
//! The API-server mode implements [`ObjectSource`] over watches of the objects its pods
//! reference (the kubelet registers each pod it syncs and unregisters it once terminated,
//! as upstream's `RegisterPod`/`UnregisterPod`); standalone nodes and tests use
//! [`InMemoryObjectSource`]. [`references`] lists what a pod references.

pub mod references;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};

/// Errors from an [`ObjectSource`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The source cannot answer now (API server unreachable, cache not synced). Retryable.
    #[error("object source unavailable: {0}")]
    Unavailable(String),
    /// The source refused (forbidden, token request rejected). Retryable on the next sync.
    #[error("{0}")]
    Other(String),
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A service-account token request (upstream `TokenRequest`, bound to the pod).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TokenRequest {
    /// Namespace of the pod and of the service account.
    pub namespace: String,
    /// The service account.
    pub service_account: String,
    /// Audience; empty means the API server's.
    pub audience: String,
    /// Requested lifetime in seconds.
    pub expiration_seconds: i64,
    /// Name of the pod the token is bound to.
    pub pod_name: String,
    /// UID of the pod the token is bound to.
    pub pod_uid: String,
}

/// A token the API server issued for a [`TokenRequest`] (upstream `TokenRequest.status`,
/// with the lifetime the server granted).
#[derive(Clone, PartialEq, Eq)]
pub struct ServiceAccountToken {
    /// The token (a JWT).
    pub token: String,
    /// When it expires (`status.expirationTimestamp`); `None` when the source does not say:
    /// the requested lifetime from when it was received.
    pub expiration: Option<SystemTime>,
    /// The lifetime the server granted (`spec.expirationSeconds` of the answer); `None`:
    /// the requested one.
    pub expiration_seconds: Option<i64>,
}

impl ServiceAccountToken {
    /// A token with no expiry information: it lives as long as requested.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            expiration: None,
            expiration_seconds: None,
        }
    }
}

impl std::fmt::Debug for ServiceAccountToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a credential: never in logs.
        f.debug_struct("ServiceAccountToken")
            .field("expiration", &self.expiration)
            .field("expiration_seconds", &self.expiration_seconds)
            .finish_non_exhaustive()
    }
}

/// Where service-account tokens come from (upstream token manager's `getToken`, the
/// TokenRequest API `serviceaccounts/<sa>/token`).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait TokenSource: Send + Sync + 'static {
    /// A fresh token for `request`, `None` when the service account does not exist.
    async fn service_account_token(
        &self,
        request: &TokenRequest,
    ) -> Result<Option<ServiceAccountToken>>;
}

/// Read access to configMaps, secrets and service-account tokens.
///
/// `Ok(None)` means the object does not exist (an `optional` volume then projects nothing).
///
/// The kubelet calls [`register_pod`](Self::register_pod) at every sync of a pod that is not
/// terminating, before its volumes and containers read objects, and
/// [`unregister_pod`](Self::unregister_pod) once the pod is terminated and its volumes are
/// torn down (upstream `SyncPod` and `SyncTerminatedPod` in `pkg/kubelet/kubelet.go`): a
/// source that caches only what pods reference (upstream's `Watch` strategy) starts and
/// stops its watches there. Both are cheap and never block on the network.
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait ObjectSource: Send + Sync + 'static {
    /// `pod` will read the objects it references (see [`references`]); a second call for
    /// the same pod updates its references. Default: nothing.
    fn register_pod(&self, pod: &Pod) {
        let _ = pod;
    }
    /// `pod` reads no objects any more. Default: nothing.
    fn unregister_pod(&self, pod: &Pod) {
        let _ = pod;
    }
    /// The configMap `namespace/name`.
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>>;
    /// The secret `namespace/name`.
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>>;
    /// A token for `request`, `None` when the service account does not exist.
    async fn service_account_token(
        &self,
        request: &TokenRequest,
    ) -> Result<Option<ServiceAccountToken>>;
}

/// An [`ObjectSource`] whose configMaps and secrets come from one source and whose tokens
/// come from a [`TokenSource`] (e.g. the API server's TokenRequest).
#[derive(Clone)]
pub struct WithTokens {
    objects: Arc<dyn ObjectSource>,
    tokens: Arc<dyn TokenSource>,
}

impl WithTokens {
    /// ConfigMaps and secrets from `objects`, tokens from `tokens`.
    pub fn new(objects: Arc<dyn ObjectSource>, tokens: Arc<dyn TokenSource>) -> Self {
        Self { objects, tokens }
    }
}

impl std::fmt::Debug for WithTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithTokens").finish_non_exhaustive()
    }
}

#[async_trait]
impl ObjectSource for WithTokens {
    fn register_pod(&self, pod: &Pod) {
        self.objects.register_pod(pod);
    }

    fn unregister_pod(&self, pod: &Pod) {
        self.objects.unregister_pod(pod);
    }

    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>> {
        self.objects.config_map(namespace, name).await
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>> {
        self.objects.secret(namespace, name).await
    }

    async fn service_account_token(
        &self,
        request: &TokenRequest,
    ) -> Result<Option<ServiceAccountToken>> {
        self.tokens.service_account_token(request).await
    }
}

#[derive(Debug, Default)]
struct Objects {
    config_maps: HashMap<(String, String), ConfigMap>,
    secrets: HashMap<(String, String), Secret>,
    tokens: HashMap<(String, String), String>,
}

/// An [`ObjectSource`] held in memory: what a standalone node has (nothing, unless set) and
/// what tests use. Cloning shares the objects.
#[derive(Clone, Debug, Default)]
pub struct InMemoryObjectSource {
    inner: Arc<Mutex<Objects>>,
}

fn key(namespace: &str, name: &str) -> (String, String) {
    (namespace.to_owned(), name.to_owned())
}

impl InMemoryObjectSource {
    /// An empty source.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Objects> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds or replaces the configMap `namespace/name`.
    pub fn set_config_map(&self, namespace: &str, name: &str, cm: ConfigMap) {
        self.lock().config_maps.insert(key(namespace, name), cm);
    }

    /// Adds or replaces the secret `namespace/name`.
    pub fn set_secret(&self, namespace: &str, name: &str, secret: Secret) {
        self.lock().secrets.insert(key(namespace, name), secret);
    }

    /// Sets the token returned for any request for `namespace/service_account`.
    pub fn set_token(&self, namespace: &str, service_account: &str, token: &str) {
        self.lock()
            .tokens
            .insert(key(namespace, service_account), token.to_owned());
    }

    /// Removes the configMap `namespace/name`.
    pub fn remove_config_map(&self, namespace: &str, name: &str) {
        self.lock().config_maps.remove(&key(namespace, name));
    }

    /// Removes the secret `namespace/name`.
    pub fn remove_secret(&self, namespace: &str, name: &str) {
        self.lock().secrets.remove(&key(namespace, name));
    }
}

#[async_trait]
impl ObjectSource for InMemoryObjectSource {
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>> {
        Ok(self.lock().config_maps.get(&key(namespace, name)).cloned())
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>> {
        Ok(self.lock().secrets.get(&key(namespace, name)).cloned())
    }

    async fn service_account_token(
        &self,
        request: &TokenRequest,
    ) -> Result<Option<ServiceAccountToken>> {
        Ok(self
            .lock()
            .tokens
            .get(&key(&request.namespace, &request.service_account))
            .map(ServiceAccountToken::new))
    }
}
