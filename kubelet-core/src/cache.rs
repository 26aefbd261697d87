//! The pod status cache (upstream `pkg/kubelet/container/cache.go`).
//!
//! The PLEG writes the runtime status of each pod with the time it was observed; a pod worker
//! asks for a status *newer than* its last sync, so it never acts on state older than its own
//! last actions. The cache also keeps a global timestamp: once a full relist newer than `t`
//! has finished, a pod the runtime does not know reads as an empty status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::pod::PodUid;
use crate::runtime::PodStatus;

#[derive(Debug, Default)]
struct Inner {
    pods: HashMap<PodUid, (Arc<PodStatus>, Instant)>,
    global: Option<Instant>,
}

/// A shared, cloneable pod status cache.
#[derive(Clone, Debug, Default)]
pub struct PodCache {
    inner: Arc<Mutex<Inner>>,
    changed: Arc<Notify>,
}

impl PodCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached status and when it was observed.
    pub fn get(&self, uid: &PodUid) -> Option<(Arc<PodStatus>, Instant)> {
        self.lock().pods.get(uid).cloned()
    }

    /// An empty status for a pod the cache has never held, once a full relist has finished:
    /// the runtime had nothing of the pod then, and only the pod's own worker creates
    /// anything for it. A new pod's first sync reads this instead of asking the runtime
    /// (upstream `GetNewerThan` with no last sync time). `None` while the cache holds the pod
    /// or before the first relist.
    pub fn never_seen(&self, uid: &PodUid) -> Option<Arc<PodStatus>> {
        let inner = self.lock();
        (inner.global.is_some() && !inner.pods.contains_key(uid)).then(|| {
            Arc::new(PodStatus {
                uid: uid.clone(),
                ..Default::default()
            })
        })
    }

    /// Stores `status` observed at `at`. An older observation never replaces a newer one.
    pub fn set(&self, uid: &PodUid, status: PodStatus, at: Instant) {
        {
            let mut inner = self.lock();
            match inner.pods.get(uid) {
                Some((_, prev)) if *prev > at => return,
                _ => {
                    inner.pods.insert(uid.clone(), (Arc::new(status), at));
                }
            }
        }
        self.changed.notify_waiters();
    }

    /// Forgets a pod.
    pub fn delete(&self, uid: &PodUid) {
        self.lock().pods.remove(uid);
    }

    /// Records that a full relist observed at `at` has finished (upstream `UpdateTime`).
    pub fn update_time(&self, at: Instant) {
        {
            let mut inner = self.lock();
            if inner.global.is_none_or(|g| g < at) {
                inner.global = Some(at);
            }
        }
        self.changed.notify_waiters();
    }

    fn newer_than(&self, uid: &PodUid, t: Instant) -> Option<Arc<PodStatus>> {
        let inner = self.lock();
        match inner.pods.get(uid) {
            Some((status, at)) if *at > t => Some(status.clone()),
            entry => match inner.global {
                Some(g) if g > t => Some(entry.map(|(s, _)| s.clone()).unwrap_or_else(|| {
                    Arc::new(PodStatus {
                        uid: uid.clone(),
                        ..Default::default()
                    })
                })),
                _ => None,
            },
        }
    }

    /// Waits until the cache holds a status of `uid` observed after `t` (or a full relist
    /// after `t` has finished) and returns it. Cancel safe.
    pub async fn get_newer_than(&self, uid: &PodUid, t: Instant) -> Arc<PodStatus> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(status) = self.newer_than(uid, t) {
                return status;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn waits_for_newer_status() {
        let cache = PodCache::new();
        let uid = PodUid::from("u1");
        let t0 = Instant::now();
        cache.set(&uid, PodStatus::default(), t0);
        let waiter = tokio::spawn({
            let cache = cache.clone();
            let uid = uid.clone();
            async move { cache.get_newer_than(&uid, t0).await }
        });
        tokio::time::advance(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished());
        let status = PodStatus {
            name: "new".into(),
            ..Default::default()
        };
        cache.set(&uid, status, Instant::now());
        let got = waiter.await.expect("waiter");
        assert_eq!(got.name, "new");
    }

    #[tokio::test(start_paused = true)]
    async fn global_time_releases_unknown_pods() {
        let cache = PodCache::new();
        let t0 = Instant::now();
        tokio::time::advance(Duration::from_millis(1)).await;
        cache.update_time(Instant::now());
        let got = cache.get_newer_than(&PodUid::from("nobody"), t0).await;
        assert!(got.containers.is_empty());
        assert_eq!(got.uid.as_str(), "nobody");
    }

    #[test]
    fn a_pod_never_seen_reads_empty_only_after_a_relist() {
        let cache = PodCache::new();
        let (new, known) = (PodUid::from("new"), PodUid::from("known"));
        assert!(cache.never_seen(&new).is_none(), "no relist yet");
        cache.set(&known, PodStatus::default(), Instant::now());
        cache.update_time(Instant::now());
        let got = cache.never_seen(&new).expect("relisted, and never held");
        assert_eq!(got.uid, new);
        assert!(got.sandboxes.is_empty() && got.containers.is_empty());
        assert!(cache.never_seen(&known).is_none(), "held: ask the runtime");
    }

    #[test]
    fn older_observation_does_not_replace_newer() {
        let cache = PodCache::new();
        let uid = PodUid::from("u");
        let now = Instant::now();
        cache.set(
            &uid,
            PodStatus {
                name: "new".into(),
                ..Default::default()
            },
            now,
        );
        cache.set(
            &uid,
            PodStatus {
                name: "old".into(),
                ..Default::default()
            },
            now - Duration::from_millis(5),
        );
        assert_eq!(
            cache.get(&uid).map(|(s, _)| s.name.clone()).as_deref(),
            Some("new")
        );
    }
}
