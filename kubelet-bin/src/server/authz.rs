//! What a request to the secure port may do (upstream `pkg/kubelet/server/auth.go`
//! `nodeAuthorizerAttributesGetter` and `cmd/kubelet/app/auth.go` `BuildAuthz`).
//!
//! A request becomes verb + `nodes/<subresource>` on this node's name: the verb from the
//! method (`GET` get, `POST` create, `PUT` update, `PATCH` patch, `DELETE` delete, anything
//! else empty); the subresource from the path, with the fine-grained ones
//! (`KubeletFineGrainedAuthz`, GA in 1.36) first and `proxy` after them, where allowing either
//! is enough:
//!
//! | path | subresources |
//! |---|---|
//! | `/stats/*` | `stats` |
//! | `/metrics/*` | `metrics` |
//! | `/logs/*` | `log` |
//! | `/checkpoint/*` | `checkpoint` |
//! | `/pods/*`, `/runningpods/*` | `pods`, `proxy` |
//! | `/healthz/*` | `healthz`, `proxy` |
//! | `/configz/*` | `configz`, `proxy` |
//! | anything else | `proxy` |
//!
//! Modes: `AlwaysAllow`, or `Webhook`: a SubjectAccessReview per attribute set, allowed
//! answers cached for `cacheAuthorizedTTL` (5 m), others for `cacheUnauthorizedTTL` (30 s).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};

use super::authn::User;
use super::cache::{CAPACITY, ExpiringCache};
use super::webhook::{Reviews, with_retries};

/// Upstream's `authorization.webhook.cacheAuthorizedTTL` default.
pub const DEFAULT_CACHE_AUTHORIZED_TTL: Duration = Duration::from_secs(300);
/// Upstream's `authorization.webhook.cacheUnauthorizedTTL` default.
pub const DEFAULT_CACHE_UNAUTHORIZED_TTL: Duration = Duration::from_secs(30);

/// `authorization.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Every authenticated request is allowed (the flag's default).
    #[default]
    AlwaysAllow,
    /// SubjectAccessReviews decide (the config file's default).
    Webhook,
}

impl Mode {
    /// Parses upstream's name.
    pub fn parse(name: &str) -> Result<Self, super::Error> {
        match name {
            "AlwaysAllow" => Ok(Self::AlwaysAllow),
            "Webhook" => Ok(Self::Webhook),
            "" => Err(super::Error::NoAuthorizationMode),
            other => Err(super::Error::AuthorizationMode(other.to_owned())),
        }
    }

    /// Upstream's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AlwaysAllow => "AlwaysAllow",
            Self::Webhook => "Webhook",
        }
    }
}

/// The authorization options (upstream `KubeletAuthorization`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthzOptions {
    /// `authorization.mode` / `--authorization-mode`.
    pub mode: Mode,
    /// `authorization.webhook.cacheAuthorizedTTL`.
    pub cache_authorized_ttl: Duration,
    /// `authorization.webhook.cacheUnauthorizedTTL`.
    pub cache_unauthorized_ttl: Duration,
}

impl Default for AuthzOptions {
    /// The flags' defaults: `AlwaysAllow`, upstream's cache TTLs.
    fn default() -> Self {
        Self {
            mode: Mode::AlwaysAllow,
            cache_authorized_ttl: DEFAULT_CACHE_AUTHORIZED_TTL,
            cache_unauthorized_ttl: DEFAULT_CACHE_UNAUTHORIZED_TTL,
        }
    }
}

/// One question for the authorizer (upstream `authorizer.AttributesRecord`; resource `nodes`,
/// API version `v1`, no namespace or group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// Who asks.
    pub user: User,
    /// The API verb.
    pub verb: &'static str,
    /// The subresource of `nodes`.
    pub subresource: &'static str,
    /// The node's name.
    pub name: String,
    /// The request path.
    pub path: String,
}

impl Attributes {
    /// Always `nodes`.
    pub const RESOURCE: &'static str = "nodes";
}

/// Upstream `isSubpath`: `path` itself or below it.
fn is_subpath(subpath: &str, path: &str) -> bool {
    let path = path.trim_end_matches('/');
    subpath == path
        || subpath
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The attribute sets of a request, most specific first (see the [module docs](self)).
pub fn request_attributes(
    node_name: &str,
    user: &User,
    method: &http::Method,
    path: &str,
) -> Vec<Attributes> {
    let verb = match *method {
        http::Method::POST => "create",
        http::Method::GET => "get",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "",
    };
    let subresources: &[&'static str] = if is_subpath(path, "/stats/") {
        &["stats"]
    } else if is_subpath(path, "/metrics") {
        &["metrics"]
    } else if is_subpath(path, "/logs/") {
        &["log"]
    } else if is_subpath(path, "/checkpoint/") {
        &["checkpoint"]
    } else if is_subpath(path, "/pods") || is_subpath(path, "/runningpods/") {
        &["pods", "proxy"]
    } else if is_subpath(path, "/healthz") {
        &["healthz", "proxy"]
    } else if is_subpath(path, "/configz") {
        &["configz", "proxy"]
    } else {
        &["proxy"]
    };
    subresources
        .iter()
        .map(|subresource| Attributes {
            user: user.clone(),
            verb,
            subresource,
            name: node_name.to_owned(),
            path: path.to_owned(),
        })
        .collect()
}

/// An authorizer's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed.
    Allow,
    /// Denied.
    Deny,
    /// Neither (the request is not allowed).
    NoOpinion,
}

/// The review failed (after retries): a 500.
#[derive(Debug, thiserror::Error)]
#[error("subject access review: {0}")]
pub struct Error(#[source] pub kube::Error);

/// The kubelet's authorizer.
pub enum Authorizer {
    /// `AlwaysAllow`.
    AlwaysAllow,
    /// `Webhook`.
    Webhook(Box<Webhook>),
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::AlwaysAllow => f.write_str("AlwaysAllow"),
            Self::Webhook(_) => f.write_str("Webhook"),
        }
    }
}

/// SubjectAccessReviews with their cache.
pub struct Webhook {
    reviews: Arc<dyn Reviews>,
    opts: AuthzOptions,
    cache: ExpiringCache<String, Decision>,
}

impl Authorizer {
    /// The authorizer of `opts`; `reviews` is required for `Webhook`.
    pub(crate) fn new(
        opts: &AuthzOptions,
        reviews: Option<Arc<dyn Reviews>>,
    ) -> Result<Self, super::Error> {
        match (opts.mode, reviews) {
            (Mode::AlwaysAllow, _) => Ok(Self::AlwaysAllow),
            (Mode::Webhook, None) => Err(super::Error::NoClient("authorization")),
            (Mode::Webhook, Some(reviews)) => Ok(Self::Webhook(Box::new(Webhook {
                reviews,
                opts: opts.clone(),
                cache: ExpiringCache::new(CAPACITY),
            }))),
        }
    }

    /// Decides one attribute set.
    pub async fn authorize(&self, attrs: &Attributes) -> Result<Decision, Error> {
        match self {
            Self::AlwaysAllow => Ok(Decision::Allow),
            Self::Webhook(webhook) => webhook.authorize(attrs).await,
        }
    }
}

impl Webhook {
    async fn authorize(&self, attrs: &Attributes) -> Result<Decision, Error> {
        let spec = SubjectAccessReviewSpec {
            user: Some(attrs.user.name.clone()),
            uid: Some(attrs.user.uid.clone()).filter(|u| !u.is_empty()),
            groups: Some(attrs.user.groups.clone()),
            extra: Some(attrs.user.extra.clone()).filter(|e| !e.is_empty()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(attrs.verb.to_owned()),
                version: Some("v1".into()),
                resource: Some(Attributes::RESOURCE.into()),
                subresource: Some(attrs.subresource.to_owned()),
                name: Some(attrs.name.clone()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        };
        // Upstream keys its cache by the review's spec, serialized.
        let key = serde_json::to_string(&spec).unwrap_or_default();
        if let Some(decision) = self.cache.get(&key) {
            return Ok(decision);
        }
        let review = SubjectAccessReview {
            spec,
            ..SubjectAccessReview::default()
        };
        let answer = with_retries(|| self.reviews.subject_access_review(review.clone()))
            .await
            .map_err(Error)?;
        let status = answer.status.unwrap_or_default();
        let (decision, ttl) = if status.allowed {
            (Decision::Allow, self.opts.cache_authorized_ttl)
        } else if status.denied == Some(true) {
            (Decision::Deny, self.opts.cache_unauthorized_ttl)
        } else {
            (Decision::NoOpinion, self.opts.cache_unauthorized_ttl)
        };
        self.cache.insert(key, decision, ttl);
        Ok(decision)
    }
}

#[cfg(test)]
#[path = "authz_tests.rs"]
mod tests;
