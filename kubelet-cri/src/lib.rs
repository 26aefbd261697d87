//! The CRI v1 client of a Rust kubelet: [`RemoteRuntime`] implements
//! [`kubelet_core::runtime::Runtime`] over the Container Runtime Interface on a unix socket
//! (containerd, CRI-O, ...).
//!
//! This crate mirrors upstream `pkg/kubelet/kuberuntime` (the generic runtime manager:
//! `computePodActions`, `SyncPod`, `KillPod`, `GetPods`, `GetPodStatus`, labels and
//! annotations) on top of `pkg/kubelet/cri/remote` (the gRPC client). It is the only crate of
//! the workspace that touches gRPC and protobuf: CRI types stay inside; the [`convert`] module
//! maps them to and from the core types.
//!
//! * [`RemoteRuntime`] / [`Options`]: connect lazily, one deadline per call, errors mapped to
//!   [`kubelet_core::runtime::Error`] (`Unavailable` is retryable).
//! * [`actions::compute_pod_actions`]: the pure decision of what to do for a pod, with
//!   init containers and sidecars ([`actions::compute_init_container_actions`]) and the
//!   crash-loop backoff check ([`actions::check_backoff`]).
//! * [`pull_backoff::ImagePullBackoff`]: `ErrImagePull`, then `ImagePullBackOff` until the
//!   window ends.
//! * [`labels`]: what the kubelet stores on sandboxes and containers.
//! * `fake::FakeCriServer` (feature `test-util`): an in-process CRI server on a unix socket.
//!
//! ```no_run
//! use std::sync::Arc;
//! use kubelet_core::runtime::Runtime;
//! use kubelet_cri::{Options, RemoteRuntime};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = RemoteRuntime::connect(
//!     "unix:///run/containerd/containerd.sock",
//!     Options::default().with_node_name("node-1"),
//! )?;
//! let runtime: Arc<dyn Runtime> = Arc::new(runtime);
//! let version = runtime.version().await?;
//! println!("{} {}", version.runtime_name, version.runtime_version);
//! for pod in runtime.get_pods(false).await? {
//!     println!("{}/{}: {} containers", pod.namespace, pod.name, pod.containers.len());
//! }
//! # Ok(()) }
//! ```

pub mod actions;
mod client;
pub mod container;
pub mod convert;
pub mod dns;
mod error;
mod graceful;
pub mod image;
mod kill;
pub mod labels;
pub mod lifecycle;
pub mod pull_backoff;
pub mod reasons;
pub mod resources;
pub mod runtime;
pub mod sandbox;
pub mod security;
mod sync;
pub mod termination;

#[cfg(any(test, feature = "test-util"))]
pub mod fake;

pub use error::ConnectError;
pub use runtime::{Options, RemoteRuntime};
