//! [`Fault`]: what the [`super::FaultProxy`] does to a call, and the proxy's rule book (which
//! fault each method has now, how many calls each method got), shared by every connection.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tonic::Code;

/// What the proxy does to the calls of a method while the fault is set.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Forward the call after this delay.
    Latency(Duration),
    /// Answer with this gRPC status (in the `grpc-status` trailer) without forwarding.
    Status(Code, String),
    /// Close the client's connection the call came on, without answering: the client sees a
    /// broken connection (tonic: `Unavailable`) and every other call on that connection fails.
    DropConnection,
    /// Never answer while the fault is set (a hung runtime); a stalled call is forwarded when
    /// the method's fault is cleared or changed, unless the client gave up first.
    Stall,
}

impl Fault {
    /// `Unavailable`: the runtime is restarting or unreachable.
    pub fn unavailable() -> Self {
        Self::Status(Code::Unavailable, "injected by the fault proxy".into())
    }

    /// `DeadlineExceeded`: the runtime gave up on the call.
    pub fn deadline_exceeded() -> Self {
        Self::Status(Code::DeadlineExceeded, "injected by the fault proxy".into())
    }

    /// `Internal`: the runtime failed the call.
    pub fn internal() -> Self {
        Self::Status(Code::Internal, "injected by the fault proxy".into())
    }
}

/// The faults in force and the calls seen; `changes` ticks on every change of a fault so that
/// stalled calls re-check theirs.
#[derive(Debug)]
pub(crate) struct Rules {
    state: Mutex<State>,
    changes: watch::Sender<()>,
}

#[derive(Debug, Default)]
struct State {
    by_method: HashMap<String, Fault>,
    every_method: Option<Fault>,
    calls: HashMap<String, u64>,
    abandoned: HashMap<String, u64>,
}

impl Rules {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State::default()),
            changes: watch::Sender::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a test panicked mid-update; the maps stay consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets (`Some`) or clears (`None`) the fault of `method`.
    pub(crate) fn set(&self, method: &str, fault: Option<Fault>) {
        let mut st = self.lock();
        match fault {
            Some(f) => st.by_method.insert(method.to_owned(), f),
            None => st.by_method.remove(method),
        };
        drop(st);
        self.changes.send_replace(());
    }

    /// Sets or clears the fault of every method without one of its own.
    pub(crate) fn set_every(&self, fault: Option<Fault>) {
        self.lock().every_method = fault;
        self.changes.send_replace(());
    }

    /// Clears every fault.
    pub(crate) fn clear(&self) {
        let mut st = self.lock();
        st.by_method.clear();
        st.every_method = None;
        drop(st);
        self.changes.send_replace(());
    }

    /// The fault of `method` now.
    pub(crate) fn fault(&self, method: &str) -> Option<Fault> {
        let st = self.lock();
        st.by_method
            .get(method)
            .or(st.every_method.as_ref())
            .cloned()
    }

    /// Counts a call of `method` and returns its fault.
    pub(crate) fn enter(&self, method: &str) -> Option<Fault> {
        *self.lock().calls.entry(method.to_owned()).or_default() += 1;
        self.fault(method)
    }

    /// Calls of `method` seen so far (faulted ones included).
    pub(crate) fn count(&self, method: &str) -> u64 {
        self.lock().calls.get(method).copied().unwrap_or(0)
    }

    /// Calls seen so far by method.
    pub(crate) fn counts(&self) -> HashMap<String, u64> {
        self.lock().calls.clone()
    }

    /// Counts a call of `method` its client gave up on (cancelled or timed out) before the
    /// proxy answered.
    pub(crate) fn abandon(&self, method: &str) {
        *self.lock().abandoned.entry(method.to_owned()).or_default() += 1;
    }

    /// Calls of `method` whose client gave up before the proxy answered.
    pub(crate) fn abandoned(&self, method: &str) -> u64 {
        self.lock().abandoned.get(method).copied().unwrap_or(0)
    }

    /// Waits while `method` is stalled; returns its fault once it is no longer [`Fault::Stall`].
    pub(crate) async fn wait_while_stalled(&self, method: &str) -> Option<Fault> {
        let mut changes = self.changes.subscribe();
        loop {
            match self.fault(method) {
                Some(Fault::Stall) => {}
                other => return other,
            }
            if changes.changed().await.is_err() {
                // The proxy is gone: stall for good, the connection is being torn down.
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_faults_win_over_the_default_and_calls_are_counted() {
        let rules = Rules::new();
        assert_eq!(rules.enter("Version"), None);
        rules.set_every(Some(Fault::unavailable()));
        rules.set("Version", Some(Fault::Latency(Duration::from_millis(5))));
        assert_eq!(
            rules.enter("Version"),
            Some(Fault::Latency(Duration::from_millis(5)))
        );
        assert_eq!(rules.enter("Status"), Some(Fault::unavailable()));
        rules.set("Version", None);
        assert_eq!(rules.fault("Version"), Some(Fault::unavailable()));
        rules.clear();
        assert_eq!(rules.fault("Status"), None);
        assert_eq!(rules.count("Version"), 2);
        assert_eq!(rules.counts().get("Status"), Some(&1));
    }

    #[tokio::test]
    async fn a_stall_ends_when_the_fault_changes() {
        let rules = std::sync::Arc::new(Rules::new());
        rules.set("ListContainers", Some(Fault::Stall));
        let waiter = tokio::spawn({
            let rules = rules.clone();
            async move { rules.wait_while_stalled("ListContainers").await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        rules.set("ListContainers", Some(Fault::internal()));
        assert_eq!(waiter.await.expect("join"), Some(Fault::internal()));
    }
}
