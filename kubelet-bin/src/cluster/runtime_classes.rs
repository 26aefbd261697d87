//! The cluster's RuntimeClasses (upstream `pkg/kubelet/runtimeclass/runtimeclass_manager.go`:
//! an informer on `node.k8s.io/v1` `runtimeclasses`, read by `LookupRuntimeHandler`).
//!
//! [`ApiRuntimeClasses`] watches all RuntimeClasses (the Node authorizer's node rules allow
//! `get`/`list`/`watch` of them to every node) with the reflector's backoff
//! ([`reflector_backoff`](super::watch_backoff::reflector_backoff)) and keeps each one's `handler`. A lookup is answered from the
//! cache only: before the first list, or for a class the API server does not have, it is
//! upstream's `NotFound`, and the pod's sandbox is retried at its next sync.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use super::watch_backoff::watch_until_cancelled;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use kubelet_core::runtimeclass::RuntimeClassSource;
use tokio_util::sync::CancellationToken;
use tracing::debug;

#[derive(Debug, Default)]
struct State {
    /// Name → handler.
    handlers: HashMap<String, String>,
    /// The classes of a relist in progress (between `Init` and `InitDone`).
    relist: Option<HashMap<String, String>>,
}

/// RuntimeClass name → handler from a watch on the API server (see the
/// [module docs](self)). Cheap to clone; clones share the cache.
#[derive(Clone, Debug, Default)]
pub struct ApiRuntimeClasses {
    state: Arc<RwLock<State>>,
}

fn entry(class: RuntimeClass) -> (String, String) {
    (class.metadata.name.unwrap_or_default(), class.handler)
}

impl ApiRuntimeClasses {
    /// An empty cache: every lookup is `NotFound` until [`run`](Self::run) lists the classes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Watches RuntimeClasses through `client` until `token` is cancelled; failed lists
    /// and watches are retried with the reflector's backoff.
    pub async fn run(self, client: kube::Client, token: CancellationToken) {
        let api = Api::<RuntimeClass>::all(client);
        watch_until_cancelled(
            api,
            watcher::Config::default(),
            "runtimeclasses",
            token,
            |e| {
                self.apply(e);
            },
        )
        .await;
    }

    /// Takes in one watch event.
    pub fn apply(&self, event: Event<RuntimeClass>) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            Event::Apply(class) => {
                let (name, handler) = entry(class);
                state.handlers.insert(name, handler);
            }
            Event::Delete(class) => {
                state.handlers.remove(&entry(class).0);
            }
            Event::Init => state.relist = Some(HashMap::new()),
            Event::InitApply(class) => {
                let (name, handler) = entry(class);
                state.relist.get_or_insert_default().insert(name, handler);
            }
            Event::InitDone => {
                state.handlers = state.relist.take().unwrap_or_default();
                debug!(
                    runtime_classes = state.handlers.len(),
                    "runtimeclasses listed"
                );
            }
        }
    }
}

impl RuntimeClassSource for ApiRuntimeClasses {
    fn handler(&self, name: &str) -> Option<String> {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .handlers
            .get(name)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn class(name: &str, handler: &str) -> RuntimeClass {
        RuntimeClass {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            handler: handler.to_owned(),
            ..RuntimeClass::default()
        }
    }

    #[test]
    fn watch_events_keep_the_handlers_and_a_relist_replaces_them() {
        let classes = ApiRuntimeClasses::new();
        assert_eq!(classes.handler("kata"), None);
        classes.apply(Event::Init);
        classes.apply(Event::InitApply(class("kata", "kata-qemu")));
        classes.apply(Event::InitApply(class("old", "runc")));
        // Until the relist is done, the previous (empty) view is served.
        assert_eq!(classes.handler("kata"), None);
        classes.apply(Event::InitDone);
        assert_eq!(classes.handler("kata").as_deref(), Some("kata-qemu"));
        classes.apply(Event::Apply(class("gvisor", "runsc")));
        classes.apply(Event::Apply(class("kata", "kata-fc")));
        classes.apply(Event::Delete(class("old", "runc")));
        assert_eq!(classes.handler("gvisor").as_deref(), Some("runsc"));
        assert_eq!(classes.handler("kata").as_deref(), Some("kata-fc"));
        assert_eq!(classes.handler("old"), None);
        classes.apply(Event::Init);
        classes.apply(Event::InitApply(class("gvisor", "runsc")));
        classes.apply(Event::InitDone);
        assert_eq!(classes.handler("kata"), None);
    }
}
