//! The HTTP side: the accept loop (HTTP/1.1 on a TCP listener), parsing a request into verb,
//! resource, namespace and name (`/api/v1/namespaces/{ns}/{resource}/{name}/{subresource}`,
//! `/apis/{group}/{version}/…`), applying faults and authentication, and journaling the answer.

use std::convert::Infallible;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER, USER_AGENT};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::Shared;
use super::faults::{Fault, RequestInfo};
use super::handlers::{self, Reply};
use super::journal::Entry;
use super::resource::Gvr;
use super::status::ApiError;

/// A response body: whole or streamed.
pub(crate) type Body = BoxBody<Bytes, io::Error>;

/// Serves connections until the task is aborted; aborting it drops every open connection.
pub(crate) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                let shared = shared.clone();
                conns.spawn(async move {
                    let service =
                        hyper::service::service_fn(move |req| handle(shared.clone(), peer, req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// A request, parsed.
#[derive(Debug, Clone)]
pub(crate) struct ApiRequest {
    pub(crate) verb: String,
    /// `None` for non-resource paths (`/version`, `/healthz`, …).
    pub(crate) gvr: Option<Gvr>,
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) subresource: Option<String>,
    pub(crate) path: String,
    pub(crate) query: Vec<(String, String)>,
    pub(crate) content_type: String,
    pub(crate) body: Bytes,
}

impl ApiRequest {
    /// A query parameter.
    pub(crate) fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `pods` or `pods/status`.
    pub(crate) fn resource(&self) -> String {
        match (&self.gvr, &self.subresource) {
            (Some(g), Some(s)) => format!("{}/{s}", g.resource),
            (Some(g), None) => g.resource.clone(),
            (None, _) => String::new(),
        }
    }

    /// The body as JSON.
    pub(crate) fn json(&self) -> Result<Value, ApiError> {
        if self.body.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&self.body)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))
    }
}

fn percent_decode(s: &str) -> String {
    let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
            (b'+', _, _) => out.push(b' '),
            (b'%', Some(hi), Some(lo)) => {
                out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'?'));
                i += 2;
            }
            (b, _, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(kv), String::new()),
        })
        .collect()
}

/// Splits a path into group/version/resource, namespace, name and subresource.
#[allow(clippy::type_complexity)]
fn parse_path(path: &str) -> Option<(Gvr, Option<String>, Option<String>, Option<String>)> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        _ => (None, rest),
    };
    let (resource, name, sub) = match rest {
        [r] => (*r, None, None),
        [r, n] => (*r, Some((*n).to_owned()), None),
        [r, n, s] => (*r, Some((*n).to_owned()), Some((*s).to_owned())),
        _ => return None,
    };
    let gvr = Gvr {
        group: group.into(),
        version: version.into(),
        resource: resource.into(),
    };
    Some((gvr, namespace, name, sub))
}

fn verb(method: &Method, name: bool, watch: bool) -> &'static str {
    match (method.as_str(), name) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "",
    }
}

pub(crate) fn json_response(code: u16, body: &Value) -> Response<Body> {
    let mut resp = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

pub(crate) fn error_response(e: &ApiError) -> Response<Body> {
    let mut resp = json_response(e.code, &e.to_status());
    if let Some(secs) = e.retry_after {
        resp.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

/// A streamed `application/json` response and its sender.
pub(crate) fn stream_response() -> (
    Response<Body>,
    mpsc::Sender<Result<Frame<Bytes>, io::Error>>,
) {
    let (tx, rx) = mpsc::channel(64);
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|f| (f, rx)) });
    let mut resp = Response::new(StreamBody::new(stream).boxed());
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    (resp, tx)
}

fn header(req: &Request<Incoming>, name: hyper::header::HeaderName) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// One request, start to finish. `Err` drops the connection without an answer.
async fn handle(
    shared: Arc<Shared>,
    peer: std::net::SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Body>, io::Error> {
    let start = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let raw_query = req.uri().query().unwrap_or("").to_owned();
    let query = parse_query(&raw_query);
    let user_agent = header(&req, USER_AGENT);
    let content_type = header(&req, CONTENT_TYPE).unwrap_or_default();
    let token =
        header(&req, AUTHORIZATION).and_then(|a| a.strip_prefix("Bearer ").map(str::to_owned));
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let watch = query
        .iter()
        .any(|(k, v)| k == "watch" && (v == "true" || v == "1"));
    let parsed = parse_path(&path);
    let (gvr, namespace, name, subresource) = match parsed {
        Some((g, ns, n, s)) => (Some(g), ns, n, s),
        None => (None, None, None, None),
    };
    let verb = if gvr.is_some() {
        verb(&method, name.is_some(), watch)
    } else {
        ""
    };
    let api = ApiRequest {
        verb: verb.to_owned(),
        gvr,
        namespace,
        name,
        subresource,
        path: path.clone(),
        query,
        content_type: content_type.clone(),
        body,
    };
    let resource = api.resource();
    let user = shared.auth.authenticate(token.as_deref());
    let mut entry = Entry {
        method: method.to_string(),
        path,
        query: raw_query,
        verb: api.verb.clone(),
        resource: resource.clone(),
        namespace: api.namespace.clone(),
        name: api.name.clone(),
        user_agent: user_agent.clone(),
        user: user
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .map(|u| u.username.clone()),
        content_type: (!content_type.is_empty()).then_some(content_type),
        body: String::from_utf8_lossy(&api.body).into_owned(),
        status: 0,
        latency: std::time::Duration::ZERO,
        peer: Some(peer),
    };
    let info = RequestInfo {
        verb: &api.verb,
        resource: &resource,
        namespace: api.namespace.as_deref(),
        name: api.name.as_deref(),
        user_agent: user_agent.as_deref(),
    };
    let fault = shared.faults.take(&info);
    let mut watch_faults = handlers::WatchFaults::default();
    match fault {
        Some(Fault::Refuse) => {
            shared.journal.record(entry);
            return Err(io::Error::other("injected fault: connection dropped"));
        }
        Some(Fault::BlackHole) => {
            shared.journal.record(entry);
            return std::future::pending().await;
        }
        Some(Fault::HeadersThenNothing) => {
            entry.status = 200;
            entry.latency = start.elapsed();
            shared.journal.record(entry);
            let (resp, tx) = stream_response();
            tokio::spawn(async move { tx.closed().await });
            return Ok(resp);
        }
        Some(Fault::Status(code)) => {
            return Ok(finish(&shared, entry, start, Err(ApiError::injected(code))));
        }
        Some(Fault::TooManyRequests { retry_after }) => {
            let mut e = ApiError::injected(429);
            e.retry_after = Some(retry_after);
            return Ok(finish(&shared, entry, start, Err(e)));
        }
        Some(Fault::Conflict) => {
            let e = ApiError::conflict(
                &resource,
                api.name.as_deref().unwrap_or(""),
                "injected fault",
            );
            return Ok(finish(&shared, entry, start, Err(e)));
        }
        Some(Fault::Gone) if api.verb != "watch" => {
            let e = ApiError::expired(0, 0);
            return Ok(finish(&shared, entry, start, Err(e)));
        }
        Some(Fault::Gone) => watch_faults.gone = true,
        Some(Fault::Latency(d)) => tokio::time::sleep(d).await,
        Some(Fault::CloseWatchAfter(n)) => watch_faults.close_after = Some(n),
        Some(Fault::CutWatchMidLine) => watch_faults.cut_mid_line = true,
        Some(Fault::Restart) => shared.restart(),
        None => {}
    }
    let reply = match user {
        Ok(user) => handlers::dispatch(&shared, &api, user.as_ref(), watch_faults).await,
        Err(e) => Err(e),
    };
    Ok(finish(&shared, entry, start, reply))
}

/// Journals the answer and builds the response.
fn finish(
    shared: &Shared,
    mut entry: Entry,
    start: Instant,
    reply: Result<Reply, ApiError>,
) -> Response<Body> {
    let resp = match reply {
        Ok(Reply::Json(code, body)) => json_response(code, &body),
        Ok(Reply::Text(text)) => {
            let mut r = Response::new(
                Full::new(Bytes::from(text))
                    .map_err(|never: Infallible| match never {})
                    .boxed(),
            );
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            r
        }
        Ok(Reply::Stream(resp)) => resp,
        Err(e) => error_response(&e),
    };
    entry.status = resp.status().as_u16();
    entry.latency = start.elapsed();
    shared.journal.record(entry);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_queries_parse_like_the_api_server() {
        let (g, ns, n, s) = parse_path("/api/v1/namespaces/default/pods/p1/status").expect("ok");
        assert_eq!(
            (
                g.resource.as_str(),
                ns.as_deref(),
                n.as_deref(),
                s.as_deref()
            ),
            ("pods", Some("default"), Some("p1"), Some("status"))
        );
        let (g, ns, n, _) =
            parse_path("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")
                .expect("ok");
        assert_eq!(
            (g.group.as_str(), ns.as_deref(), n),
            ("coordination.k8s.io", Some("kube-node-lease"), None)
        );
        let (g, ns, n, _) = parse_path("/api/v1/namespaces/default").expect("ok");
        assert_eq!(
            (g.resource.as_str(), ns, n.as_deref()),
            ("namespaces", None, Some("default"))
        );
        assert!(parse_path("/version").is_none());
        let q = parse_query("fieldSelector=spec.nodeName%3Dn1&watch=true&x");
        assert_eq!(q[0], ("fieldSelector".into(), "spec.nodeName=n1".into()));
        assert_eq!(q[2], ("x".into(), String::new()));
    }
}
