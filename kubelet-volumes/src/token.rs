//! A cache of service-account tokens (upstream `pkg/kubelet/token/token_manager.go`): a token
//! is requested once and reused until 80% of its requested lifetime, or 24 hours, has passed;
//! the tokens of a pod are dropped when its volumes are torn down.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kubelet_core::objects::{ObjectSource, Result, TokenRequest};
use tokio::time::Instant;

/// Upstream `maxTTL`: a token is refreshed at least this often.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// Cached tokens by request.
#[derive(Debug, Default)]
pub struct TokenCache {
    tokens: Mutex<HashMap<TokenRequest, (String, Instant)>>,
}

/// When a token fetched at `fetched` for `expiration_seconds` must be refreshed.
fn refresh_at(fetched: Instant, expiration_seconds: i64) -> Instant {
    let ttl = Duration::from_secs(u64::try_from(expiration_seconds.max(0)).unwrap_or(0));
    fetched + (ttl.mul_f64(0.8)).min(MAX_TTL)
}

impl TokenCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TokenRequest, (String, Instant)>> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached token for `request`, or a fresh one from `objects` when there is none or
    /// it is due for refresh.
    pub async fn get(
        &self,
        objects: &dyn ObjectSource,
        request: &TokenRequest,
    ) -> Result<Option<String>> {
        let now = Instant::now();
        if let Some((token, fetched)) = self.lock().get(request)
            && now < refresh_at(*fetched, request.expiration_seconds)
        {
            return Ok(Some(token.clone()));
        }
        let token = objects.service_account_token(request).await?;
        match &token {
            Some(t) => {
                self.lock().insert(request.clone(), (t.clone(), now));
            }
            None => {
                self.lock().remove(request);
            }
        }
        Ok(token)
    }

    /// UIDs of the pods holding cached tokens.
    pub fn pod_uids(&self) -> Vec<String> {
        let mut uids: Vec<String> = self.lock().keys().map(|r| r.pod_uid.clone()).collect();
        uids.sort();
        uids.dedup();
        uids
    }

    /// Forgets the tokens bound to the pod `pod_uid`.
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
}
