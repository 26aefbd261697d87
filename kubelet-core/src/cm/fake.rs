//! A [`PodContainerManager`] that keeps pod cgroups in memory and records calls.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Pod;

use super::{PodContainerManager, Result, pod_cgroupfs_name};
use crate::PodExt;
use crate::pod::PodUid;

/// In-memory pod cgroups under `/` (cgroupfs names).
#[derive(Clone, Debug, Default)]
pub struct FakePodContainerManager {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    existing: BTreeSet<PodUid>,
    created: Vec<PodUid>,
    destroyed: Vec<PodUid>,
    qos_updates: usize,
}

impl FakePodContainerManager {
    /// A manager with no pod cgroups.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pods whose cgroup was created, in order.
    pub fn created(&self) -> Vec<PodUid> {
        self.state().created.clone()
    }

    /// Pods whose cgroup was destroyed, in order.
    pub fn destroyed(&self) -> Vec<PodUid> {
        self.state().destroyed.clone()
    }

    /// Whether the cgroup of `uid` exists.
    pub fn exists(&self, uid: &PodUid) -> bool {
        self.state().existing.contains(uid)
    }

    /// How many times the QoS cgroups were updated.
    pub fn qos_updates(&self) -> usize {
        self.state().qos_updates
    }
}

impl PodContainerManager for FakePodContainerManager {
    fn pod_cgroup_parent(&self, pod: &Pod) -> String {
        pod_cgroupfs_name("/", pod)
    }

    fn ensure_exists(&self, pod: &Pod) -> Result<()> {
        let mut s = self.state();
        if s.existing.insert(pod.uid()) {
            s.created.push(pod.uid());
        }
        Ok(())
    }

    fn destroy(&self, uid: &PodUid) -> Result<()> {
        let mut s = self.state();
        if s.existing.remove(uid) {
            s.destroyed.push(uid.clone());
        }
        Ok(())
    }

    fn pod_cgroups(&self) -> Result<Vec<PodUid>> {
        Ok(self.state().existing.iter().cloned().collect())
    }

    fn pod_cgroup_exists(&self, pod: &Pod) -> bool {
        self.exists(&pod.uid())
    }

    fn update_qos_cgroups(&self, _burstable_cpu_shares: u64) -> Result<()> {
        self.state().qos_updates += 1;
        Ok(())
    }
}
