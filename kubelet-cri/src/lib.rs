//! The CRI v1 backend of a Rust kubelet: [`CriRuntimeService`] implements the pod engine's
//! [`kubelet_core::kuberuntime::RuntimeService`] over the Container Runtime Interface on a
//! unix socket (containerd, CRI-O, ...), and [`RemoteRuntime`] is the engine over it, a
//! [`kubelet_core::runtime::Runtime`].
//!
//! This crate mirrors upstream `pkg/kubelet/cri/remote` (the gRPC client) and the CRI half of
//! `pkg/kubelet/kuberuntime` (`generatePodSandboxConfig`, `generateContainerConfig`, security
//! contexts, resources). The pod logic itself (`computePodActions`, `SyncPod`, `KillPod`,
//! labels, termination messages) is runtime-agnostic and lives in
//! [`kubelet_core::kuberuntime`]. This is the only crate of the workspace that touches gRPC
//! and protobuf: CRI types stay inside; the [`convert`] module maps them to and from the
//! core types.
//!
//! * [`connect`] / [`Options`]: the engine over CRI in one call; [`CriRuntimeService`] /
//!   [`CriOptions`] alone for an engine built by hand. Connections are lazy, one deadline per
//!   call, errors mapped to [`kubelet_core::runtime::Error`] (`Unavailable` is retryable).
//! * [`sandbox`], [`container`], [`security`], [`resources`]: the CRI configs.
//! * `fake::FakeCriServer` (feature `test-util`): an in-process CRI server on a unix socket.
//! * `testing::FaultProxy` (feature `test-util`): a CRI proxy in front of a runtime's socket
//!   that injects latency, errors, dropped connections and stalls per method.
//!
//! ```no_run
//! use std::sync::Arc;
//! use kubelet_core::runtime::Runtime;
//! use kubelet_cri::Options;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = kubelet_cri::connect(
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

// Blocking calls are banned on async workers (clippy.toml, issue 16); unit tests may block.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod client;
pub mod container;
pub mod convert;
mod error;
mod exec_reaper;
mod options;
pub mod resources;
pub mod sandbox;
pub mod security;
mod service;
mod stats;

#[cfg(any(test, feature = "test-util"))]
pub mod fake;
#[cfg(feature = "test-util")]
pub mod testing;

pub use error::{ConfigError, ConnectError, CriError};
pub use options::{Options, connect, connect_with_metrics};
pub use service::{CriOptions, CriRuntimeService, DEFAULT_REQUEST_TIMEOUT};

/// The kubelet's runtime over CRI: the pod engine driving a [`CriRuntimeService`]
/// (upstream `kubeGenericRuntimeManager` over `remoteRuntimeService`). Built by [`connect`].
#[doc(alias = "kubeGenericRuntimeManager")]
pub type RemoteRuntime = kubelet_core::kuberuntime::KubeRuntimeManager<CriRuntimeService>;
