//! `v5.channel.k8s.io` for a runtime that speaks only `v4.channel.k8s.io` (containerd 1.6):
//! the kubelet terminates the client's websocket itself and relays its messages channel by
//! channel to the runtime's streaming server.
//!
//! v5 (KEP-3396; upstream `k8s.io/apimachinery/pkg/util/httpstream/wsstream/conn.go`,
//! `k8s.io/client-go/tools/remotecommand/websocket.go`) is v4 plus one signal: a binary
//! message on channel 255 whose payload is a stream's id closes that stream (the client's
//! `stdin.Close()`). v4 over a websocket cannot close one direction of a stream: the only
//! way to end an exec's stdin there is to end the runtime's connection, and containerd then
//! drops what the exec prints afterwards (`echo data | kubectl exec -i … -- sort` would lose
//! its output). So the runtime is spoken to in one of two ways:
//!
//! - a session without stdin: a v4 websocket of the kubelet's own, messages passed on as
//!   they are ([`relay`]);
//! - a session with stdin (exec or attach): v4 over SPDY/3.1, as upstream's SPDY executor
//!   speaks it, where the CLOSE signal of stdin is a FIN on the stdin stream
//!   ([`super::spdy::relay`]).
//!
//! Pings are answered on each side; a close on either side is passed on and ends the
//! session.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use kubelet_core::runtime::{ClosedBy, ExecSession};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Mutex;

use super::backend::Location;
use super::proxy::{self, Error};
use super::spdy;
use super::ws_frame::{self, BINARY, CLOSE, PING, PONG, TEXT};

/// The remote command protocol with the CLOSE signal.
pub(crate) const V5: &str = "v5.channel.k8s.io";
/// The remote command protocol the runtime is spoken to in.
const V4: &str = "v4.channel.k8s.io";
/// Upstream `remotecommand.StreamClose`: the channel of the CLOSE signal.
const STREAM_CLOSE: u8 = 255;

/// Whether the upgrade `request` is served here: a websocket offering `v5.channel.k8s.io`.
pub(crate) fn serves(request: &Request) -> bool {
    offers_v5(request.headers())
}

/// Whether `headers` are a websocket upgrade offering `v5.channel.k8s.io`.
fn offers_v5(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
        && headers
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|p| p.trim() == V5)
}

/// Serves the client's v5 upgrade `request` through a v4 websocket to `location`, or v4
/// over SPDY for a session with stdin; the session is driven as [`proxy::proxy_stream`]
/// drives it.
pub(crate) async fn proxy_v5(
    request: Request,
    location: &str,
    session: Box<dyn ExecSession>,
) -> Response {
    match try_proxy_v5(request, location, session).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn try_proxy_v5(
    mut request: Request,
    location: &str,
    session: Box<dyn ExecSession>,
) -> Result<Response, Error> {
    let Some(accept) = request
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok())
        .map(ws_frame::accept_key)
    else {
        return Ok((StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key\n").into_response());
    };
    let location = Location::parse(location)?;
    let client_upgrade = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
        .ok_or(Error::UpgradeRequired)?;
    // The caller checked the options; a session that names none has no stdin.
    let options = super::streaming::stream_options(request.uri().query()).unwrap_or_default();
    let mut backend = proxy::backend_request(&request, &location, proxy::peer(&request));
    if options.stdin {
        spdy_upgrade(&mut backend);
    } else {
        websocket_upgrade(&mut backend);
    }
    let mut response = proxy::send_to_backend(&location, backend).await?;
    let status = response.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        return proxy::refusal(response);
    }
    let backend_upgrade = hyper::upgrade::on(&mut response);
    if options.stdin {
        tracing::debug!("v5 session with stdin relayed to the runtime over SPDY");
        proxy::spawn_session(client_upgrade, backend_upgrade, session, move |c, r| {
            spdy::relay::relay(TokioIo::new(c), TokioIo::new(r), options)
        });
    } else {
        proxy::spawn_session(client_upgrade, backend_upgrade, session, relay);
    }
    let mut reply = Response::new(Body::empty());
    *reply.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = reply.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(V5));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    Ok(reply)
}

/// `backend` as a v4 websocket upgrade (the client's websocket headers replaced).
fn websocket_upgrade(backend: &mut hyper::Request<Body>) {
    *backend.method_mut() = axum::http::Method::GET;
    let headers = backend.headers_mut();
    let key: [u8; 16] = rand::random();
    let key = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, key);
    for (name, value) in [
        (header::CONNECTION, "Upgrade".to_owned()),
        (header::UPGRADE, "websocket".to_owned()),
        (header::SEC_WEBSOCKET_VERSION, "13".to_owned()),
        (header::SEC_WEBSOCKET_KEY, key),
        (header::SEC_WEBSOCKET_PROTOCOL, V4.to_owned()),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    headers.remove(header::SEC_WEBSOCKET_EXTENSIONS);
}

/// `backend` as upstream's SPDY executor asks (`POST`, `Upgrade: SPDY/3.1`,
/// `X-Stream-Protocol-Version: v4.channel.k8s.io`), without the client's websocket headers.
fn spdy_upgrade(backend: &mut hyper::Request<Body>) {
    *backend.method_mut() = axum::http::Method::POST;
    let headers = backend.headers_mut();
    for name in [
        header::SEC_WEBSOCKET_VERSION,
        header::SEC_WEBSOCKET_KEY,
        header::SEC_WEBSOCKET_PROTOCOL,
        header::SEC_WEBSOCKET_EXTENSIONS,
    ] {
        headers.remove(name);
    }
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(
        header::UPGRADE,
        HeaderValue::from_static(spdy::remotecommand::UPGRADE),
    );
    headers.insert(
        spdy::remotecommand::PROTOCOL_HEADER,
        HeaderValue::from_static(spdy::remotecommand::V4),
    );
}

/// Relays the v5 client's messages to the v4 runtime and back until either side closes.
async fn relay(client: Upgraded, runtime: Upgraded) -> ClosedBy {
    let (client_read, client_write) = tokio::io::split(TokioIo::new(client));
    let (runtime_read, runtime_write) = tokio::io::split(TokioIo::new(runtime));
    let client_write = Mutex::new(client_write);
    let runtime_write = Mutex::new(runtime_write);
    let upstream = from_client(client_read, &client_write, &runtime_write);
    let downstream = from_runtime(runtime_read, &client_write, &runtime_write);
    let closed_by = tokio::select! {
        () = upstream => ClosedBy::Client,
        () = downstream => ClosedBy::Runtime,
    };
    tracing::debug!(?closed_by, "v5 streaming session ended");
    closed_by
}

/// Client to runtime: data messages as they are (masked, as a client's), CLOSE signals
/// dropped (a session without stdin has no stream to close), pings answered; returns when
/// the client closed (its close passed on).
async fn from_client<R, W1, W2>(read: R, client: &Mutex<W1>, runtime: &Mutex<W2>)
where
    R: AsyncRead + Unpin,
    W1: AsyncWrite + Unpin,
    W2: AsyncWrite + Unpin,
{
    let mut messages = ws_frame::Reader::new(read);
    loop {
        let sent = match messages.next().await {
            Ok(Some(m)) if m.opcode == BINARY && m.payload.first() == Some(&STREAM_CLOSE) => Ok(()),
            Ok(Some(m)) if m.opcode == BINARY || m.opcode == TEXT => {
                send(runtime, m.opcode, &m.payload, true).await
            }
            Ok(Some(m)) if m.opcode == PING => send(client, PONG, &m.payload, false).await,
            Ok(Some(m)) if m.opcode == CLOSE => {
                let _ = send(runtime, CLOSE, &m.payload, true).await;
                let _ = send(client, CLOSE, &m.payload, false).await;
                return;
            }
            Ok(Some(_)) => Ok(()),
            Ok(None) | Err(_) => {
                let _ = send(runtime, CLOSE, &1000u16.to_be_bytes(), true).await;
                return;
            }
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "v5 relay to the runtime");
            return;
        }
    }
}

/// Runtime to client: data messages as they are (unmasked, as a server's), pings answered;
/// returns when the runtime closed (its close passed on).
async fn from_runtime<R, W1, W2>(read: R, client: &Mutex<W1>, runtime: &Mutex<W2>)
where
    R: AsyncRead + Unpin,
    W1: AsyncWrite + Unpin,
    W2: AsyncWrite + Unpin,
{
    let mut messages = ws_frame::Reader::new(read);
    loop {
        let sent = match messages.next().await {
            Ok(Some(m)) if m.opcode == BINARY || m.opcode == TEXT => {
                send(client, m.opcode, &m.payload, false).await
            }
            Ok(Some(m)) if m.opcode == PING => send(runtime, PONG, &m.payload, true).await,
            Ok(Some(m)) if m.opcode == CLOSE => {
                let _ = send(client, CLOSE, &m.payload, false).await;
                return;
            }
            Ok(Some(_)) => Ok(()),
            Ok(None) | Err(_) => {
                let _ = send(client, CLOSE, &1000u16.to_be_bytes(), false).await;
                return;
            }
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "v5 relay to the client");
            return;
        }
    }
}

async fn send<W: AsyncWrite + Unpin>(
    io: &Mutex<W>,
    opcode: u8,
    payload: &[u8],
    masked: bool,
) -> std::io::Result<()> {
    ws_frame::send(&mut *io.lock().await, opcode, payload, masked).await
}
