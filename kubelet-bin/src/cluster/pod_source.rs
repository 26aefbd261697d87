//! The `api` pod source: the pods bound to this node, listed and watched from the API
//! server (upstream `pkg/kubelet/config/apiserver.go` `NewSourceApiserver`: a reflector with
//! `fieldSelector=spec.nodeName=<node>` over all namespaces into an `UndeltaStore`).
//!
//! As upstream, every change sends the full set of the node's pods as one
//! [`Operation::Set`], and the merge in `kubelet_core::config` turns it into adds, updates,
//! deletes and removes:
//! - The first `Set` goes out when the first list is complete, which marks the source as
//!   seen (`SourcesReady` waits for it, so housekeeping kills nothing before).
//! - A relist (a watch that expired with 410 Gone, or a restart after errors) is buffered
//!   until it is complete and then sent as one `Set`: pods that still exist are unchanged
//!   for the merge, so a relist kills nothing.
//! - Events that are already queued are applied together and cost one `Set` (coalescing).
//! - Pods are kept without `managedFields`, which the kubelet never reads (see
//!   [`strip_managed_fields`]): every copy down the pipeline (config, pod manager, workers)
//!   is smaller for it.
//! - With [`ApiPodSource::after_node_sync`], nothing is listed before the node's own Node
//!   has been listed (upstream waits for `nodeHasSynced`, checking every
//!   `WaitForAPIServerSyncPeriod`; here the signal wakes it), so API pods are admitted
//!   against the Node the API server has.
//! - Failed lists and watches are retried with the reflector's two backoffs
//!   ([`reflector_backoff`]: 800 ms doubling to 30 s with jitter, reset after 2 min quiet):
//!   one paces re-opening the watch during an outage, the other the relist, so the relist
//!   that a restarted server's `410 Gone` asks for does not wait the outage's backoff.

use std::collections::BTreeMap;

use super::watch_backoff::reflector_backoff;
use async_trait::async_trait;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use kubelet_core::config::{API_SERVER_SOURCE, Operation, PodSource, PodUpdate};
use kubelet_core::pod::strip_managed_fields;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// Pods bound to one node, from the API server; a [`PodSource`] named `api`.
#[derive(Clone)]
pub struct ApiPodSource {
    client: kube::Client,
    node_name: String,
    node_synced: Option<watch::Receiver<bool>>,
}

impl std::fmt::Debug for ApiPodSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiPodSource")
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

impl ApiPodSource {
    /// The pods of node `node_name`, through `client` (the main, rate-limited client).
    pub fn new(client: kube::Client, node_name: impl Into<String>) -> Self {
        Self {
            client,
            node_name: node_name.into(),
            node_synced: None,
        }
    }

    /// Watches pods only once `synced` is `true` (e.g.
    /// [`ApiNodeProvider::synced`](super::ApiNodeProvider::synced)); a closed signal no
    /// longer holds it back.
    #[must_use]
    pub fn after_node_sync(mut self, synced: watch::Receiver<bool>) -> Self {
        self.node_synced = Some(synced);
        self
    }

    /// The watcher's config: this node's pods, lists served from the API server's watch
    /// cache (upstream's reflector lists at resourceVersion 0, where the server ignores the
    /// page size; kube drops `resourceVersion=0` from paged lists, so lists are not paged).
    pub fn watcher_config(&self) -> watcher::Config {
        let mut config = watcher::Config::default()
            .fields(&format!("spec.nodeName={}", self.node_name))
            .any_semantic();
        config.page_size = None;
        config
    }
}

#[async_trait]
impl PodSource for ApiPodSource {
    fn name(&self) -> &str {
        API_SERVER_SOURCE
    }

    async fn run(self: Box<Self>, updates: mpsc::Sender<PodUpdate>, token: CancellationToken) {
        if let Some(mut synced) = self.node_synced.clone() {
            info!(node = %self.node_name, "waiting for node sync before watching apiserver pods");
            tokio::select! {
                biased;
                () = token.cancelled() => return,
                _ = synced.wait_for(|s| *s) => {}
            }
        }
        info!(node = %self.node_name, "watching the API server for this node's pods");
        let config = self.watcher_config();
        let pods: Api<Pod> = Api::all(self.client);
        let events = reflector_backoff(watcher::watcher(pods, config));
        forward(events, updates, token).await;
    }
}

/// The pods the source holds: the last complete set plus the watch events since.
#[derive(Debug, Default)]
struct Store {
    pods: BTreeMap<String, Pod>,
    /// A relist in progress: its pods so far.
    relisting: Option<BTreeMap<String, Pod>>,
    /// Whether a complete list has been seen.
    listed: bool,
}

fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

impl Store {
    /// Applies one event; `true` when the set the kubelet should see changed.
    fn apply(&mut self, mut event: Event<Pod>) -> bool {
        if let Event::Apply(pod) | Event::InitApply(pod) = &mut event {
            strip_managed_fields(&mut pod.metadata);
        }
        match event {
            Event::Init => {
                self.relisting = Some(BTreeMap::new());
                false
            }
            Event::InitApply(pod) => {
                self.relisting
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key(&pod), pod);
                false
            }
            Event::InitDone => {
                self.pods = self.relisting.take().unwrap_or_default();
                self.listed = true;
                true
            }
            Event::Apply(pod) => {
                self.pods.insert(key(&pod), pod);
                self.listed
            }
            Event::Delete(pod) => self.pods.remove(&key(&pod)).is_some() && self.listed,
        }
    }

    fn snapshot(&self) -> Vec<Pod> {
        self.pods.values().cloned().collect()
    }
}

/// Turns watch events into `Set`s on `updates` until `token` is cancelled, the events end or
/// the kubelet stops listening.
pub(crate) async fn forward<S>(
    events: S,
    updates: mpsc::Sender<PodUpdate>,
    token: CancellationToken,
) where
    S: Stream<Item = Result<Event<Pod>, watcher::Error>> + Send,
{
    let mut events = std::pin::pin!(events);
    let mut store = Store::default();
    loop {
        let first = tokio::select! {
            biased;
            () = token.cancelled() => return,
            event = events.next() => event,
        };
        let mut changed = false;
        let mut next = first;
        // Apply what is queued already, then send one set.
        loop {
            match next {
                None => return,
                Some(Ok(event)) => changed |= store.apply(event),
                Some(Err(e)) => {
                    warn!(error = %e, "watching this node's pods failed; retrying with backoff")
                }
            }
            match events.next().now_or_never() {
                Some(event) => next = event,
                None => break,
            }
        }
        if !changed {
            continue;
        }
        let pods = store.snapshot();
        debug!(pods = pods.len(), "pods from the API server");
        let update = PodUpdate {
            pods,
            op: Operation::Set,
            source: API_SERVER_SOURCE.to_owned(),
        };
        tokio::select! {
            biased;
            () = token.cancelled() => return,
            sent = updates.send(update) => if sent.is_err() { return },
        }
    }
}

#[cfg(test)]
#[path = "pod_source_tests.rs"]
mod tests;
