//! HTTP GET probes (upstream `pkg/probe/http`): HTTP or HTTPS (certificates are not checked, as
//! upstream's `InsecureSkipVerify`); status 200–399 is success; the body is read up to 10 KiB;
//! redirects are followed only to the same host (at most 10), a redirect elsewhere is itself the
//! answer.
//!
//! [`get`] is the client underneath, shared with lifecycle hooks as upstream shares
//! `httpprobe` (`pkg/kubelet/lifecycle/handlers.go`): same TLS, redirect and body rules, with
//! the caller's `User-Agent`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::net::TcpStream;

use crate::prober::Outcome;

/// How much of the response body is read (upstream `maxRespBodyLength`, 10 KiB).
pub const MAX_BODY: usize = 10 * 1024;
/// Redirects followed before giving up (Go's `http.Client` default).
pub const MAX_REDIRECTS: usize = 10;
/// The `User-Agent` probes send (upstream `kube-probe/<major>.<minor>`).
pub const USER_AGENT: &str = concat!(
    "kube-probe/",
    kubelet_core::kubernetes_version!(major_minor)
);

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
    match tokio::time::timeout(timeout, follow(target.clone())).await {
        Ok(o) => o,
        Err(_) => Outcome::failure(format!(
            "Get \"{}\": context deadline exceeded",
            url(target)
        )),
    }
}

fn url(target: &Target) -> String {
    format!(
        "{}://{}{}",
        if target.https { "https" } else { "http" },
        join_host_port(&target.host, target.port),
        target.path
    )
}

async fn follow(target: Target) -> Outcome {
    match get(target, USER_AGENT).await {
        Ok(Answer::Response(status, body)) if (200..400).contains(&status.as_u16()) => {
            Outcome::success(body)
        }
        Ok(Answer::Response(status, _)) => Outcome::failure(format!(
            "HTTP probe failed with statuscode: {}",
            status.as_u16()
        )),
        Ok(Answer::OtherHostRedirect(body)) => {
            Outcome::success(format!("Probe terminated redirects, Response body: {body}"))
        }
        Err(e) => Outcome::failure(e.to_string()),
    }
}

/// What a GET came back with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The last response after same-host redirects: its status and up to [`MAX_BODY`] of body.
    Response(StatusCode, String),
    /// A redirect to another host, which is not followed (upstream
    /// `followNonLocalRedirects=false`): the redirect's body.
    OtherHostRedirect(String),
}

/// Why a GET got no answer, with Go's message (`Get "<url>": <cause>`).
#[derive(Debug, thiserror::Error)]
#[error("Get \"{url}\": {cause}")]
pub struct GetError {
    /// The URL of the request that failed (after same-host redirects).
    pub url: String,
    /// What went wrong.
    #[source]
    pub cause: RequestError,
    /// `true` when an HTTPS request reached a server that answered in plain HTTP (Go's
    /// "server gave HTTP response to HTTPS client"); lifecycle hooks retry those over HTTP.
    pub http_answer_to_https: bool,
}

/// Why one HTTP request got no response: the cause of a [`GetError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The TCP connection failed.
    #[error("dial tcp: {0}")]
    Connect(#[source] std::io::Error),
    /// The host is not a valid TLS server name.
    #[error("invalid TLS server name {host:?}: {source}")]
    ServerName {
        /// The host.
        host: String,
        /// Why it is not a server name.
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    /// The TLS client could not be built (not expected with the ring provider).
    #[error("building the TLS client: {0}")]
    TlsClient(#[source] rustls::Error),
    /// The TLS handshake failed.
    #[error("tls: {0}")]
    Tls(#[source] std::io::Error),
    /// The request could not be built from the target's path and headers.
    #[error("bad request: {0}")]
    Request(#[source] hyper::http::Error),
    /// The HTTP exchange failed.
    #[error("{0}")]
    Http(#[source] hyper::Error),
    /// The response body broke off.
    #[error("reading the body: {0}")]
    Body(#[source] hyper::Error),
    /// More than [`MAX_REDIRECTS`] same-host redirects.
    #[error("stopped after {MAX_REDIRECTS} redirects")]
    TooManyRedirects,
}

/// Sends a GET to `target` as `user_agent` (unless its headers set one), following redirects
/// to the same host, at most [`MAX_REDIRECTS`]. No timeout of its own: the caller bounds it.
pub async fn get(mut target: Target, user_agent: &str) -> Result<Answer, GetError> {
    for _ in 0..=MAX_REDIRECTS {
        let (status, location, body) = match exchange_once(&target, user_agent).await {
            Ok(r) => r,
            Err(cause) => {
                return Err(GetError {
                    url: url(&target),
                    http_answer_to_https: matches!(&cause, RequestError::Tls(e) if is_plain_http_answer(e)),
                    cause,
                });
            }
        };
        if status.is_redirection()
            && let Some(loc) = location
        {
            match redirect(&target, &loc) {
                Some(next) if next.host == target.host => {
                    target = next;
                    continue;
                }
                _ => return Ok(Answer::OtherHostRedirect(body)),
            }
        }
        return Ok(Answer::Response(status, body));
    }
    Err(GetError {
        url: url(&target),
        cause: RequestError::TooManyRedirects,
        http_answer_to_https: false,
    })
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

/// A TLS client that accepts any server certificate, as upstream's probes do
/// (`InsecureSkipVerify`); rustls' error if it cannot build one (not expected with the ring
/// provider, but then every HTTPS request fails with it rather than the process).
fn tls() -> Result<&'static tokio_rustls::TlsConnector, RequestError> {
    static TLS: OnceLock<Result<tokio_rustls::TlsConnector, rustls::Error>> = OnceLock::new();
    TLS.get_or_init(|| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map(|b| {
                let config = b
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
                    .with_no_client_auth();
                tokio_rustls::TlsConnector::from(Arc::new(config))
            })
    })
    .as_ref()
    .map_err(|e| RequestError::TlsClient(e.clone()))
}

#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A response: status, `Location` and up to [`MAX_BODY`] of body.
type Response = (StatusCode, Option<String>, String);

/// One request on a new connection.
async fn exchange_once(target: &Target, user_agent: &str) -> Result<Response, RequestError> {
    let stream = TcpStream::connect(join_host_port(&target.host, target.port))
        .await
        .map_err(RequestError::Connect)?;
    if target.https {
        let name = ServerName::try_from(target.host.clone()).map_err(|source| {
            RequestError::ServerName {
                host: target.host.clone(),
                source,
            }
        })?;
        let tls = tls()?
            .connect(name, stream)
            .await
            .map_err(RequestError::Tls)?;
        exchange(tls, target, user_agent).await
    } else {
        exchange(stream, target, user_agent).await
    }
}

/// `true` when the TLS handshake failed because the server's first bytes were not a TLS
/// record (a plain HTTP server answers `HTTP/1.1 400 …` to a ClientHello).
fn is_plain_http_answer(e: &std::io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|e| {
            matches!(
                e,
                rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)
            )
        })
}

async fn exchange<S>(io: S, target: &Target, user_agent: &str) -> Result<Response, RequestError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(RequestError::Http)?;
    let conn = tokio::spawn(conn);
    let mut req = Request::get(target.path.as_str());
    let mut host = join_host_port(&target.host, target.port);
    let mut user_agent = Some(user_agent.to_owned());
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
        .map_err(RequestError::Request)?;
    let resp = sender.send_request(req).await.map_err(RequestError::Http)?;
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
            Some(Err(e)) => return Err(RequestError::Body(e)),
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

    /// A self-signed certificate and PKCS#8 key (DER) made with the openssl CLI.
    fn self_signed() -> (Vec<u8>, Vec<u8>) {
        let dir = std::env::temp_dir().join(format!("probe-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let run = |args: &[&str]| {
            let st = std::process::Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .stderr(std::process::Stdio::null())
                .status()
                .expect("openssl");
            assert!(st.success(), "openssl {args:?}");
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "key.pem",
            "-out",
            "cert.der",
            "-outform",
            "DER",
            "-subj",
            "/CN=probe",
            "-days",
            "1",
        ]);
        run(&[
            "pkcs8", "-topk8", "-nocrypt", "-in", "key.pem", "-outform", "DER", "-out", "key.der",
        ]);
        let out = (
            std::fs::read(dir.join("cert.der")).expect("cert"),
            std::fs::read(dir.join("key.der")).expect("key"),
        );
        let _ = std::fs::remove_dir_all(&dir);
        out
    }

    #[tokio::test]
    async fn https_skips_certificate_checks() {
        use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
        let (cert, key) = self_signed();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert)],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
            )
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = l.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut s) = acceptor.accept(s).await else {
                        return;
                    };
                    let mut buf = vec![0u8; 4096];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let req = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let path = req.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let _ = s.write_all(respond(&path).as_bytes()).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        let t = Duration::from_secs(2);
        let https = |path: &str| Target {
            https: true,
            ..target(port, path)
        };
        let o = probe(&https("/ok"), t).await;
        assert!(o.success && o.output == "fine", "{o:?}");
        assert!(!probe(&https("/missing"), t).await.success);
        // Plain HTTP against the TLS port fails.
        assert!(!probe(&target(port, "/ok"), t).await.success);
    }

    #[tokio::test]
    async fn https_to_a_plain_http_server_is_told_apart() {
        let (port, _reqs) = server(respond).await;
        let https = Target {
            https: true,
            ..target(port, "/ok")
        };
        let e = get(https, crate::lifecycle::USER_AGENT)
            .await
            .expect_err("no TLS here");
        assert!(e.http_answer_to_https, "{e:?}");
        assert!(e.to_string().starts_with("Get \"https://127.0.0.1:"), "{e}");
        // A refused connection is another failure.
        drop(_reqs);
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let closed = l.local_addr().expect("addr").port();
        drop(l);
        let e = get(
            Target {
                https: true,
                ..target(closed, "/ok")
            },
            USER_AGENT,
        )
        .await
        .expect_err("refused");
        assert!(!e.http_answer_to_https, "{e:?}");
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
