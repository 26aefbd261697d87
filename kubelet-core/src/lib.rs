//! Core of a Rust kubelet: shared types, the manager traits, pod config, pod workers and the
//! sync loop.
//!
//! This crate mirrors the runtime-agnostic parts of upstream `pkg/kubelet`:
//! `container/` (runtime types, cache, helpers), `config/` (pod sources and merge),
//! `pod/` (pod manager), `pod_workers.go` and the sync loop of `kubelet.go`, and the pod
//! engine of `kuberuntime/`. It knows nothing of gRPC, CRI or the API server: a custom node
//! agent implements the container-level [`kuberuntime::RuntimeService`] for its runtime, and
//! [`kuberuntime::KubeRuntimeManager`] turns that into the pod-level [`runtime::Runtime`] the
//! kubelet drives (`kubelet-cri` does the same for CRI runtimes). `ARCHITECTURE.md` at the
//! repository root maps the crates and the data path.
//!
//! ```no_run
//! use std::sync::Arc;
//! use kubelet_core::runtime::Runtime;
//! # async fn demo(runtime: Arc<dyn Runtime>) -> Result<(), kubelet_core::runtime::Error> {
//! let pods = runtime.get_pods(true).await?;
//! println!("{} pods known to the runtime", pods.len());
//! # Ok(()) }
//! ```

// Blocking calls are banned on async workers (clippy.toml, issue 16); unit tests may block.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod active_deadline;
pub mod apparmor;
pub mod backoff;
pub mod blocking;
pub mod cache;
pub mod cm;
pub mod collections;
pub mod config;
pub mod container;
pub mod container_gc;
pub mod credentialprovider;
pub mod duration;
pub mod envvars;
pub mod error;
pub mod events;
pub mod eviction;
pub mod expansion;
pub mod fieldpath;
pub mod image_gc;
pub mod kubelet;
pub mod kuberuntime;
pub mod lifecycle;
pub mod logs;
pub mod metrics;
pub mod nodeshutdown;
pub mod objects;
pub mod pleg;
pub mod pod;
pub mod pod_manager;
pub mod pod_resources;
pub mod pod_workers;
pub mod probe;
pub mod qos;
pub mod quantity;
pub mod resources;
pub mod runtime;
pub mod runtimeclass;
pub mod start_path;
pub mod stats;
pub mod status;
pub mod sync;
pub mod sysctl;
pub mod time;
pub mod version;
pub mod volume;
pub mod watchdog;

#[cfg(any(test, feature = "test-util"))]
// Test fakes and fixtures (feature `test-util`): blocking calls are fine in test code.
#[allow(clippy::disallowed_methods)]
pub mod testing;

pub use error::{Error, Result};
pub use pod::{PodExt, PodUid};
