//! The Rust kubelet as a library: [`NodeBuilder`] assembles a whole node — pod sources,
//! runtime, PLEG, status, volume and probe managers, admit handlers, cgroups and the
//! read-only HTTP endpoints — with upstream's defaults where one exists, and returns a
//! [`Node`] to run and stop (upstream `cmd/kubelet/app/server.go` `RunKubelet` and
//! `pkg/kubelet/kubelet.go` `NewMainKubelet`). The `kubelet` binary is flags and config on
//! top of it; a custom node agent is a runtime on top of it.
//!
//! ```no_run
//! use kubelet::NodeBuilder;
//! # fn my_runtime(_: kubelet_core::probe::Results) -> kubelet_core::testing::FakeRuntime { kubelet_core::testing::FakeRuntime::new() }
//! # async fn demo() -> Result<(), kubelet::Error> {
//! let node = NodeBuilder::new(|ctx: &kubelet::RuntimeContext| {
//!     Ok::<_, std::convert::Infallible>(my_runtime(ctx.probe_results.clone()))
//! })
//! .root_dir("/var/lib/my-agent")
//! .pod_manifest_path("/etc/my-agent/manifests")
//! .read_only_addr("127.0.0.1:10255".parse().expect("an address"))
//! .build()
//! .await?;
//! node.run_until(async { tokio::signal::ctrl_c().await.ok(); }).await;
//! # Ok(()) }
//! ```
//!
//! Features: `containerd` (default) adds the evented PLEG over containerd's events
//! ([`NodeBuilder::evented_pleg`]); `cri` (default) builds the `kubelet` binary's CRI
//! runtime. Without them the library pulls in no gRPC.

pub mod cluster;
pub mod duration;
pub mod logind;
pub mod node;
#[cfg(feature = "containerd")]
pub mod pleg;
pub mod server;
pub mod span_stacks;
pub mod systemd;

pub use node::{Error, Node, NodeBuilder, RuntimeContext};
