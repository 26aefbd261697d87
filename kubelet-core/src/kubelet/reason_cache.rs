//! The last start failure of each container, kept until the container starts (upstream
//! `pkg/kubelet/reason_cache.go`).
//!
//! A sync that refuses a start (`CrashLoopBackOff`, `ErrImagePull`, …) reports it once; the
//! status generated at any later moment must still show the container waiting for that
//! reason until a start succeeds, as upstream's `reasonCache` does.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::pod::PodUid;
use crate::runtime::{ContainerSyncError, PodSyncResult};

/// Per pod and container: the last start failure.
#[derive(Debug, Default)]
pub(crate) struct ReasonCache {
    pods: Mutex<HashMap<PodUid, HashMap<String, ContainerSyncError>>>,
}

impl ReasonCache {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<PodUid, HashMap<String, ContainerSyncError>>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the failures of a sync and forgets the containers it started (upstream
    /// `Update`).
    pub(crate) fn update(&self, uid: &PodUid, result: &PodSyncResult) {
        let mut pods = self.lock();
        let reasons = pods.entry(uid.clone()).or_default();
        for name in &result.started {
            reasons.remove(name);
        }
        for e in &result.container_errors {
            reasons.insert(e.container.clone(), e.clone());
        }
        if reasons.is_empty() {
            pods.remove(uid);
        }
    }

    /// A sync result carrying every remembered failure of the pod, for status generation.
    pub(crate) fn as_result(&self, uid: &PodUid) -> Option<PodSyncResult> {
        let pods = self.lock();
        let reasons = pods.get(uid)?;
        let mut container_errors: Vec<ContainerSyncError> = reasons.values().cloned().collect();
        container_errors.sort_by(|a, b| a.container.cmp(&b.container));
        Some(PodSyncResult {
            container_errors,
            ..Default::default()
        })
    }

    /// Forgets the pod.
    pub(crate) fn remove(&self, uid: &PodUid) {
        self.lock().remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(container: &str, reason: &str) -> ContainerSyncError {
        ContainerSyncError {
            container: container.into(),
            reason: reason.into(),
            message: format!("{container} {reason}"),
        }
    }

    #[test]
    fn keeps_failures_until_the_container_starts() {
        let cache = ReasonCache::default();
        let uid = PodUid::from("u");
        assert_eq!(cache.as_result(&uid), None);
        cache.update(
            &uid,
            &PodSyncResult {
                container_errors: vec![failed("app", "CrashLoopBackOff")],
                ..Default::default()
            },
        );
        // a later sync that did nothing for the container keeps the reason
        cache.update(&uid, &PodSyncResult::default());
        let kept = cache.as_result(&uid).expect("kept");
        assert_eq!(
            kept.container_errors,
            vec![failed("app", "CrashLoopBackOff")]
        );
        // a newer failure replaces it; a start forgets it
        cache.update(
            &uid,
            &PodSyncResult {
                container_errors: vec![failed("app", "ErrImagePull")],
                ..Default::default()
            },
        );
        assert_eq!(
            cache.as_result(&uid).expect("kept").container_errors[0].reason,
            "ErrImagePull"
        );
        cache.update(
            &uid,
            &PodSyncResult {
                started: vec!["app".into()],
                ..Default::default()
            },
        );
        assert_eq!(cache.as_result(&uid), None);
    }
}
