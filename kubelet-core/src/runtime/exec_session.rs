//! What a runtime does around one streamed exec: an [`ExecSession`] is begun before the
//! kubelet asks for the exec's streaming URL ([`Runtime::begin_exec_session`]) and ended
//! when the proxied stream closes, so that the kubelet can guarantee that a client who
//! disconnects mid-session leaves no exec process behind (issue 14, acceptance 5).
//!
//! Upstream has no counterpart: the Go kubelet relies on the runtime's streaming server to
//! end the exec with its stream (`k8s.io/kubelet/pkg/cri/streaming`). containerd 2 does;
//! containerd 1.6 runs execs under a context of its own (`pkg/cri/server/streaming.go`),
//! so a process that does not read its stdin (`sleep 600`) outlives the session there.
//!
//! [`Runtime::begin_exec_session`]: super::Runtime::begin_exec_session

use async_trait::async_trait;

/// Which side closed an exec session's stream first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClosedBy {
    /// The client (kubectl, the API server) went away: the runtime may still be running the
    /// exec, or not have started it yet.
    Client,
    /// The runtime's streaming server closed the stream: it does so when the exec's process
    /// ended (or could not start).
    Runtime,
}

/// One streamed exec, as the runtime tracks it between the stream's upgrade and its end.
///
/// The kubelet's proxy drives it: [`ExecSession::watch`] alongside the stream once the
/// runtime's streaming server switched protocols (dropped when the stream closes first),
/// then [`ExecSession::end`] once either side closed. A session that is dropped without
/// `end` (the upgrade failed) releases what it holds and kills nothing.
#[async_trait]
pub trait ExecSession: Send {
    /// Runs while the stream is up: learns which process is the session's. Resolves when
    /// that is known or cannot be; cancel safe.
    async fn watch(&mut self);

    /// The stream closed (`closed_by` went first): makes sure the session's process, and
    /// what it started, is gone.
    async fn end(self: Box<Self>, closed_by: ClosedBy);
}

/// The session of a runtime whose streaming server ends an exec with its stream (the
/// default of [`Runtime::begin_exec_session`](super::Runtime::begin_exec_session)).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopExecSession;

#[async_trait]
impl ExecSession for NoopExecSession {
    async fn watch(&mut self) {}

    async fn end(self: Box<Self>, closed_by: ClosedBy) {
        let _ = closed_by;
    }
}
