//! Test helpers for code that talks CRI to a real runtime (feature `test-util`).
//!
//! [`FaultProxy`] sits on its own unix socket in front of a runtime's socket (containerd's, or
//! a [`crate::fake::FakeCriServer`]'s), forwards every gRPC call byte for byte and injects the
//! [`Fault`]s a test sets per method at run time: latency, gRPC errors, dropped connections
//! and stalls. Upstream has no such proxy; its fault tests script the fake runtime
//! (`pkg/kubelet/cri/remote/fake`), which cannot sit in front of containerd.

mod fault_proxy;
mod faults;

pub use fault_proxy::FaultProxy;
pub use faults::Fault;
