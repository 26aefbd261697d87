//! Registration and the node status loop (upstream `registerWithAPIServer`,
//! `tryRegisterWithAPIServer`, `syncNodeStatus`, `updateNodeStatus`, `tryUpdateNodeStatus`
//! and `fastStatusUpdateOnce` in `pkg/kubelet/kubelet_node_status.go` and `kubelet.go`).
//!
//! - Registration creates the Node; when it already exists the kubelet adopts it (a merge
//!   patch of its managed labels and annotation). Failures retry every 100 ms doubling to 7 s.
//! - Every `nodeStatusUpdateFrequency` the status is recomputed from the Node as the API
//!   serves it; it is written (a strategic merge patch of `nodes/<n>/status` with what
//!   changed, [`super::patch`], so conditions others own stay) only when it changed
//!   ([`super::diff`]) or `nodeStatusReportFrequency` passed since the last write. A round tries 5 times (upstream `nodeStatusUpdateRetry`);
//!   the first read may come from the API server's cache (`resourceVersion=0`).
//! - A read never takes the cache's word that the Node is gone: right after the kubelet's own
//!   create the cache may not have it yet (a real API server's watch cache lags etcd), so the
//!   first update after registering starts from the Node the create (or adoption) returned, and
//!   a `404` from a cache read is retried at once as a quorum read. Only a quorum `404` means
//!   the Node was deleted, and then it is registered again in the same round.
//! - Until a Ready=True status is written, rounds run every 100 ms (upstream
//!   `fastStatusUpdateOnce`), for at most two minutes and only while the API answers.
//! - A failed update after a failed one calls the `OnHeartbeatFailure` hook
//!   ([`NodeStatusInputs::on_repeated_heartbeat_failure`]), which drops the heartbeat
//!   client's connections (upstream `onRepeatedHeartbeatFailure`).
//! - A Node deleted under the kubelet is registered again at once (upstream needs a restart
//!   for that).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{GetParams, Patch, PatchParams, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use super::diff::status_has_changed;
use super::initial::{adopt_patch, initial_node};
use super::machine::MachineInfo;
use super::patch::node_status_patch;
use super::setters::{NodeEvent, set_node_status};
use super::{Error, NodeStatusInputs, NodeStatusOptions};

/// Upstream `nodeStatusUpdateRetry`.
pub const NODE_STATUS_UPDATE_RETRY: usize = 5;
/// The period of fast updates until the node is Ready.
pub const FAST_STATUS_PERIOD: Duration = Duration::from_millis(100);
/// How long fast updates may last (upstream `nodeReadyGracePeriod`).
pub const NODE_READY_GRACE_PERIOD: Duration = Duration::from_secs(120);
/// First registration retry delay.
pub const REGISTER_INITIAL_DELAY: Duration = Duration::from_millis(100);
/// Largest registration retry delay.
pub const REGISTER_MAX_DELAY: Duration = Duration::from_secs(7);

/// The running node status loop.
#[derive(Clone, Debug)]
pub struct NodeStatusHandle {
    node: watch::Receiver<Option<Arc<Node>>>,
}

impl NodeStatusHandle {
    /// The Node as last read or written (`None` until registered): allocatable for
    /// admission, the uid for owner references.
    pub fn node(&self) -> watch::Receiver<Option<Arc<Node>>> {
        self.node.clone()
    }
}

/// Starts registration and the status loop on `tracker`; it stops when `token` is
/// cancelled. `client` should be the heartbeat client (upstream uses a separate one so that
/// pod traffic cannot starve node status).
pub fn spawn(
    client: kube::Client,
    opts: NodeStatusOptions,
    inputs: NodeStatusInputs,
    tracker: &TaskTracker,
    token: CancellationToken,
) -> NodeStatusHandle {
    let (tx, rx) = watch::channel(None);
    let machine = inputs
        .machine
        .clone()
        .unwrap_or_else(|| MachineInfo::read(&opts.root_dir));
    let syncer = Syncer {
        api: Api::all(client),
        opts,
        inputs,
        machine,
        registered: false,
        written: None,
        ready_written: false,
        last_report: None,
        published: tx,
    };
    tracker.spawn(syncer.run(token));
    NodeStatusHandle { node: rx }
}

struct Syncer {
    api: Api<Node>,
    opts: NodeStatusOptions,
    inputs: NodeStatusInputs,
    machine: MachineInfo,
    registered: bool,
    /// The Node as the kubelet's own create or adoption returned it, for the first update
    /// after registering (the API server's cache may not have it yet).
    written: Option<Node>,
    ready_written: bool,
    last_report: Option<Instant>,
    published: watch::Sender<Option<Arc<Node>>>,
}

impl Syncer {
    async fn run(mut self, token: CancellationToken) {
        let start = Instant::now();
        loop {
            let ok = self.sync_node_status(&token).await;
            let fast = ok && !self.ready_written && start.elapsed() < NODE_READY_GRACE_PERIOD;
            let period = if fast {
                FAST_STATUS_PERIOD
            } else {
                self.opts.update_frequency
            };
            let shutdown = self.inputs.shutdown.clone();
            tokio::select! {
                biased;
                _ = token.cancelled() => break,
                _ = tokio::time::sleep(period) => {}
                // A graceful node shutdown starts: `NotReady` now (upstream `syncNodeStatus`).
                () = async {
                    match &shutdown {
                        Some(state) => state.changed().await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
    }

    /// One round: register if needed, then update the status. `false` when the API failed.
    async fn sync_node_status(&mut self, token: &CancellationToken) -> bool {
        if self.opts.register_node && !self.registered && !self.register(token).await {
            return false;
        }
        for attempt in 0..NODE_STATUS_UPDATE_RETRY {
            match self.try_update_node_status(attempt).await {
                Ok(()) => return true,
                Err(Error::NotInCache(name)) => {
                    debug!(node = %name, "node not in the API server's cache yet; reading it from etcd");
                }
                Err(Error::NodeNotFound(name)) => {
                    warn!(node = %name, "node not found; registering it again");
                    self.registered = false;
                    if !self.opts.register_node || !self.register(token).await {
                        return false;
                    }
                }
                Err(e) => {
                    if attempt > 0
                        && let Some(hook) = &self.inputs.on_repeated_failure
                    {
                        hook();
                    }
                    warn!(error = %e, attempt, "error updating node status, will retry");
                }
            }
        }
        warn!("unable to update node status: update node status exceeds retry count");
        false
    }

    /// Upstream `registerWithAPIServer`: until it succeeds or `token` is cancelled.
    async fn register(&mut self, token: &CancellationToken) -> bool {
        let mut delay = REGISTER_INITIAL_DELAY;
        loop {
            match self.try_register().await {
                Ok(()) => {
                    self.registered = true;
                    return true;
                }
                Err(e) => {
                    warn!(error = %e, node = %self.opts.node_name, "unable to register node with API server")
                }
            }
            tokio::select! {
                biased;
                _ = token.cancelled() => return false,
                _ = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(REGISTER_MAX_DELAY);
        }
    }

    /// Upstream `tryRegisterWithAPIServer`.
    async fn try_register(&mut self) -> Result<(), Error> {
        let mut node = initial_node(&self.opts);
        let events = self.set_status(&mut node).await;
        match self.api.create(&PostParams::default(), &node).await {
            Ok(created) => {
                self.record(events);
                info!(node = %self.opts.node_name, "successfully registered node");
                self.written = Some(created.clone());
                self.publish(created);
                return Ok(());
            }
            Err(kube::Error::Api(s)) if s.is_already_exists() => {}
            Err(e) => return Err(e.into()),
        }
        let existing = self.api.get(&self.opts.node_name).await?;
        let adopted = match adopt_patch(&node, &existing, &self.opts) {
            Some(patch) => {
                self.api
                    .patch(
                        &self.opts.node_name,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?
            }
            None => existing,
        };
        info!(node = %self.opts.node_name, "node already registered; adopted it");
        self.written = Some(adopted.clone());
        self.publish(adopted);
        Ok(())
    }

    /// Upstream `tryUpdateNodeStatus`.
    async fn try_update_node_status(&mut self, attempt: usize) -> Result<(), Error> {
        let mut node = match self.written.take() {
            Some(node) => node,
            None => self.read_node(attempt == 0).await?,
        };
        let original = node.status.clone();
        let events = self.set_status(&mut node).await;
        self.record(events);
        let now = Instant::now();
        let report_due = self
            .last_report
            .is_none_or(|t| now >= t + self.opts.report_frequency);
        if !report_due && !status_has_changed(original.as_ref(), node.status.as_ref()) {
            self.publish(node);
            return Ok(());
        }
        let patch = node_status_patch(original.as_ref(), node.status.as_ref())?;
        let updated = self
            .api
            .patch_status(
                &self.opts.node_name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await?;
        self.last_report = Some(now);
        self.publish(updated);
        Ok(())
    }

    /// The Node from the API server's cache (`resourceVersion=0`, cheap) or from etcd (a
    /// quorum read). A cache miss is [`Error::NotInCache`], only a quorum miss
    /// [`Error::NodeNotFound`].
    async fn read_node(&self, from_cache: bool) -> Result<Node, Error> {
        let params = if from_cache {
            GetParams::any()
        } else {
            GetParams::default()
        };
        match self.api.get_with(&self.opts.node_name, &params).await {
            Ok(node) => Ok(node),
            Err(kube::Error::Api(s)) if s.is_not_found() => {
                let name = self.opts.node_name.clone();
                Err(if from_cache {
                    Error::NotInCache(name)
                } else {
                    Error::NodeNotFound(name)
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn set_status(&self, node: &mut Node) -> Vec<NodeEvent> {
        let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::now());
        let snapshot = self.inputs.snapshot(&self.machine, now).await;
        set_node_status(node, &self.opts, &snapshot)
    }

    fn record(&self, events: Vec<NodeEvent>) {
        for (event_type, reason, message) in events {
            self.inputs
                .record(&self.opts.node_name, event_type, &reason, &message);
        }
    }

    fn publish(&mut self, node: Node) {
        self.ready_written = is_ready(&node);
        self.published.send_replace(Some(Arc::new(node)));
    }
}

/// Whether the Node's Ready condition is True.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests;
