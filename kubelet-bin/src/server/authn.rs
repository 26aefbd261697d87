//! Who a request to the secure port comes from (upstream `cmd/kubelet/app/auth.go`
//! `BuildAuthn` over `k8s.io/apiserver/pkg/authentication/authenticatorfactory`
//! `DelegatingAuthenticatorConfig`):
//!
//! 1. x509: a client certificate that verifies against `--client-ca-file` (client auth usage)
//!    is the user of its CommonName, in the groups of its Organizations;
//! 2. a bearer token (`Authorization: Bearer …`, or on a websocket request the subprotocol
//!    `base64url.bearer.authorization.k8s.io.<token>`) is checked with a TokenReview when
//!    `authentication.webhook.enabled`; answers are cached for `cacheTTL` (2 m), keyed by the
//!    token's SHA-256, failures too; errors are not cached. An accepted token is removed from
//!    the request (the header, or the subprotocol), as upstream;
//! 3. authenticated users get group `system:authenticated`;
//! 4. when nothing authenticated the request and nothing failed, it is `system:anonymous` in
//!    `system:unauthenticated` if `authentication.anonymous.enabled`. A certificate or token
//!    that fails is a 401 even then (upstream's fail-on-error union).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http::{HeaderMap, HeaderValue};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use rustls::pki_types::{CertificateDer, UnixTime};
use sha2::{Digest, Sha256};

use super::cache::{CAPACITY, ExpiringCache};
use super::tls::ClientCa;
use super::webhook::{Reviews, with_retries};

/// Upstream's `authentication.webhook.cacheTTL` default.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(120);

/// The user of a request (upstream `user.Info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    /// The user name.
    pub name: String,
    /// The user's UID, if known.
    pub uid: String,
    /// Its groups.
    pub groups: Vec<String>,
    /// Extra attributes (from a TokenReview), passed on to SubjectAccessReviews.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> Self {
        Self {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..Self::default()
        }
    }
}

/// The authentication options (upstream `KubeletAuthentication`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthnOptions {
    /// `authentication.x509.clientCAFile` / `--client-ca-file`.
    pub client_ca_file: Option<PathBuf>,
    /// `authentication.webhook.enabled` / `--authentication-token-webhook`.
    pub webhook: bool,
    /// `authentication.webhook.cacheTTL` / `--authentication-token-webhook-cache-ttl`.
    pub webhook_cache_ttl: Duration,
    /// `authentication.anonymous.enabled` / `--anonymous-auth`.
    pub anonymous: bool,
}

impl Default for AuthnOptions {
    /// The flags' defaults: anonymous on, no webhook, no client CA.
    fn default() -> Self {
        Self {
            client_ca_file: None,
            webhook: false,
            webhook_cache_ttl: DEFAULT_CACHE_TTL,
            anonymous: true,
        }
    }
}

/// Why a request did not authenticate (all of them are a 401).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client certificate does not verify against the client CA, or cannot be read.
    #[error("verifying the client certificate: {0}")]
    Certificate(String),
    /// The API server says the bearer token is not valid.
    #[error("invalid bearer token{}", if .0.is_empty() { String::new() } else { format!(": {}", .0) })]
    InvalidToken(String),
    /// The websocket bearer subprotocol is malformed (not base64url, twice, or alone).
    #[error("{0}")]
    WebsocketProtocol(&'static str),
    /// The TokenReview failed (after retries).
    #[error("token review: {0}")]
    Review(#[source] kube::Error),
}

/// The token webhook with its cache.
struct TokenWebhook {
    reviews: Arc<dyn Reviews>,
    ttl: Duration,
    cache: ExpiringCache<[u8; 32], Option<User>>,
}

impl TokenWebhook {
    async fn authenticate(&self, token: &str) -> Result<User, Error> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(cached) = self.cache.get(&key) {
            return cached.ok_or_else(|| Error::InvalidToken(String::new()));
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = with_retries(|| self.reviews.token_review(review.clone()))
            .await
            .map_err(Error::Review)?;
        let status = answer.status.unwrap_or_default();
        if status.authenticated == Some(true) {
            let info = status.user.unwrap_or_default();
            let user = User {
                name: info.username.unwrap_or_default(),
                uid: info.uid.unwrap_or_default(),
                groups: info.groups.unwrap_or_default(),
                extra: info.extra.unwrap_or_default(),
            };
            self.cache.insert(key, Some(user.clone()), self.ttl);
            return Ok(user);
        }
        match status.error.filter(|e| !e.is_empty()) {
            // Upstream returns the review's error as an error, which is not cached.
            Some(message) => Err(Error::InvalidToken(message)),
            None => {
                self.cache.insert(key, None, self.ttl);
                Err(Error::InvalidToken(String::new()))
            }
        }
    }
}

/// The kubelet's authenticator.
pub struct Authenticator {
    client_ca: Option<ClientCa>,
    tokens: Option<TokenWebhook>,
    anonymous: bool,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("x509", &self.client_ca.is_some())
            .field("webhook", &self.tokens.is_some())
            .field("anonymous", &self.anonymous)
            .finish()
    }
}

/// The bearer token of an `Authorization` header (upstream `bearertoken`: `Bearer <token>`,
/// the scheme in any case).
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// `Sec-WebSocket-Protocol`.
const WEBSOCKET_PROTOCOL: &str = "sec-websocket-protocol";
/// The subprotocol prefix of a bearer token (upstream `websocket.ProtocolAuthenticator`).
const BEARER_PROTOCOL_PREFIX: &str = "base64url.bearer.authorization.k8s.io.";

/// Upstream `wsstream.IsWebSocketRequest`: `Upgrade: websocket` and `Connection` naming
/// `upgrade`.
fn is_websocket(headers: &HeaderMap) -> bool {
    let get = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    get(http::header::UPGRADE).is_some_and(|u| u.eq_ignore_ascii_case("websocket"))
        && get(http::header::CONNECTION).is_some_and(|c| {
            c.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
}

/// The bearer token of a websocket request's subprotocols and the other subprotocols.
fn websocket_token(headers: &HeaderMap) -> Result<Option<(String, Vec<String>)>, Error> {
    if !is_websocket(headers) {
        return Ok(None);
    }
    let mut token = None;
    let mut others = Vec::new();
    for value in headers.get_all(WEBSOCKET_PROTOCOL) {
        let Ok(value) = value.to_str() else { continue };
        for protocol in value.split(',').map(str::trim) {
            let Some(encoded) = protocol.strip_prefix(BEARER_PROTOCOL_PREFIX) else {
                others.push(protocol.to_owned());
                continue;
            };
            if token.is_some() {
                return Err(Error::WebsocketProtocol(
                    "multiple base64.bearer.authorization tokens specified",
                ));
            }
            let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(encoded)
                .map_err(|_| {
                    Error::WebsocketProtocol("invalid base64.bearer.authorization token encoding")
                })?;
            token = Some(String::from_utf8(decoded).map_err(|_| {
                Error::WebsocketProtocol("invalid base64.bearer.authorization token")
            })?);
        }
    }
    match token.filter(|t| !t.is_empty()) {
        None => Ok(None),
        Some(_) if others.is_empty() => {
            Err(Error::WebsocketProtocol("missing additional subprotocol"))
        }
        Some(t) => Ok(Some((t, others))),
    }
}

fn with_authenticated_group(mut user: User) -> User {
    const AUTHENTICATED: &str = "system:authenticated";
    if !user.groups.iter().any(|g| g == AUTHENTICATED) {
        user.groups.push(AUTHENTICATED.into());
    }
    user
}

impl Authenticator {
    /// An authenticator of `opts`; `client_ca` is the verifier of `opts.client_ca_file` and
    /// `reviews` answers TokenReviews (required when `opts.webhook`). With anonymous off and
    /// neither a client CA nor the webhook it authenticates no request (every one is a 401):
    /// the `kubelet` binary's default without a config file or auth flags.
    pub(crate) fn new(
        opts: &AuthnOptions,
        client_ca: Option<ClientCa>,
        reviews: Option<Arc<dyn Reviews>>,
    ) -> Result<Self, super::Error> {
        let tokens = match (opts.webhook, reviews) {
            (false, _) => None,
            (true, None) => return Err(super::Error::NoClient("authentication")),
            (true, Some(reviews)) => Some(TokenWebhook {
                reviews,
                ttl: opts.webhook_cache_ttl,
                cache: ExpiringCache::new(CAPACITY),
            }),
        };
        Ok(Self {
            client_ca,
            tokens,
            anonymous: opts.anonymous,
        })
    }

    /// The user of a request with these peer certificates and headers; `Ok(None)` when nothing
    /// authenticated it (anonymous off). An accepted bearer token is removed from `headers`.
    pub async fn authenticate(
        &self,
        peer_certificates: &[CertificateDer<'static>],
        headers: &mut HeaderMap,
    ) -> Result<Option<User>, Error> {
        let mut failure = None;
        if let (Some(ca), Some((leaf, intermediates))) =
            (&self.client_ca, peer_certificates.split_first())
        {
            match self.x509(ca, leaf, intermediates) {
                Ok(Some(user)) => return Ok(Some(with_authenticated_group(user))),
                Ok(None) => {}
                Err(e) => failure = Some(e),
            }
        }
        if let Some(webhook) = &self.tokens {
            if let Some(token) = bearer_token(headers).map(str::to_owned) {
                match webhook.authenticate(&token).await {
                    Ok(user) => {
                        headers.remove(http::header::AUTHORIZATION);
                        return Ok(Some(with_authenticated_group(user)));
                    }
                    Err(e) => failure = Some(e),
                }
            }
            match websocket_token(headers) {
                Ok(Some((token, others))) => match webhook.authenticate(&token).await {
                    Ok(user) => {
                        if let Ok(value) = HeaderValue::from_str(&others.join(",")) {
                            headers.insert(WEBSOCKET_PROTOCOL, value);
                        }
                        return Ok(Some(with_authenticated_group(user)));
                    }
                    Err(e) => failure = Some(e),
                },
                Ok(None) => {}
                Err(e) => failure = Some(e),
            }
        }
        match failure {
            Some(e) => Err(e),
            None if self.anonymous => Ok(Some(User::anonymous())),
            None => Ok(None),
        }
    }

    fn x509(
        &self,
        ca: &ClientCa,
        leaf: &CertificateDer<'static>,
        intermediates: &[CertificateDer<'static>],
    ) -> Result<Option<User>, Error> {
        ca.verify_client_cert(leaf, intermediates, UnixTime::now())
            .map_err(|e| Error::Certificate(e.to_string()))?;
        let subject = super::x509::subject(leaf).map_err(|e| Error::Certificate(e.to_string()))?;
        if subject.common_name.is_empty() {
            return Ok(None);
        }
        Ok(Some(User {
            name: subject.common_name,
            groups: subject.organizations,
            ..User::default()
        }))
    }
}

#[cfg(test)]
#[path = "authn_tests.rs"]
mod tests;
