//! A cache of service-account tokens (upstream `pkg/kubelet/token/token_manager.go`): a token
//! is requested once and reused until it needs a refresh, which upstream's `requiresRefresh`
//! decides from the token's actual expiry (`status.expirationTimestamp`) and granted lifetime
//! (`spec.expirationSeconds`) in the API server's answer: after 80 % of its lifetime, or 24
//! hours after it was issued. When a refresh fails the old token is served while it is still
//! valid; once it has expired the failure is the caller's. The tokens of a pod are dropped
//! when its volumes are torn down.
//!
//! Expiry is taken into tokio time when the token arrives (the wall-clock time left until
//! `expirationTimestamp`), so a later leap of the system clock cannot make a token look
//! issued in the future (upstream's third refresh rule has nothing left to catch). Upstream's
//! random jitter of up to 10 s is not applied. Tokens are rewritten in volumes by the pod's
//! periodic sync (`syncFrequency`, 1 minute), as upstream's remount of projected volumes on
//! each sync: for the 600-second minimum lifetime that leaves 120 s to expiry.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use kubelet_core::objects::{Error, ObjectSource, Result, ServiceAccountToken, TokenRequest};
use tokio::time::Instant;
use tracing::warn;

/// Upstream `maxTTL`: a token is refreshed at least this often.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

#[derive(Clone)]
struct Cached {
    token: String,
    refresh_at: Instant,
    expires_at: Instant,
}

/// Cached tokens by request.
#[derive(Default)]
pub struct TokenCache {
    tokens: Mutex<HashMap<TokenRequest, Cached>>,
}

impl std::fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCache")
            .field("tokens", &self.lock().len())
            .finish()
    }
}

fn seconds(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s).unwrap_or(0))
}

/// Upstream `requiresRefresh`, turned into instants when `token` arrives at `now`
/// (`wall_now` on the system clock): refresh 24 hours after issue or once 80 % of the
/// granted lifetime has passed, whichever comes first.
fn cached(
    token: ServiceAccountToken,
    requested: i64,
    now: Instant,
    wall_now: SystemTime,
) -> Cached {
    let lifetime_secs = token.expiration_seconds.unwrap_or(requested).max(0);
    let lifetime = seconds(lifetime_secs);
    let left = match token.expiration {
        Some(expiration) => expiration.duration_since(wall_now).unwrap_or_default(),
        None => lifetime,
    };
    let expires_at = now + left;
    let issued_at = expires_at.checked_sub(lifetime).unwrap_or(now);
    // Upstream's integer arithmetic: `expirationSeconds*20/100` seconds before expiry.
    let early = seconds(lifetime_secs * 20 / 100);
    let refresh_at = (issued_at + MAX_TTL).min(expires_at.checked_sub(early).unwrap_or(now));
    Cached {
        token: token.token,
        refresh_at,
        expires_at,
    }
}

impl TokenCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TokenRequest, Cached>> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached token for `request`, or a fresh one from `objects` when there is none or
    /// it needs a refresh (upstream `GetServiceAccountToken`). A failed refresh serves the
    /// cached token until it expires.
    pub async fn get(
        &self,
        objects: &dyn ObjectSource,
        request: &TokenRequest,
    ) -> Result<Option<String>> {
        let now = Instant::now();
        let current = self.lock().get(request).cloned();
        if let Some(c) = &current
            && now < c.refresh_at
        {
            return Ok(Some(c.token.clone()));
        }
        match objects.service_account_token(request).await {
            Ok(Some(token)) => {
                let entry = cached(token, request.expiration_seconds, now, SystemTime::now());
                let t = entry.token.clone();
                self.lock().insert(request.clone(), entry);
                Ok(Some(t))
            }
            Ok(None) => {
                self.lock().remove(request);
                Ok(None)
            }
            Err(e) => match current {
                Some(c) if Instant::now() <= c.expires_at => {
                    warn!(
                        namespace = %request.namespace,
                        service_account = %request.service_account,
                        pod = %request.pod_name,
                        error = %e,
                        "couldn't update token; the current one is still valid"
                    );
                    Ok(Some(c.token))
                }
                Some(_) => Err(Error::Other(format!(
                    "token of service account {}/{} expired and refresh failed: {e}",
                    request.namespace, request.service_account
                ))),
                None => Err(e),
            },
        }
    }

    /// UIDs of the pods holding cached tokens.
    pub fn pod_uids(&self) -> Vec<String> {
        let mut uids: Vec<String> = self.lock().keys().map(|r| r.pod_uid.clone()).collect();
        uids.sort();
        uids.dedup();
        uids
    }

    /// Forgets the tokens bound to the pod `pod_uid` (upstream
    /// `DeleteServiceAccountToken`).
    pub fn forget_pod(&self, pod_uid: &str) {
        self.lock().retain(|r, _| r.pod_uid != pod_uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_core::objects::InMemoryObjectSource;

    fn request(expiration_seconds: i64) -> TokenRequest {
        TokenRequest {
            namespace: "ns".into(),
            service_account: "sa".into(),
            audience: String::new(),
            expiration_seconds,
            pod_name: "p".into(),
            pod_uid: "u".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_reused_until_eighty_percent_of_their_lifetime() {
        let objects = InMemoryObjectSource::new();
        let cache = TokenCache::default();
        objects.set_token("ns", "sa", "t1");
        let r = request(3600);
        assert_eq!(
            cache.get(&objects, &r).await.expect("get").as_deref(),
            Some("t1")
        );
        objects.set_token("ns", "sa", "t2");
        tokio::time::advance(Duration::from_secs(2879)).await;
        assert_eq!(
            cache.get(&objects, &r).await.expect("get").as_deref(),
            Some("t1")
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            cache.get(&objects, &r).await.expect("get").as_deref(),
            Some("t2")
        );
        objects.set_token("ns", "sa", "t3");
        cache.forget_pod("u");
        assert_eq!(
            cache.get(&objects, &r).await.expect("get").as_deref(),
            Some("t3")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn long_lived_tokens_are_refreshed_daily() {
        let objects = InMemoryObjectSource::new();
        let cache = TokenCache::default();
        objects.set_token("ns", "sa", "t1");
        let r = request(7 * 24 * 3600);
        cache.get(&objects, &r).await.expect("get");
        objects.set_token("ns", "sa", "t2");
        tokio::time::advance(MAX_TTL - Duration::from_secs(1)).await;
        assert_eq!(
            cache.get(&objects, &r).await.expect("get").as_deref(),
            Some("t1")
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            cache.get(&objects, &r).await.expect("get").as_deref(),
            Some("t2")
        );
    }

    /// Answers from a script: each call takes the next answer.
    struct Scripted(Mutex<Vec<Result<Option<ServiceAccountToken>>>>);

    #[async_trait::async_trait]
    impl ObjectSource for Scripted {
        async fn config_map(
            &self,
            _: &str,
            _: &str,
        ) -> Result<Option<k8s_openapi::api::core::v1::ConfigMap>> {
            Ok(None)
        }
        async fn secret(
            &self,
            _: &str,
            _: &str,
        ) -> Result<Option<k8s_openapi::api::core::v1::Secret>> {
            Ok(None)
        }
        async fn service_account_token(
            &self,
            _: &TokenRequest,
        ) -> Result<Option<ServiceAccountToken>> {
            self.0
                .lock()
                .expect("lock")
                .pop()
                .unwrap_or_else(|| Err(Error::Unavailable("script ended".into())))
        }
    }

    fn answers(mut script: Vec<Result<Option<ServiceAccountToken>>>) -> Scripted {
        script.reverse();
        Scripted(Mutex::new(script))
    }

    fn issued(token: &str, expires_in: u64, granted: i64) -> ServiceAccountToken {
        ServiceAccountToken {
            token: token.into(),
            expiration: Some(SystemTime::now() + Duration::from_secs(expires_in)),
            expiration_seconds: Some(granted),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_answers_expiry_decides_not_the_request() {
        // Asked for an hour, granted 600 s (a server's max-token-expiration): refreshed
        // 480 s in, not at 2880 s.
        let objects = answers(vec![
            Ok(Some(issued("t1", 600, 600))),
            Ok(Some(issued("t2", 600, 600))),
        ]);
        let cache = TokenCache::default();
        let r = request(3600);
        let get = || cache.get(&objects, &r);
        assert_eq!(get().await.expect("get").as_deref(), Some("t1"));
        tokio::time::advance(Duration::from_secs(478)).await;
        assert_eq!(get().await.expect("get").as_deref(), Some("t1"));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(get().await.expect("get").as_deref(), Some("t2"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_refresh_serves_the_old_token_until_it_expires() {
        let objects = answers(vec![
            Ok(Some(issued("t1", 1000, 1000))),
            Err(Error::Unavailable("connection refused".into())),
            Err(Error::Unavailable("connection refused".into())),
            Ok(Some(issued("t2", 1000, 1000))),
        ]);
        let cache = TokenCache::default();
        let r = request(1000);
        assert_eq!(
            cache.get(&objects, &r).await.expect("get").as_deref(),
            Some("t1")
        );
        tokio::time::advance(Duration::from_secs(900)).await;
        assert_eq!(
            cache.get(&objects, &r).await.expect("old token").as_deref(),
            Some("t1")
        );
        tokio::time::advance(Duration::from_secs(101)).await;
        let err = cache
            .get(&objects, &r)
            .await
            .expect_err("expired and refresh failed");
        assert!(
            err.to_string()
                .contains("token of service account ns/sa expired and refresh failed"),
            "{err}"
        );
        assert_eq!(
            cache.get(&objects, &r).await.expect("get").as_deref(),
            Some("t2")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_service_account_is_none_and_not_cached() {
        let objects = answers(vec![Ok(None), Ok(Some(issued("t1", 600, 600)))]);
        let cache = TokenCache::default();
        let r = request(600);
        assert_eq!(cache.get(&objects, &r).await.expect("get"), None);
        assert_eq!(
            cache.get(&objects, &r).await.expect("get").as_deref(),
            Some("t1")
        );
        assert_eq!(cache.pod_uids(), vec!["u".to_owned()]);
    }
}
