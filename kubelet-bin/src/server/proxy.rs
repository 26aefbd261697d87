//! The upgrade-aware proxy of the streaming endpoints (upstream
//! `k8s.io/apimachinery/pkg/util/proxy/upgradeaware.go` `UpgradeAwareHandler` with
//! `UpgradeRequired`, as `pkg/kubelet/server/server.go` uses it for `/exec`, `/attach` and
//! `/portForward`).
//!
//! The client's upgrade request (SPDY/3.1, or a websocket with whatever subprotocols it
//! offers) is sent on to the URL the runtime gave, with the client's headers and an
//! `X-Forwarded-For`; the runtime's streaming server answers it:
//!
//! - `101 Switching Protocols`: its headers go back to the client, and from then on the two
//!   connections are spliced byte for byte, without parsing the protocol; when either side
//!   closes or fails, both are closed (the runtime ends the exec or attach session whose
//!   stream closed);
//! - an error status (≥ 400): forwarded to the client as it is;
//! - anything else: `500` `invalid upgrade response: status code <n>`.
//!
//! A request that is not an upgrade (no `Connection: Upgrade`) gets upstream's `500`
//! `Upgrade request required`, as do the other proxy errors (upstream's kubelet `responder`
//! answers every proxy error with 500).

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use kubelet_core::runtime::{ClosedBy, ExecSession};
use tokio::net::TcpStream;

use super::listener::Peer;

/// How long dialling the runtime's streaming server may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a streaming request could not be proxied.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client did not ask for an upgrade.
    #[error("Upgrade request required")]
    UpgradeRequired,
    /// The runtime's URL is not one the proxy can dial.
    #[error("invalid streaming URL {url:?}: {reason}")]
    Location {
        /// The URL.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The streaming server could not be reached or did not answer.
    #[error("error dialing backend: {0}")]
    Dial(#[source] std::io::Error),
    /// The streaming server could not be dialled within 30 s.
    #[error("error dialing backend: timed out after {0:?}")]
    DialTimeout(Duration),
    /// The HTTP exchange with the streaming server failed.
    #[error("error proxying to the backend: {0}")]
    Http(#[source] hyper::Error),
    /// The streaming server answered neither 101 nor an error.
    #[error("invalid upgrade response: status code {0}")]
    InvalidUpgradeResponse(u16),
}

impl IntoResponse for Error {
    /// Upstream's kubelet `responder`: every proxy error is a 500 with its text.
    fn into_response(self) -> Response {
        tracing::warn!(error = %self, "error while proxying request");
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{self}\n"),
        )
            .into_response()
    }
}

/// Upstream `httpstream.IsUpgradeRequest`: a `Connection` header that mentions `upgrade`.
pub(crate) fn is_upgrade_request(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("upgrade"))
}

/// Proxies the upgrade request `request` to `location` (the runtime's streaming URL) and,
/// once both sides switched protocols, splices the two connections in a task of its own,
/// which drives `session` ([`ExecSession::watch`] while the stream is up,
/// [`ExecSession::end`] when it closed; dropped unended when the upgrade fails).
pub(crate) async fn proxy_stream(
    request: Request,
    location: &str,
    session: Box<dyn ExecSession>,
) -> Response {
    match try_proxy(request, location, session).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn try_proxy(
    mut request: Request,
    location: &str,
    mut session: Box<dyn ExecSession>,
) -> Result<Response, Error> {
    if !is_upgrade_request(request.headers()) {
        return Err(Error::UpgradeRequired);
    }
    let (authority, target) = parse_location(location)?;
    let client_upgrade = request.extensions_mut().remove::<OnUpgrade>();
    // The secure port's connect info, or a plain listener's.
    let extensions = request.extensions();
    let peer = extensions
        .get::<ConnectInfo<Peer>>()
        .map(|ConnectInfo(peer)| peer.addr)
        .or_else(|| {
            extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| *addr)
        });

    let backend = backend_request(&request, &authority, target, peer);
    let tcp = dial(&authority).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(Error::Http)?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "streaming backend connection");
        }
    });
    let mut response = sender.send_request(backend).await.map_err(Error::Http)?;
    let status = response.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        if status.as_u16() < 400 {
            return Err(Error::InvalidUpgradeResponse(status.as_u16()));
        }
        // The streaming server's error (e.g. an unknown or expired token) as it is.
        let (parts, body) = response.into_parts();
        return Ok(Response::from_parts(parts, Body::new(body)));
    }
    let backend_upgrade = hyper::upgrade::on(&mut response);
    let Some(client_upgrade) = client_upgrade else {
        // Only a connection served without upgrades (e.g. HTTP/2) lacks it.
        return Err(Error::UpgradeRequired);
    };
    tokio::spawn(async move {
        match tokio::try_join!(client_upgrade, backend_upgrade) {
            Ok((client, backend)) => {
                let splice = splice(client, backend);
                tokio::pin!(splice);
                let closed_by = tokio::select! {
                    closed_by = &mut splice => closed_by,
                    () = session.watch() => splice.await,
                };
                session.end(closed_by).await;
            }
            Err(e) => tracing::warn!(error = %e, "streaming upgrade failed"),
        }
    });
    let mut reply = Response::new(Body::empty());
    *reply.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *reply.headers_mut() = response.headers().clone();
    Ok(reply)
}

/// The runtime's URL as the authority to dial and the request target (path and query);
/// only `http` URLs (the streaming server without TLS, containerd's default).
fn parse_location(location: &str) -> Result<(String, String), Error> {
    let invalid = |reason| Error::Location {
        url: location.to_owned(),
        reason,
    };
    let uri: Uri = location.parse().map_err(|_| invalid("not a URL"))?;
    if uri.scheme_str() != Some("http") {
        return Err(invalid("only http streaming servers are supported"));
    }
    let authority = uri.authority().ok_or_else(|| invalid("no host"))?;
    let authority = match authority.port_u16() {
        Some(_) => authority.as_str().to_owned(),
        None => format!("{}:80", authority.host()),
    };
    let target = uri
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |pq| pq.as_str().to_owned());
    Ok((authority, target))
}

/// The request to the streaming server: the client's method and headers (upstream
/// `CloneRequest`), the runtime's path and query, `Host` of the streaming server, and the
/// client's address appended to `X-Forwarded-For` (upstream `AppendForwardedForHeader`).
fn backend_request(
    request: &Request,
    authority: &str,
    target: String,
    peer: Option<SocketAddr>,
) -> hyper::Request<Body> {
    let mut backend = hyper::Request::new(Body::empty());
    *backend.method_mut() = request.method().clone();
    *backend.uri_mut() = Uri::try_from(target).unwrap_or_else(|_| Uri::from_static("/"));
    let headers = backend.headers_mut();
    *headers = request.headers().clone();
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(header::TRANSFER_ENCODING);
    if let Ok(host) = HeaderValue::from_str(authority) {
        headers.insert(header::HOST, host);
    }
    if let Some(peer) = peer {
        let ip = peer.ip().to_string();
        let value = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
            Some(prior) if !prior.is_empty() => format!("{prior}, {ip}"),
            _ => ip,
        };
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert("x-forwarded-for", value);
        }
    }
    backend
}

async fn dial(authority: &str) -> Result<TcpStream, Error> {
    match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(authority)).await {
        Ok(Ok(tcp)) => {
            let _ = tcp.set_nodelay(true);
            Ok(tcp)
        }
        Ok(Err(e)) => Err(Error::Dial(e)),
        Err(_) => Err(Error::DialTimeout(DIAL_TIMEOUT)),
    }
}

/// Copies bytes both ways until either side closes or fails, then closes both (upstream
/// returns once one copy exits and closes both connections); which side went first.
async fn splice(client: Upgraded, backend: Upgraded) -> ClosedBy {
    let (mut client_read, mut client_write) = tokio::io::split(TokioIo::new(client));
    let (mut backend_read, mut backend_write) = tokio::io::split(TokioIo::new(backend));
    let (closed_by, result) = tokio::select! {
        r = tokio::io::copy(&mut client_read, &mut backend_write) => (ClosedBy::Client, r),
        r = tokio::io::copy(&mut backend_read, &mut client_write) => (ClosedBy::Runtime, r),
    };
    tracing::debug!(?closed_by, ?result, "streaming session ended");
    closed_by
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrade_requests_are_those_whose_connection_header_says_upgrade() {
        let mut headers = HeaderMap::new();
        assert!(!is_upgrade_request(&headers));
        headers.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        assert!(!is_upgrade_request(&headers));
        headers.append(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        assert!(is_upgrade_request(&headers));
    }

    #[test]
    fn locations_are_http_urls_of_the_streaming_server() {
        assert_eq!(
            parse_location("http://127.0.0.1:4321/exec/AbC?x=1").expect("valid"),
            ("127.0.0.1:4321".to_owned(), "/exec/AbC?x=1".to_owned())
        );
        assert_eq!(
            parse_location("http://[::1]/attach/t").expect("valid"),
            ("[::1]:80".to_owned(), "/attach/t".to_owned())
        );
        for bad in ["https://127.0.0.1:1/exec/t", "/exec/t", "not a url"] {
            assert!(
                matches!(parse_location(bad), Err(Error::Location { .. })),
                "{bad}"
            );
        }
    }
}
