//! Container probes for a Rust kubelet: liveness, readiness and startup.
//!
//! Mirrors upstream `pkg/kubelet/prober`: a [`Manager`] (`prober_manager.go`) keeps one worker
//! task per container and probe type (`worker.go`), each running the container's probe on
//! tokio time and recording transitions in core's results managers
//! ([`kubelet_core::probe::Results`], upstream `prober/results`), whose update channel the
//! sync loop consumes. The probers (`prober.go`, `pkg/probe/{exec,http,tcp,grpc}`) are in
//! [`exec`], [`http`], [`tcp`] and [`grpc`]. A probe that could not run at all (a bad port, no
//! pod IP, a runtime error) is an [`Error`]; one that ran and failed is an [`Outcome`].
//! [`LifecycleHandlerRunner`] runs lifecycle hooks (upstream
//! `pkg/kubelet/lifecycle/handlers.go`), httpGet ones with the same HTTP client.
//!
//! The manager implements core's [`ProbeManager`](kubelet_core::probe::ProbeManager) (driven by
//! the pod syncer) and [`ProbeResults`](kubelet_core::probe::ProbeResults) (read by status
//! generation); the runtime reads liveness and startup failures from the results managers.
//!
//! ```no_run
//! use std::sync::Arc;
//! use kubelet_core::cache::PodCache;
//! use kubelet_core::probe::Results;
//! use kubelet_core::runtime::Runtime;
//! use tokio_util::sync::CancellationToken;
//! # fn demo(runtime: Arc<dyn Runtime>) {
//! let (results, updates) = Results::new(); // `updates` goes to the sync loop
//! let manager = kubelet_probe::Manager::new(runtime, PodCache::new(), results, CancellationToken::new());
//! # let _ = (manager, updates);
//! # }
//! ```

// Blocking calls are banned on async workers (clippy.toml, issue 16); unit tests may block.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod error;
pub mod exec;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod http;
pub mod lifecycle;
mod manager;
pub mod prober;
mod schedule;
pub mod tcp;
mod worker;

pub use error::{Error, Result};
pub use kubelet_core::probe::{ProbeKind, ProbeResult};
pub use lifecycle::LifecycleHandlerRunner;
pub use manager::Manager;
pub use prober::Outcome;
