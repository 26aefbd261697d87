//! The runtime-agnostic pod engine (upstream `pkg/kubelet/kuberuntime`) and the
//! container-level backend it drives.
//!
//! * [`RuntimeService`]: a container runtime at CRI height (sandboxes, containers, images,
//!   exec), in core types ([`api`]). `kubelet-cri` implements it over CRI; a custom node
//!   agent implements it for its own runtime.
//! * [`KubeRuntimeManager`] (upstream `kubeGenericRuntimeManager`), generic over a
//!   [`RuntimeService`], implements [`crate::runtime::Runtime`]: pod actions
//!   ([`actions`]), init containers and sidecars, CrashLoopBackOff, image pull policy and
//!   ImagePullBackOff ([`image`], [`pull_backoff`]) with the pod's pull secrets, probe-triggered restarts, graceful
//!   termination with preStop hooks, postStart hooks (run by a
//!   [`crate::lifecycle::HandlerRunner`]), termination messages ([`termination`]), DNS
//!   ([`dns`]) and the labels that let it find its objects again ([`labels`]), and garbage
//!   collection of dead containers, sandboxes and pod log directories
//!   ([`crate::runtime::Runtime::garbage_collect`], private module `gc`).

pub mod actions;
pub mod api;
pub mod container;
pub mod convert;
pub mod dns;
mod gc;
mod graceful;
pub mod image;
mod kill;
pub mod labels;
mod manager;
pub mod observed_exits;
mod pull;
pub mod pull_backoff;
pub mod reasons;
pub mod security;
mod service;
pub mod store;
mod sync;
pub mod termination;

pub use dns::ClusterDns;
pub use manager::{KubeRuntimeManager, Options};
pub use pull_backoff::ImagePullBackoff;
pub use service::RuntimeService;
pub use store::{ContainerRecord, ContainerStore};

#[cfg(any(test, feature = "test-util"))]
pub use service::MockRuntimeService;
