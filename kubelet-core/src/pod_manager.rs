//! The pod manager: the kubelet's set of desired pods (upstream `pkg/kubelet/pod/pod_manager.go`).
//!
//! Indexed by UID and by full name. Mirror pods (the API's copies of static pods, see
//! [`crate::pod::is_mirror_pod`]) are kept apart from the pods the kubelet runs: they are
//! found by the full name they share with their static pod, never among [`PodManager::pods`],
//! and a mirror pod whose static pod is gone is an orphan that housekeeping deletes.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Pod;

use crate::collections::shrink_when_sparse;
use crate::pod::{PodExt, PodUid, is_mirror_pod};

/// Pods are boxed so that the slots a map keeps when empty stay small
/// ([`crate::collections`]).
#[derive(Debug, Default)]
struct Inner {
    by_uid: HashMap<PodUid, Box<Pod>>,
    by_full_name: HashMap<String, PodUid>,
    mirror_by_full_name: HashMap<String, Box<Pod>>,
}

/// A shared, cloneable store of desired pods.
#[derive(Clone, Debug, Default)]
pub struct PodManager {
    inner: Arc<RwLock<Inner>>,
}

impl PodManager {
    /// An empty pod manager.
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds or replaces a pod, or a mirror pod (upstream `AddPod`/`UpdatePod`).
    pub fn add_pod(&self, pod: Pod) {
        let full_name = pod.full_name();
        let mut inner = self.write();
        if is_mirror_pod(&pod) {
            inner.mirror_by_full_name.insert(full_name, Box::new(pod));
            return;
        }
        let uid = pod.uid();
        inner.by_full_name.insert(full_name, uid.clone());
        inner.by_uid.insert(uid, Box::new(pod));
    }

    /// Removes a pod, or a mirror pod (upstream `RemovePod`).
    pub fn remove_pod(&self, pod: &Pod) {
        let uid = pod.uid();
        let mut inner = self.write();
        if is_mirror_pod(pod) {
            let full_name = pod.full_name();
            if inner
                .mirror_by_full_name
                .get(&full_name)
                .is_some_and(|m| m.uid() == uid)
            {
                inner.mirror_by_full_name.remove(&full_name);
                shrink_when_sparse(&mut inner.mirror_by_full_name);
            }
            return;
        }
        if let Some(old) = inner.by_uid.remove(&uid) {
            let full_name = old.full_name();
            if inner.by_full_name.get(&full_name) == Some(&uid) {
                inner.by_full_name.remove(&full_name);
            }
            shrink_when_sparse(&mut inner.by_uid);
            shrink_when_sparse(&mut inner.by_full_name);
        }
    }

    /// The pod with this UID.
    pub fn pod_by_uid(&self, uid: &PodUid) -> Option<Pod> {
        self.read().by_uid.get(uid).map(|p| Pod::clone(p))
    }

    /// The pod with this `<name>_<namespace>`.
    pub fn pod_by_full_name(&self, full_name: &str) -> Option<Pod> {
        let inner = self.read();
        let uid = inner.by_full_name.get(full_name)?;
        inner.by_uid.get(uid).map(|p| Pod::clone(p))
    }

    /// Every desired pod, sorted by full name.
    pub fn pods(&self) -> Vec<Pod> {
        let mut pods: Vec<Pod> = self.read().by_uid.values().map(|p| Pod::clone(p)).collect();
        pods.sort_by_cached_key(|p| p.full_name());
        pods
    }

    /// `f` applied to every desired pod under the lock, keeping the `Some`s (e.g. to pick a
    /// few pods without cloning them all).
    pub fn filter_map<T>(&self, f: impl FnMut(&Pod) -> Option<T>) -> Vec<T> {
        self.read()
            .by_uid
            .values()
            .map(|p| &**p)
            .filter_map(f)
            .collect()
    }

    /// The UIDs of every desired pod.
    pub fn uids(&self) -> std::collections::HashSet<PodUid> {
        self.read().by_uid.keys().cloned().collect()
    }

    /// `true` when the pod is desired.
    pub fn contains(&self, uid: &PodUid) -> bool {
        self.read().by_uid.contains_key(uid)
    }

    /// The mirror pod of `pod` (same full name), if the API has one (upstream
    /// `GetMirrorPodByPod`).
    pub fn mirror_pod_by_pod(&self, pod: &Pod) -> Option<Pod> {
        self.read()
            .mirror_by_full_name
            .get(&pod.full_name())
            .map(|p| Pod::clone(p))
    }

    /// The static pod that `mirror_pod` mirrors (same full name), if it is desired (upstream
    /// `GetPodByMirrorPod`).
    pub fn pod_by_mirror_pod(&self, mirror_pod: &Pod) -> Option<Pod> {
        self.pod_by_full_name(&mirror_pod.full_name())
    }

    /// Every mirror pod, sorted by full name.
    pub fn mirror_pods(&self) -> Vec<Pod> {
        let mut pods: Vec<Pod> = self
            .read()
            .mirror_by_full_name
            .values()
            .map(|p| Pod::clone(p))
            .collect();
        pods.sort_by_key(|p| p.full_name());
        pods
    }

    /// The full names of mirror pods whose static pod is not desired (upstream
    /// `GetOrphanedMirrorPodNames`), sorted.
    pub fn orphaned_mirror_pod_names(&self) -> Vec<String> {
        let inner = self.read();
        let mut names: Vec<String> = inner
            .mirror_by_full_name
            .keys()
            .filter(|name| !inner.by_full_name.contains_key(*name))
            .cloned()
            .collect();
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    #[test]
    fn indexes_by_uid_and_full_name() {
        let pm = PodManager::new();
        pm.add_pod(pod("a"));
        pm.add_pod(pod("b"));
        assert!(pm.pod_by_full_name("a_default").is_some());
        assert_eq!(pm.pods().len(), 2);
        pm.remove_pod(&pod("a"));
        assert!(pm.pod_by_uid(&PodUid::from("uid-a")).is_none());
        assert!(pm.pod_by_full_name("a_default").is_none());
        assert!(pm.contains(&PodUid::from("uid-b")));
    }

    fn mirror_of(name: &str, uid: &str) -> Pod {
        let mut p = pod(name);
        p.metadata.uid = Some(uid.into());
        p.metadata.annotations = Some(
            [(
                crate::config::CONFIG_MIRROR_ANNOTATION.to_owned(),
                "h1".to_owned(),
            )]
            .into(),
        );
        p
    }

    #[test]
    fn mirror_pods_are_tracked_apart_and_found_by_full_name() {
        let pm = PodManager::new();
        let web = pod("web");
        let mirror = mirror_of("web", "mirror-uid");
        pm.add_pod(mirror.clone());
        pm.add_pod(web.clone());
        assert_eq!(pm.pods(), vec![web.clone()], "a mirror pod is never run");
        assert!(!pm.contains(&PodUid::from("mirror-uid")));
        assert_eq!(pm.mirror_pod_by_pod(&web), Some(mirror.clone()));
        assert_eq!(pm.pod_by_mirror_pod(&mirror), Some(web.clone()));
        assert_eq!(pm.mirror_pods(), vec![mirror.clone()]);
        assert!(pm.orphaned_mirror_pod_names().is_empty());

        pm.remove_pod(&web);
        assert_eq!(
            pm.orphaned_mirror_pod_names(),
            vec!["web_default".to_owned()]
        );
        assert_eq!(pm.pod_by_mirror_pod(&mirror), None);

        // Removing an older mirror pod of the same name keeps the newer one.
        let newer = mirror_of("web", "mirror-uid-2");
        pm.add_pod(newer.clone());
        pm.remove_pod(&mirror);
        assert_eq!(pm.mirror_pods(), vec![newer.clone()]);
        pm.remove_pod(&newer);
        assert!(pm.mirror_pods().is_empty());
        assert!(pm.orphaned_mirror_pod_names().is_empty());
    }
}
