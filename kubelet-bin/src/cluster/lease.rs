//! The node Lease: `kube-node-lease/<node>`, renewed every quarter of its duration (upstream
//! `pkg/kubelet/kubelet.go` `nodeLeaseController` over component-helpers
//! `apimachinery/lease/controller.go`, with `pkg/kubelet/util/nodelease.go`
//! `SetNodeOwnerFunc`).
//!
//! As upstream:
//! - Every `renew_interval` (duration × 0.25, plus up to 4 % jitter, counted from the end
//!   of the last sync) the controller PUTs the last Lease it wrote with a new `renewTime`,
//!   without a GET first; on failure it falls back to GET (and CREATE when missing) then PUT.
//! - An update is tried up to 5 times in a row; a conflict re-reads the Lease first; any
//!   other failure after the first calls the `OnHeartbeatFailure` hook
//!   ([`Controller::on_repeated_heartbeat_failure`]), which drops the heartbeat client's
//!   connections.
//! - GET/CREATE failures are retried with a backoff of 200 ms doubling up to 7 s.
//! - The Lease carries an owner reference to the Node (so it is garbage collected with
//!   it). The reference needs the Node's UID: while the Node cannot be read the Lease is not
//!   created (retried at the next renewal), and an existing Lease without the reference
//!   gets it at the first renewal after the Node is readable.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::client::OnHeartbeatFailure;

/// The namespace of node Leases (upstream `corev1.NamespaceNodeLease`).
pub const NAMESPACE_NODE_LEASE: &str = "kube-node-lease";
/// Update attempts in a row before waiting for the next renewal (upstream `maxUpdateRetries`).
pub const MAX_UPDATE_RETRIES: usize = 5;
/// The largest wait between GET/CREATE attempts (upstream `maxBackoff`).
pub const MAX_BACKOFF: Duration = Duration::from_secs(7);
/// The renewal interval as a fraction of the duration (upstream
/// `nodeLeaseRenewIntervalFraction`).
pub const RENEW_INTERVAL_FRACTION: f64 = 0.25;
/// The jitter factor of the renewal interval (upstream `JitterUntil(…, 0.04, …)`).
const JITTER: f64 = 0.04;

/// Keeps the node's Lease (see the [module docs](self)).
pub struct Controller {
    leases: Api<Lease>,
    nodes: Api<Node>,
    node_name: String,
    duration_seconds: i32,
    renew_interval: Duration,
    latest: Option<Lease>,
    jitter: RandomState,
    on_repeated_failure: Option<OnHeartbeatFailure>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("node_name", &self.node_name)
            .field("renew_interval", &self.renew_interval)
            .finish_non_exhaustive()
    }
}

/// A failed attempt to write the Lease.
#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error("failed {MAX_UPDATE_RETRIES} attempts to update lease")]
    Update,
    #[error("stopped")]
    Cancelled,
}

impl Controller {
    /// The controller of node `node_name`'s Lease lasting `duration`, renewed every quarter
    /// of it, through `client` (the heartbeat client).
    pub fn new(client: kube::Client, node_name: impl Into<String>, duration: Duration) -> Self {
        let seconds = i32::try_from(duration.as_secs()).unwrap_or(i32::MAX).max(1);
        Self {
            leases: Api::namespaced(client.clone(), NAMESPACE_NODE_LEASE),
            nodes: Api::all(client),
            node_name: node_name.into(),
            duration_seconds: seconds,
            renew_interval: duration.mul_f64(RENEW_INTERVAL_FRACTION),
            latest: None,
            jitter: RandomState::new(),
            on_repeated_failure: None,
        }
    }

    /// Calls `hook` when a Lease update fails again after a failed one (upstream
    /// `onRepeatedHeartbeatFailure`, e.g. [`ApiClients::on_heartbeat_failure`](super::ApiClients::on_heartbeat_failure)).
    #[must_use]
    pub fn on_repeated_heartbeat_failure(mut self, hook: Option<OnHeartbeatFailure>) -> Self {
        self.on_repeated_failure = hook;
        self
    }

    /// How often the Lease is renewed (before jitter).
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
    }

    /// Renews the Lease until `token` is cancelled (upstream `controller.Run`).
    pub async fn run(mut self, token: CancellationToken) {
        info!(node = %self.node_name, interval = ?self.renew_interval, "starting the node lease controller");
        let mut round: u64 = 0;
        loop {
            tokio::select! {
                biased;
                () = token.cancelled() => return,
                () = self.sync(&token) => {}
            }
            round += 1;
            let wait = self.jittered(round);
            tokio::select! {
                biased;
                () = token.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// The renewal interval plus up to 4 % (upstream `wait.Jitter`).
    fn jittered(&self, round: u64) -> Duration {
        let fraction = (self.jitter.hash_one(round) % 10_000) as f64 / 10_000.0;
        self.renew_interval.mul_f64(1.0 + JITTER * fraction)
    }

    /// One renewal (upstream `controller.sync`).
    async fn sync(&mut self, token: &CancellationToken) {
        if let Some(latest) = self.latest.clone() {
            match self.retry_update_lease(latest, token).await {
                Ok(()) => return,
                Err(e) => {
                    info!(error = %e, "failed to update lease using latest lease, fallback to ensure lease")
                }
            }
        }
        let Some((lease, created)) = self.backoff_ensure_lease(token).await else {
            self.latest = None;
            return;
        };
        self.latest = lease.clone();
        if let Some(lease) = lease
            && !created
            && let Err(e) = self.retry_update_lease(lease, token).await
        {
            warn!(error = %e, retry_in = ?self.renew_interval, "will retry updating lease");
        }
    }

    /// GET (and CREATE when missing) until it works, waiting 200 ms doubling to 7 s between
    /// attempts (upstream `backoffEnsureLease`); `None` when cancelled. The lease is `None`
    /// when it does not exist and could not be made yet (the Node is not readable).
    async fn backoff_ensure_lease(
        &self,
        token: &CancellationToken,
    ) -> Option<(Option<Lease>, bool)> {
        let mut sleep = Duration::from_millis(100);
        loop {
            match self.ensure_lease().await {
                Ok(found) => return Some(found),
                Err(e) => {
                    sleep = (sleep * 2).min(MAX_BACKOFF);
                    warn!(error = %e, retry_in = ?sleep, "failed to ensure lease exists, will retry");
                }
            }
            tokio::select! {
                biased;
                () = token.cancelled() => return None,
                () = tokio::time::sleep(sleep) => {}
            }
        }
    }

    /// The Lease, created when missing (upstream `ensureLease`); `true` when this call
    /// created it.
    async fn ensure_lease(&self) -> Result<(Option<Lease>, bool), kube::Error> {
        match self.leases.get(&self.node_name).await {
            Ok(lease) => Ok((Some(lease), false)),
            Err(kube::Error::Api(status)) if status.is_not_found() => {
                let (lease, owned) = self.new_lease(None).await;
                if !owned {
                    // Created at the next renewal, with its owner reference.
                    return Ok((None, false));
                }
                let lease = self.leases.create(&PostParams::default(), &lease).await?;
                info!(node = %self.node_name, "created the node lease");
                Ok((Some(lease), true))
            }
            Err(e) => Err(e),
        }
    }

    /// PUT `base` with a new renewTime up to [`MAX_UPDATE_RETRIES`] times (upstream
    /// `retryUpdateLease`).
    async fn retry_update_lease(
        &mut self,
        mut base: Lease,
        token: &CancellationToken,
    ) -> Result<(), SyncError> {
        for attempt in 0..MAX_UPDATE_RETRIES {
            let (lease, _) = self.new_lease(Some(&base)).await;
            match self
                .leases
                .replace(&self.node_name, &PostParams::default(), &lease)
                .await
            {
                Ok(lease) => {
                    debug!(node = %self.node_name, "renewed the node lease");
                    self.latest = Some(lease);
                    return Ok(());
                }
                Err(kube::Error::Api(status)) if status.is_conflict() => {
                    warn!(error = %status, "failed to update lease");
                    match self.backoff_ensure_lease(token).await {
                        Some((Some(lease), _)) => base = lease,
                        Some((None, _)) => {}
                        None => return Err(SyncError::Cancelled),
                    }
                }
                Err(e) => {
                    warn!(error = %e, "failed to update lease");
                    if attempt > 0
                        && let Some(hook) = &self.on_repeated_failure
                    {
                        hook();
                    }
                }
            }
        }
        Err(SyncError::Update)
    }

    /// `base` (or a new Lease) with renewTime now and the owner reference to the Node when it
    /// can be read (upstream `newLease` with `SetNodeOwnerFunc`); `false` when the owner
    /// reference is missing because the Node could not be read.
    async fn new_lease(&self, base: Option<&Lease>) -> (Lease, bool) {
        let mut lease = base.cloned().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.node_name.clone()),
                namespace: Some(NAMESPACE_NODE_LEASE.to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.node_name.clone()),
                lease_duration_seconds: Some(self.duration_seconds),
                ..LeaseSpec::default()
            }),
        });
        lease.spec.get_or_insert_with(LeaseSpec::default).renew_time =
            Some(MicroTime(Timestamp::now()));
        if lease
            .metadata
            .owner_references
            .as_ref()
            .is_some_and(|refs| !refs.is_empty())
        {
            return (lease, true);
        }
        match self.nodes.get(&self.node_name).await {
            Ok(node) => {
                lease.metadata.owner_references = Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: self.node_name.clone(),
                    uid: node.metadata.uid.unwrap_or_default(),
                    ..OwnerReference::default()
                }]);
                (lease, true)
            }
            Err(e) => {
                warn!(error = %e, node = %self.node_name, "failed to get node when trying to set owner ref to the node lease");
                (lease, false)
            }
        }
    }
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
