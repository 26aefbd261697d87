//! Pod lifecycle event generators (PLEG) for a Rust kubelet.
//!
//! Mirrors upstream `pkg/kubelet/pleg/generic.go` (the relisting [`GenericPleg`]),
//! `pkg/kubelet/pleg/evented.go` (the event-driven [`EventedPleg`], here over any
//! [`evented::EventSource`], e.g. containerd's native events with feature `containerd`) and
//! `pkg/kubelet/pleg/pleg.go` (their configuration); the contract,
//! [`kubelet_core::pleg::Pleg`] and [`kubelet_core::pleg::Event`], lives in `kubelet-core`.
//!
//! The PLEG periodically lists the runtime's pods, turns container and sandbox state changes
//! into events for the sync loop, and keeps the [`kubelet_core::cache::PodCache`] that pod
//! workers read fresh.
//!
//! ```no_run
//! use std::sync::Arc;
//! use kubelet_core::cache::PodCache;
//! use kubelet_core::pleg::Pleg;
//! use kubelet_core::runtime::Runtime;
//! use kubelet_pleg::{Config, GenericPleg};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo(runtime: Arc<dyn Runtime>) {
//! let cache = PodCache::new();
//! let (pleg, mut events) = GenericPleg::new(runtime, cache.clone(), Config::default());
//! let token = CancellationToken::new();
//! tokio::spawn(pleg.clone().run(token.child_token()));
//! while let Some(event) = events.recv().await {
//!     println!("{:?} in pod {}", event.kind, event.id);
//!     if let Err(reason) = pleg.healthy() {
//!         eprintln!("{reason}");
//!     }
//! }
//! # }
//! ```

// Blocking calls are banned on async workers (clippy.toml, issue 16); unit tests may block.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

#[cfg(feature = "containerd")]
pub mod containerd;
mod error;
pub mod evented;
pub mod events;
pub mod generic;

pub use error::{Error, Result};
pub use evented::EventedPleg;
pub use generic::{CHANNEL_CAPACITY, Config, ContainerRelist, GenericPleg};
