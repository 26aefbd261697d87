//! `activeDeadlineSeconds`: a pod active on the node longer than its deadline fails with
//! reason `DeadlineExceeded` (upstream `pkg/kubelet/active_deadline.go`).
//!
//! Status generation asks [`past_active_deadline`] (upstream `ShouldEvict`) and turns the pod
//! `Failed` with [`REASON`] and [`MESSAGE`]; the sync loop syncs pods that are past their
//! deadline on its tick (upstream `ShouldSync`), so a pod fails without waiting for a resync.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The pod status reason of a pod past its deadline.
pub const REASON: &str = "DeadlineExceeded";
/// The pod status message of a pod past its deadline.
pub const MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

/// The pod's `activeDeadlineSeconds`, if set.
pub fn active_deadline_seconds(pod: &Pod) -> Option<i64> {
    pod.spec.as_ref().and_then(|s| s.active_deadline_seconds)
}

/// `true` when the pod has a deadline, has started (`start_time`, the status' `startTime`)
/// and `now - start_time >= activeDeadlineSeconds` (upstream `pastActiveDeadline`).
pub fn past_active_deadline(pod: &Pod, start_time: Option<Timestamp>, now: Timestamp) -> bool {
    let (Some(deadline), Some(start)) = (active_deadline_seconds(pod), start_time) else {
        return false;
    };
    now.duration_since(start) >= SignedDuration::from_secs(deadline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    #[test]
    fn deadline_counts_from_the_start_time() {
        let mut p = pod("d");
        let start: Timestamp = "2024-01-01T00:00:00Z".parse().expect("time");
        let at = |s: i64| start + SignedDuration::from_secs(s);
        assert!(
            !past_active_deadline(&p, Some(start), at(1_000)),
            "no deadline"
        );
        if let Some(s) = p.spec.as_mut() {
            s.active_deadline_seconds = Some(30);
        }
        assert!(!past_active_deadline(&p, None, at(1_000)), "not started");
        assert!(!past_active_deadline(&p, Some(start), at(29)));
        assert!(past_active_deadline(&p, Some(start), at(30)));
        assert!(past_active_deadline(&p, Some(start), at(31)));
    }
}
