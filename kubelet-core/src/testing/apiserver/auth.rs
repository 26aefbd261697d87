//! Authentication and authorization from a table the test sets: bearer tokens → users, a
//! policy of (subject, verb, resource) rules, TokenRequest (`serviceaccounts/{sa}/token`),
//! TokenReview and SubjectAccessReview answered from them, and optional NodeRestriction-like
//! rules (mirrors `plugin/pkg/admission/noderestriction/admission.go`, loosely: a node user may
//! only write its own Node and Lease and pods bound to it).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use serde_json::{Value, json};

use super::status::ApiError;
use super::store::now_rfc3339;

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    /// `system:node:node-1`, `system:serviceaccount:ns:sa`, `admin`, …
    pub username: String,
    /// The user's uid.
    pub uid: String,
    /// Groups (`system:nodes`, `system:masters`, …).
    pub groups: Vec<String>,
}

impl UserInfo {
    /// A user without groups.
    pub fn new(username: impl Into<String>) -> Self {
        Self {
            username: username.into(),
            ..Self::default()
        }
    }

    /// The kubelet of `node`: `system:node:<node>` in `system:nodes`.
    pub fn node(node: &str) -> Self {
        Self::new(format!("system:node:{node}")).group("system:nodes")
    }

    /// Adds a group.
    #[must_use]
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.groups.push(group.into());
        self
    }

    /// The node name if this is a node user (`system:node:<name>` in `system:nodes`).
    pub(crate) fn node_name(&self) -> Option<&str> {
        self.username
            .strip_prefix("system:node:")
            .filter(|_| self.groups.iter().any(|g| g == "system:nodes"))
    }

    fn json(&self) -> Value {
        json!({"username": self.username, "uid": self.uid, "groups": self.groups})
    }
}

#[derive(Debug, Clone)]
struct Rule {
    subject: String,
    verb: String,
    resource: String,
}

#[derive(Debug, Default)]
struct State {
    tokens: HashMap<String, UserInfo>,
    rules: Vec<Rule>,
    enforce: bool,
    node_restriction: bool,
    issued: u64,
}

/// The authentication and authorization table of a [`super::FakeApiServer`]. By default
/// nothing is enforced: any request is served, unknown tokens are anonymous.
#[derive(Debug, Default)]
pub struct Auth {
    state: Mutex<State>,
}

impl Auth {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `token` authenticate as `user`.
    pub fn add_token(&self, token: impl Into<String>, user: UserInfo) {
        self.state().tokens.insert(token.into(), user);
    }

    /// Allows `subject` (a username or a group) `verb` on `resource` (`pods`, `pods/status`;
    /// `*` for any verb or resource). Members of `system:masters` may do anything.
    pub fn allow(&self, subject: &str, verb: &str, resource: &str) {
        self.state().rules.push(Rule {
            subject: subject.into(),
            verb: verb.into(),
            resource: resource.into(),
        });
    }

    /// Turns enforcement on: requests without a known token are 401, requests the policy does
    /// not allow are 403.
    pub fn enforce(&self, on: bool) {
        self.state().enforce = on;
    }

    /// Turns the NodeRestriction-like rules on (they apply to node users only).
    pub fn node_restriction(&self, on: bool) {
        self.state().node_restriction = on;
    }

    pub(crate) fn node_restriction_on(&self) -> bool {
        self.state().node_restriction
    }

    /// The user of a bearer token: `Ok(None)` for anonymous (allowed unless enforcing).
    pub(crate) fn authenticate(&self, token: Option<&str>) -> Result<Option<UserInfo>, ApiError> {
        let state = self.state();
        match token.and_then(|t| state.tokens.get(t)) {
            Some(u) => Ok(Some(u.clone())),
            None if state.enforce => Err(ApiError::unauthorized()),
            None => Ok(None),
        }
    }

    fn allowed(state: &State, user: &UserInfo, verb: &str, resource: &str) -> bool {
        if user.groups.iter().any(|g| g == "system:masters") {
            return true;
        }
        state.rules.iter().any(|r| {
            (r.subject == user.username || user.groups.contains(&r.subject))
                && (r.verb == "*" || r.verb == verb)
                && (r.resource == "*" || r.resource == resource)
        })
    }

    /// Whether the request may go on (403 when enforcing and the policy says no).
    pub(crate) fn authorize(
        &self,
        user: Option<&UserInfo>,
        verb: &str,
        resource: &str,
    ) -> Result<(), ApiError> {
        let state = self.state();
        if !state.enforce {
            return Ok(());
        }
        let anonymous = UserInfo::new("system:anonymous").group("system:unauthenticated");
        let user = user.unwrap_or(&anonymous);
        if Self::allowed(&state, user, verb, resource) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "{resource} is forbidden: User \"{}\" cannot {verb} resource \"{resource}\"",
                user.username
            )))
        }
    }

    /// Answers a TokenReview: `status.authenticated` and `status.user` from the token table.
    pub(crate) fn token_review(&self, mut review: Value) -> Value {
        let token = review
            .pointer("/spec/token")
            .and_then(Value::as_str)
            .unwrap_or("");
        let status = match self.state().tokens.get(token) {
            Some(u) => json!({"authenticated": true, "user": u.json(),
                "audiences": review.pointer("/spec/audiences").cloned().unwrap_or(json!([]))}),
            None => json!({"authenticated": false, "error": "invalid bearer token"}),
        };
        review["status"] = status;
        review
    }

    /// Answers a SubjectAccessReview from the policy table.
    pub(crate) fn subject_access_review(&self, mut review: Value) -> Value {
        let spec = review.get("spec").cloned().unwrap_or_default();
        let user = UserInfo {
            username: spec
                .get("user")
                .and_then(Value::as_str)
                .unwrap_or("")
                .into(),
            uid: spec.get("uid").and_then(Value::as_str).unwrap_or("").into(),
            groups: spec
                .get("groups")
                .and_then(Value::as_array)
                .map(|g| {
                    g.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
        };
        let (verb, resource) = match spec.get("resourceAttributes") {
            Some(a) => {
                let res = a.get("resource").and_then(Value::as_str).unwrap_or("");
                let resource = match a.get("subresource").and_then(Value::as_str) {
                    Some(sub) if !sub.is_empty() => format!("{res}/{sub}"),
                    _ => res.to_owned(),
                };
                (
                    a.get("verb")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    resource,
                )
            }
            None => {
                let n = spec
                    .get("nonResourceAttributes")
                    .cloned()
                    .unwrap_or_default();
                (
                    n.get("verb")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    n.get("path")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                )
            }
        };
        let allowed = Self::allowed(&self.state(), &user, &verb, &resource);
        review["status"] = if allowed {
            json!({"allowed": true, "reason": "allowed by the fake's policy"})
        } else {
            json!({"allowed": false})
        };
        review
    }

    /// Answers a TokenRequest for `namespace/sa`: a fresh token that authenticates as the
    /// service account (so TokenReview accepts it), expiring after `expirationSeconds`
    /// (default 3600).
    pub(crate) fn issue_token(&self, namespace: &str, sa: &str, mut request: Value) -> Value {
        let secs = request
            .pointer("/spec/expirationSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(3600);
        let mut state = self.state();
        state.issued += 1;
        let token = format!("fake-sa-token.{namespace}.{sa}.{}", state.issued);
        let user = UserInfo::new(format!("system:serviceaccount:{namespace}:{sa}"))
            .group("system:serviceaccounts")
            .group(format!("system:serviceaccounts:{namespace}"));
        state.tokens.insert(token.clone(), user);
        if let Value::Object(o) = &mut request {
            o.insert("kind".into(), json!("TokenRequest"));
            o.insert("apiVersion".into(), json!("authentication.k8s.io/v1"));
        }
        request["metadata"] = json!({"name": sa, "namespace": namespace,
            "creationTimestamp": now_rfc3339(0)});
        request["spec"]["expirationSeconds"] = json!(secs);
        request["status"] = json!({"token": token, "expirationTimestamp": now_rfc3339(secs)});
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_answers_reviews_and_enforcement() {
        let auth = Auth::default();
        auth.add_token("t-node", UserInfo::node("n1"));
        auth.allow("system:nodes", "get", "pods");
        assert_eq!(auth.authenticate(Some("nope")).expect("ok"), None);
        auth.enforce(true);
        assert_eq!(
            auth.authenticate(Some("nope")).expect_err("fails").code,
            401
        );
        let node = auth.authenticate(Some("t-node")).expect("ok");
        assert_eq!(node.as_ref().and_then(|u| u.node_name()), Some("n1"));
        assert!(auth.authorize(node.as_ref(), "get", "pods").is_ok());
        assert_eq!(
            auth.authorize(node.as_ref(), "delete", "pods")
                .expect_err("fails")
                .code,
            403
        );
        let sar = auth.subject_access_review(json!({"spec": {"user": "system:node:n1",
            "groups": ["system:nodes"], "resourceAttributes": {"verb": "get", "resource": "pods"}}}));
        assert_eq!(sar["status"]["allowed"], true);
        let tr = auth.issue_token("ns", "sa", json!({"spec": {"audiences": ["api"]}}));
        let token = tr["status"]["token"].as_str().expect("ok").to_owned();
        let review = auth.token_review(json!({"spec": {"token": token}}));
        assert_eq!(
            review["status"]["user"]["username"],
            "system:serviceaccount:ns:sa"
        );
        assert_eq!(
            auth.token_review(json!({"spec": {"token": "x"}}))["status"]["authenticated"],
            false
        );
    }
}
