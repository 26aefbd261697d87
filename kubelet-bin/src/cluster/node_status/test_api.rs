//! A small in-memory API server for one Node behind a real `kube::Client` (tests only):
//! create, get, merge/strategic patch of the object and of `/status` (a strategic patch is
//! applied as the fake API server applies it), a request journal and injected failures.

use std::sync::{Arc, Mutex};

use axum::http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Value,
}

#[derive(Default)]
struct State {
    node: Option<Value>,
    resource_version: u64,
    journal: Vec<Call>,
    fail_next: usize,
}

/// The fake server; clones share state.
#[derive(Clone, Default)]
pub struct FakeNodeApi {
    state: Arc<Mutex<State>>,
}

impl FakeNodeApi {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client whose requests this server answers.
    pub fn client(&self) -> kube::Client {
        let api = self.clone();
        let service = tower::service_fn(move |req: Request<Body>| {
            let api = api.clone();
            async move { Ok::<_, std::convert::Infallible>(api.handle(req).await) }
        });
        kube::Client::new(service, "default")
    }

    /// Puts a Node in place (as another party registered it).
    pub fn set_node(&self, node: Value) {
        self.lock().node = Some(node);
    }

    /// The stored Node.
    pub fn node(&self) -> Option<Value> {
        self.lock().node.clone()
    }

    /// Deletes the Node.
    pub fn delete_node(&self) {
        self.lock().node = None;
    }

    /// Answers the next `n` requests with 500.
    pub fn fail_next(&self, n: usize) {
        self.lock().fail_next = n;
    }

    /// Every request so far.
    pub fn journal(&self) -> Vec<Call> {
        self.lock().journal.clone()
    }

    /// Requests of `method` whose path ends with `suffix`.
    pub fn count(&self, method: &str, suffix: &str) -> usize {
        self.journal()
            .iter()
            .filter(|c| c.method == method && c.path.ends_with(suffix))
            .count()
    }

    async fn handle(&self, req: Request<Body>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let bytes = body.collect_bytes().await.unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let path = parts.uri.path().to_owned();
        let mut state = self.lock();
        state.journal.push(Call {
            method: parts.method.to_string(),
            path: path.clone(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            body: body.clone(),
        });
        if state.fail_next > 0 {
            state.fail_next -= 1;
            return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError");
        }
        let rest = path.trim_start_matches("/api/v1/nodes");
        match (parts.method.as_str(), rest) {
            ("POST", "") => {
                if state.node.is_some() {
                    return status(StatusCode::CONFLICT, "AlreadyExists");
                }
                let mut node = body;
                node["metadata"]["uid"] = json!("uid-1");
                state.resource_version += 1;
                node["metadata"]["resourceVersion"] = json!(state.resource_version.to_string());
                state.node = Some(node.clone());
                respond(StatusCode::CREATED, &node)
            }
            ("GET", _) => match &state.node {
                Some(node) => respond(StatusCode::OK, node),
                None => status(StatusCode::NOT_FOUND, "NotFound"),
            },
            ("PATCH", sub) => {
                state.resource_version += 1;
                let rv = state.resource_version.to_string();
                let Some(node) = state.node.as_mut() else {
                    return status(StatusCode::NOT_FOUND, "NotFound");
                };
                let mut patch = body;
                if sub.ends_with("/status") {
                    patch = match patch.get("status") {
                        Some(status) => json!({ "status": status }),
                        None => json!({}),
                    };
                } else if let Some(p) = patch.as_object_mut() {
                    p.remove("status");
                }
                let strategic = parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .is_some_and(|ct| ct.as_bytes().starts_with(b"application/strategic"));
                if strategic {
                    match kubelet_core::testing::apiserver::strategic_merge(node, &patch) {
                        Ok(merged) => *node = merged,
                        Err(_) => return status(StatusCode::BAD_REQUEST, "BadRequest"),
                    }
                } else {
                    merge(node, &patch);
                }
                node["metadata"]["resourceVersion"] = json!(rv);
                respond(StatusCode::OK, node)
            }
            _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        }
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Some(t) = target.as_object_mut() {
        for (k, v) in patch {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

fn respond(code: StatusCode, value: &Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(serde_json::to_vec(value).unwrap_or_default()));
    *resp.status_mut() = code;
    resp
}

fn status(code: StatusCode, reason: &str) -> Response<Body> {
    respond(
        code,
        &json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": reason, "reason": reason, "code": code.as_u16(),
        }),
    )
}
