//! The `http` pod source: static pods from a URL, read every `httpCheckFrequency` (upstream
//! `pkg/kubelet/config/http.go` `sourceURL`, flags `--manifest-url`,
//! `--manifest-url-header`, `--http-check-frequency`).
//!
//! As upstream:
//! - A GET with the configured headers and a 10 s timeout, then again `check_frequency`
//!   (20 s) after each read ends.
//! - A status other than 200 is an error (logged, nothing sent). An empty body sends an
//!   empty [`Operation::Set`] (so the source counts as seen) and is logged as an error.
//! - A body equal to the last one sends nothing.
//! - The body is one pod, or else a `PodList`; each pod gets the static pod defaults (name
//!   suffixed with the node name, `spec.nodeName`, a UID hashed from the content and the
//!   URL) and the source annotation `http`. A body that is neither is an error naming the
//!   URL.
//! - Errors are logged at info the first three times in a row, then at debug.
//!
//! Deviation: the UID hash is the file source's over `file:<url>` (upstream hashes `url`);
//! the properties (stable across restarts, new on any change) are the same.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use http::{HeaderName, HeaderValue, Request};
use k8s_openapi::api::core::v1::Pod;
use kubelet_core::config::static_pod::{self, MAX_MANIFEST_BYTES};
use kubelet_core::config::{
    CONFIG_SOURCE_ANNOTATION, HTTP_SOURCE, Operation, PodSource, PodUpdate,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

/// Upstream's `httpCheckFrequency` default.
pub const DEFAULT_CHECK_FREQUENCY: Duration = Duration::from_secs(20);
/// Upstream's timeout of one read of the URL.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Errors in a row logged at info before the rest go to debug (upstream's `failureLogs`).
const LOUD_FAILURES: u32 = 3;

/// Why the URL gave no pods.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL is not an absolute http(s) URL.
    #[error("--manifest-url {url:?}: {reason}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// A header name or value is invalid.
    #[error("--manifest-url-header {0:?}: invalid header")]
    Header(String),
    /// The request failed.
    #[error("{url}: {source}")]
    Request {
        /// The URL.
        url: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The server answered something else than 200.
    #[error("{url}: {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: http::StatusCode,
    },
    /// The body was empty.
    #[error("zero-length data received from {0}")]
    Empty(String),
    /// The body is larger than a manifest may be.
    #[error("{0}: more than {MAX_MANIFEST_BYTES} bytes")]
    TooLarge(String),
    /// The body is neither a pod nor a pod list, or a pod in it is invalid.
    #[error("{url}: couldn't parse as single pod ({single}) or multiple pods ({list})")]
    Parse {
        /// The URL.
        url: String,
        /// Why it is not one pod.
        single: String,
        /// Why it is not a pod list.
        list: String,
    },
    /// It is a pod or a pod list, but a pod in it is invalid.
    #[error("{0}")]
    Invalid(#[source] static_pod::Error),
}

/// Static pods from a URL; a [`PodSource`] named `http`.
#[derive(Clone)]
pub struct HttpSource {
    url: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    node_name: String,
    check_frequency: Duration,
    client: kube::Client,
    path_and_query: String,
}

impl std::fmt::Debug for HttpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSource")
            .field("url", &self.url)
            .field("check_frequency", &self.check_frequency)
            .finish_non_exhaustive()
    }
}

impl HttpSource {
    /// A source reading `url` with `headers` (name, value; repeated names are all sent) for
    /// node `node_name`, every [`DEFAULT_CHECK_FREQUENCY`]. Needs a tokio runtime.
    pub fn new(
        url: &str,
        headers: &[(String, String)],
        node_name: impl Into<String>,
    ) -> Result<Self, Error> {
        let bad = |reason: &str| Error::Url {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
            return Err(bad("must be an absolute http:// or https:// URL"));
        }
        let origin = http::Uri::builder()
            .scheme(uri.scheme_str().unwrap_or("http"))
            .authority(uri.authority().map(|a| a.as_str()).unwrap_or_default())
            .path_and_query("/")
            .build()
            .map_err(|_| bad("not a URL"))?;
        let path_and_query = uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
        let mut config = kube::Config::new(origin);
        config.read_timeout = Some(READ_TIMEOUT);
        config.connect_timeout = Some(READ_TIMEOUT);
        config.default_retry = false;
        let client = kube::Client::try_from(config).map_err(|e| bad(&e.to_string()))?;
        let headers = headers
            .iter()
            .map(|(name, value)| {
                Ok((
                    HeaderName::try_from(name.as_str()).map_err(|_| Error::Header(name.clone()))?,
                    HeaderValue::try_from(value.as_str())
                        .map_err(|_| Error::Header(name.clone()))?,
                ))
            })
            .collect::<Result<_, Error>>()?;
        Ok(Self {
            url: url.to_owned(),
            headers,
            node_name: node_name.into(),
            check_frequency: DEFAULT_CHECK_FREQUENCY,
            client,
            path_and_query,
        })
    }

    /// Reads the URL every `every` instead.
    #[must_use]
    pub fn check_frequency(mut self, every: Duration) -> Self {
        self.check_frequency = every;
        self
    }

    /// One GET of the URL: the body, or why there is none.
    async fn fetch(&self) -> Result<Vec<u8>, Error> {
        let mut request = Request::get(self.path_and_query.as_str());
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let request = request
            .body(kube::client::Body::empty())
            .map_err(|e| Error::Url {
                url: self.url.clone(),
                reason: e.to_string(),
            })?;
        let request_error = |source| Error::Request {
            url: self.url.clone(),
            source,
        };
        let response = self.client.send(request).await.map_err(request_error)?;
        let status = response.status();
        let body = response
            .into_body()
            .collect_bytes()
            .await
            .map_err(request_error)?;
        if status != http::StatusCode::OK {
            return Err(Error::Status {
                url: self.url.clone(),
                status,
            });
        }
        if body.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(Error::TooLarge(self.url.clone()));
        }
        Ok(body.to_vec())
    }
}

/// The pods of a body: one pod, or a `PodList` (upstream `tryDecodeSinglePod`, then
/// `tryDecodePodList`).
pub fn decode(data: &[u8], url: &str, node_name: &str) -> Result<Vec<Pod>, Error> {
    let path = Path::new(url);
    let single = match static_pod::decode(data, path, node_name) {
        Ok(pod) => return Ok(vec![mark_http(pod)]),
        Err(e @ (static_pod::Error::Invalid { .. } | static_pod::Error::ApiReference { .. })) => {
            return Err(Error::Invalid(e));
        }
        Err(e) => e.to_string(),
    };
    let list: Value = match serde_saphyr::from_slice(data) {
        Ok(v) => v,
        Err(e) => {
            return Err(Error::Parse {
                url: url.to_owned(),
                single,
                list: e.to_string(),
            });
        }
    };
    if list.get("kind").and_then(Value::as_str) != Some("PodList") {
        return Err(Error::Parse {
            url: url.to_owned(),
            single,
            list: "not a PodList".into(),
        });
    }
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    items
        .into_iter()
        .map(|mut item| {
            item["apiVersion"] = Value::from("v1");
            item["kind"] = Value::from("Pod");
            let bytes = serde_json::to_vec(&item).unwrap_or_default();
            static_pod::decode(&bytes, path, node_name)
                .map(mark_http)
                .map_err(Error::Invalid)
        })
        .collect()
}

fn mark_http(mut pod: Pod) -> Pod {
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(CONFIG_SOURCE_ANNOTATION.to_owned(), HTTP_SOURCE.to_owned());
    pod
}

#[async_trait]
impl PodSource for HttpSource {
    fn name(&self) -> &str {
        HTTP_SOURCE
    }

    async fn run(self: Box<Self>, updates: mpsc::Sender<PodUpdate>, token: CancellationToken) {
        info!(url = %self.url, "watching URL");
        let mut last: Option<Vec<u8>> = None;
        let mut failures = 0u32;
        loop {
            let result = tokio::select! {
                biased;
                () = token.cancelled() => return,
                r = self.fetch() => r,
            };
            let outcome = match result {
                Ok(data) if data.is_empty() => {
                    let empty = PodUpdate {
                        pods: Vec::new(),
                        op: Operation::Set,
                        source: HTTP_SOURCE.to_owned(),
                    };
                    if updates.send(empty).await.is_err() {
                        return;
                    }
                    Err(Error::Empty(self.url.clone()))
                }
                Ok(data) if last.as_ref() == Some(&data) => Ok(()),
                Ok(data) => {
                    let decoded = decode(&data, &self.url, &self.node_name);
                    last = Some(data);
                    match decoded {
                        Ok(pods) => {
                            let update = PodUpdate {
                                pods,
                                op: Operation::Set,
                                source: HTTP_SOURCE.to_owned(),
                            };
                            if updates.send(update).await.is_err() {
                                return;
                            }
                            Ok(())
                        }
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            };
            match outcome {
                Err(e) => {
                    failures += 1;
                    if failures <= LOUD_FAILURES {
                        info!(error = %e, "failed to read pods from URL");
                    } else {
                        debug!(error = %e, "failed to read pods from URL");
                    }
                }
                Ok(()) if failures > 0 => {
                    info!(url = %self.url, "successfully read pods from URL");
                    failures = 0;
                }
                Ok(()) => {}
            }
            tokio::select! {
                biased;
                () = token.cancelled() => return,
                () = tokio::time::sleep(self.check_frequency) => {}
            }
        }
    }
}

#[cfg(test)]
#[path = "http_source_tests.rs"]
mod tests;
