//! Pod status computation and the status manager of a Rust kubelet.
//!
//! Mirrors upstream `pkg/kubelet/status` (`generate.go`, `status_manager.go`) and the status
//! parts of `pkg/kubelet/kubelet_pods.go` (`generateAPIPodStatus`, `getPhase`,
//! `convertStatusToAPIStatus`, `convertToAPIContainerStatuses`), plus `GetPodQOS` from
//! `pkg/apis/core/v1/helper/qos`.
//!
//! * [`generate`] turns the runtime's view of a pod ([`kubelet_core::runtime::PodStatus`])
//!   into a `v1.PodStatus`: phase, conditions, container statuses, IPs, QoS class.
//! * [`manager::LocalStatusManager`] implements [`kubelet_core::status::StatusManager`]: one
//!   versioned status per pod, terminal phases are final, and a [`tokio::sync::watch`] of
//!   changes for an API status syncer.
//! * [`api::ApiStatusSyncer`] writes those statuses to the API server and deletes pods whose
//!   termination is complete.
//!
//! ```no_run
//! use kubelet_core::runtime::PodStatus;
//! use kubelet_core::status::{StatusInputs, StatusManager};
//! use kubelet_status::LocalStatusManager;
//! # fn demo(pod: k8s_openapi::api::core::v1::Pod, runtime: PodStatus) {
//! let manager = LocalStatusManager::new();
//! let host_ips = vec!["192.168.1.10".to_owned()];
//! let inputs = StatusInputs { host_ips: &host_ips, ..Default::default() };
//! let status = manager.generate(&pod, &runtime, &inputs);
//! manager.set_pod_status(&pod, status);
//! let stored = manager.pod_status(&kubelet_core::PodUid::from("uid-web"));
//! println!("phase: {:?}", stored.and_then(|s| s.phase));
//! # }
//! ```

// Blocking calls are banned on async workers (clippy.toml, issue 16); unit tests may block.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod api;
pub mod conditions;
mod containers;
pub mod generate;
pub mod manager;
pub mod phase;
pub mod probes;
pub mod qos;
pub mod reason;

pub use generate::{generate_api_pod_status, generate_api_pod_status_with};
pub use manager::LocalStatusManager;
pub use probes::{NoProbes, ProbeResults, ProbeState};
