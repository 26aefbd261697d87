//! ConfigMaps and Secrets from the API server for the pods of this node (upstream
//! `pkg/kubelet/configmap/configmap_manager.go` and `pkg/kubelet/secret/secret_manager.go`
//! with the `Watch` change detection strategy, `NewWatchingConfigMapManager` /
//! `NewWatchingSecretManager` over `pkg/kubelet/util/manager/cache_based_manager.go`).
//!
//! [`ApiObjectSource`] is the [`ObjectSource`] of cluster mode. The kubelet registers every
//! pod it syncs; the source then watches each object the pod references (volumes, projected
//! sources, `env.valueFrom`, `envFrom`, `imagePullSecrets`: see
//! [`references`](kubelet_core::objects::references)), one watch per object however many
//! pods use it, and drops the watch when the last pod that references it is unregistered.
//! Volumes and env read from those watches, never with a GET, which is also all that the
//! node authorizer allows (a node may read only what its pods reference).
//!
//! Volumes pick up a change at the pod's next sync. Upstream waits for the periodic sync
//! (the sync period with up to 50 % jitter: 60–90 s by default); here a change a watch sees
//! also asks for a sync of the registered pods that reference the object, through the
//! handler set with [`ApiObjectSource::set_change_handler`], so mounted files follow within
//! seconds. The env of a running container never changes.
//!
//! Service-account tokens are not its business: cluster mode wraps it in
//! [`WithTokens`](kubelet_core::objects::WithTokens) with the
//! [`ApiTokenSource`](super::ApiTokenSource).

pub mod cache;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kubelet_core::PodExt;
use kubelet_core::objects::references::{config_map_names, secret_names};
use kubelet_core::objects::{Error, ObjectSource, Result, ServiceAccountToken, TokenRequest};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use cache::{DEFAULT_SYNC_TIMEOUT, Notify, ObjectCache};

/// Told the UIDs of the registered pods that reference an object that changed.
pub type ChangeHandler = Arc<dyn Fn(&[String]) + Send + Sync>;

/// A registered pod (upstream's `objectKey`: namespace, name, UID).
type PodKey = (String, String, String);

/// What a registered pod references.
#[derive(Debug, Default, PartialEq, Eq)]
struct Refs {
    config_maps: BTreeSet<String>,
    secrets: BTreeSet<String>,
}

impl Refs {
    fn of(pod: &Pod) -> Self {
        pod.spec
            .as_ref()
            .map(|spec| Self {
                config_maps: config_map_names(spec),
                secrets: secret_names(spec),
            })
            .unwrap_or_default()
    }
}

/// The pod's namespace as the volumes and env read it, name and UID.
fn pod_key(pod: &Pod) -> PodKey {
    (
        pod.namespace_or_default().to_owned(),
        pod.name_or_empty().to_owned(),
        pod.uid().as_str().to_owned(),
    )
}

/// ConfigMaps and Secrets from per-object watches (see the [module docs](self)).
pub struct ApiObjectSource {
    config_maps: ObjectCache<ConfigMap>,
    secrets: ObjectCache<Secret>,
    registered: Arc<Mutex<HashMap<PodKey, Refs>>>,
    on_change: Arc<Mutex<Option<ChangeHandler>>>,
}

/// Which kind of object changed.
#[derive(Clone, Copy, Debug)]
enum Kind {
    ConfigMap,
    Secret,
}

/// A [`Notify`] that tells `on_change` the registered pods referencing the object.
fn notifier(
    kind: Kind,
    registered: Arc<Mutex<HashMap<PodKey, Refs>>>,
    on_change: Arc<Mutex<Option<ChangeHandler>>>,
) -> Notify {
    Arc::new(move |namespace: &str, name: &str| {
        let uids: Vec<String> = registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|((ns, _, _), refs)| {
                ns == namespace
                    && match kind {
                        Kind::ConfigMap => refs.config_maps.contains(name),
                        Kind::Secret => refs.secrets.contains(name),
                    }
            })
            .map(|((_, _, uid), _)| uid.clone())
            .collect();
        let handler = on_change
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(handler) = handler
            && !uids.is_empty()
        {
            tracing::debug!(?kind, %namespace, %name, pods = uids.len(), "referenced object changed; resyncing its pods");
            handler(&uids);
        }
    })
}

impl std::fmt::Debug for ApiObjectSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiObjectSource")
            .field("config_maps", &self.config_maps)
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

impl ApiObjectSource {
    /// A source over `client` (the main, rate-limited client); its watches run on `tracker`
    /// and stop with `token`. No token source.
    pub fn new(client: kube::Client, tracker: TaskTracker, token: CancellationToken) -> Self {
        let registered = Arc::<Mutex<HashMap<PodKey, Refs>>>::default();
        let on_change = Arc::<Mutex<Option<ChangeHandler>>>::default();
        Self {
            config_maps: ObjectCache::new(
                client.clone(),
                "configmap",
                |cm: &ConfigMap| cm.immutable == Some(true),
                notifier(Kind::ConfigMap, registered.clone(), on_change.clone()),
                tracker.clone(),
                token.clone(),
            ),
            secrets: ObjectCache::new(
                client,
                "secret",
                |s: &Secret| s.immutable == Some(true),
                notifier(Kind::Secret, registered.clone(), on_change.clone()),
                tracker,
                token,
            ),
            registered,
            on_change,
        }
    }

    /// After this, a change to a watched object calls `handler` with the UIDs of the
    /// registered pods that reference it (e.g. to sync them; the node builder does). Called
    /// from the watch tasks: it must not block.
    pub fn set_change_handler(&self, handler: impl Fn(&[String]) + Send + Sync + 'static) {
        *self
            .on_change
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(handler));
    }

    /// How long a read waits for a new watch's first list (default
    /// [`DEFAULT_SYNC_TIMEOUT`], upstream's 1 s); after it the read is `Unavailable` and the
    /// pod's next sync tries again.
    #[must_use]
    pub fn with_sync_timeout(mut self, timeout: Duration) -> Self {
        self.config_maps.set_sync_timeout(timeout);
        self.secrets.set_sync_timeout(timeout);
        self
    }

    /// `configmaps/<namespace>/<name>` and `secrets/<namespace>/<name>` of every object
    /// watched now, sorted.
    pub fn watched(&self) -> Vec<String> {
        let cms = self
            .config_maps
            .watched()
            .into_iter()
            .map(|k| format!("configmaps/{k}"));
        let secrets = self
            .secrets
            .watched()
            .into_iter()
            .map(|k| format!("secrets/{k}"));
        cms.chain(secrets).collect()
    }

    fn registered(&self) -> std::sync::MutexGuard<'_, HashMap<PodKey, Refs>> {
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds the references of `new` that `old` lacks and drops those `new` lacks.
    fn update_references(&self, namespace: &str, uid: &str, old: &Refs, new: &Refs) {
        for name in new.config_maps.difference(&old.config_maps) {
            self.config_maps.add_reference(namespace, name, uid);
        }
        for name in new.secrets.difference(&old.secrets) {
            self.secrets.add_reference(namespace, name, uid);
        }
        for name in old.config_maps.difference(&new.config_maps) {
            self.config_maps.delete_reference(namespace, name, uid);
        }
        for name in old.secrets.difference(&new.secrets) {
            self.secrets.delete_reference(namespace, name, uid);
        }
    }
}

#[async_trait]
impl ObjectSource for ApiObjectSource {
    fn register_pod(&self, pod: &Pod) {
        let key = pod_key(pod);
        let refs = Refs::of(pod);
        let mut registered = self.registered();
        let old = registered.remove(&key).unwrap_or_default();
        if old != refs {
            self.update_references(&key.0, &key.2, &old, &refs);
        }
        registered.insert(key, refs);
    }

    fn unregister_pod(&self, pod: &Pod) {
        let key = pod_key(pod);
        let mut registered = self.registered();
        if let Some(old) = registered.remove(&key) {
            self.update_references(&key.0, &key.2, &old, &Refs::default());
        }
    }

    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>> {
        self.config_maps.get(namespace, name).await
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>> {
        self.secrets.get(namespace, name).await
    }

    /// Always `Unavailable`: tokens come from a `TokenSource` beside it (`WithTokens`).
    async fn service_account_token(
        &self,
        _request: &TokenRequest,
    ) -> Result<Option<ServiceAccountToken>> {
        Err(Error::Unavailable(
            "service-account tokens: no TokenRequest source for this object source".into(),
        ))
    }
}

#[cfg(test)]
mod tests;
