//! One watch per referenced object (upstream `objectCache` in
//! `pkg/kubelet/util/manager/watch_based_manager.go`): the first reference to
//! `namespace/name` starts a list+watch with `fieldSelector=metadata.name=<name>` in its
//! namespace (kube-runtime's watcher with the reflector's backoff,
//! [`reflector_backoff`], so a `403` while the node
//! authorizer does not yet know the pod, or any other failure, is retried); references are
//! counted per pod UID, and the watch stops when the last one goes (upstream stops it at
//! once, with no grace period). An object marked `immutable` stops its watch and keeps the
//! value, as upstream.
//!
//! Every change a watch sees after its first list (an update, a deletion, a relist) is
//! reported to the cache's [`Notify`] with the object's namespace and name, and so is the
//! first list when a read gave up waiting for it (the pod's sync failed and may now retry).
//!
//! [`ObjectCache::get`] answers from the cache only: it waits up to the sync timeout
//! (upstream: 1 s) for the watch's first list, then returns the object or `None`; it never
//! sends a request.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::cluster::watch_backoff::reflector_backoff;
use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use kubelet_core::objects::{Error, Result};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

/// Upstream's wait for a new watch's first list in `Get` (`wait.PollImmediate(10ms, 1s)`).
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(1);

/// Told `(namespace, name)` of an object whose watch saw it change after its first list.
pub type Notify = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// What a watch knows of its object.
#[derive(Clone, Debug)]
enum State<K> {
    /// The first list has not completed.
    Unsynced,
    /// Listed: the object, or `None` when it does not exist.
    Synced(Option<Arc<K>>),
}

/// A watched object: who references it and what the watch saw.
#[derive(Debug)]
struct Item<K> {
    /// References by pod UID.
    refs: HashMap<String, usize>,
    state: watch::Receiver<State<K>>,
    stop: CancellationToken,
    /// A read gave up waiting for the first list.
    late: Arc<AtomicBool>,
}

/// The objects of one kind, each from its own watch (see the [module docs](self)).
pub struct ObjectCache<K> {
    client: kube::Client,
    /// The resource in messages: `configmap`, `secret`.
    resource: &'static str,
    is_immutable: fn(&K) -> bool,
    notify: Notify,
    items: Mutex<HashMap<(String, String), Item<K>>>,
    tracker: TaskTracker,
    token: CancellationToken,
    sync_timeout: Duration,
}

impl<K> Debug for ObjectCache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCache")
            .field("resource", &self.resource)
            .field("watched", &self.watched())
            .finish_non_exhaustive()
    }
}

impl<K> ObjectCache<K> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Item<K>>> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `namespace/name` of every watched object, sorted.
    pub fn watched(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .lock()
            .keys()
            .map(|(namespace, name)| format!("{namespace}/{name}"))
            .collect();
        names.sort();
        names
    }
}

impl<K> ObjectCache<K>
where
    K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    /// A cache of `resource` objects over `client` that tells `notify` of changes; watches
    /// run on `tracker` and all stop with `token`.
    pub fn new(
        client: kube::Client,
        resource: &'static str,
        is_immutable: fn(&K) -> bool,
        notify: Notify,
        tracker: TaskTracker,
        token: CancellationToken,
    ) -> Self {
        Self {
            client,
            resource,
            is_immutable,
            notify,
            items: Mutex::default(),
            tracker,
            token,
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
        }
    }

    /// How long [`get`](Self::get) waits for a new watch's first list.
    pub fn set_sync_timeout(&mut self, timeout: Duration) {
        self.sync_timeout = timeout;
    }

    /// Pod `pod_uid` references `namespace/name`: the first reference starts its watch.
    pub fn add_reference(&self, namespace: &str, name: &str, pod_uid: &str) {
        let mut items = self.lock();
        let item = items
            .entry((namespace.to_owned(), name.to_owned()))
            .or_insert_with(|| self.start(namespace, name));
        *item.refs.entry(pod_uid.to_owned()).or_default() += 1;
    }

    /// Pod `pod_uid` no longer references `namespace/name`: the last reference stops its
    /// watch.
    pub fn delete_reference(&self, namespace: &str, name: &str, pod_uid: &str) {
        let mut items = self.lock();
        let key = (namespace.to_owned(), name.to_owned());
        let Some(item) = items.get_mut(&key) else {
            return;
        };
        if let Some(n) = item.refs.get_mut(pod_uid) {
            *n -= 1;
            if *n == 0 {
                item.refs.remove(pod_uid);
            }
        }
        if item.refs.is_empty() {
            item.stop.cancel();
            items.remove(&key);
            debug!(resource = self.resource, %namespace, %name, "stopped watching: no pod references it");
        }
    }

    /// `namespace/name` from its watch: waits for the first list (bounded), then the object
    /// or `None`. `Unavailable` when no pod references it or the list has not completed in
    /// time (retry on the next sync).
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<K>> {
        let state = self
            .lock()
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|item| (item.state.clone(), item.late.clone()));
        let Some((mut state, late)) = state else {
            return Err(Error::Unavailable(format!(
                "object {namespace:?}/{name:?} not registered"
            )));
        };
        let synced = tokio::time::timeout(
            self.sync_timeout,
            state.wait_for(|s| matches!(s, State::Synced(_))),
        )
        .await;
        match synced {
            Ok(Ok(s)) => match &*s {
                State::Synced(object) => Ok(object.as_deref().cloned()),
                State::Unsynced => Err(self.not_synced()),
            },
            // The watch ended (the node is stopping).
            Ok(Err(_)) => Err(self.not_synced()),
            Err(_) => {
                late.store(true, Ordering::Relaxed);
                Err(self.not_synced())
            }
        }
    }

    fn not_synced(&self) -> Error {
        Error::Unavailable(format!(
            "failed to sync {} cache: timed out waiting for the condition",
            self.resource
        ))
    }

    fn start(&self, namespace: &str, name: &str) -> Item<K> {
        let (tx, rx) = watch::channel(State::Unsynced);
        let stop = self.token.child_token();
        let late = Arc::new(AtomicBool::new(false));
        debug!(resource = self.resource, %namespace, %name, "watching");
        self.tracker.spawn(run(
            Api::namespaced(self.client.clone(), namespace),
            (namespace.to_owned(), name.to_owned()),
            self.is_immutable,
            self.notify.clone(),
            late.clone(),
            tx,
            stop.clone(),
        ));
        Item {
            refs: HashMap::new(),
            state: rx,
            stop,
            late,
        }
    }
}

/// The watcher's config: the one object, lists served from the API server's watch cache as
/// upstream's reflector asks (resourceVersion 0, unpaged).
fn watcher_config(name: &str) -> watcher::Config {
    let mut config = watcher::Config::default()
        .fields(&format!("metadata.name={name}"))
        .any_semantic();
    config.page_size = None;
    config
}

/// Watches `namespace/name` until `stop`, publishing what it sees on `state` and telling
/// `notify` of changes after the first list (and of the first list when a read was `late`
/// for it); ends early once the object is immutable (its value stays).
async fn run<K>(
    api: Api<K>,
    (namespace, name): (String, String),
    is_immutable: fn(&K) -> bool,
    notify: Notify,
    late: Arc<AtomicBool>,
    state: watch::Sender<State<K>>,
    stop: CancellationToken,
) where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let events = reflector_backoff(watcher::watcher(api, watcher_config(&name)));
    let mut events = std::pin::pin!(events);
    // The object of a list in progress (between `Init` and `InitDone`).
    let mut listing: Option<Option<K>> = None;
    loop {
        let event = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            event = events.next() => event,
        };
        let seen = match event {
            None => return,
            Some(Err(e)) => {
                warn!(%name, error = %e, "watching a referenced object failed; retrying with backoff");
                continue;
            }
            Some(Ok(Event::Init)) => {
                listing = Some(None);
                continue;
            }
            Some(Ok(Event::InitApply(object))) => {
                listing = Some(Some(object));
                continue;
            }
            Some(Ok(Event::InitDone)) => listing.take().flatten(),
            Some(Ok(Event::Apply(object))) => Some(object),
            Some(Ok(Event::Delete(_))) => None,
        };
        let immutable = seen.as_ref().is_some_and(is_immutable);
        let previous = state.send_replace(State::Synced(seen.map(Arc::new)));
        if matches!(previous, State::Synced(_)) || late.swap(false, Ordering::Relaxed) {
            notify(&namespace, &name);
        }
        if immutable {
            debug!(%name, "stopped watching for changes: the object is immutable");
            return;
        }
    }
}
