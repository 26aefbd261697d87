//! The streaming endpoints of the secure port (upstream `pkg/kubelet/server/server.go`
//! `getExec`, `getAttach`, `getPortForward`, with `pkg/kubelet/kubelet_pods.go` `GetExec`,
//! `GetAttach`, `GetPortForward`, `findContainer`):
//!
//! | route (GET and POST) | runtime call |
//! |---|---|
//! | `/exec/{ns}/{pod}[/{uid}]/{container}?command=…&input=1&output=1&error=1&tty=1` | [`Runtime::get_exec`](kubelet_core::runtime::Runtime::get_exec) |
//! | `/attach/{ns}/{pod}[/{uid}]/{container}?input=1&output=1&error=1&tty=1` | [`Runtime::get_attach`](kubelet_core::runtime::Runtime::get_attach) |
//! | `/portForward/{ns}/{pod}[/{uid}]` (websocket: `?port=80&port=8080,9090`) | [`Runtime::get_port_forward`](kubelet_core::runtime::Runtime::get_port_forward) |
//!
//! (`/run`, the non-streaming exec, is in `super::run`.)
//!
//! The runtime answers with a URL on its streaming server, and the client's upgrade request
//! is proxied there ([`super::proxy`]), so SPDY/3.1 and the websocket protocols
//! (`v4.channel.k8s.io`, …) work as the runtime speaks them; upstream's default
//! (no `--redirect-container-streaming`). An exec is an exec session of the runtime
//! ([`Runtime::begin_exec_session`](kubelet_core::runtime::Runtime::begin_exec_session)),
//! begun before its URL is asked for and ended when the stream closes: what the exec left
//! running then is killed (containerd 1.6 keeps an exec that ignores its stdin).
//!
//! Answers before the upgrade, as upstream: `400` with `NewOptions`' / `NewV4Options`'
//! message for bad stream options or ports; `404` `pod does not exist` for a pod the
//! kubelet does not have (by namespace and name; `pod not found` when a port-forward's UID
//! differs); a container that is not running in the runtime (by the pod's full name, and its
//! UID when the path has one; a mirror pod's UID stands for its static pod's) → `404`
//! `container not found ("<name>")` (upstream answers 500 there: a plain error through
//! `streaming.WriteError`; issue 14 asks for 404); a pod without a sandbox → `404`
//! `pod not found ("<full name>")`; a runtime error → its status (`NotFound` → 404, else 500)
//! and text, as upstream `streaming.WriteError`.

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use k8s_openapi::api::core::v1::Pod;
use kubelet_core::pod::{PodExt, PodUid};
use kubelet_core::runtime::{
    self, ContainerState, ExecSession, NoopExecSession, RunningPod, StreamOptions,
};
use serde::Deserialize;

use super::ServerState;
use super::proxy::proxy_stream;

/// The streaming routes and `/run` (added to the secure port, behind its auth filter).
pub(crate) fn routes(state: ServerState) -> Router {
    Router::new()
        .route("/exec/{namespace}/{pod}/{container}", get(exec).post(exec))
        .route(
            "/exec/{namespace}/{pod}/{uid}/{container}",
            get(exec).post(exec),
        )
        .route(
            "/attach/{namespace}/{pod}/{container}",
            get(attach).post(attach),
        )
        .route(
            "/attach/{namespace}/{pod}/{uid}/{container}",
            get(attach).post(attach),
        )
        .route(
            "/portForward/{namespace}/{pod}",
            get(port_forward).post(port_forward),
        )
        .route(
            "/portForward/{namespace}/{pod}/{uid}",
            get(port_forward).post(port_forward),
        )
        .route("/run/{namespace}/{pod}/{container}", post(super::run::run))
        .route(
            "/run/{namespace}/{pod}/{uid}/{container}",
            post(super::run::run),
        )
        .with_state(state)
}

/// The path parameters (upstream `execRequestParams`, `portForwardRequestParams`).
#[derive(Debug, Deserialize)]
pub(super) struct StreamPath {
    pub(super) namespace: String,
    pub(super) pod: String,
    #[serde(default)]
    pub(super) uid: Option<String>,
    #[serde(default)]
    pub(super) container: Option<String>,
}

pub(super) fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body.into(),
    )
        .into_response()
}

/// Every value of query parameter `key`, decoded.
fn query_values(query: Option<&str>, key: &str) -> Vec<String> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .collect()
}

/// Upstream `req.FormValue(key) == "1"`: the first value of `key` is `1`.
fn flag(query: Option<&str>, key: &str) -> bool {
    query_values(query, key).first().is_some_and(|v| v == "1")
}

/// Upstream `remotecommand.NewOptions`: `input`, `output`, `error`, `tty` (`1` is true);
/// `tty` drops stderr; at least one stream.
pub(crate) fn stream_options(query: Option<&str>) -> Result<StreamOptions, &'static str> {
    let tty = flag(query, "tty");
    let options = StreamOptions {
        stdin: flag(query, "input"),
        stdout: flag(query, "output"),
        // A terminal has no separate stderr (upstream logs "bypassing stderr").
        stderr: flag(query, "error") && !tty,
        tty,
    };
    if !options.stdin && !options.stdout && !options.stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr");
    }
    Ok(options)
}

/// Upstream `wsstream.IsWebSocketRequest`: an upgrade to `websocket`.
fn is_websocket_request(headers: &HeaderMap) -> bool {
    super::proxy::is_upgrade_request(headers)
        && headers
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Upstream `portforward.NewV4Options`: a websocket request names its ports in `port`
/// (repeated, or comma-separated), each in 1..=65535; SPDY clients name them per stream.
pub(crate) fn port_forward_ports(
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<Vec<i32>, String> {
    if !is_websocket_request(headers) {
        return Ok(Vec::new());
    }
    let values = query_values(query, "port");
    if values.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    let mut ports = Vec::new();
    for value in &values {
        if value.is_empty() {
            return Err("query parameter \"port\" cannot be empty".into());
        }
        for p in value.split(',') {
            let port: u16 = p
                .parse()
                .map_err(|e| format!("unable to parse {value:?} as a port: {e}"))?;
            if port < 1 {
                return Err(format!("port {value:?} must be > 0"));
            }
            ports.push(i32::from(port));
        }
    }
    Ok(ports)
}

/// Upstream `GetPodByName`: the desired pod `namespace`/`name`.
pub(super) fn pod_by_name(state: &ServerState, namespace: &str, name: &str) -> Option<Pod> {
    state
        .pod_manager
        .pod_by_full_name(&format!("{name}_{namespace}"))
}

/// Upstream `TranslatePodUID`: a mirror pod's UID stands for its static pod's.
fn translate_uid(state: &ServerState, pod: &Pod, uid: Option<&str>) -> Option<PodUid> {
    let uid = uid.filter(|u| !u.is_empty())?;
    let is_mirror = state
        .pod_manager
        .mirror_pod_by_pod(pod)
        .is_some_and(|m| m.uid().0 == uid);
    Some(if is_mirror {
        pod.uid()
    } else {
        PodUid(uid.to_owned())
    })
}

/// Upstream `Pods.FindPod`: by UID when one is given, else by full name.
async fn find_running_pod(
    state: &ServerState,
    full_name: &str,
    uid: Option<&PodUid>,
) -> Result<Option<RunningPod>, runtime::Error> {
    let pods = state.runtime.get_pods(false).await?;
    Ok(pods.into_iter().find(|p| match uid {
        Some(uid) => &p.uid == uid,
        None => format!("{}_{}", p.name, p.namespace) == full_name,
    }))
}

/// Upstream `streaming.WriteError`: the runtime's `NotFound` is a 404, anything else a 500.
fn runtime_error(e: &runtime::Error) -> Response {
    let status = match e {
        runtime::Error::NotFound(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    text(status, e.to_string())
}

/// Upstream `findContainer`: the running container `name` of the pod; its runtime ID.
pub(super) async fn find_container(
    state: &ServerState,
    pod: &Pod,
    uid: Option<&str>,
    name: &str,
) -> Result<String, Response> {
    let uid = translate_uid(state, pod, uid);
    let running = find_running_pod(state, &pod.full_name(), uid.as_ref())
        .await
        .map_err(|e| runtime_error(&e))?;
    running
        .and_then(|p| {
            p.containers
                .into_iter()
                .find(|c| c.name == name && c.state == ContainerState::Running)
        })
        .map(|c| c.id)
        .ok_or_else(|| {
            text(
                StatusCode::NOT_FOUND,
                format!("container not found ({name:?})"),
            )
        })
}

/// `/exec` and `/attach`: `cmd` is `Some` for an exec.
async fn exec_or_attach(
    state: ServerState,
    path: StreamPath,
    request: Request,
    exec: bool,
) -> Response {
    let query = request.uri().query().map(str::to_owned);
    let streams = match stream_options(query.as_deref()) {
        Ok(streams) => streams,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    let Some(pod) = pod_by_name(&state, &path.namespace, &path.pod) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    let container = path.container.unwrap_or_default();
    let id = match find_container(&state, &pod, path.uid.as_deref(), &container).await {
        Ok(id) => id,
        Err(response) => return response,
    };
    let (url, session) = if exec {
        let cmd = query_values(query.as_deref(), "command");
        // Begun first: it notes what the container runs before the exec starts.
        let session = state.runtime.begin_exec_session(&id, &cmd).await;
        (state.runtime.get_exec(&id, &cmd, streams).await, session)
    } else {
        let session: Box<dyn ExecSession> = Box::new(NoopExecSession);
        (state.runtime.get_attach(&id, streams).await, session)
    };
    match url {
        Ok(url) => proxy_stream(request, &url, session).await,
        Err(e) => runtime_error(&e),
    }
}

async fn exec(
    State(state): State<ServerState>,
    Path(path): Path<StreamPath>,
    request: Request,
) -> Response {
    exec_or_attach(state, path, request, true).await
}

async fn attach(
    State(state): State<ServerState>,
    Path(path): Path<StreamPath>,
    request: Request,
) -> Response {
    exec_or_attach(state, path, request, false).await
}

async fn port_forward(
    State(state): State<ServerState>,
    Path(path): Path<StreamPath>,
    request: Request,
) -> Response {
    let ports = match port_forward_ports(request.headers(), request.uri().query()) {
        Ok(ports) => ports,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    let Some(pod) = pod_by_name(&state, &path.namespace, &path.pod) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    if path
        .uid
        .as_deref()
        .is_some_and(|uid| !uid.is_empty() && uid != pod.uid().0)
    {
        return text(StatusCode::NOT_FOUND, "pod not found");
    }
    let full_name = pod.full_name();
    let running = match find_running_pod(&state, &full_name, Some(&pod.uid())).await {
        Ok(running) => running,
        Err(e) => return runtime_error(&e),
    };
    // Upstream `getSandboxIDByPodUID`: the newest sandbox.
    let Some(sandbox) = running.and_then(|p| p.sandboxes.into_iter().next()) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod not found ({full_name:?})"),
        );
    };
    match state.runtime.get_port_forward(&sandbox.id, &ports).await {
        Ok(url) => proxy_stream(request, &url, Box::new(NoopExecSession)).await,
        Err(e) => runtime_error(&e),
    }
}
