//! Ending a pod before its time, for the eviction manager (upstream `killPodNow` in
//! `pkg/kubelet/pod_workers.go` behind `TerminatePodAbnormallyAndWait`, and
//! `GetActivePods` in `pkg/kubelet/kubelet_pods.go`).
//!
//! The pod's status becomes `Failed` with the given reason, message and conditions first
//! (upstream's `PodStatusFunc`; status generation keeps a terminal phase and its reason),
//! then its worker kills it with the given grace period; the call waits until the worker
//! has stopped the containers, at most 1.5 × the grace period and never less than 10 s.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use tokio::time::{Duration, Instant};

use super::Kubelet;
use crate::eviction::{self, PodTerminator, TerminatePodOptions};
use crate::pod::PodExt;
use crate::pod_workers::{UpdatePodOptions, WorkerPhase};
use crate::sync::SyncPodType;

/// How often the wait looks at the pod's worker.
const POLL: Duration = Duration::from_millis(100);

impl Kubelet {
    /// The pods that run or may run on the node: desired, not terminal and not being
    /// terminated (upstream `GetActivePods`).
    pub fn active_pods(&self) -> Vec<Pod> {
        self.filter_out_inactive_pods(self.pod_manager.pods())
    }

    /// The pod's status with the terminal phase, reason, message and conditions of
    /// `options` (upstream's eviction `PodStatusFunc`).
    fn abnormal_status(&self, pod: &Pod, options: &TerminatePodOptions) -> ApiPodStatus {
        let mut status = self
            .status
            .pod_status(&pod.uid())
            .or_else(|| pod.status.clone())
            .unwrap_or_default();
        status.phase = Some("Failed".into());
        status.reason = Some(options.reason.clone());
        status.message = Some(options.message.clone());
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        for c in &options.conditions {
            let mut c = c.clone();
            c.last_transition_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                crate::time::now(),
            ));
            match conditions.iter_mut().find(|o| o.type_ == c.type_) {
                Some(old) => *old = c,
                None => conditions.push(c),
            }
        }
        status
    }
}

#[async_trait]
impl PodTerminator for Kubelet {
    async fn terminate_pod_abnormally_and_wait(
        &self,
        pod: &Pod,
        options: TerminatePodOptions,
    ) -> Result<(), eviction::Error> {
        let uid = pod.uid();
        self.status
            .set_pod_status(pod, self.abnormal_status(pod, &options));
        let grace = options.grace_period_override;
        self.workers.update_pod(UpdatePodOptions {
            kind: SyncPodType::Kill,
            pod: Some(pod.clone()),
            running_pod: None,
            grace_period_override: Some(grace),
            evict: true,
        });
        let timeout = Duration::from_secs(u64::try_from((grace + grace / 2).max(10)).unwrap_or(10));
        let deadline = Instant::now() + timeout;
        loop {
            match self.workers.phase(&uid) {
                None | Some(WorkerPhase::Terminated | WorkerPhase::Finished) => return Ok(()),
                Some(_) if Instant::now() >= deadline => {
                    return Err(eviction::Error::TerminationTimeout(pod.full_name()));
                }
                Some(_) => tokio::time::sleep(POLL).await,
            }
        }
    }

    fn pod_cleaned_up(&self, pod: &Pod) -> bool {
        matches!(
            self.workers.phase(&pod.uid()),
            None | Some(WorkerPhase::Finished)
        )
    }
}
