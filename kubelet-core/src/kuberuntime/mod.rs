//! The runtime-agnostic pod engine (upstream `pkg/kubelet/kuberuntime`) and the
//! container-level backend it drives.
//!
//! * [`RuntimeService`]: a container runtime at CRI height (sandboxes, containers, images,
//!   exec), in core types ([`api`]). `kubelet-cri` implements it over CRI; a custom node
//!   agent implements it for its own runtime.
//! * The engine, generic over a [`RuntimeService`], implements [`crate::runtime::Runtime`]:
//!   pod actions, init containers and sidecars, CrashLoopBackOff, image pull policy and
//!   ImagePullBackOff, probe-triggered restarts, graceful termination with preStop hooks,
//!   postStart hooks, termination messages and the labels that let it find its objects again.

pub mod api;
mod service;
pub mod store;

pub use service::RuntimeService;
pub use store::{ContainerRecord, ContainerStore};

#[cfg(any(test, feature = "test-util"))]
pub use service::MockRuntimeService;
