//! `rest_client_requests_total{code, method, host}` of the kubelet's API clients (client-go
//! `tools/metrics` `RequestResult`, recorded by `rest.Request` after each response): a tower
//! layer on each client's service, counting each request once its answer (or failure)
//! arrives; `code` is the HTTP status code, or `<error>` when there was none.
//!
//! A request that got no answer at all (refused, reset, timed out) is also logged here, the one
//! place that still knows which request it was: its verb, path and server with the whole chain
//! of causes (`POST 10.0.0.1:6443/api/v1/nodes: client error (SendRequest): connection
//! closed before message completed`), where kube's own line would say only `client error
//! (SendRequest)`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use kubelet_core::metrics::{KubeletMetrics, RestClientLabels};
use tower::{Layer, Service};

/// The [`Layer`] of [`RequestMetrics`].
#[derive(Clone, Debug)]
pub struct RequestMetricsLayer {
    metrics: KubeletMetrics,
    host: String,
}

impl RequestMetricsLayer {
    /// Counts the requests to `host` (the API server's `host:port`) in `metrics`.
    pub fn new(metrics: KubeletMetrics, host: impl Into<String>) -> Self {
        Self {
            metrics,
            host: host.into(),
        }
    }
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestMetrics {
            inner,
            layer: self.clone(),
        }
    }
}

/// A service counting its requests in `rest_client_requests_total`.
#[derive(Clone, Debug)]
pub struct RequestMetrics<S> {
    inner: S,
    layer: RequestMetricsLayer,
}

impl<S, B, R> Service<http::Request<B>> for RequestMetrics<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: AsRef<dyn std::error::Error + Send + Sync + 'static>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = request.method().as_str().to_owned();
        let host = request
            .uri()
            .authority()
            .map_or_else(|| self.layer.host.clone(), ToString::to_string);
        let target = format!(
            "{host}{}",
            request.uri().path_and_query().map_or("", |p| p.as_str())
        );
        let metrics = self.layer.metrics.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            let code = match &result {
                Ok(response) => response.status().as_str().to_owned(),
                Err(e) => {
                    tracing::warn!(
                        "{method} {target}: {}",
                        kubelet_core::error::chain(e.as_ref())
                    );
                    "<error>".to_owned()
                }
            };
            metrics.record_rest_client_request(&RestClientLabels { code, method, host });
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    fn labels(code: &str, method: &str) -> RestClientLabels {
        RestClientLabels {
            code: code.into(),
            method: method.into(),
            host: "10.0.0.1:6443".into(),
        }
    }

    #[tokio::test]
    async fn counts_answers_by_code_and_failures_as_errors() {
        let metrics = KubeletMetrics::default();
        let service = RequestMetricsLayer::new(metrics.clone(), "10.0.0.1:6443").layer(
            tower::service_fn(|request: http::Request<()>| async move {
                match request.uri().path() {
                    "/fail" => Err::<_, tower::BoxError>("connection refused".into()),
                    "/missing" => Ok(http::Response::builder()
                        .status(404)
                        .body(())
                        .expect("response")),
                    _ => Ok(http::Response::new(())),
                }
            }),
        );
        for (method, path) in [
            ("GET", "/api"),
            ("GET", "/api"),
            ("PATCH", "/missing"),
            ("GET", "/fail"),
        ] {
            let request = http::Request::builder()
                .method(method)
                .uri(path)
                .body(())
                .expect("request");
            let _ = service.clone().oneshot(request).await;
        }
        let count =
            |l: &RestClientLabels| metrics.rest_client_requests.get(l).map_or(0, |c| c.get());
        assert_eq!(count(&labels("200", "GET")), 2);
        assert_eq!(count(&labels("404", "PATCH")), 1);
        assert_eq!(count(&labels("<error>", "GET")), 1);
    }
}
