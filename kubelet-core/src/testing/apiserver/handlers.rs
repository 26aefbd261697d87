//! What each verb does: get, list (with `limit`/`continue`), watch, create, update, patch,
//! delete, deletecollection, the review and TokenRequest endpoints, and the few non-resource
//! paths a client asks for (`/version`, `/healthz`, `/api`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::Shared;
use super::auth::UserInfo;
use super::http::{ApiRequest, Body, stream_response};
use super::patch::{self, PatchType};
use super::resource::Gvr;
use super::selectors::{FieldSelector, LabelSelector, Selectors};
use super::status::ApiError;
use super::store::DeleteOptions;
use super::watch::{self, WatchRequest};

/// An answer.
pub(crate) enum Reply {
    Json(u16, Value),
    Text(String),
    Stream(hyper::Response<Body>),
}

/// Faults that change how a watch streams.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WatchFaults {
    pub(crate) gone: bool,
    pub(crate) close_after: Option<usize>,
    pub(crate) cut_mid_line: bool,
}

fn non_resource(path: &str) -> Result<Reply, ApiError> {
    match path.trim_end_matches('/') {
        "/version" => Ok(Reply::Json(
            200,
            json!({"major": "1", "minor": "20", "gitVersion": "v1.20.2-fake",
                   "platform": "linux/amd64", "goVersion": "go1.19"}),
        )),
        "/healthz" | "/livez" | "/readyz" => Ok(Reply::Text("ok".into())),
        "/api" => Ok(Reply::Json(
            200,
            json!({"kind": "APIVersions", "versions": ["v1"],
                   "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
        )),
        "/apis" => Ok(Reply::Json(
            200,
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []}),
        )),
        _ => Err(ApiError::not_found("path", path)),
    }
}

fn selectors(api: &ApiRequest) -> Result<Selectors, ApiError> {
    Ok(Selectors {
        fields: FieldSelector::parse(api.param("fieldSelector").unwrap_or(""))?,
        labels: LabelSelector::parse(api.param("labelSelector").unwrap_or(""))?,
    })
}

fn parse_rv(s: Option<&str>) -> Result<Option<u64>, ApiError> {
    match s {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {v:?}"))),
    }
}

/// A GET: from the (possibly lagging) watch cache for `resourceVersion=0`, as a real API
/// server answers it, else from the store.
fn get(
    shared: &Shared,
    api: &ApiRequest,
    gvr: &Gvr,
    ns: &str,
    name: &str,
) -> Result<Value, ApiError> {
    let lag = *shared
        .cache_lag
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if api.param("resourceVersion") == Some("0") && !lag.is_zero() {
        let now = tokio::time::Instant::now();
        let cutoff = now.checked_sub(lag).unwrap_or(now);
        return shared.read(|s| s.get_as_of(gvr, ns, name, cutoff));
    }
    shared.read(|s| s.get(gvr, ns, name))
}

/// Handles a parsed, authenticated request.
pub(crate) async fn dispatch(
    shared: &Arc<Shared>,
    api: &ApiRequest,
    user: Option<&UserInfo>,
    faults: WatchFaults,
) -> Result<Reply, ApiError> {
    let Some(gvr) = &api.gvr else {
        return non_resource(&api.path);
    };
    shared.auth.authorize(user, &api.verb, &api.resource())?;
    if let Some(node) = user.and_then(UserInfo::node_name)
        && shared.auth.node_restriction_on()
    {
        node_restriction(shared, api, gvr, node)?;
    }
    let ns = api.namespace.clone().unwrap_or_default();
    if gvr.namespaced() && ns.is_empty() && !matches!(api.verb.as_str(), "list" | "watch") {
        return Err(ApiError::not_found("namespace", ""));
    }
    let name = api.name.clone().unwrap_or_default();
    let sub = api.subresource.as_deref();
    match (api.verb.as_str(), sub) {
        ("get", None | Some("status")) => Ok(Reply::Json(200, get(shared, api, gvr, &ns, &name)?)),
        ("list", None) => list(shared, api, gvr),
        ("watch", None) => watch(shared, api, gvr, faults),
        ("create", None) => match gvr.resource.as_str() {
            "tokenreviews" => Ok(Reply::Json(201, shared.auth.token_review(api.json()?))),
            "subjectaccessreviews" => Ok(Reply::Json(
                201,
                shared.auth.subject_access_review(api.json()?),
            )),
            _ => Ok(Reply::Json(
                201,
                shared.write(|s| s.create(gvr, &ns, api.json()?))?,
            )),
        },
        ("create", Some("token")) if gvr.resource == "serviceaccounts" => {
            token_request(shared, api, gvr, &ns, &name)
        }
        ("update", None | Some("status")) => Ok(Reply::Json(
            200,
            shared.write(|s| s.update(gvr, &ns, &name, api.json()?, sub))?,
        )),
        // A CSR's approval conditions live in its status (the registry's approval strategy
        // changes only `status.conditions`; here the whole status, as `/status` does).
        ("update", Some("approval")) if gvr.resource == "certificatesigningrequests" => {
            Ok(Reply::Json(
                200,
                shared.write(|s| s.update(gvr, &ns, &name, api.json()?, Some("status")))?,
            ))
        }
        ("patch" | "update", Some("ephemeralcontainers")) if gvr.resource == "pods" => {
            let body = api.json()?;
            let ty = (api.verb == "patch")
                .then(|| PatchType::from_content_type(&api.content_type))
                .transpose()?;
            let out = shared.write(|s| {
                let current = s.get(gvr, &ns, &name)?;
                let wanted = match ty {
                    Some(ty) => patch::apply(&current, &body, ty)?,
                    None => body,
                };
                let updated = with_ephemeral_containers(&current, &wanted, &name)?;
                s.update(gvr, &ns, &name, updated, None)
            })?;
            Ok(Reply::Json(200, out))
        }
        ("patch", None | Some("status")) => {
            let ty = PatchType::from_content_type(&api.content_type)?;
            let body = api.json()?;
            let out = shared.write(|s| {
                let current = s.get(gvr, &ns, &name)?;
                let patched = patch::apply(&current, &body, ty)?;
                s.update(gvr, &ns, &name, patched, sub)
            })?;
            Ok(Reply::Json(200, out))
        }
        ("delete", None) => {
            let opts = delete_options(api)?;
            Ok(Reply::Json(
                200,
                shared.write(|s| s.delete(gvr, &ns, &name, &opts))?,
            ))
        }
        ("deletecollection", None) => {
            let opts = delete_options(api)?;
            let sel = selectors(api)?;
            let items = shared.write(|s| {
                let names: Vec<String> = s
                    .list(gvr, api.namespace.as_deref(), &sel)
                    .iter()
                    .filter_map(|o| {
                        o.pointer("/metadata/name")
                            .and_then(Value::as_str)
                            .map(String::from)
                    })
                    .collect();
                names
                    .iter()
                    .filter_map(|n| s.delete(gvr, &ns, n, &opts).ok())
                    .collect::<Vec<_>>()
            });
            Ok(Reply::Json(
                200,
                list_body(gvr, items, shared.read(|s| s.rv()), None),
            ))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn list_body(gvr: &Gvr, items: Vec<Value>, rv: u64, cont: Option<String>) -> Value {
    let items: Vec<Value> = items
        .into_iter()
        .map(|mut o| {
            if let Value::Object(m) = &mut o {
                // The API server leaves kind and apiVersion out of list items.
                m.remove("kind");
                m.remove("apiVersion");
            }
            o
        })
        .collect();
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    json!({
        "kind": format!("{}List", gvr.kind()),
        "apiVersion": gvr.api_version(),
        "metadata": meta,
        "items": items,
    })
}

/// A list; with `limit`, pages continue by `continue` tokens (`<rv>/<offset>`), which expire
/// (410) when the history they were taken from is gone.
fn list(shared: &Shared, api: &ApiRequest, gvr: &Gvr) -> Result<Reply, ApiError> {
    let sel = selectors(api)?;
    let limit = api
        .param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let (offset, token_rv) = match api.param("continue").filter(|c| !c.is_empty()) {
        Some(c) => {
            let bad = || ApiError::bad_request(format!("invalid continue token {c:?}"));
            let (rv, off) = c.split_once('/').ok_or_else(bad)?;
            (
                off.parse().map_err(|_| bad())?,
                Some(rv.parse::<u64>().map_err(|_| bad())?),
            )
        }
        None => (0, None),
    };
    let (items, rv) = shared.read(|s| {
        if let Some(trv) = token_rv
            && trv < s.floor()
        {
            return Err(ApiError::expired(trv, s.floor()));
        }
        Ok((s.list(gvr, api.namespace.as_deref(), &sel), s.rv()))
    })?;
    let rest: Vec<Value> = items.into_iter().skip(offset).collect();
    let (page, cont) = match limit {
        Some(l) if rest.len() > l => (
            rest[..l].to_vec(),
            Some(format!("{}/{}", token_rv.unwrap_or(rv), offset + l)),
        ),
        _ => (rest, None),
    };
    Ok(Reply::Json(200, list_body(gvr, page, rv, cont)))
}

fn watch(
    shared: &Arc<Shared>,
    api: &ApiRequest,
    gvr: &Gvr,
    faults: WatchFaults,
) -> Result<Reply, ApiError> {
    let req = WatchRequest {
        gvr: gvr.clone(),
        namespace: api.namespace.clone(),
        selectors: selectors(api)?,
        since: parse_rv(api.param("resourceVersion"))?,
        timeout: api
            .param("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .map(Duration::from_secs),
        bookmarks: matches!(api.param("allowWatchBookmarks"), Some("true" | "1")),
        close_after: faults.close_after,
        cut_mid_line: faults.cut_mid_line,
        gone: faults.gone,
    };
    let (resp, tx) = stream_response();
    tokio::spawn(watch::run(shared.clone(), req, tx));
    Ok(Reply::Stream(resp))
}

fn delete_options(api: &ApiRequest) -> Result<DeleteOptions, ApiError> {
    let body = api.json()?;
    let grace = body
        .get("gracePeriodSeconds")
        .and_then(Value::as_i64)
        .or_else(|| api.param("gracePeriodSeconds").and_then(|g| g.parse().ok()));
    let pre = |f: &str| {
        body.pointer(&format!("/preconditions/{f}"))
            .and_then(Value::as_str)
            .map(String::from)
    };
    Ok(DeleteOptions {
        grace_period_seconds: grace,
        uid: pre("uid"),
        resource_version: pre("resourceVersion"),
    })
}

/// `POST serviceaccounts/{sa}/token`: the service account must exist, and so must the pod of
/// a `boundObjectRef` (with its uid, if given).
fn token_request(
    shared: &Shared,
    api: &ApiRequest,
    gvr: &Gvr,
    ns: &str,
    sa: &str,
) -> Result<Reply, ApiError> {
    let body = api.json()?;
    shared.read(|s| s.get(gvr, ns, sa))?;
    if let Some(bound) = body.pointer("/spec/boundObjectRef")
        && bound.get("kind").and_then(Value::as_str) == Some("Pod")
    {
        let pods = Gvr {
            group: String::new(),
            version: "v1".into(),
            resource: "pods".into(),
        };
        let pod_name = bound.get("name").and_then(Value::as_str).unwrap_or("");
        let pod = shared.read(|s| s.get(&pods, ns, pod_name))?;
        if let Some(uid) = bound.get("uid").and_then(Value::as_str)
            && pod.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid)
        {
            return Err(ApiError::conflict(
                "pods",
                pod_name,
                "the UID in the bound object reference does not match",
            ));
        }
    }
    Ok(Reply::Json(201, shared.auth.issue_token(ns, sa, body)))
}

/// NodeRestriction-like rules for a node user: writes only to its own Node and Lease, to pods
/// bound to it, and creations of mirror pods bound to it.
fn node_restriction(
    shared: &Shared,
    api: &ApiRequest,
    gvr: &Gvr,
    node: &str,
) -> Result<(), ApiError> {
    if !matches!(
        api.verb.as_str(),
        "create" | "update" | "patch" | "delete" | "deletecollection"
    ) {
        return Ok(());
    }
    let deny = |why: &str| Err(ApiError::forbidden(format!("node \"{node}\" {why}")));
    let body_name = || {
        api.json().ok().and_then(|b| {
            b.pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(String::from)
        })
    };
    let target = api.name.clone().or_else(body_name).unwrap_or_default();
    match gvr.resource.as_str() {
        "nodes" if target != node => deny(&format!("is not allowed to modify node \"{target}\"")),
        "leases" if target != node || api.namespace.as_deref() != Some("kube-node-lease") => {
            deny("is not allowed to modify other nodes' leases")
        }
        "pods" if api.verb == "create" && api.subresource.is_none() => {
            let body = api.json()?;
            let mirror = body
                .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
                .is_some();
            let bound = body.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node);
            if mirror && bound {
                Ok(())
            } else {
                deny("can only create mirror pods bound to itself")
            }
        }
        "pods" => {
            let ns = api.namespace.clone().unwrap_or_default();
            let pod = shared.read(|s| s.get(gvr, &ns, &target))?;
            if pod.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node) {
                Ok(())
            } else {
                deny("can only modify pods bound to itself")
            }
        }
        _ => Ok(()),
    }
}

/// The `pods/ephemeralcontainers` subresource as 1.25+ serves it (a `Pod` in, a `Pod` out):
/// only `spec.ephemeralContainers` of `wanted` is taken, and only additions are allowed (as
/// upstream's `ValidatePodEphemeralContainersUpdate`): an existing one may not change, a new
/// one may not set ports, probes, lifecycle or resources, nor reuse a container's name.
fn with_ephemeral_containers(
    current: &Value,
    wanted: &Value,
    name: &str,
) -> Result<Value, ApiError> {
    let invalid = |m: String| ApiError::invalid(format!("Pod \"{name}\" is invalid: {m}"));
    if wanted.get("kind").and_then(Value::as_str) != Some("Pod") {
        return Err(ApiError::bad_request(
            "the ephemeralcontainers subresource takes a Pod (kind EphemeralContainers was 1.21's)",
        ));
    }
    let list = |pod: &Value, key: &str| -> Vec<Value> {
        pod.pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let old = list(current, "ephemeralContainers");
    let new = list(wanted, "ephemeralContainers");
    let name_of = |c: &Value| {
        c.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    for (i, o) in old.iter().enumerate() {
        if new.get(i) != Some(o) {
            return Err(invalid(format!(
                "spec.ephemeralContainers[{i}]: Forbidden: existing ephemeral containers \"{}\" may not be changed",
                name_of(o)
            )));
        }
    }
    let taken: Vec<String> = list(current, "containers")
        .iter()
        .chain(&list(current, "initContainers"))
        .chain(&old)
        .map(name_of)
        .collect();
    for (i, c) in new.iter().enumerate().skip(old.len()) {
        for field in [
            "ports",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
            "lifecycle",
            "resources",
        ] {
            if c.get(field)
                .is_some_and(|v| !v.is_null() && v != &serde_json::json!({}))
            {
                return Err(invalid(format!(
                    "spec.ephemeralContainers[{i}].{field}: Forbidden: cannot be set for an Ephemeral Container"
                )));
            }
        }
        if taken.contains(&name_of(c)) {
            return Err(invalid(format!(
                "spec.ephemeralContainers[{i}].name: Duplicate value: \"{}\"",
                name_of(c)
            )));
        }
    }
    let mut updated = current.clone();
    if let Some(spec) = updated.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("ephemeralContainers".into(), Value::Array(new));
    }
    Ok(updated)
}
