//! The cluster's Services for service-link environment variables (upstream's service
//! informer and lister in `pkg/kubelet/kubelet.go` `NewMainKubelet`: one watch of all
//! Services, read by `getServiceEnvVarMap`).
//!
//! [`ApiServiceLister`] watches `services` in all namespaces (the Node authorizer allows
//! `list`/`watch` of services to every node) with the reflector's backoff
//! ([`reflector_backoff`](super::watch_backoff::reflector_backoff)), and keeps
//! only what the variables need: name, namespace, cluster IP and ports. It reports
//! [`has_synced`](kubelet_core::envvars::ServiceLister::has_synced) once the first list is
//! in; until then API pods wait for their environment, as upstream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use super::watch_backoff::watch_until_cancelled;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use kubelet_core::envvars::ServiceLister;
use tokio_util::sync::CancellationToken;
use tracing::debug;

type Key = (String, String);

#[derive(Debug, Default)]
struct State {
    services: HashMap<Key, Arc<Service>>,
    /// The objects of a relist in progress (between `Init` and `InitDone`).
    relist: Option<HashMap<Key, Arc<Service>>>,
}

/// The cluster's Services from a watch (see the [module docs](self)). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct ApiServiceLister {
    state: Arc<RwLock<State>>,
    synced: Arc<AtomicBool>,
}

/// The part of a Service that its environment variables are made of.
fn trimmed(service: Service) -> (Key, Arc<Service>) {
    let name = service.metadata.name.unwrap_or_default();
    let namespace = service.metadata.namespace.unwrap_or_default();
    let spec = service.spec.map(|spec| ServiceSpec {
        cluster_ip: spec.cluster_ip,
        ports: spec.ports.map(|ports| {
            ports
                .into_iter()
                .map(|p| ServicePort {
                    name: p.name,
                    port: p.port,
                    protocol: p.protocol,
                    ..Default::default()
                })
                .collect()
        }),
        ..Default::default()
    });
    let kept = Service {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        spec,
        status: None,
    };
    ((namespace, name), Arc::new(kept))
}

impl ApiServiceLister {
    /// An empty lister, not synced; [`run`](Self::run) fills it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Watches all Services through `client` until `token` is cancelled; the reflector's
    /// backoff ([`reflector_backoff`](super::watch_backoff::reflector_backoff)) retries failed lists and watches.
    pub async fn run(self, client: kube::Client, token: CancellationToken) {
        let api = Api::<Service>::all(client);
        watch_until_cancelled(api, watcher::Config::default(), "services", token, |e| {
            self.apply(e);
        })
        .await;
    }

    /// Takes in one watch event.
    pub fn apply(&self, event: Event<Service>) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            Event::Apply(service) => {
                let (key, service) = trimmed(service);
                state.services.insert(key, service);
            }
            Event::Delete(service) => {
                let (key, _) = trimmed(service);
                state.services.remove(&key);
            }
            Event::Init => state.relist = Some(HashMap::new()),
            Event::InitApply(service) => {
                let (key, service) = trimmed(service);
                state.relist.get_or_insert_default().insert(key, service);
            }
            Event::InitDone => {
                state.services = state.relist.take().unwrap_or_default();
                debug!(services = state.services.len(), "services listed");
                self.synced.store(true, Ordering::Release);
            }
        }
    }
}

impl ServiceLister for ApiServiceLister {
    fn has_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    fn list(&self) -> Vec<Arc<Service>> {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .services
            .values()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
#[path = "services_tests.rs"]
mod tests;
