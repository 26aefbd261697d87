//! The pod's QoS class (upstream `pkg/apis/core/v1/helper/qos/qos.go`, `GetPodQOS`).
//!
//! The computation lives in [`kubelet_core::qos`], which the cgroup manager and the CRI
//! resources share; this module re-exports it for status generation.

pub use kubelet_core::qos::{BEST_EFFORT, BURSTABLE, GUARANTEED, pod_qos};
