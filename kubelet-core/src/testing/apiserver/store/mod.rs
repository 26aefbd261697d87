//! The object store: JSON objects of any resource keyed by group/version/resource, namespace
//! and name, with one increasing resourceVersion across all of them (etcd's revision) and the
//! history of changes that watches replay (mirrors the generic registry
//! `k8s.io/apiserver/pkg/registry/generic/registry/store.go` and the pod strategy's graceful
//! deletion in `pkg/registry/core/pod/strategy.go`).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::resource::Gvr;
use super::selectors::Selectors;
use super::status::ApiError;

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change in the history.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) rv: u64,
    pub(crate) gvr: Gvr,
    pub(crate) namespace: String,
    pub(crate) ty: EventType,
    /// The object after the change (for a deletion: its last state, with the deletion's rv).
    pub(crate) object: Value,
    /// The object before the change (`None` for a creation).
    pub(crate) old: Option<Value>,
    /// When the change was made (the clock the cache lag of [`Store::get_as_of`] reads).
    pub(crate) at: tokio::time::Instant,
}

mod delete;

type Key = (Gvr, String, String);

/// What DELETE asked for (`DeleteOptions` from the body or the query).
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    pub(crate) grace_period_seconds: Option<i64>,
    pub(crate) uid: Option<String>,
    pub(crate) resource_version: Option<String>,
}

/// All objects and their history.
#[derive(Debug, Default)]
pub(crate) struct Store {
    objects: BTreeMap<Key, Value>,
    rv: u64,
    /// History before this revision is lost: watching or listing from an older one is 410.
    floor: u64,
    history: Vec<Change>,
    /// Bumped by each restart; open watches end when it changes.
    epoch: u64,
}

fn meta(obj: &Value) -> &Value {
    obj.get("metadata").unwrap_or(&Value::Null)
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).get(field).and_then(Value::as_str)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let Value::Object(o) = obj else {
        unreachable!("just made an object")
    };
    let m = o.entry("metadata").or_insert_with(|| json!({}));
    if !m.is_object() {
        *m = json!({});
    }
    match m {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// Now, at second precision, as the API server writes `metav1.Time`.
pub(crate) fn now_rfc3339(offset_seconds: i64) -> String {
    let now = crate::time::now()
        .as_second()
        .saturating_add(offset_seconds);
    k8s_openapi::jiff::Timestamp::from_second(now)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn new_uid() -> String {
    let n: u128 = rand::random();
    let h = format!("{n:032x}");
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

fn random_suffix() -> String {
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| CHARS[rand::random_range(0..CHARS.len())] as char)
        .collect()
}

impl Store {
    /// The current (latest) resourceVersion.
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    /// The oldest resourceVersion a watch may still start from.
    pub(crate) fn floor(&self) -> u64 {
        self.floor
    }

    /// Forgets the history, as a restarted server does (its watch cache starts over, and the
    /// writes a starting server makes move the revision on): watches and list continuations
    /// from any resourceVersion handed out before get 410 Gone.
    pub(crate) fn compact(&mut self) {
        self.rv += 1;
        self.floor = self.rv;
        self.history.clear();
        self.epoch += 1;
    }

    /// How many times the server restarted.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Changes after `rv`, or 410 if the history no longer reaches back that far.
    pub(crate) fn changes_since(&self, rv: u64) -> Result<Vec<Change>, ApiError> {
        if rv < self.floor {
            return Err(ApiError::expired(rv, self.floor));
        }
        let start = self.history.partition_point(|c| c.rv <= rv);
        Ok(self.history[start..].to_vec())
    }

    fn record(&mut self, gvr: &Gvr, ns: &str, ty: EventType, object: &Value, old: Option<Value>) {
        self.history.push(Change {
            rv: self.rv,
            gvr: gvr.clone(),
            namespace: ns.to_owned(),
            ty,
            object: object.clone(),
            old,
            at: tokio::time::Instant::now(),
        });
    }

    fn bump(&mut self, obj: &mut Value) {
        self.rv += 1;
        meta_mut(obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
    }

    /// The object, with `kind` and `apiVersion` set.
    pub(crate) fn get(&self, gvr: &Gvr, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.objects
            .get(&(gvr.clone(), ns.to_owned(), name.to_owned()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&gvr.to_string(), name))
    }

    /// The object as it was at `cutoff`: what a watch cache that has not yet seen the changes
    /// made after `cutoff` serves (a real API server answers `resourceVersion=0` reads from
    /// such a cache). Changes are undone newest first; where the history does not reach back
    /// (after a restart) the current object is the answer.
    pub(crate) fn get_as_of(
        &self,
        gvr: &Gvr,
        ns: &str,
        name: &str,
        cutoff: tokio::time::Instant,
    ) -> Result<Value, ApiError> {
        let mut object = self
            .objects
            .get(&(gvr.clone(), ns.to_owned(), name.to_owned()))
            .cloned();
        for change in self.history.iter().rev().take_while(|c| c.at > cutoff) {
            if &change.gvr == gvr
                && change.namespace == ns
                && meta_str(&change.object, "name") == Some(name)
            {
                object.clone_from(&change.old);
            }
        }
        object.ok_or_else(|| ApiError::not_found(&gvr.to_string(), name))
    }

    /// Matching objects of a resource (in one namespace, or all with `None`), in key order.
    pub(crate) fn list(&self, gvr: &Gvr, ns: Option<&str>, sel: &Selectors) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((g, n, _), o)| g == gvr && ns.is_none_or(|ns| ns == n) && sel.matches(o))
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// Creates an object: name (or `generateName`), uid, creationTimestamp, resourceVersion,
    /// generation; 409 AlreadyExists if the name is taken.
    pub(crate) fn create(
        &mut self,
        gvr: &Gvr,
        ns: &str,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        let kind = gvr.kind();
        if let Value::Object(o) = &mut obj {
            o.insert("kind".into(), json!(kind));
            o.insert("apiVersion".into(), json!(gvr.api_version()));
        } else {
            return Err(ApiError::bad_request("the body is not a JSON object"));
        }
        let m = meta_mut(&mut obj);
        let name = match m.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => match m.get("generateName").and_then(Value::as_str) {
                Some(g) if !g.is_empty() => format!("{g}{}", random_suffix()),
                _ => return Err(ApiError::invalid("metadata.name: Required value")),
            },
        };
        match m.get("namespace").and_then(Value::as_str) {
            Some(n) if !n.is_empty() && n != ns => {
                return Err(ApiError::bad_request(format!(
                    "the namespace of the provided object ({n}) does not match the namespace sent on the request ({ns})"
                )));
            }
            _ => {}
        }
        if gvr.namespaced() {
            m.insert("namespace".into(), json!(ns));
        } else {
            m.remove("namespace");
        }
        m.insert("name".into(), json!(name));
        m.insert("uid".into(), json!(new_uid()));
        m.insert("creationTimestamp".into(), json!(now_rfc3339(0)));
        m.insert("generation".into(), json!(1));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        let key = (gvr.clone(), ns.to_owned(), name.clone());
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&gvr.to_string(), &name));
        }
        if gvr.resource == "pods" {
            // The pod strategy's PrepareForCreate: status starts over as Pending.
            obj["status"] = json!({"phase": "Pending"});
        }
        self.bump(&mut obj);
        self.record(gvr, ns, EventType::Added, &obj, None);
        self.objects.insert(key, obj.clone());
        Ok(obj)
    }

    /// Replaces an object (PUT, and PATCH after the patch is applied). `subresource` is
    /// `Some("status")` for `/status`. A non-empty `metadata.resourceVersion` that is not the
    /// current one is 409 Conflict. Without `/status`, status is kept (for resources with a
    /// status subresource); with it, only status changes.
    pub(crate) fn update(
        &mut self,
        gvr: &Gvr,
        ns: &str,
        name: &str,
        mut obj: Value,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError> {
        let key = (gvr.clone(), ns.to_owned(), name.to_owned());
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&gvr.to_string(), name))?;
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body is not a JSON object"));
        }
        if let Some(n) = meta_str(&obj, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        match meta_str(&obj, "resourceVersion") {
            Some(rv) if !rv.is_empty() && meta_str(&old, "resourceVersion") != Some(rv) => {
                return Err(ApiError::conflict(
                    &gvr.to_string(),
                    name,
                    "the object has been modified; please apply your changes to the latest version and try again",
                ));
            }
            _ => {}
        }
        if let Some(uid) = meta_str(&obj, "uid")
            && !uid.is_empty()
            && Some(uid) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                &gvr.to_string(),
                name,
                "Precondition failed: UID in object meta does not match",
            ));
        }
        let mut new = if subresource == Some("status") {
            let mut n = old.clone();
            n["status"] = obj.get("status").cloned().unwrap_or(Value::Null);
            n
        } else {
            if gvr.has_status() {
                match old.get("status") {
                    Some(s) => obj["status"] = s.clone(),
                    None => {
                        if let Value::Object(o) = &mut obj {
                            o.remove("status");
                        }
                    }
                }
            }
            obj
        };
        if let Value::Object(o) = &mut new {
            o.insert("kind".into(), json!(gvr.kind()));
            o.insert("apiVersion".into(), json!(gvr.api_version()));
        }
        // Fields the server owns stay as they were.
        let om = meta(&old).clone();
        let m = meta_mut(&mut new);
        for f in [
            "uid",
            "creationTimestamp",
            "namespace",
            "name",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match om.get(f) {
                Some(v) => m.insert(f.into(), v.clone()),
                None => m.remove(f),
            };
        }
        let spec_changed =
            subresource.is_none() && strip_meta_status(&old) != strip_meta_status(&new);
        if spec_changed {
            let g = meta(&old)
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        if new == old_with_rv(&old, &new) {
            return Ok(old); // a no-op write does not bump the resourceVersion
        }
        self.bump(&mut new);
        if delete::finalized(&new) {
            self.objects.remove(&key);
            self.record(gvr, ns, EventType::Deleted, &new, Some(old));
        } else {
            self.objects.insert(key, new.clone());
            self.record(gvr, ns, EventType::Modified, &new, Some(old));
        }
        Ok(new)
    }
}

fn strip_meta_status(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Value::Object(m) = &mut o {
        m.remove("metadata");
        m.remove("status");
    }
    o
}

/// `old` with `new`'s resourceVersion, to compare a write against the stored object.
fn old_with_rv(old: &Value, new: &Value) -> Value {
    let mut o = old.clone();
    match meta(new).get("resourceVersion") {
        Some(rv) => {
            meta_mut(&mut o).insert("resourceVersion".into(), rv.clone());
        }
        None => {
            meta_mut(&mut o).remove("resourceVersion");
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> Gvr {
        crate::testing::apiserver::gvr_of("v1", "pods")
    }

    fn rv(o: &Value) -> u64 {
        meta_str(o, "resourceVersion")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    #[test]
    fn create_sets_server_fields_and_one_increasing_resource_version() {
        let mut s = Store::default();
        let a = s
            .create(&pods(), "ns", json!({"metadata": {"name": "a"}}))
            .expect("ok");
        let b = s
            .create(&pods(), "ns", json!({"metadata": {"generateName": "b-"}}))
            .expect("ok");
        assert!(rv(&b) > rv(&a));
        assert_eq!(a["kind"], "Pod");
        assert_eq!(a["metadata"]["namespace"], "ns");
        assert_eq!(a["metadata"]["generation"], 1);
        assert_eq!(a["metadata"]["uid"].as_str().map(str::len), Some(36));
        assert!(meta_str(&b, "name").is_some_and(|n| n.starts_with("b-") && n.len() == 7));
        let dup = s
            .create(&pods(), "ns", json!({"metadata": {"name": "a"}}))
            .expect_err("fails");
        assert_eq!((dup.code, dup.reason), (409, "AlreadyExists"));
    }

    #[test]
    fn stale_update_conflicts_and_status_is_kept_by_the_main_endpoint() {
        let mut s = Store::default();
        let a = s
            .create(
                &pods(),
                "ns",
                json!({"metadata": {"name": "a"}, "spec": {"x": 1}}),
            )
            .expect("ok");
        let mut st = a.clone();
        st["status"] = json!({"phase": "Running"});
        let st = s
            .update(&pods(), "ns", "a", st, Some("status"))
            .expect("ok");
        assert_eq!(st["status"]["phase"], "Running");
        assert_eq!(st["metadata"]["generation"], 1);
        let mut stale = a.clone();
        stale["spec"]["x"] = json!(2);
        assert_eq!(
            s.update(&pods(), "ns", "a", stale, None)
                .expect_err("fails")
                .code,
            409
        );
        let mut fresh = st.clone();
        fresh["spec"]["x"] = json!(2);
        fresh["status"] = json!({"phase": "Failed"});
        let out = s.update(&pods(), "ns", "a", fresh, None).expect("ok");
        assert_eq!(out["status"]["phase"], "Running");
        assert_eq!(out["metadata"]["generation"], 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lagging_cache_sees_the_store_as_it_was() {
        use std::time::Duration;
        let mut s = Store::default();
        let before_create = tokio::time::Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        let a = s
            .create(
                &pods(),
                "ns",
                json!({"metadata": {"name": "a"}, "spec": {"x": 1}}),
            )
            .expect("ok");
        tokio::time::advance(Duration::from_millis(10)).await;
        let after_create = tokio::time::Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        let mut changed = a.clone();
        changed["spec"]["x"] = json!(2);
        s.update(&pods(), "ns", "a", changed, None).expect("ok");
        let now = tokio::time::Instant::now();

        let missing = s
            .get_as_of(&pods(), "ns", "a", before_create)
            .expect_err("not created yet");
        assert_eq!(missing.code, 404);
        let first = s
            .get_as_of(&pods(), "ns", "a", after_create)
            .expect("created");
        assert_eq!(first["spec"]["x"], 1);
        assert_eq!(rv(&first), rv(&a));
        assert_eq!(
            s.get_as_of(&pods(), "ns", "a", now).expect("current")["spec"]["x"],
            2
        );
    }
}
