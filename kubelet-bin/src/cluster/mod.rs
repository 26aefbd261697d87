//! Cluster mode: the kubelet as a node of an API server (upstream `cmd/kubelet/app/server.go`
//! `RunKubelet` with a kubeconfig, and the parts of `pkg/kubelet/kubelet.go` that need the
//! API: the `api` pod source, the node Lease, node status, mirror pods, status sync, events).
//!
//! [`NodeBuilder::cluster`](crate::NodeBuilder::cluster) takes [`ClusterOptions`]; the
//! builder turns them into a [`Cluster`] (the [`ApiClients`] and the options) at build time
//! and starts the cluster tasks when the node is spawned. Without it the node is standalone.

pub mod certificate;
pub mod client;
pub mod events;
pub mod http_source;
pub mod lease;
pub mod mirror;
pub mod node_cache;
pub mod node_status;
pub mod objects;
pub mod pod_source;
pub mod rate_limit;
pub mod request_metrics;
pub mod runtime_classes;
pub mod services;
#[cfg(test)]
mod test_api;
pub mod tokens;
pub mod watch_backoff;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kubelet_core::kubelet::KubeletService;
use kubelet_status::LocalStatusManager;
use kubelet_status::api::ApiStatusSyncer;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use client::ApiClients;
pub use mirror::KubeMirrorClient;
pub use node_cache::ApiNodeProvider;
pub use pod_source::ApiPodSource;
pub use rate_limit::Limits;
pub use runtime_classes::ApiRuntimeClasses;
pub use services::ApiServiceLister;
pub use tokens::ApiTokenSource;

/// Why cluster mode could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig file could not be read or has no usable current context.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A client setting is invalid.
    #[error("API client config: {0}")]
    Config(String),
    /// The API client could not be built (e.g. its TLS settings).
    #[error("building the API client: {0}")]
    Client(#[source] kube::Error),
}

/// Upstream's `nodeLeaseDurationSeconds` default.
pub const DEFAULT_NODE_LEASE_DURATION: Duration = Duration::from_secs(40);
/// Upstream's `nodeStatusUpdateFrequency` default.
pub const DEFAULT_NODE_STATUS_UPDATE_FREQUENCY: Duration = Duration::from_secs(10);

/// How the node joins its cluster (see [`NodeBuilder::cluster`](crate::NodeBuilder::cluster)).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ClusterOptions {
    connection: Connection,
    /// Rate limit of the main client (`kubeAPIQPS` 50, `kubeAPIBurst` 100).
    pub api_limits: Limits,
    /// How long the node Lease lasts (`nodeLeaseDurationSeconds`, 40 s); it is renewed every
    /// quarter of it.
    pub node_lease_duration: Duration,
    /// How often the node status is computed (`nodeStatusUpdateFrequency`, 10 s); also the
    /// heartbeat client's timeout when shorter than the lease.
    pub node_status_update_frequency: Duration,
    /// Node registration and node status (default: upstream's for this node); the builder
    /// fills in the node's name, IPs, root directory and the update frequency above.
    pub node_status: Option<node_status::NodeStatusOptions>,
    /// Rate limit of event writes (`eventRecordQPS` 50, `eventBurst` 100; upstream's event
    /// client).
    pub event_limits: Limits,
    /// The client certificate's rotation (`rotateCertificates`), if on.
    pub client_certificate_rotation: Option<certificate::Rotation>,
    /// The serving certificate from CSRs (`serverTLSBootstrap`), if on.
    pub serving_certificate_rotation: Option<certificate::Rotation>,
    /// Where the API clients count their requests (`rest_client_requests_total`); the node
    /// builder sets its own.
    pub(crate) metrics: kubelet_core::metrics::KubeletMetrics,
}

#[derive(Clone, Debug)]
enum Connection {
    Config(Box<kube::Config>),
    Clients(Box<ApiClients>),
}

impl ClusterOptions {
    /// Joins the cluster of `config` (e.g. [`client::load_kubeconfig`]) with upstream's
    /// defaults.
    pub fn new(config: kube::Config) -> Self {
        Self::with_connection(Connection::Config(Box::new(config)))
    }

    /// Uses these clients as they are (no rate limit or User-Agent added), e.g. a
    /// `kube::Client` over a fake API server in tests.
    pub fn with_clients(clients: ApiClients) -> Self {
        Self::with_connection(Connection::Clients(Box::new(clients)))
    }

    fn with_connection(connection: Connection) -> Self {
        Self {
            connection,
            api_limits: Limits::default(),
            node_lease_duration: DEFAULT_NODE_LEASE_DURATION,
            node_status_update_frequency: DEFAULT_NODE_STATUS_UPDATE_FREQUENCY,
            node_status: None,
            event_limits: Limits::default(),
            client_certificate_rotation: None,
            serving_certificate_rotation: None,
            metrics: kubelet_core::metrics::KubeletMetrics::default(),
        }
    }

    /// Sets the event writes' rate limit.
    #[must_use]
    pub fn event_limits(mut self, limits: Limits) -> Self {
        self.event_limits = limits;
        self
    }

    /// Renews the client certificate with `rotation` while the node runs; the clients switch
    /// to each new certificate ([`ApiClients::use_client_certificate`]).
    #[must_use]
    pub fn rotate_client_certificate(mut self, rotation: certificate::Rotation) -> Self {
        self.client_certificate_rotation = Some(rotation);
        self
    }

    /// Gets the secure port's serving certificate through CSRs with `rotation`
    /// ([`certificate::Rotation::serving`]) and renews it while the node runs; the port serves
    /// each new one from its next handshake (until the first is issued, its own pair).
    #[must_use]
    pub fn rotate_serving_certificate(mut self, rotation: certificate::Rotation) -> Self {
        self.serving_certificate_rotation = Some(rotation);
        self
    }

    /// Sets the main client's rate limit.
    #[must_use]
    pub fn api_limits(mut self, limits: Limits) -> Self {
        self.api_limits = limits;
        self
    }

    /// Sets the node Lease's duration.
    #[must_use]
    pub fn node_lease_duration(mut self, duration: Duration) -> Self {
        self.node_lease_duration = duration;
        self
    }

    /// Sets the node status update frequency.
    #[must_use]
    pub fn node_status_update_frequency(mut self, every: Duration) -> Self {
        self.node_status_update_frequency = every;
        self
    }

    /// Sets the node registration and node status options.
    #[must_use]
    pub fn node_status(mut self, options: node_status::NodeStatusOptions) -> Self {
        self.node_status = Some(options);
        self
    }

    /// Completes the node status options with what the node builder knows.
    pub(crate) fn fill_node_status(
        &mut self,
        node_name: &str,
        node_ips: &[String],
        root_dir: &Path,
    ) {
        let opts = self
            .node_status
            .get_or_insert_with(|| node_status::NodeStatusOptions::new(node_name));
        node_name.clone_into(&mut opts.node_name);
        // With an external cloud provider, detected IPs are not the node's: upstream then
        // waits for the provider's addresses.
        if opts.node_ips.is_empty() && !opts.external_cloud_provider {
            opts.node_ips = node_ips.iter().filter_map(|ip| ip.parse().ok()).collect();
        }
        root_dir.clone_into(&mut opts.root_dir);
        opts.update_frequency = self.node_status_update_frequency;
    }

    /// The heartbeat client's timeout (upstream: the smaller of the node status update
    /// frequency and the lease duration).
    pub fn heartbeat_timeout(&self) -> Duration {
        self.node_status_update_frequency
            .min(self.node_lease_duration)
    }
}

/// A node's cluster mode, built: its clients and options. Its tasks start with the node.
#[derive(Debug)]
pub struct Cluster {
    /// The API clients.
    pub clients: ApiClients,
    /// The options it was built from.
    pub options: ClusterOptions,
    node_name: String,
    node_watch: Option<ApiNodeProvider>,
    service_watch: Option<ApiServiceLister>,
    runtime_class_watch: Option<ApiRuntimeClasses>,
    started: bool,
    node_status: Option<node_status::NodeStatusHandle>,
    events: Option<Arc<dyn kubelet_core::events::EventRecorder>>,
    serving: Option<Arc<crate::server::tls::ServingCertificate>>,
}

impl Cluster {
    /// Builds the clients of `options` for node `node_name`.
    pub fn new(options: ClusterOptions, node_name: impl Into<String>) -> Result<Self, Error> {
        let clients = match &options.connection {
            Connection::Config(config) => ApiClients::new(
                (**config).clone(),
                options.api_limits,
                options.heartbeat_timeout(),
                &options.metrics,
            )?,
            Connection::Clients(clients) => (**clients).clone(),
        };
        Ok(Self {
            clients,
            options,
            node_name: node_name.into(),
            node_watch: None,
            service_watch: None,
            runtime_class_watch: None,
            started: false,
            node_status: None,
            events: None,
            serving: None,
        })
    }

    /// The node's name in the API.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// The `api` pod source of this node, over the main client; once
    /// [`node_provider`](Self::node_provider) was called, it waits for that Node's first
    /// list (upstream `nodeHasSynced`).
    pub fn pod_source(&self) -> ApiPodSource {
        let source = ApiPodSource::new(self.clients.client.clone(), self.node_name.clone());
        match &self.node_watch {
            Some(provider) => source.after_node_sync(provider.synced()),
            None => source,
        }
    }

    /// The Node admission uses until the node's own has been read from the API server
    /// (upstream `initialNode`, see [`node_status::initial::fallback_node`]): the labels,
    /// taints, capacity and allocatable the kubelet registers.
    pub fn initial_node(&self) -> k8s_openapi::api::core::v1::Node {
        let opts = self
            .options
            .node_status
            .clone()
            .unwrap_or_else(|| node_status::NodeStatusOptions::new(self.node_name.clone()));
        let machine = node_status::machine::MachineInfo::read(&opts.root_dir);
        node_status::initial::fallback_node(&opts, &machine)
    }

    /// The host names and IPs of the node's addresses as it registers them (upstream's
    /// serving certificate asks for exactly these).
    fn node_addresses(&self) -> (Vec<String>, Vec<std::net::IpAddr>) {
        let node = self.initial_node();
        let mut hostnames = Vec::new();
        let mut ips = Vec::new();
        for address in node.status.and_then(|s| s.addresses).into_iter().flatten() {
            match address.type_.as_str() {
                "Hostname" | "InternalDNS" | "ExternalDNS" => {
                    if !hostnames.contains(&address.address) {
                        hostnames.push(address.address);
                    }
                }
                _ => {
                    if let Ok(ip) = address.address.parse()
                        && !ips.contains(&ip)
                    {
                        ips.push(ip);
                    }
                }
            }
        }
        (hostnames, ips)
    }

    /// Service-account tokens through the TokenRequest API, over the main client.
    pub fn token_source(&self) -> ApiTokenSource {
        ApiTokenSource::new(self.clients.client.clone())
    }

    /// This node's Node as the API server has it, for admission and mirror pods: `fallback`
    /// until the watch that [`spawn`](Self::spawn) starts has read it.
    pub fn node_provider(&mut self, fallback: k8s_openapi::api::core::v1::Node) -> ApiNodeProvider {
        let provider = ApiNodeProvider::new(fallback);
        self.node_watch = Some(provider.clone());
        provider
    }

    /// The cluster's Services for service-link env vars: empty and not synced until the
    /// watch that [`spawn`](Self::spawn) starts has listed them.
    pub fn service_lister(&mut self) -> ApiServiceLister {
        self.service_watch
            .get_or_insert_with(ApiServiceLister::new)
            .clone()
    }

    /// The cluster's RuntimeClasses for `runtimeClassName` (upstream's RuntimeClass
    /// manager): empty until the watch that [`spawn`](Self::spawn) starts has listed them.
    pub fn runtime_classes(&mut self) -> ApiRuntimeClasses {
        self.runtime_class_watch
            .get_or_insert_with(ApiRuntimeClasses::new)
            .clone()
    }

    /// The configMaps and secrets of this node's pods, from watches over the main client
    /// that run on `tracker` and stop with `token`.
    pub fn object_source(
        &self,
        tracker: &TaskTracker,
        token: &CancellationToken,
    ) -> objects::ApiObjectSource {
        objects::ApiObjectSource::new(
            self.clients.client.clone(),
            tracker.clone(),
            token.child_token(),
        )
    }

    /// The mirror pods of this node's static pods, over the main client.
    pub fn mirror_client(&self) -> KubeMirrorClient {
        KubeMirrorClient::new(self.clients.client.clone())
    }

    /// Whether the cluster tasks were started.
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// The pod status syncer of this node (upstream status manager's API half): writes the
    /// statuses of `statuses` through the main client, finds mirror pods in the kubelet's pod
    /// manager and asks its pod workers before the final delete of a pod.
    pub fn status_syncer(
        &self,
        statuses: Arc<LocalStatusManager>,
        service: &KubeletService,
    ) -> ApiStatusSyncer {
        let pods = service.pod_manager().clone();
        ApiStatusSyncer::new(
            self.clients.client.clone(),
            statuses,
            pods.clone(),
            Arc::new(pods),
            Arc::new(service.kubelet().workers().clone()),
        )
    }

    /// Records node events with `recorder` (the node's recorder; default: log lines).
    pub fn set_event_recorder(&mut self, recorder: Arc<dyn kubelet_core::events::EventRecorder>) {
        self.events = Some(recorder);
    }

    /// The secure port's serving certificate, renewed from CSRs when the options ask for it
    /// ([`ClusterOptions::rotate_serving_certificate`]).
    pub fn set_serving_certificate(
        &mut self,
        serving: Arc<crate::server::tls::ServingCertificate>,
    ) {
        self.serving = Some(serving);
    }

    /// The node status loop, once spawned (the Node as last read or written).
    pub fn node_status(&self) -> Option<&node_status::NodeStatusHandle> {
        self.node_status.as_ref()
    }

    /// Starts the cluster tasks on `tracker`, each stopping with `token`; node status reads
    /// `inputs`. Calling it again does nothing.
    pub fn spawn_with(
        &mut self,
        tracker: &TaskTracker,
        token: &CancellationToken,
        inputs: node_status::NodeStatusInputs,
    ) {
        if self.started {
            return;
        }
        let opts = self
            .options
            .node_status
            .clone()
            .unwrap_or_else(|| node_status::NodeStatusOptions::new(self.node_name.clone()));
        let inputs = match &self.events {
            Some(recorder) => inputs.events(recorder.clone()),
            None => inputs,
        }
        .on_repeated_heartbeat_failure(self.clients.on_heartbeat_failure());
        self.node_status = Some(node_status::spawn(
            self.clients.heartbeat.clone(),
            opts,
            inputs,
            tracker,
            token.child_token(),
        ));
        self.spawn(tracker, token);
    }

    /// Starts the cluster tasks but node status on `tracker`, each stopping with `token`.
    /// Calling it again does nothing.
    pub fn spawn(&mut self, tracker: &TaskTracker, token: &CancellationToken) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        tracker.spawn(
            lease::Controller::new(
                self.clients.heartbeat.clone(),
                self.node_name.clone(),
                self.options.node_lease_duration,
            )
            .on_repeated_heartbeat_failure(self.clients.on_heartbeat_failure())
            .run(token.child_token()),
        );
        if let Some(rotation) = self.options.client_certificate_rotation.clone() {
            let clients = self.clients.clone();
            let on_rotated: certificate::manager::OnRotated = Arc::new(move |pem| {
                if let Err(e) = clients.use_client_certificate(pem) {
                    tracing::error!(error = %e, certificate = %pem.display(), "the API clients cannot use the rotated certificate");
                }
            });
            tracing::info!(dir = %rotation.store().current_path().display(), "rotating the client certificate");
            tracker.spawn(rotation.run(
                self.clients.client.clone(),
                self.options.metrics.clone(),
                on_rotated,
                token.child_token(),
            ));
        }
        match (
            self.options.serving_certificate_rotation.clone(),
            self.serving.clone(),
        ) {
            (Some(rotation), Some(serving)) => {
                let (hostnames, ips) = self.node_addresses();
                let on_rotated: certificate::manager::OnRotated = Arc::new(move |pem| {
                    if let Err(e) = serving.set_from_file(pem) {
                        tracing::error!(error = %e, certificate = %pem.display(), "the secure port cannot serve the new certificate");
                    }
                });
                tracker.spawn(rotation.addresses(hostnames, ips).run(
                    self.clients.client.clone(),
                    self.options.metrics.clone(),
                    on_rotated,
                    token.child_token(),
                ));
            }
            (Some(_), None) => tracing::warn!(
                "serverTLSBootstrap: no secure port to serve the certificate; not requesting one"
            ),
            _ => {}
        }
        if let Some(lister) = self.service_watch.take() {
            tracker.spawn(lister.run(self.clients.client.clone(), token.child_token()));
        }
        if let Some(classes) = self.runtime_class_watch.take() {
            tracker.spawn(classes.run(self.clients.client.clone(), token.child_token()));
        }
        if let Some(provider) = self.node_watch.take() {
            tracker.spawn(provider.run(
                self.clients.client.clone(),
                self.node_name.clone(),
                token.child_token(),
            ));
        }
    }
}
