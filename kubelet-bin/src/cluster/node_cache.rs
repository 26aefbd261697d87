//! The kubelet's own Node as the API server has it (upstream's node informer and lister in
//! `pkg/kubelet/kubelet.go`, read through `GetNode`/`getNodeAnyWay`): [`ApiNodeProvider`]
//! watches `nodes` with `fieldSelector=metadata.name=<node>` (with backoff) and serves the
//! latest object to predicate admission and the mirror pods' owner reference. Until the
//! Node has been read, or while it does not exist, it serves the fallback node (the one the
//! kubelet registers), which has no UID, so no mirror pod is created before the Node exists.
//!
//! [`ApiNodeProvider::synced`] tells when the first list is complete, whether or not it
//! found the Node (upstream's node informer `HasSynced`): the `api` pod source waits for it
//! before it watches pods, as upstream `NewSourceApiserver` waits for `nodeHasSynced`, so
//! API pods are admitted against the Node the API server has once it exists.

use std::sync::{Arc, PoisonError, RwLock};

use super::watch_backoff::watch_until_cancelled;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use kubelet_core::kubelet::NodeProvider;
use kubelet_core::pod::strip_managed_fields;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

#[derive(Debug, Default)]
struct State {
    current: Option<Arc<Node>>,
    /// The objects of a relist in progress (between `Init` and `InitDone`).
    relist: Option<Option<Arc<Node>>>,
}

/// The Node from a watch on the API server (see the [module docs](self)). Cheap to clone.
#[derive(Clone, Debug)]
pub struct ApiNodeProvider {
    state: Arc<RwLock<State>>,
    fallback: Arc<Node>,
    synced: Arc<watch::Sender<bool>>,
}

impl ApiNodeProvider {
    /// A provider that serves `fallback` until [`apply`](Self::apply) gives it a Node.
    pub fn new(fallback: Node) -> Self {
        Self {
            state: Arc::default(),
            fallback: Arc::new(fallback),
            synced: Arc::new(watch::channel(false).0),
        }
    }

    /// Turns `true` once the first list of the Node is complete, found or not (upstream's
    /// node informer `HasSynced`); it stays `true` through later relists.
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// Watches the Node `name` through `client` on `tracker` until `token` is cancelled;
    /// serves `fallback` until the Node is read.
    pub fn spawn(
        client: kube::Client,
        name: &str,
        fallback: Node,
        tracker: &TaskTracker,
        token: CancellationToken,
    ) -> Self {
        let provider = Self::new(fallback);
        tracker.spawn(provider.clone().run(client, name.to_owned(), token));
        provider
    }

    /// Watches the Node `name` until `token` is cancelled; the reflector's backoff
    /// ([`reflector_backoff`](super::watch_backoff::reflector_backoff)) retries failed lists and watches.
    pub async fn run(self, client: kube::Client, name: String, token: CancellationToken) {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let what = format!("node {name}");
        watch_until_cancelled(Api::<Node>::all(client), config, &what, token, |e| {
            self.apply(e);
        })
        .await;
    }

    /// Takes in one watch event (keeping the Node without `managedFields`).
    pub fn apply(&self, mut event: Event<Node>) {
        if let Event::Apply(node) | Event::InitApply(node) = &mut event {
            strip_managed_fields(&mut node.metadata);
        }
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            Event::Apply(node) => state.current = Some(Arc::new(node)),
            Event::Delete(_) => state.current = None,
            Event::Init => state.relist = Some(None),
            Event::InitApply(node) => state.relist = Some(Some(Arc::new(node))),
            Event::InitDone => {
                state.current = state.relist.take().flatten();
                debug!(found = state.current.is_some(), "node listed");
                self.synced.send_replace(true);
            }
        }
    }

    /// `true` once the Node has been read from the API server (and still exists).
    pub fn has_node(&self) -> bool {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .current
            .is_some()
    }
}

impl NodeProvider for ApiNodeProvider {
    fn node(&self) -> Arc<Node> {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .current
            .clone()
            .unwrap_or_else(|| self.fallback.clone())
    }
}

#[cfg(test)]
#[path = "node_cache_tests.rs"]
mod tests;
