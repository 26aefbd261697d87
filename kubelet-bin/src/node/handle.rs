//! The handle of a built node: spawn, stop, and the accessors tests and agents read.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kubelet_core::kubelet::{KubeletService, sync_loop};
use kubelet_core::pod_manager::PodManager;
use kubelet_core::runtime::Runtime;
use kubelet_core::status::StatusManager;
use kubelet_status::LocalStatusManager;
use tracing::{info, warn};

use super::{Error, Task};
use crate::cluster::Cluster;
use crate::server::listener::{Peer, TlsListener};

/// An endpoint, bound and not yet serving; HTTPS when it has a TLS config.
pub(super) struct Server {
    name: &'static str,
    addr: SocketAddr,
    listener: Option<(tokio::net::TcpListener, axum::Router)>,
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl Server {
    /// Serves HTTPS with `config`.
    pub(super) fn with_tls(mut self, config: Arc<rustls::ServerConfig>) -> Self {
        self.tls = Some(config);
        self
    }
}

pub(super) async fn bind(
    name: &'static str,
    addr: SocketAddr,
    router: axum::Router,
) -> Result<Server, Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { name, addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| Error::Bind { name, addr, source })?;
    Ok(Server {
        name,
        addr,
        listener: Some((listener, router)),
        tls: None,
    })
}

/// A built node: [`spawn`](Self::spawn) it and [`stop`](Self::stop) it, or
/// [`run_until`](Self::run_until) a shutdown signal. Stopping leaves the pods running in the
/// runtime, as upstream.
pub struct Node {
    pub(super) service: KubeletService,
    pub(super) runtime: Arc<dyn Runtime>,
    pub(super) status: Arc<dyn StatusManager>,
    pub(super) local_status: Option<Arc<LocalStatusManager>>,
    pub(super) pleg_task: Option<Task>,
    pub(super) servers: Vec<Server>,
    pub(super) drain_timeout: Duration,
    pub(super) cluster: Option<Cluster>,
    /// Watches the runtime's workers while the node lives.
    pub(super) _watchdog: Option<kubelet_core::watchdog::Watchdog>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("service", &self.service)
            .field("healthz_addr", &self.healthz_addr())
            .field("read_only_addr", &self.read_only_addr())
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Starts every task: the kubelet (runtime checks, sources, sync loop), the PLEG and the
    /// endpoints. Calling it again does nothing.
    pub async fn spawn(&mut self) {
        let tracker = self.service.tracker().clone();
        let token = self.service.token().clone();
        self.service.spawn().await;
        if let Some(pleg) = self.pleg_task.take() {
            tracker.spawn(pleg);
        }
        if let Some(cluster) = &mut self.cluster {
            match &self.local_status {
                Some(local) if !cluster.is_started() => {
                    let syncer = cluster.status_syncer(local.clone(), &self.service);
                    tracker.spawn(syncer.run(token.child_token()));
                }
                None if !cluster.is_started() => warn!(
                    "cluster mode with a replaced status manager: pod statuses are not written to the API"
                ),
                _ => {}
            }
            let mut inputs = crate::cluster::node_status::NodeStatusInputs::new(
                self.runtime.clone(),
                self.service.runtime_state().clone(),
            );
            if let Some(pressure) = self.service.pressure() {
                inputs = inputs.pressure(Arc::new(pressure.clone()));
            }
            if let Some(shutdown) = self.service.node_shutdown() {
                inputs = inputs.node_shutdown(shutdown.clone());
            }
            cluster.spawn_with(&tracker, &token, inputs);
        }
        for server in &mut self.servers {
            let Some((listener, router)) = server.listener.take() else {
                continue;
            };
            let (name, addr) = (server.name, server.addr);
            info!(%addr, "serving {name} endpoints");
            let token = token.child_token();
            let shutdown = async move { token.cancelled().await };
            match server.tls.clone() {
                None => {
                    tracker.spawn(async move {
                        if let Err(e) = axum::serve(listener, router)
                            .with_graceful_shutdown(shutdown)
                            .await
                        {
                            warn!(error = %e, "{name} server failed");
                        }
                    });
                }
                Some(config) => match TlsListener::new(listener, config) {
                    Ok(listener) => {
                        let app = router.into_make_service_with_connect_info::<Peer>();
                        tracker.spawn(async move {
                            if let Err(e) = axum::serve(listener, app)
                                .with_graceful_shutdown(shutdown)
                                .await
                            {
                                warn!(error = %e, "{name} server failed");
                            }
                        });
                    }
                    Err(e) => warn!(error = %e, "{name} server failed"),
                },
            }
        }
    }

    /// Stops every task and waits up to the drain timeout; `false` (and a warning) when some
    /// did not stop in time.
    pub async fn stop(&self) -> bool {
        let drained = self.service.stop(self.drain_timeout).await;
        if !drained {
            warn!(
                "some subsystems did not stop within {:?}",
                self.drain_timeout
            );
        }
        drained
    }

    /// Spawns the node, waits for `shutdown`, then stops it.
    pub async fn run_until(mut self, shutdown: impl Future<Output = ()>) -> bool {
        self.spawn().await;
        shutdown.await;
        info!("shutting down; pods keep running");
        self.stop().await
    }

    /// The cluster mode, if the node joined a cluster.
    pub fn cluster(&self) -> Option<&Cluster> {
        self.cluster.as_ref()
    }

    /// The desired pods.
    pub fn pod_manager(&self) -> &PodManager {
        self.service.pod_manager()
    }

    /// The status manager.
    pub fn status_manager(&self) -> &Arc<dyn StatusManager> {
        &self.status
    }

    /// The default status manager, unless [`NodeBuilder::status_manager`](super::NodeBuilder::status_manager) replaced it
    /// (its `subscribe` and `versioned_status` serve tests and benchmarks).
    pub fn local_status_manager(&self) -> Option<&Arc<LocalStatusManager>> {
        self.local_status.as_ref()
    }

    /// The container runtime.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.runtime
    }

    /// The sync loop's liveness.
    pub fn health(&self) -> &sync_loop::Health {
        self.service.health()
    }

    /// The core assembly (kubelet, managers, runtime state, tracker and token).
    pub fn kubelet(&self) -> &KubeletService {
        &self.service
    }

    /// Where the healthz endpoints listen, if enabled.
    pub fn healthz_addr(&self) -> Option<SocketAddr> {
        self.addr("healthz")
    }

    /// Where the read-only endpoints listen, if enabled.
    pub fn read_only_addr(&self) -> Option<SocketAddr> {
        self.addr("read-only")
    }

    /// Where the secure (HTTPS) endpoints listen, if enabled.
    pub fn secure_addr(&self) -> Option<SocketAddr> {
        self.addr("secure")
    }

    fn addr(&self, name: &str) -> Option<SocketAddr> {
        self.servers.iter().find(|s| s.name == name).map(|s| s.addr)
    }
}
