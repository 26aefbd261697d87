//! [`FaultProxy`]: an HTTP/2 server on a unix socket that forwards each gRPC call to the
//! runtime's socket as opaque frames (no protobuf decoding) unless a [`Fault`] says otherwise.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http2::SendRequest;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{HeaderMap, Request, Response, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Mutex, Notify, watch};
use tokio::task::JoinHandle;
use tonic::Code;

use super::faults::{Fault, Rules};

type Body = BoxBody<Bytes, hyper::Error>;

/// A CRI fault injector: listens on its own socket, forwards to the runtime's socket, and
/// applies the [`Fault`] set for each method (the last path segment of the gRPC call:
/// `RunPodSandbox`, `ListContainers`, `PullImage`…). Faults can change at any time; calls
/// are counted per method whether faulted or not.
///
/// Dropping the proxy stops it (open connections are closed); prefer [`FaultProxy::shutdown`].
///
/// ```no_run
/// use kubelet_cri::testing::{Fault, FaultProxy};
///
/// # async fn demo() -> std::io::Result<()> {
/// let proxy = FaultProxy::start(
///     "/tmp/fault.sock".as_ref(),
///     "/run/containerd/containerd.sock".as_ref(),
/// )
/// .await?;
/// // point the kubelet at proxy.endpoint(), then:
/// proxy.set("RunPodSandbox", Fault::unavailable());
/// proxy.clear("RunPodSandbox");
/// println!("{} sandboxes asked for", proxy.count("RunPodSandbox"));
/// proxy.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    socket: PathBuf,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

/// What every connection of the proxy shares.
#[derive(Debug)]
struct Shared {
    rules: Rules,
    upstream: Upstream,
    /// Bumped to close every client connection (also on shutdown).
    generation: watch::Sender<u64>,
}

impl FaultProxy {
    /// Listens on `socket` (a stale file is replaced) and forwards to the runtime at
    /// `upstream`, which need not be up yet: while it is down, calls fail with `Unavailable`.
    pub async fn start(socket: &Path, upstream: &Path) -> std::io::Result<Self> {
        match tokio::fs::remove_file(socket).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let listener = UnixListener::bind(socket)?;
        let shared = Arc::new(Shared {
            rules: Rules::new(),
            upstream: Upstream::new(upstream),
            generation: watch::Sender::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(Self {
            socket: socket.to_owned(),
            shared,
            accept: Some(accept),
        })
    }

    /// The socket the proxy listens on.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// `unix://<socket>`, for `--container-runtime-endpoint` or [`crate::connect`].
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Applies `fault` to every later call of `method` (and to calls of it stalled now).
    pub fn set(&self, method: &str, fault: Fault) {
        self.shared.rules.set(method, Some(fault));
    }

    /// Forwards `method` again; stalled calls of it proceed.
    pub fn clear(&self, method: &str) {
        self.shared.rules.set(method, None);
    }

    /// Applies `fault` to every method that has no fault of its own.
    pub fn set_every_method(&self, fault: Fault) {
        self.shared.rules.set_every(Some(fault));
    }

    /// Clears every fault: all calls are forwarded again.
    pub fn clear_all(&self) {
        self.shared.rules.clear();
    }

    /// Calls of `method` the proxy received so far, faulted or not.
    pub fn count(&self, method: &str) -> u64 {
        self.shared.rules.count(method)
    }

    /// Calls received so far, by method.
    pub fn counts(&self) -> HashMap<String, u64> {
        self.shared.rules.counts()
    }

    /// Calls of `method` whose client gave up (a deadline, a cancellation) before the proxy
    /// answered: with [`Fault::Stall`], the calls the client timed out.
    pub fn abandoned(&self, method: &str) -> u64 {
        self.shared.rules.abandoned(method)
    }

    /// Closes every client connection now (calls in flight on them fail); clients reconnect.
    pub fn drop_connections(&self) {
        self.shared.generation.send_modify(|g| *g += 1);
    }

    /// Stops accepting, closes every connection and removes the socket.
    pub async fn shutdown(mut self) {
        self.stop();
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
        let _ = tokio::fs::remove_file(&self.socket).await;
    }

    fn stop(&mut self) {
        if let Some(accept) = &self.accept {
            accept.abort();
        }
        self.drop_connections();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve_connection(stream, shared.clone()));
            }
            Err(e) => {
                tracing::warn!(error = %e, "fault proxy: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// Serves one client connection until it ends, a [`Fault::DropConnection`] call arrives on it
/// or [`FaultProxy::drop_connections`] is called.
async fn serve_connection(stream: UnixStream, shared: Arc<Shared>) {
    let mut generation = shared.generation.subscribe();
    let dropped = Arc::new(Notify::new());
    let service = hyper::service::service_fn({
        let shared = shared.clone();
        let dropped = dropped.clone();
        move |req| handle(shared.clone(), dropped.clone(), req)
    });
    let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        result = conn => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "fault proxy: client connection ended");
            }
        }
        () = dropped.notified() => tracing::debug!("fault proxy: dropping a client connection"),
        _ = generation.changed() => tracing::debug!("fault proxy: dropping every client connection"),
    }
}

/// Counts the call as abandoned if it is dropped (the client reset the stream or closed the
/// connection) before [`Answered::done`].
struct Answered<'a> {
    rules: &'a Rules,
    method: &'a str,
    done: bool,
}

impl Answered<'_> {
    fn done<T>(mut self, value: T) -> T {
        self.done = true;
        value
    }
}

impl Drop for Answered<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.rules.abandon(self.method);
        }
    }
}

/// One gRPC call: counted, then faulted or forwarded.
async fn handle(
    shared: Arc<Shared>,
    dropped: Arc<Notify>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = req
        .uri()
        .path()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let answered = Answered {
        rules: &shared.rules,
        method: &method,
        done: false,
    };
    let resp = respond(&shared, &dropped, &method, req).await;
    Ok(answered.done(resp))
}

/// The answer to a call of `method`: faulted or forwarded.
async fn respond(
    shared: &Shared,
    dropped: &Notify,
    method: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    let mut fault = shared.rules.enter(method);
    if fault == Some(Fault::Stall) {
        tracing::debug!(%method, "fault proxy: stalling");
        fault = shared.rules.wait_while_stalled(method).await;
    }
    match fault {
        None | Some(Fault::Stall) => {}
        Some(Fault::Latency(delay)) => tokio::time::sleep(delay).await,
        Some(Fault::Status(code, message)) => {
            tracing::debug!(%method, ?code, "fault proxy: failing");
            return grpc_status(code, &message);
        }
        Some(Fault::DropConnection) => {
            tracing::debug!(%method, "fault proxy: dropping the connection");
            dropped.notify_one();
            std::future::pending::<()>().await;
        }
    }
    shared.upstream.forward(req).await.unwrap_or_else(|e| {
        grpc_status(
            Code::Unavailable,
            &format!("fault proxy: runtime unreachable: {e}"),
        )
    })
}

/// A gRPC answer with `code` and `message` in its trailers and no message.
fn grpc_status(code: Code, message: &str) -> Response<Body> {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from(code as i32));
    // grpc-message is percent-encoded; keep it to safe characters rather than encode.
    let safe: String = message
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '%' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&safe) {
        trailers.insert("grpc-message", v);
    }
    let body = Empty::<Bytes>::new()
        .with_trailers(async move { Some(Ok(trailers)) })
        .map_err(|never: Infallible| match never {})
        .boxed();
    let mut resp = Response::new(body);
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    resp
}

/// The connection to the runtime: one HTTP/2 connection, dialled on first use and again after
/// it broke (the runtime restarted).
#[derive(Debug)]
struct Upstream {
    path: PathBuf,
    sender: Mutex<Option<SendRequest<Incoming>>>,
}

/// Why a call could not be forwarded.
#[derive(Debug, thiserror::Error)]
enum ForwardError {
    #[error("connecting: {0}")]
    Connect(#[from] std::io::Error),
    #[error(transparent)]
    Http(#[from] hyper::Error),
    #[error("invalid request path: {0}")]
    Path(#[from] hyper::http::uri::InvalidUri),
}

impl Upstream {
    fn new(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
            sender: Mutex::new(None),
        }
    }

    async fn sender(&self) -> Result<SendRequest<Incoming>, ForwardError> {
        let mut slot = self.sender.lock().await;
        if let Some(s) = slot.as_ref().filter(|s| !s.is_closed()) {
            return Ok(s.clone());
        }
        let stream = UnixStream::connect(&self.path).await?;
        let (sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "fault proxy: runtime connection ended");
            }
        });
        *slot = Some(sender.clone());
        Ok(sender)
    }

    async fn forward(&self, req: Request<Incoming>) -> Result<Response<Body>, ForwardError> {
        let mut sender = self.sender().await?;
        let (mut parts, body) = req.into_parts();
        // HTTP/2 needs a scheme and an authority; the runtime ignores them (as upstream's
        // dialer, which sends `localhost`).
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        parts.uri = Uri::try_from(format!("http://localhost{path}"))?;
        let resp = sender
            .send_request(Request::from_parts(parts, body))
            .await?;
        Ok(resp.map(BodyExt::boxed))
    }
}
