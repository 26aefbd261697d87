//! A bounded map whose entries expire (upstream `k8s.io/utils/lru` `LRUExpireCache` as the
//! webhook authenticator and authorizer use it), on the tokio clock so tests pause it.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Entries kept at most (upstream's webhook caches hold 8192 or fewer).
pub(crate) const CAPACITY: usize = 4096;

/// Values by key until each one's time to live ends.
#[derive(Debug)]
pub(crate) struct ExpiringCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
    capacity: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> ExpiringCache<K, V> {
    /// An empty cache holding up to `capacity` entries.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (V, Instant)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value of `key` unless it expired.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let mut entries = self.lock();
        match entries.get(key) {
            Some((value, until)) if Instant::now() < *until => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` for `ttl` (not at all when `ttl` is zero). When full, expired entries go
    /// first, then the one closest to expiring.
    pub(crate) fn insert(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.lock();
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (_, until)| now < *until);
            if entries.len() >= self.capacity {
                let soonest = entries
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(k, _)| k.clone());
                if let Some(k) = soonest {
                    entries.remove(&k);
                }
            }
        }
        entries.insert(key, (value, now + ttl));
    }

    /// How many entries are held (expired ones included until touched).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn entries_expire_after_their_ttl() {
        let cache = ExpiringCache::new(8);
        cache.insert("a", 1, Duration::from_secs(30));
        cache.insert("b", 2, Duration::from_secs(300));
        cache.insert("c", 3, Duration::ZERO);
        assert_eq!(cache.get(&"a"), Some(1));
        assert_eq!(cache.get(&"c"), None);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(cache.get(&"a"), None);
        assert_eq!(cache.get(&"b"), Some(2));
        tokio::time::advance(Duration::from_secs(270)).await;
        assert_eq!(cache.get(&"b"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_cache_drops_the_soonest_to_expire() {
        let cache = ExpiringCache::new(2);
        cache.insert(1, "one", Duration::from_secs(10));
        cache.insert(2, "two", Duration::from_secs(20));
        cache.insert(3, "three", Duration::from_secs(30));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(&1), None);
        assert_eq!(cache.get(&2), Some("two"));
        tokio::time::advance(Duration::from_secs(25)).await;
        cache.insert(4, "four", Duration::from_secs(30));
        assert_eq!(
            (cache.get(&3), cache.get(&4)),
            (Some("three"), Some("four"))
        );
    }
}
