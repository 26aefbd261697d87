//! The pod manager: the kubelet's set of desired pods (upstream `pkg/kubelet/pod/pod_manager.go`).
//!
//! Indexed by UID and by full name. Mirror pods do not exist in standalone mode; the API-server
//! mode will add them here.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Pod;

use crate::pod::{PodExt, PodUid};

#[derive(Debug, Default)]
struct Inner {
    by_uid: HashMap<PodUid, Pod>,
    by_full_name: HashMap<String, PodUid>,
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

    /// Adds or replaces a pod (upstream `AddPod`/`UpdatePod`).
    pub fn add_pod(&self, pod: Pod) {
        let uid = pod.uid();
        let full_name = pod.full_name();
        let mut inner = self.write();
        inner.by_full_name.insert(full_name, uid.clone());
        inner.by_uid.insert(uid, pod);
    }

    /// Removes a pod (upstream `RemovePod`).
    pub fn remove_pod(&self, pod: &Pod) {
        let uid = pod.uid();
        let mut inner = self.write();
        if let Some(old) = inner.by_uid.remove(&uid) {
            let full_name = old.full_name();
            if inner.by_full_name.get(&full_name) == Some(&uid) {
                inner.by_full_name.remove(&full_name);
            }
        }
    }

    /// The pod with this UID.
    pub fn pod_by_uid(&self, uid: &PodUid) -> Option<Pod> {
        self.read().by_uid.get(uid).cloned()
    }

    /// The pod with this `<name>_<namespace>`.
    pub fn pod_by_full_name(&self, full_name: &str) -> Option<Pod> {
        let inner = self.read();
        let uid = inner.by_full_name.get(full_name)?;
        inner.by_uid.get(uid).cloned()
    }

    /// Every desired pod, sorted by full name.
    pub fn pods(&self) -> Vec<Pod> {
        let mut pods: Vec<Pod> = self.read().by_uid.values().cloned().collect();
        pods.sort_by_key(|p| p.full_name());
        pods
    }

    /// `f` applied to every desired pod under the lock, keeping the `Some`s (e.g. to pick a
    /// few pods without cloning them all).
    pub fn filter_map<T>(&self, f: impl FnMut(&Pod) -> Option<T>) -> Vec<T> {
        self.read().by_uid.values().filter_map(f).collect()
    }

    /// The UIDs of every desired pod.
    pub fn uids(&self) -> std::collections::HashSet<PodUid> {
        self.read().by_uid.keys().cloned().collect()
    }

    /// `true` when the pod is desired.
    pub fn contains(&self, uid: &PodUid) -> bool {
        self.read().by_uid.contains_key(uid)
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
}
