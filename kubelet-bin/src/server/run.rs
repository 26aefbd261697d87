//! `/run/{ns}/{pod}[/{uid}]/{container}?cmd=…` (POST) on the secure port (upstream
//! `pkg/kubelet/server/server.go` `getRun` and `kubelet_pods.go` `RunInContainer`): runs the
//! space-separated `cmd` in the running container to its end (CRI `ExecSync`, no timeout) and
//! answers `200` with its stdout then its stderr (`application/json`, as upstream's
//! `writeJSONResponse` labels whatever the command printed).
//!
//! As upstream: `404` `pod does not exist`; a container that is not running, a runtime error
//! or a non-zero exit code → `500` with the error's text (`command '<cmd>' exited with <code>:
//! <stderr>` for the latter, the CRI client's message); this kubelet answers `404` for a
//! container that is not running, as `/exec` does.

use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::ServerState;
use super::streaming::{StreamPath, find_container, pod_by_name, text};

/// The `/run` handler.
pub(crate) async fn run(
    State(state): State<ServerState>,
    Path(path): Path<StreamPath>,
    request: Request,
) -> Response {
    let Some(pod) = pod_by_name(&state, &path.namespace, &path.pod) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    // Upstream: `strings.Split(request.QueryParameter("cmd"), " ")`.
    let cmd: Vec<String> = form_urlencoded::parse(request.uri().query().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "cmd")
        .map(|(_, v)| v.split(' ').map(str::to_owned).collect())
        .unwrap_or_else(|| vec![String::new()]);
    let container = path.container.unwrap_or_default();
    let id = match find_container(&state, &pod, path.uid.as_deref(), &container).await {
        Ok(id) => id,
        Err(response) => return response,
    };
    let result = match state
        .runtime
        .exec_sync(&id, &cmd, std::time::Duration::ZERO, usize::MAX)
        .await
    {
        Ok(result) => result,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    if result.exit_code != 0 {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "command '{}' exited with {}: {}",
                cmd.join(" "),
                result.exit_code,
                String::from_utf8_lossy(&result.stderr)
            ),
        );
    }
    let mut body = result.stdout;
    body.extend_from_slice(&result.stderr);
    if body.is_empty() {
        return StatusCode::OK.into_response();
    }
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}
