//! Lifecycle hook handlers: exec (CRI `ExecSync`), httpGet (to the pod IP by default) and
//! sleep, with upstream's failure messages.
//!
//! Mirrors upstream `pkg/kubelet/lifecycle/handlers.go` (`handlerRunner.Run`,
//! `runHTTPHandler`, `runSleepHandler`). As upstream, an httpGet hook fails only when the
//! request cannot be made; any HTTP status counts as success. The request goes through the
//! probes' HTTP client ([`kubelet_probe::http::get`], as upstream uses `httpprobe`): HTTPS
//! without certificate checks, redirects followed on the same host only, and an HTTPS hook
//! whose server answers in plain HTTP is retried over HTTP without its `Authorization`
//! header.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, LifecycleHandler, Pod};
use kubelet_core::container::resolve_port;
use kubelet_core::pod::PodExt;
use kubelet_probe::http::{self, Target};
use tracing::warn;

use crate::runtime::RemoteRuntime;

/// The `User-Agent` of httpGet hooks (upstream `kube-lifecycle/<major>.<minor>`).
pub const USER_AGENT: &str = "kube-lifecycle/1.34";

/// Upstream `ErrPostStartHook`: the waiting reason of a container whose postStart hook failed.
pub const POST_START_HOOK_ERROR: &str = "PostStartHookError";

/// The kill reason of a container whose postStart hook failed (upstream's event reason).
pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";

/// `"<name>_<namespace>(<uid>)"`, upstream `format.Pod`.
fn format_pod(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.name_or_empty(),
        pod.namespace_or_default(),
        pod.uid()
    )
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

impl RemoteRuntime {
    /// Runs one lifecycle handler against the container `container_id` (upstream
    /// `handlerRunner.Run`). `Err` carries upstream's message for events and statuses.
    ///
    /// Cancel safe: dropping the future abandons the hook (an exec is cancelled with its
    /// CRI call).
    pub(crate) async fn run_lifecycle_handler(
        &self,
        pod: &Pod,
        container: &Container,
        container_id: &str,
        handler: &LifecycleHandler,
    ) -> Result<(), String> {
        if let Some(exec) = &handler.exec {
            let cmd = exec.command.clone().unwrap_or_default();
            let err = match self
                .client
                .exec_sync(container_id, &cmd, Duration::ZERO)
                .await
            {
                Ok(Some(r)) if r.exit_code == 0 => return Ok(()),
                Ok(Some(r)) => {
                    let mut output = r.stdout;
                    output.extend_from_slice(&r.stderr);
                    let output = String::from_utf8_lossy(&output).into_owned();
                    (
                        format!(
                            "command '{}' exited with {}: {}",
                            cmd.join(" "),
                            r.exit_code,
                            String::from_utf8_lossy(&r.stderr)
                        ),
                        output,
                    )
                }
                Ok(None) => (
                    format!("command '{}' timed out", cmd.join(" ")),
                    String::new(),
                ),
                Err(e) => (e.to_string(), String::new()),
            };
            // Go's `%v` of a string slice: `[sh -c exit 1]`.
            return Err(format!(
                "Exec lifecycle hook ([{}]) for Container {:?} in Pod {:?} failed - error: {}, message: {:?}",
                cmd.join(" "),
                container.name,
                format_pod(pod),
                err.0,
                err.1
            ));
        }
        if let Some(get) = &handler.http_get {
            let result = async {
                let port = resolve_port(&get.port, container).map_err(|e| e.to_string())?;
                let host = match get.host.as_deref().filter(|h| !h.is_empty()) {
                    Some(h) => h.to_owned(),
                    None => {
                        let status = self
                            .pod_status(&pod.uid(), pod.name_or_empty(), pod.namespace_or_default())
                            .await
                            .map_err(|e| e.to_string())?;
                        status
                            .ips
                            .first()
                            .cloned()
                            .ok_or_else(|| "failed to find networking container".to_owned())?
                    }
                };
                http_get(get, &host, port).await
            }
            .await;
            return result.map_err(|e| {
                format!(
                    "HTTP lifecycle hook ({}) for Container {:?} in Pod {:?} failed - error: {e}",
                    get.path.as_deref().unwrap_or_default(),
                    container.name,
                    format_pod(pod)
                )
            });
        }
        if let Some(sleep) = &handler.sleep {
            tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0).unsigned_abs())).await;
            return Ok(());
        }
        Err("Cannot run handler: invalid handler: no exec, httpGet or sleep action".into())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPHeader};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
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
