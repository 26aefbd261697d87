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
//!
//! The streaming server is dialled by `server::backend` (`http`, or `https` with the
//! system's roots). A websocket client asking for `v5.channel.k8s.io` is served by
//! `server::ws_v5` instead, which terminates its websocket and speaks v4 to the runtime (over
//! a websocket, or over SPDY for a session with stdin).

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use kubelet_core::runtime::{ClosedBy, ExecSession};

use super::backend::{self, Location};
use super::listener::Peer;

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
    /// The streaming server could not be reached or did not answer (TCP or TLS).
    #[error("error dialing backend: {0}")]
    Dial(#[source] std::io::Error),
    /// The streaming server could not be dialled within 30 s.
    #[error("error dialing backend: timed out after {0:?}")]
    DialTimeout(Duration),
    /// TLS to an `https` streaming server could not be set up (its roots, its name).
    #[error("error dialing backend: TLS: {0}")]
    Tls(String),
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
    if !is_upgrade_request(request.headers()) {
        return Error::UpgradeRequired.into_response();
    }
    if super::ws_v5::serves(&request) {
        return super::ws_v5::proxy_v5(request, location, session).await;
    }
    match try_proxy(request, location, session).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn try_proxy(
    mut request: Request,
    location: &str,
    session: Box<dyn ExecSession>,
) -> Result<Response, Error> {
    let location = Location::parse(location)?;
    let client_upgrade = request.extensions_mut().remove::<OnUpgrade>();
    let backend = backend_request(&request, &location, peer(&request));
    let mut response = send_to_backend(&location, backend).await?;
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return refusal(response);
    }
    let backend_upgrade = hyper::upgrade::on(&mut response);
    // Only a connection served without upgrades (e.g. HTTP/2) lacks it.
    let client_upgrade = client_upgrade.ok_or(Error::UpgradeRequired)?;
    spawn_session(client_upgrade, backend_upgrade, session, splice);
    let mut reply = Response::new(Body::empty());
    *reply.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *reply.headers_mut() = response.headers().clone();
    Ok(reply)
}

/// The client's address: the secure port's connect info, or a plain listener's.
pub(crate) fn peer(request: &Request) -> Option<SocketAddr> {
    let extensions = request.extensions();
    extensions
        .get::<ConnectInfo<Peer>>()
        .map(|ConnectInfo(peer)| peer.addr)
        .or_else(|| {
            extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| *addr)
        })
}

/// Dials the streaming server and sends it `backend`; its response head.
pub(crate) async fn send_to_backend(
    location: &Location,
    backend: hyper::Request<Body>,
) -> Result<hyper::Response<Incoming>, Error> {
    let conn = backend::dial(location).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(conn))
        .await
        .map_err(Error::Http)?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "streaming backend connection");
        }
    });
    sender.send_request(backend).await.map_err(Error::Http)
}

/// A streaming server's answer other than 101: its error (e.g. an unknown or expired
/// token) as it is, anything else `invalid upgrade response`.
pub(crate) fn refusal(response: hyper::Response<Incoming>) -> Result<Response, Error> {
    let status = response.status();
    if status.as_u16() < 400 {
        return Err(Error::InvalidUpgradeResponse(status.as_u16()));
    }
    let (parts, body) = response.into_parts();
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// Once both sides switched protocols, runs `relay` over the two connections in a task of
/// its own, with `session` watched meanwhile and ended with the side that closed first.
pub(crate) fn spawn_session<F, Fut>(
    client: OnUpgrade,
    backend: OnUpgrade,
    mut session: Box<dyn ExecSession>,
    relay: F,
) where
    F: FnOnce(Upgraded, Upgraded) -> Fut + Send + 'static,
    Fut: Future<Output = ClosedBy> + Send,
{
    tokio::spawn(async move {
        match tokio::try_join!(client, backend) {
            Ok((client, backend)) => {
                let relay = relay(client, backend);
                tokio::pin!(relay);
                let closed_by = tokio::select! {
                    closed_by = &mut relay => closed_by,
                    () = session.watch() => relay.await,
                };
                session.end(closed_by).await;
            }
            Err(e) => tracing::warn!(error = %e, "streaming upgrade failed"),
        }
    });
}

/// The request to the streaming server: the client's method and headers (upstream
/// `CloneRequest`), the runtime's path and query, `Host` of the streaming server, and the
/// client's address appended to `X-Forwarded-For` (upstream `AppendForwardedForHeader`).
pub(crate) fn backend_request(
    request: &Request,
    location: &Location,
    peer: Option<SocketAddr>,
) -> hyper::Request<Body> {
    let mut backend = hyper::Request::new(Body::empty());
    *backend.method_mut() = request.method().clone();
    *backend.uri_mut() =
        Uri::try_from(location.target.as_str()).unwrap_or_else(|_| Uri::from_static("/"));
    let headers = backend.headers_mut();
    *headers = request.headers().clone();
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(header::TRANSFER_ENCODING);
    if let Ok(host) = HeaderValue::from_str(&location.authority) {
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
}
