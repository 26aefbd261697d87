//! `/containerLogs/{namespace}/{pod}/{container}` on the secure port (upstream
//! `pkg/kubelet/server/server.go` `getContainerLogs`, `pkg/kubelet/kubelet_pods.go`
//! `GetKubeletContainerLogs` and `validateContainerLogStatus`, `kuberuntime`
//! `GetContainerLogs`).
//!
//! The pod is looked up in the pod manager by namespace and name, the container in its spec,
//! the container ID in its status (the running instance, or the last terminated one with
//! `previous`) and the log file in the runtime: no part of the request is ever joined into a
//! path. Responses, as upstream:
//!
//! * a query that does not decode → `400` `{"message": "Unable to decode query."}`; one that
//!   `ValidatePodLogOptions` rejects → `422` `{"message": "Invalid request."}`;
//! * unknown pod → `404` `pod "<pod>" does not exist`; a container not in its spec → `404`
//!   `container "<c>" not found in pod "<pod>"`;
//! * no log to read (waiting container, no previous instance…) → `400` with upstream's text;
//! * otherwise `200` and the log, streamed (with `follow`, until the container exits).

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kubelet_core::PodExt;
use kubelet_core::logs::{LogOptions, PodLogOptions, read_logs};
use kubelet_core::runtime::Runtime;

use super::ServerState;

/// Size of the pipe between the log reader and the response body.
const PIPE_SIZE: usize = 64 * 1024;

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// The `/containerLogs` route over `state`.
pub(crate) fn router(state: ServerState) -> axum::Router {
    axum::Router::new()
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            axum::routing::get(container_logs),
        )
        .with_state(state)
}

/// The handler of `GET /containerLogs/{namespace}/{pod}/{container}`.
pub(crate) async fn container_logs(
    State(state): State<ServerState>,
    Path((namespace, pod_name, container)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
) -> Response {
    let Ok(api) = decode_query(query.as_deref().unwrap_or("")) else {
        return text(
            StatusCode::BAD_REQUEST,
            r#"{"message": "Unable to decode query."}"#.into(),
        );
    };
    if api.validate().is_err() {
        return text(
            StatusCode::UNPROCESSABLE_ENTITY,
            r#"{"message": "Invalid request."}"#.into(),
        );
    }
    let Some(pod) = pod_by_name(&state, &namespace, &pod_name) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod {pod_name:?} does not exist"),
        );
    };
    if !has_container(&pod, &container) {
        return text(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {pod_name:?}"),
        );
    }
    let status = state
        .status
        .pod_status(&pod.uid())
        .or_else(|| pod.status.clone())
        .unwrap_or_default();
    let container_id = match container_log_id(&pod_name, &status, &container, api.previous) {
        Ok(id) => id,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    let id = container_id
        .split_once("://")
        .map_or(container_id.as_str(), |(_, id)| id)
        .to_owned();
    let log = match state.runtime.container_log(&id).await {
        Ok(log) if is_log_path(&log.path) => log,
        Ok(log) => {
            tracing::warn!(container = %id, path = %log.path.display(), "refusing to read a container log path that is not absolute and normalized");
            return text(
                StatusCode::BAD_REQUEST,
                format!("unable to retrieve container logs for {container_id}"),
            );
        }
        Err(e) => {
            tracing::info!(container = %id, error = %e, "container status for logs");
            return text(
                StatusCode::BAD_REQUEST,
                format!("unable to retrieve container logs for {container_id}"),
            );
        }
    };
    if let Err(e) = tokio::fs::metadata(&log.path).await {
        return text(
            StatusCode::BAD_REQUEST,
            format!("failed to open log file {:?}: {e}", log.path),
        );
    }
    let opts = LogOptions::new(&api, Timestamp::now());
    let (body, _reader) = stream_log(log.path, id, opts, state.runtime.clone());
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// The response body of a log: a task reads it into a pipe the body drains. The task ends
/// when the log is read (with `follow`, when the container exits) or when the body is
/// dropped (the client went away), even while it waits for the next line.
pub(crate) fn stream_log(
    path: PathBuf,
    id: String,
    opts: LogOptions,
    runtime: Arc<dyn Runtime>,
) -> (Body, tokio::task::JoinHandle<()>) {
    let (mut tx, rx) = tokio::io::duplex(PIPE_SIZE);
    // Dropped with the body: the reader stops.
    let (body_alive, body_dropped) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        tokio::select! {
            result = read_logs(&path, &id, &opts, runtime.as_ref(), &mut tx) => match result {
                Ok(()) => {}
                Err(kubelet_core::logs::Error::Write(_)) => {
                    tracing::debug!(container = %id, "log client went away");
                }
                Err(e) => tracing::info!(container = %id, error = %e, "reading container logs"),
            },
            _ = body_dropped => tracing::debug!(container = %id, "log client went away"),
        }
    });
    let body = tokio_util::io::ReaderStream::new(rx).map(move |chunk| {
        let _ = &body_alive;
        chunk
    });
    (Body::from_stream(body), reader)
}

/// An absolute path without `..`: what a runtime reports, never a request's text.
fn is_log_path(path: &std::path::Path) -> bool {
    path.is_absolute()
        && path
            .components()
            .all(|c| !matches!(c, std::path::Component::ParentDir))
}

/// Upstream `GetPodByName`: the desired pod `namespace/name`.
fn pod_by_name(state: &ServerState, namespace: &str, name: &str) -> Option<Pod> {
    let pod = state
        .pod_manager
        .pod_by_full_name(&format!("{name}_{namespace}"))?;
    // Full names join name and namespace with `_`, which neither may hold but a request
    // may: `a_b` in `c` and `a` in `b_c` must not find each other.
    (pod.name_or_empty() == name && pod.namespace_or_default() == namespace).then_some(pod)
}

/// Upstream `GetContainerSpec`: app, init or ephemeral container `name`.
fn has_container(pod: &Pod, name: &str) -> bool {
    let Some(spec) = &pod.spec else { return false };
    spec.containers.iter().any(|c| c.name == name)
        || spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
}

/// Upstream `validateContainerLogStatus`: the ID of the instance whose log to read, or the
/// message of the `400`.
pub(crate) fn container_log_id(
    pod_name: &str,
    status: &PodStatus,
    container: &str,
    previous: bool,
) -> Result<String, String> {
    let find = |list: &Option<Vec<ContainerStatus>>| {
        list.iter().flatten().find(|c| c.name == container).cloned()
    };
    let Some(cs) = find(&status.container_statuses)
        .or_else(|| find(&status.init_container_statuses))
        .or_else(|| find(&status.ephemeral_container_statuses))
    else {
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is not available"
        ));
    };
    let state = cs.state.unwrap_or_default();
    let last = cs
        .last_state
        .and_then(|s| s.terminated)
        .map(|t| t.container_id.unwrap_or_default())
        .filter(|id| !id.is_empty());
    let terminated_msg = || format!("container {container:?} in pod {pod_name:?} is terminated");
    if previous {
        return last.ok_or_else(|| {
            format!("previous terminated container {container:?} in pod {pod_name:?} not found")
        });
    }
    if state.running.is_some() {
        return cs
            .container_id
            .filter(|id| !id.is_empty())
            .ok_or_else(terminated_msg);
    }
    if let Some(t) = state.terminated {
        return t
            .container_id
            .filter(|id| !id.is_empty())
            .or(last)
            .ok_or_else(terminated_msg);
    }
    if let Some(id) = last {
        return Ok(id);
    }
    match state.waiting.and_then(|w| w.reason) {
        Some(reason) if reason == "ErrImagePull" => Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: image can't be pulled"
        )),
        Some(reason) if reason == "ImagePullBackOff" => Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: trying and failing to pull image"
        )),
        Some(reason) => Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: {reason}"
        )),
        None => Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"
        )),
    }
}

/// The query as the v1 `PodLogOptions` (upstream's parameter codec, with the legacy `tail`
/// parameter: a number or `all`); `Err` when a value does not decode.
pub(crate) fn decode_query(query: &str) -> Result<PodLogOptions, ()> {
    let mut opts = PodLogOptions::default();
    let mut tail = None;
    let pairs: Vec<(String, String)> =
        axum::extract::Query::try_from_uri(&format!("/?{query}").parse().map_err(|_| ())?)
            .map(|axum::extract::Query(pairs)| pairs)
            .map_err(|_| ())?;
    for (key, value) in pairs {
        match key.as_str() {
            "follow" => opts.follow = parse_bool(&value)?,
            "previous" => opts.previous = parse_bool(&value)?,
            "timestamps" => opts.timestamps = parse_bool(&value)?,
            "tailLines" => opts.tail_lines = Some(value.parse().map_err(|_| ())?),
            "limitBytes" => opts.limit_bytes = Some(value.parse().map_err(|_| ())?),
            "sinceSeconds" => opts.since_seconds = Some(value.parse().map_err(|_| ())?),
            "sinceTime" => opts.since_time = Some(value.parse().map_err(|_| ())?),
            "tail" => tail = Some(value),
            _ => {}
        }
    }
    match tail.as_deref() {
        None | Some("") => {}
        Some("all") => opts.tail_lines = None,
        Some(n) => opts.tail_lines = Some(n.parse().map_err(|_| ())?),
    }
    Ok(opts)
}

/// Go's `strconv.ParseBool`.
fn parse_bool(s: &str) -> Result<bool, ()> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(()),
    }
}

#[cfg(test)]
#[path = "logs_tests.rs"]
mod tests;
