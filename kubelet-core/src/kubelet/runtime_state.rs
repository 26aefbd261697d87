//! Runtime health as the sync loop and `/healthz` see it (upstream `pkg/kubelet/runtime.go`
//! and `updateRuntimeUp` in `kubelet.go`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::pleg::Pleg;
use crate::runtime::{Runtime, RuntimeHandler};

/// How long the runtime may go without a successful status check before it counts as down
/// (upstream `maxWaitForContainerRuntime`).
pub const MAX_WAIT_FOR_RUNTIME: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
struct Inner {
    last_base_runtime_sync: Option<Instant>,
    runtime_error: Option<String>,
    network_error: Option<String>,
    handlers: Vec<RuntimeHandler>,
}

/// Shared runtime health. Cheap to clone.
#[derive(Clone)]
pub struct RuntimeState {
    inner: Arc<Mutex<Inner>>,
    pleg: Arc<dyn Pleg>,
}

impl std::fmt::Debug for RuntimeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeState").finish_non_exhaustive()
    }
}

impl RuntimeState {
    /// A state that reports "not checked yet" until the first status check; PLEG health is
    /// part of it.
    pub fn new(pleg: Arc<dyn Pleg>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner::default())),
            pleg,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Errors that block all pod syncing (upstream `runtimeErrors`).
    pub fn runtime_errors(&self) -> Vec<String> {
        let inner = self.lock();
        let mut errs = Vec::new();
        match inner.last_base_runtime_sync {
            None => {
                errs.push("container runtime status check may not have completed yet".to_owned())
            }
            Some(t) if t.elapsed() > MAX_WAIT_FOR_RUNTIME => {
                errs.push("container runtime is down".to_owned())
            }
            Some(_) => {}
        }
        if let Some(e) = &inner.runtime_error {
            errs.push(e.clone());
        }
        drop(inner);
        if let Err(e) = self.pleg.healthy() {
            errs.push(format!("PLEG is not healthy: {e}"));
        }
        errs
    }

    /// Errors that block pods needing the pod network (upstream `networkErrors`).
    pub fn network_errors(&self) -> Option<String> {
        self.lock().network_error.clone()
    }

    /// The runtime handlers of the last successful status check (upstream
    /// `runtimeState.runtimeHandlers`).
    pub fn runtime_handlers(&self) -> Vec<RuntimeHandler> {
        self.lock().handlers.clone()
    }

    /// Runs one status check now (upstream `updateRuntimeUp`).
    pub async fn update(&self, runtime: &dyn Runtime) {
        match runtime.status().await {
            Ok(status) => {
                let mut inner = self.lock();
                let was_down =
                    inner.runtime_error.is_some() || inner.last_base_runtime_sync.is_none();
                inner.handlers = status.handlers;
                inner.network_error = (!status.network_ready)
                    .then(|| format!("container runtime network not ready: {}", status.message));
                if status.runtime_ready {
                    inner.last_base_runtime_sync = Some(Instant::now());
                    inner.runtime_error = None;
                    if was_down {
                        info!("container runtime is ready");
                    }
                } else {
                    inner.runtime_error =
                        Some(format!("container runtime not ready: {}", status.message));
                }
            }
            Err(e) => {
                let mut inner = self.lock();
                if inner.runtime_error.is_none() {
                    warn!(error = %e, "container runtime status check failed");
                }
                inner.runtime_error = Some(format!("container runtime status check failed: {e}"));
            }
        }
    }

    /// Checks the runtime every `period` until cancelled (upstream: every 5 s).
    pub async fn run(self, runtime: Arc<dyn Runtime>, period: Duration, token: CancellationToken) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = token.cancelled() => break,
                _ = tick.tick() => self.update(runtime.as_ref()).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::PodCache;
    use crate::runtime::RuntimeStatus;
    use crate::testing::{FakePleg, FakeRuntime};

    #[tokio::test(start_paused = true)]
    async fn reports_down_until_checked_and_after_failures() {
        let rt = Arc::new(FakeRuntime::new());
        let state = RuntimeState::new(Arc::new(FakePleg::new(rt.clone(), PodCache::new())));
        assert_eq!(state.runtime_errors().len(), 1);
        state.update(rt.as_ref()).await;
        assert!(state.runtime_errors().is_empty());
        rt.set_down(true);
        state.update(rt.as_ref()).await;
        assert!(state.runtime_errors()[0].contains("status check failed"));
        rt.set_down(false);
        rt.set_runtime_status(RuntimeStatus {
            runtime_ready: true,
            network_ready: false,
            message: "cni".into(),
            handlers: vec![crate::runtime::RuntimeHandler {
                name: "kata".into(),
                supports_user_namespaces: true,
                ..Default::default()
            }],
        });
        state.update(rt.as_ref()).await;
        assert_eq!(state.runtime_handlers()[0].name, "kata");
        assert!(state.runtime_errors().is_empty());
        assert!(state.network_errors().is_some());
        tokio::time::advance(MAX_WAIT_FOR_RUNTIME + Duration::from_secs(1)).await;
        assert_eq!(
            state.runtime_errors(),
            vec!["container runtime is down".to_owned()]
        );
    }
}
