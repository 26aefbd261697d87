//! HTTP GET probes (upstream `pkg/probe/http`): status 200–399 is success; the body is read up to
//! 10 KiB; redirects are followed only to the same host (at most 10), a redirect elsewhere is
//! itself the answer.

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::prober::Outcome;

/// How much of the response body is read (upstream `maxRespBodyLength`, 10 KiB).
pub const MAX_BODY: usize = 10 * 1024;
/// Redirects followed before giving up (Go's `http.Client` default).
pub const MAX_REDIRECTS: usize = 10;
/// The `User-Agent` probes send (upstream `kube-probe/<major>.<minor>`).
pub const USER_AGENT: &str = "kube-probe/1.34";

/// One HTTP GET probe target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `true` for HTTPS.
    pub https: bool,
    /// Host name or IP.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
    /// Extra headers, in order; a `Host` header sets the request's host.
    pub headers: Vec<(String, String)>,
}

/// `host:port`, with brackets around IPv6 literals.
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Runs the probe with `timeout` for the whole exchange (redirects included).
pub async fn probe(target: &Target, timeout: Duration) -> Outcome {
    if target.https {
        return Outcome::failure("HTTPS probes are not supported by this kubelet".into());
    }
    match tokio::time::timeout(timeout, follow(target.clone())).await {
        Ok(o) => o,
        Err(_) => Outcome::failure(format!(
            "Get \"http://{}{}\": context deadline exceeded",
            join_host_port(&target.host, target.port),
            target.path
        )),
    }
}

async fn follow(mut target: Target) -> Outcome {
    for _ in 0..=MAX_REDIRECTS {
        let url = format!(
            "http://{}{}",
            join_host_port(&target.host, target.port),
            target.path
        );
        let (status, location, body) = match get(&target).await {
            Ok(r) => r,
            Err(e) => return Outcome::failure(format!("Get \"{url}\": {e}")),
        };
        if status.is_redirection()
            && let Some(loc) = location
        {
            match redirect(&target, &loc) {
                Some(next) if next.host == target.host => {
                    target = next;
                    continue;
                }
                // A redirect to another host: the 3xx is the answer (upstream
                // `followNonLocalRedirects=false`).
                _ => {
                    return Outcome::success(format!(
                        "Probe terminated redirects, Response body: {body}"
                    ));
                }
            }
        }
        return if (200..400).contains(&status.as_u16()) {
            Outcome::success(body)
        } else {
            Outcome::failure(format!(
                "HTTP probe failed with statuscode: {}",
                status.as_u16()
            ))
        };
    }
    Outcome::failure(format!("stopped after {MAX_REDIRECTS} redirects"))
}

fn redirect(from: &Target, location: &str) -> Option<Target> {
    let uri: Uri = location.parse().ok()?;
    let mut next = from.clone();
    if let Some(auth) = uri.authority() {
        if uri.scheme_str() == Some("https") {
            next.https = true;
        }
        next.host = auth.host().trim_matches(['[', ']']).to_owned();
        next.port = auth.port_u16().unwrap_or(if next.https { 443 } else { 80 });
    }
    next.path = match uri.path_and_query() {
        Some(pq) if pq.as_str().starts_with('/') => pq.as_str().to_owned(),
        Some(pq) => format!("/{}", pq.as_str()),
        None => "/".into(),
    };
    Some(next)
}

async fn get(target: &Target) -> Result<(StatusCode, Option<String>, String), String> {
    let stream = TcpStream::connect(join_host_port(&target.host, target.port))
        .await
        .map_err(|e| format!("dial tcp: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    let conn = tokio::spawn(conn);
    let mut req = Request::get(target.path.as_str());
    let mut host = join_host_port(&target.host, target.port);
    let mut user_agent = Some(USER_AGENT.to_owned());
    let mut accept = Some("*/*".to_owned());
    for (k, v) in &target.headers {
        if k.eq_ignore_ascii_case("host") {
            host = v.clone();
        } else if k.eq_ignore_ascii_case("user-agent") {
            user_agent = None;
            req = req.header(k.as_str(), v.as_str());
        } else if k.eq_ignore_ascii_case("accept") {
            accept = None;
            req = req.header(k.as_str(), v.as_str());
        } else {
            req = req.header(k.as_str(), v.as_str());
        }
    }
    req = req.header("host", host);
    if let Some(ua) = user_agent {
        req = req.header("user-agent", ua);
    }
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("bad request: {e}"))?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let location = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    while buf.len() < MAX_BODY {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let take = data.len().min(MAX_BODY - buf.len());
                    buf.extend_from_slice(&data[..take]);
                }
            }
            Some(Err(e)) => return Err(format!("reading the body: {e}")),
            None => break,
        }
    }
    // Dropping the connection closes it; the rest of a long body is never read.
    conn.abort();
    Ok((status, location, String::from_utf8_lossy(&buf).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A one-shot-per-connection server answering each request with `respond(path)`.
    async fn server(
        respond: fn(&str) -> String,
    ) -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = l.local_addr().expect("addr").port();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let req = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let path = req.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let _ = tx.send(req);
                    let _ = s.write_all(respond(&path).as_bytes()).await;
                });
            }
        });
        (port, rx)
    }

    fn target(port: u16, path: &str) -> Target {
        Target {
            https: false,
            host: "127.0.0.1".into(),
            port,
            path: path.into(),
            headers: vec![("X-Probe".into(), "yes".into())],
        }
    }

    fn respond(path: &str) -> String {
        let (code, extra, body) = match path {
            "/ok" => ("200 OK", String::new(), "fine".to_owned()),
            "/big" => ("200 OK", String::new(), "x".repeat(100_000)),
            "/missing" => ("404 Not Found", String::new(), String::new()),
            "/local" => ("302 Found", "Location: /ok\r\n".to_owned(), String::new()),
            "/away" => (
                "302 Found",
                "Location: http://192.0.2.1:1/ok\r\n".to_owned(),
                String::new(),
            ),
            "/loop" => ("302 Found", "Location: /loop\r\n".to_owned(), String::new()),
            _ => ("500 Internal Server Error", String::new(), String::new()),
        };
        format!(
            "HTTP/1.1 {code}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    #[tokio::test]
    async fn status_codes_headers_redirects_and_bounded_body() {
        let (port, mut reqs) = server(respond).await;
        let t = Duration::from_secs(2);
        let o = probe(&target(port, "/ok"), t).await;
        assert!(o.success && o.output == "fine", "{o:?}");
        let req = reqs.recv().await.expect("request");
        assert!(req.contains("x-probe: yes"), "{req}");
        assert!(req.contains(&format!("user-agent: {USER_AGENT}")), "{req}");
        assert!(!probe(&target(port, "/missing"), t).await.success);
        assert!(!probe(&target(port, "/error"), t).await.success);
        let o = probe(&target(port, "/big"), t).await;
        assert!(
            o.success && o.output.len() == MAX_BODY,
            "{}",
            o.output.len()
        );
        let o = probe(&target(port, "/local"), t).await;
        assert!(o.success && o.output == "fine", "{o:?}");
        // Not followed: the 302 itself is the (successful) answer.
        let o = probe(&target(port, "/away"), t).await;
        assert!(
            o.success && o.output.starts_with("Probe terminated redirects"),
            "{o:?}"
        );
        let o = probe(&target(port, "/loop"), t).await;
        assert!(!o.success && o.output.contains("redirects"), "{o:?}");
    }

    #[tokio::test]
    async fn refused_and_timeout_fail() {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = l.local_addr().expect("addr").port();
        // Accepts (via the backlog) but never answers.
        let o = probe(&target(port, "/"), Duration::from_millis(200)).await;
        assert!(!o.success && o.output.contains("deadline"), "{o:?}");
        drop(l);
        assert!(
            !probe(&target(port, "/"), Duration::from_secs(1))
                .await
                .success
        );
    }
}
