//! Minimal status and volume managers for tests of the sync machinery.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::pod::{PodExt, PodUid};
use crate::runtime::{ContainerState, PodStatus};
use crate::status::{StatusInputs, StatusManager, is_terminal_phase};
use crate::volume::{MountedVolume, Result as VolumeResult, VolumeManager};

/// A status manager with a deliberately simple phase rule (Running when any container runs,
/// Succeeded/Failed when every container exited and the policy will not restart them,
/// Pending otherwise) that keeps terminal phases. The real rules live in `kubelet-status`.
#[derive(Clone, Debug, Default)]
pub struct FakeStatusManager {
    statuses: Arc<Mutex<HashMap<PodUid, ApiPodStatus>>>,
    reclaimed: Arc<Mutex<Vec<PodUid>>>,
}

impl FakeStatusManager {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PodUid, ApiPodStatus>> {
        self.statuses.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Overwrites the stored start time of a pod (e.g. to put it past its deadline).
    pub fn set_start_time(&self, uid: &PodUid, start: k8s_openapi::jiff::Timestamp) {
        if let Some(s) = self.lock().get_mut(uid) {
            s.start_time = Some(Time(start));
        }
    }

    /// The stored reason of a pod.
    pub fn reason(&self, uid: &PodUid) -> Option<String> {
        self.lock().get(uid).and_then(|s| s.reason.clone())
    }

    /// The stored phase of a pod.
    pub fn phase(&self, uid: &PodUid) -> Option<String> {
        self.lock().get(uid).and_then(|s| s.phase.clone())
    }

    /// The pods [`StatusManager::pod_resources_reclaimed`] was called for, in order.
    pub fn reclaimed(&self) -> Vec<PodUid> {
        self.reclaimed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl StatusManager for FakeStatusManager {
    fn generate<'a>(
        &self,
        pod: &Pod,
        runtime: &PodStatus,
        _inputs: &StatusInputs<'a>,
    ) -> ApiPodStatus {
        let specs = pod.containers();
        let newest: Vec<_> = specs
            .iter()
            .filter_map(|c| runtime.container(&c.name))
            .collect();
        let phase = if newest.iter().any(|c| c.state == ContainerState::Running) {
            "Running"
        } else if newest.len() == specs.len()
            && !specs.is_empty()
            && newest.iter().all(|c| c.state == ContainerState::Exited)
            && pod.restart_policy() != "Always"
        {
            if newest.iter().all(|c| c.exit_code == 0) {
                "Succeeded"
            } else {
                "Failed"
            }
        } else {
            "Pending"
        };
        // The start time stays; past `activeDeadlineSeconds` the pod fails.
        let start_time = self
            .lock()
            .get(&pod.uid())
            .and_then(|s| s.start_time.clone())
            .unwrap_or(Time(crate::time::now()));
        if crate::active_deadline::past_active_deadline(pod, Some(start_time.0), crate::time::now())
        {
            return ApiPodStatus {
                phase: Some("Failed".into()),
                reason: Some(crate::active_deadline::REASON.into()),
                message: Some(crate::active_deadline::MESSAGE.into()),
                start_time: Some(start_time),
                ..Default::default()
            };
        }
        ApiPodStatus {
            phase: Some(phase.into()),
            pod_ips: None,
            start_time: Some(start_time),
            ..Default::default()
        }
    }

    fn set_pod_status(&self, pod: &Pod, status: ApiPodStatus) {
        let mut map = self.lock();
        let uid = pod.uid();
        if map.get(&uid).is_some_and(is_terminal_phase) {
            return;
        }
        map.insert(uid, status);
    }

    fn pod_status(&self, uid: &PodUid) -> Option<ApiPodStatus> {
        self.lock().get(uid).cloned()
    }

    fn terminate_pod(&self, _pod: &Pod) {}

    fn remove_orphaned_statuses(&self, keep: &HashSet<PodUid>) {
        self.lock().retain(|uid, _| keep.contains(uid));
    }

    fn pod_resources_reclaimed(&self, pod: &Pod) {
        self.reclaimed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(pod.uid());
    }
}

/// A volume manager for pods without volumes; records which pods were unmounted.
#[derive(Clone, Debug, Default)]
pub struct FakeVolumeManager {
    unmounted: Arc<Mutex<Vec<PodUid>>>,
    last_active: Arc<Mutex<Option<HashSet<PodUid>>>>,
}

impl FakeVolumeManager {
    /// Pods whose volumes were torn down.
    pub fn unmounted(&self) -> Vec<PodUid> {
        self.unmounted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The pods housekeeping last asked to keep volumes for (`None` before the first pass).
    pub fn last_active(&self) -> Option<HashSet<PodUid>> {
        self.last_active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[async_trait]
impl VolumeManager for FakeVolumeManager {
    async fn wait_for_attach_and_mount(&self, _pod: &Pod) -> VolumeResult<()> {
        Ok(())
    }
    fn mounted_volumes(&self, _uid: &PodUid) -> HashMap<String, MountedVolume> {
        HashMap::new()
    }
    async fn unmount_pod(&self, uid: &PodUid) -> VolumeResult<()> {
        self.unmounted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(uid.clone());
        Ok(())
    }
    async fn cleanup_orphaned(&self, active: &HashSet<PodUid>) -> VolumeResult<()> {
        *self.last_active.lock().unwrap_or_else(|e| e.into_inner()) = Some(active.clone());
        Ok(())
    }
}
