//! DELETE: preconditions, finalizers and the pod strategy's graceful deletion
//! (`pkg/registry/core/pod/strategy.go` `CheckGracefulDelete`, and
//! `k8s.io/apiserver/pkg/registry/generic/registry/store.go` `Delete`).

use serde_json::{Value, json};

use super::{DeleteOptions, EventType, Store, meta, meta_mut, meta_str, now_rfc3339};
use crate::testing::apiserver::resource::Gvr;
use crate::testing::apiserver::status::ApiError;

impl Store {
    /// Deletes an object. Preconditions (uid, resourceVersion) that do not hold are 409. An
    /// object with finalizers, or a pod bound to a node with a grace period above zero, gets
    /// `deletionTimestamp` and `deletionGracePeriodSeconds` and stays; otherwise it is removed.
    pub(crate) fn delete(
        &mut self,
        gvr: &Gvr,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let key = (gvr.clone(), ns.to_owned(), name.to_owned());
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&gvr.to_string(), name))?;
        if let Some(uid) = &opts.uid
            && meta_str(&old, "uid") != Some(uid.as_str())
        {
            return Err(ApiError::conflict(
                &gvr.to_string(),
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && meta_str(&old, "resourceVersion") != Some(rv.as_str())
        {
            return Err(ApiError::conflict(
                &gvr.to_string(),
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion").unwrap_or("")
                ),
            ));
        }
        let grace = self.grace_period(gvr, &old, opts);
        let has_finalizers = meta(&old)
            .get("finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if grace > 0 || has_finalizers {
            let current = meta(&old)
                .get("deletionGracePeriodSeconds")
                .and_then(Value::as_i64);
            let already = meta(&old).get("deletionTimestamp").is_some();
            if already && current.is_some_and(|c| c <= grace) {
                return Ok(old); // already terminating with a grace period no longer than this
            }
            let mut new = old.clone();
            let m = meta_mut(&mut new);
            m.insert("deletionTimestamp".into(), json!(now_rfc3339(grace)));
            m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            self.bump(&mut new);
            self.objects.insert(key, new.clone());
            self.record(gvr, ns, EventType::Modified, &new, Some(old));
            return Ok(new);
        }
        let mut gone = old.clone();
        self.bump(&mut gone);
        self.objects.remove(&key);
        self.record(gvr, ns, EventType::Deleted, &gone, Some(old));
        Ok(gone)
    }

    /// The pod strategy's `CheckGracefulDelete`: only pods that are bound and not terminal get
    /// a grace period (the request's, else `spec.terminationGracePeriodSeconds`, else 30).
    fn grace_period(&self, gvr: &Gvr, obj: &Value, opts: &DeleteOptions) -> i64 {
        if gvr.resource != "pods" {
            return 0;
        }
        let bound = obj
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let terminal = matches!(
            obj.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        );
        if !bound || terminal {
            return 0;
        }
        opts.grace_period_seconds
            .or_else(|| {
                obj.pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30)
            .max(0)
    }
}

/// Whether an object being deleted has lost its last finalizer and its grace period is over.
pub(super) fn finalized(obj: &Value) -> bool {
    let m = meta(obj);
    m.get("deletionTimestamp").is_some()
        && m.get("deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            == 0
        && m.get("finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> Gvr {
        crate::testing::apiserver::gvr_of("v1", "pods")
    }

    #[test]
    fn bound_pods_delete_gracefully_and_compaction_expires_history() {
        let mut s = Store::default();
        let p = s
            .create(
                &pods(),
                "ns",
                json!({"metadata": {"name": "a"}, "spec": {"nodeName": "n"}}),
            )
            .expect("ok");
        let uid = meta_str(&p, "uid").expect("ok").to_owned();
        let wrong = DeleteOptions {
            uid: Some("x".into()),
            ..Default::default()
        };
        assert_eq!(
            s.delete(&pods(), "ns", "a", &wrong)
                .expect_err("fails")
                .code,
            409
        );
        let d = s
            .delete(&pods(), "ns", "a", &DeleteOptions::default())
            .expect("ok");
        assert_eq!(d["metadata"]["deletionGracePeriodSeconds"], 30);
        assert!(s.get(&pods(), "ns", "a").is_ok());
        let now = DeleteOptions {
            grace_period_seconds: Some(0),
            uid: Some(uid),
            ..Default::default()
        };
        s.delete(&pods(), "ns", "a", &now).expect("ok");
        assert_eq!(s.get(&pods(), "ns", "a").expect_err("fails").code, 404);
        assert_eq!(s.changes_since(0).expect("ok").len(), 3);
        s.compact();
        assert_eq!(s.changes_since(1).expect_err("fails").code, 410);
        assert!(s.changes_since(s.rv()).expect("ok").is_empty());
    }
}
