//! The three API calls of the status syncer, behind [`PodStatusApi`] so tests can fake them
//! (upstream calls `kubeClient.CoreV1().Pods(ns)` `Get`, `statusutil.PatchPodStatus` and
//! `Delete` from `pkg/kubelet/status/status_manager.go`).

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};

/// An error of the status syncer's API calls.
///
/// [`Error::Api`], [`Error::Timeout`] and [`Error::Conflict`] are retried with backoff;
/// [`Error::NotFound`] means the pod is gone and is not retried.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pod does not exist (HTTP 404).
    #[error("pod {namespace}/{name} not found")]
    NotFound {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
    },
    /// A precondition failed (HTTP 409): the pod was deleted and created again with another
    /// UID, or changed concurrently.
    #[error("conflict on pod {namespace}/{name}: {message}")]
    Conflict {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// The server's message.
        message: String,
    },
    /// Any other failure of the request (transport, 5xx, 429, 403...). Retryable.
    #[error("request for pod {namespace}/{name} failed")]
    Api {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// What the client said.
        #[source]
        source: kube::Error,
    },
    /// No answer within the request timeout (e.g. a server that accepts and never answers).
    /// Retryable.
    #[error("request for pod {namespace}/{name} got no answer within {after:?}")]
    Timeout {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// The timeout.
        after: Duration,
    },
    /// The status patch could not be encoded.
    #[error("encoding the status patch")]
    Encode(#[source] serde_json::Error),
}

impl Error {
    fn from_kube(namespace: &str, name: &str, e: kube::Error) -> Self {
        let (namespace, name) = (namespace.to_owned(), name.to_owned());
        match e {
            kube::Error::Api(status) if status.is_not_found() => Self::NotFound { namespace, name },
            kube::Error::Api(status) if status.is_conflict() => Self::Conflict {
                namespace,
                name,
                message: status.message.clone(),
            },
            source => Self::Api {
                namespace,
                name,
                source,
            },
        }
    }
}

/// The pod calls the status syncer makes. Implemented by [`KubePodStatusApi`]; tests fake it.
#[async_trait]
pub trait PodStatusApi: Send + Sync + 'static {
    /// `GET pods/<name>`; `Ok(None)` when it does not exist.
    async fn get_pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, Error>;

    /// `PATCH pods/<name>/status` with a strategic merge patch; returns the patched pod.
    async fn patch_pod_status(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Pod, Error>;

    /// `DELETE pods/<name>` with grace period 0 and a UID precondition (the final delete of
    /// a pod whose resources are reclaimed).
    async fn delete_pod(&self, namespace: &str, name: &str, uid: &str) -> Result<(), Error>;
}

/// How long one status call may take by default: the heartbeat client's timeout upstream
/// (`nodeStatusUpdateFrequency`, 10 s). The main client has none of its own for a request
/// (only a per-read timeout of minutes), so without this a server that accepts and never
/// answers would hold every status write back for minutes after it recovers.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// [`PodStatusApi`] over a [`kube::Client`], each call bounded by a timeout.
#[derive(Clone)]
pub struct KubePodStatusApi {
    client: kube::Client,
    timeout: Duration,
}

impl std::fmt::Debug for KubePodStatusApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubePodStatusApi").finish_non_exhaustive()
    }
}

impl KubePodStatusApi {
    /// Calls through `client`, each call bounded by [`DEFAULT_REQUEST_TIMEOUT`].
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// Sets how long one call may take before it fails with [`Error::Timeout`].
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs `call` for pod `namespace/name` within the timeout.
    async fn bounded<T>(
        &self,
        namespace: &str,
        name: &str,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result.map_err(|e| Error::from_kube(namespace, name, e)),
            Err(_) => Err(Error::Timeout {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                after: self.timeout,
            }),
        }
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }
}

#[async_trait]
impl PodStatusApi for KubePodStatusApi {
    async fn get_pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, Error> {
        self.bounded(namespace, name, self.pods(namespace).get_opt(name))
            .await
    }

    async fn patch_pod_status(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Pod, Error> {
        let (pods, params, patch) = (
            self.pods(namespace),
            PatchParams::default(),
            Patch::Strategic(patch),
        );
        self.bounded(namespace, name, pods.patch_status(name, &params, &patch))
            .await
    }

    async fn delete_pod(&self, namespace: &str, name: &str, uid: &str) -> Result<(), Error> {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let pods = self.pods(namespace);
        self.bounded(namespace, name, pods.delete(name, &params))
            .await
            .map(|_| ())
    }
}
