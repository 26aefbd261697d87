//! A scripted API server behind a real `kube::Client` for the cluster unit tests: every
//! request goes to a handler closure over the method, path, query and JSON body, with no
//! network, so tests can run on a paused clock.

use std::sync::{Arc, Mutex, PoisonError};

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::{Value, json};

/// One request, as the handler sees it.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: Method,
    pub path: String,
    pub body: Value,
    pub at: tokio::time::Instant,
}

/// The requests a client made, in order.
#[derive(Clone, Debug, Default)]
pub struct Journal(Arc<Mutex<Vec<Call>>>);

impl Journal {
    pub fn calls(&self) -> Vec<Call> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// `"<METHOD> <path>"` of every call.
    pub fn lines(&self) -> Vec<String> {
        self.calls()
            .iter()
            .map(|c| format!("{} {}", c.method, c.path))
            .collect()
    }
}

/// A client whose requests `handler` answers with a status and a JSON body.
pub fn client<F>(handler: F) -> (kube::Client, Journal)
where
    F: Fn(&Call) -> (StatusCode, Value) + Send + Sync + 'static,
{
    let handler = Arc::new(handler);
    let journal = Journal::default();
    let recorded = journal.clone();
    let service = tower::service_fn(move |req: Request<Body>| {
        let handler = handler.clone();
        let journal = recorded.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect().await?.to_bytes();
            let call = Call {
                method: parts.method,
                path: parts.uri.path().to_owned(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                at: tokio::time::Instant::now(),
            };
            journal
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(call.clone());
            let (status, value) = handler(&call);
            let response = Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&value)?))?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
        }
    });
    (kube::Client::new(service, "default"), journal)
}

/// A `Status` failure body with `code` and `reason`.
pub fn status(code: StatusCode, reason: &str) -> (StatusCode, Value) {
    (
        code,
        json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": reason, "reason": reason, "code": code.as_u16(),
        }),
    )
}
