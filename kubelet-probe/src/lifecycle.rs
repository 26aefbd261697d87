//! The lifecycle hook runner of a kubelet: exec and sleep handlers as the pod engine's
//! default runs them, plus httpGet handlers through the probes' HTTP client.
//!
//! Mirrors upstream `pkg/kubelet/lifecycle/handlers.go` (`handlerRunner.Run`,
//! `runHTTPHandler`). As upstream, an httpGet hook fails only when the request cannot be
//! made; any HTTP status counts as success. The request goes through [`crate::http::get`]
//! (as upstream uses `httpprobe`): HTTPS without certificate checks, redirects followed on the
//! same host only, and an HTTPS hook whose server answers in plain HTTP is retried over HTTP
//! without its `Authorization` header. The host defaults to the pod IP.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{HTTPGetAction, LifecycleHandler};
use kubelet_core::container::resolve_port;
use kubelet_core::lifecycle::{
    CommandRunner, HandlerRunner, HookError, HookTarget, format_pod, run_exec_or_sleep,
};
use tracing::warn;

use crate::http::{self, Target};

/// The `User-Agent` of httpGet hooks (upstream `kube-lifecycle/<major>.<minor>`).
pub const USER_AGENT: &str = concat!(
    "kube-lifecycle/",
    kubelet_core::kubernetes_version!(major_minor)
);

/// A [`HandlerRunner`] for every handler kind: exec and sleep as
/// [`kubelet_core::lifecycle::ExecSleepHandlerRunner`], httpGet with the probes' HTTP client.
/// Give it to the engine with `KubeRuntimeManager::with_handler_runner`.
#[derive(Clone, Copy, Debug, Default)]
pub struct LifecycleHandlerRunner;

#[async_trait]
impl HandlerRunner for LifecycleHandlerRunner {
    async fn run(
        &self,
        runtime: &dyn CommandRunner,
        target: HookTarget<'_>,
        handler: &LifecycleHandler,
    ) -> Result<(), HookError> {
        if let Some(result) = run_exec_or_sleep(runtime, target, handler).await {
            return result;
        }
        let Some(get) = &handler.http_get else {
            return Err(HookError::InvalidHandler);
        };
        run_http(runtime, target, get)
            .await
            .map_err(|error| HookError::Http {
                path: get.path.clone().unwrap_or_default(),
                container: target.container.name.clone(),
                pod: format_pod(target.pod),
                error,
            })
    }
}

/// Resolves the port and host (the pod IP by default) and makes the request.
async fn run_http(
    runtime: &dyn CommandRunner,
    target: HookTarget<'_>,
    get: &HTTPGetAction,
) -> Result<(), String> {
    let port = resolve_port(&get.port, target.container).map_err(|e| e.to_string())?;
    let host = match get.host.as_deref().filter(|h| !h.is_empty()) {
        Some(h) => h.to_owned(),
        None => runtime
            .pod_ips(target.pod)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .next()
            .ok_or_else(|| "failed to find networking container".to_owned())?,
    };
    http_get(get, &host, port).await
}

/// One GET request; any answer is success (upstream ignores the status code of hooks).
async fn http_get(get: &HTTPGetAction, host: &str, port: u16) -> Result<(), String> {
    let mut path = get.path.clone().unwrap_or_default();
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    let target = Target {
        https: get
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("https")),
        host: host.to_owned(),
        port,
        path,
        headers: get
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
    };
    let err = match http::get(target.clone(), USER_AGENT).await {
        Ok(_) => return Ok(()),
        Err(e) if e.http_answer_to_https => e,
        Err(e) => return Err(e.to_string()),
    };
    warn!(host, port, error = %err, "HTTPS request to lifecycle hook got HTTP response, retrying with HTTP");
    let plain = Target {
        https: false,
        headers: target
            .headers
            .into_iter()
            .filter(|(name, _)| !name.eq_ignore_ascii_case("authorization"))
            .collect(),
        ..target
    };
    // As upstream: when the retry fails too, the hook fails with the HTTPS error.
    http::get(plain, USER_AGENT)
        .await
        .map(drop)
        .map_err(|_| err.to_string())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, ContainerPort, HTTPHeader};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use kubelet_core::container::resolve_port;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    #[test]
    fn named_and_numeric_ports() {
        let c = Container {
            name: "web".into(),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(resolve_port(&IntOrString::Int(80), &c), Ok(80));
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &c),
            Ok(8080)
        );
        assert_eq!(resolve_port(&IntOrString::String("81".into()), &c), Ok(81));
        assert!(resolve_port(&IntOrString::Int(0), &c).is_err());
        let err = resolve_port(&IntOrString::String("nope".into()), &c).expect_err("unknown");
        assert!(err.to_string().contains("couldn't find port"), "{err}");
    }

    #[tokio::test]
    async fn http_hook_sends_get_with_headers_and_ignores_the_status() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.expect("read");
            s.write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n")
                .await
                .expect("write");
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        let get = HTTPGetAction {
            path: Some("/hook".into()),
            port: IntOrString::Int(i32::from(port)),
            http_headers: Some(vec![HTTPHeader {
                name: "X-Test".into(),
                value: "yes".into(),
            }]),
            ..Default::default()
        };
        http_get(&get, "127.0.0.1", port)
            .await
            .expect("any status is success");
        let request = server.await.expect("server");
        assert!(request.starts_with("GET /hook HTTP/1.1\r\n"), "{request}");
        assert!(request.to_lowercase().contains("x-test: yes"), "{request}");
        assert!(request.contains(USER_AGENT), "{request}");
    }

    #[tokio::test]
    async fn https_hook_answered_in_plain_http_is_retried_over_http_without_authorization() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        // Answers every connection in plain HTTP and hands over what it read.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let _ = tx.send(buf[..n].to_vec());
                let _ = s
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        });
        let get = HTTPGetAction {
            scheme: Some("HTTPS".into()),
            path: Some("/hook".into()),
            port: IntOrString::Int(i32::from(port)),
            http_headers: Some(vec![
                HTTPHeader {
                    name: "Authorization".into(),
                    value: "Bearer secret".into(),
                },
                HTTPHeader {
                    name: "X-Test".into(),
                    value: "yes".into(),
                },
            ]),
            ..Default::default()
        };
        http_get(&get, "127.0.0.1", port)
            .await
            .expect("the HTTP retry got an answer");
        let hello = rx.recv().await.expect("first connection");
        assert_eq!(hello.first(), Some(&0x16), "a TLS handshake record first");
        let retry = String::from_utf8(rx.recv().await.expect("second connection")).expect("text");
        assert!(retry.starts_with("GET /hook HTTP/1.1\r\n"), "{retry}");
        assert!(retry.to_lowercase().contains("x-test: yes"), "{retry}");
        assert!(!retry.to_lowercase().contains("authorization"), "{retry}");
        assert!(retry.contains(USER_AGENT), "{retry}");
    }

    #[tokio::test]
    async fn http_hook_fails_when_nothing_listens() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        let get = HTTPGetAction {
            port: IntOrString::Int(i32::from(port)),
            ..Default::default()
        };
        let err = http_get(&get, "127.0.0.1", port)
            .await
            .expect_err("refused");
        assert!(err.contains("dial tcp"), "{err}");
    }
}
