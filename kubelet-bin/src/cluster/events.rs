//! Events to the API server: [`ApiEventRecorder`] (the kubelet's
//! [`EventRecorder`] in cluster mode) and the [`EventWriter`] task that writes core/v1
//! Events.
//!
//! Mirrors client-go `tools/record/event.go`: `makeEvent` (name `<object>.<hex nanos>`, the
//! object's namespace or `default`, source `kubelet` on the node), the broadcaster's bounded
//! queue (1000 events, dropped rather than block the caller, as `DropIfChannelFull`), and
//! `recordToSink` (the [`correlator`], then a create or a PATCH of the count, a create when
//! the patched event is gone, up to 12 tries 10 s apart with a random first wait, no retry
//! of a request the server rejected). Writes are rate limited by the kubelet's event client
//! limits (`--event-qps` 50, `--event-burst` 100; upstream gives events their own client).

pub mod correlator;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubelet_core::events::{EventRecorder, EventType};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::client::retryable;
use super::rate_limit::{Limits, TokenBucket};
use correlator::{Correlated, Correlator};

/// The source component of the kubelet's events.
pub const COMPONENT: &str = "kubelet";

/// How events are queued, correlated, limited and retried; the defaults are upstream's.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Settings {
    /// Event writes per second and burst (`eventRecordQPS` 50, `eventBurst` 100).
    pub limits: Limits,
    /// Events waiting to be written; more are dropped (upstream `maxQueuedEvents`, 1000).
    pub queue: usize,
    /// Tries per event (upstream `maxTriesPerEvent`, 12).
    pub max_tries: u32,
    /// Wait between tries (upstream `sleepDuration`, 10 s; the first is random within it).
    pub retry_delay: Duration,
    /// Aggregation, deduplication and spam filter.
    pub correlator: correlator::Config,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            queue: 1000,
            max_tries: 12,
            retry_delay: Duration::from_secs(10),
            correlator: correlator::Config::default(),
        }
    }
}

impl Settings {
    /// These settings with the event write limits `limits`.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
}

/// The kubelet's recorder in cluster mode: queues each event for the [`EventWriter`] and
/// returns at once. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ApiEventRecorder {
    tx: mpsc::Sender<Event>,
    source: EventSource,
    dropped: Arc<AtomicU64>,
}

impl ApiEventRecorder {
    /// A recorder for node `node_name` and the writer that sends its events through
    /// `client` (give it a client without its own rate limit: the writer applies
    /// `settings.limits`). Run the writer with [`EventWriter::run`].
    pub fn new(
        client: kube::Client,
        node_name: impl Into<String>,
        settings: Settings,
    ) -> (Self, EventWriter) {
        let (tx, rx) = mpsc::channel(settings.queue.max(1));
        let recorder = Self {
            tx,
            source: EventSource {
                component: Some(COMPONENT.into()),
                host: Some(node_name.into()),
            },
            dropped: Arc::default(),
        };
        let bucket = settings
            .limits
            .is_limited()
            .then(|| TokenBucket::new(settings.limits));
        let writer = EventWriter {
            client,
            rx,
            correlator: Correlator::new(settings.correlator.clone()),
            bucket,
            settings,
        };
        (recorder, writer)
    }

    /// Events dropped because the queue was full or the writer stopped.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Upstream `makeEvent` plus the recorder's source.
    fn make_event(
        &self,
        object: &ObjectReference,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Event {
        let now = kubelet_core::time::now();
        let namespace = match object.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => ns.to_owned(),
            _ => "default".to_owned(),
        };
        Event {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}.{:x}",
                    object.name.as_deref().unwrap_or(""),
                    now.as_nanosecond()
                )),
                namespace: Some(namespace),
                ..Default::default()
            },
            involved_object: object.clone(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            type_: Some(event_type.as_str().to_owned()),
            source: Some(self.source.clone()),
            ..Default::default()
        }
    }
}

impl EventRecorder for ApiEventRecorder {
    fn event(&self, object: &ObjectReference, event_type: EventType, reason: &str, message: &str) {
        let event = self.make_event(object, event_type, reason, message);
        if self.tx.try_send(event).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::debug!(reason, dropped, "event queue full: event dropped");
        }
    }
}

/// Writes the queued events (upstream `StartRecordingToSink`). Run it once.
pub struct EventWriter {
    client: kube::Client,
    rx: mpsc::Receiver<Event>,
    correlator: Correlator,
    bucket: Option<TokenBucket>,
    settings: Settings,
}

impl std::fmt::Debug for EventWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventWriter")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 404)
}

impl EventWriter {
    /// Writes events until `token` is cancelled or every recorder is gone. Events still
    /// queued at cancellation are dropped.
    ///
    /// Cancel safe: an event being written when the token fires is abandoned.
    pub async fn run(mut self, token: CancellationToken) {
        loop {
            let event = tokio::select! {
                biased;
                _ = token.cancelled() => return,
                event = self.rx.recv() => match event {
                    Some(event) => event,
                    None => return,
                },
            };
            tokio::select! {
                biased;
                _ = token.cancelled() => return,
                _ = self.record(event) => {}
            }
        }
    }

    /// Upstream `recordToSink`.
    async fn record(&mut self, event: Event) {
        let (event, patch) = match self.correlator.correlate(event, Instant::now()) {
            Correlated::Skip => return,
            Correlated::Create(event) => (event, None),
            Correlated::Patch { event, patch } => (event, Some(patch)),
        };
        let mut tries = 0;
        loop {
            if let Some(bucket) = &self.bucket {
                tokio::time::sleep_until(bucket.reserve()).await;
            }
            match self.write(&event, patch.as_ref()).await {
                Ok(written) => {
                    self.correlator.update_state(&written, Instant::now());
                    return;
                }
                Err(e) if !retryable(&e) => {
                    tracing::warn!(error = %e, "server rejected event (will not retry)");
                    return;
                }
                Err(e) => {
                    tries += 1;
                    if tries >= self.settings.max_tries {
                        tracing::warn!(error = %e, tries, "unable to write event (retry limit exceeded)");
                        return;
                    }
                    tracing::debug!(error = %e, tries, "unable to write event (will retry)");
                    let delay = self.settings.retry_delay;
                    // Randomize the first wait so that kubelets do not retry in step.
                    let wait = if tries == 1 {
                        delay.mul_f64(rand::random::<f64>())
                    } else {
                        delay
                    };
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// A create, or a PATCH of a seen event (a create when it is gone).
    async fn write(
        &self,
        event: &Event,
        patch: Option<&serde_json::Value>,
    ) -> Result<Event, kube::Error> {
        let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        if let (Some(patch), Some(name)) = (patch, event.metadata.name.as_deref()) {
            match api
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Strategic(patch.clone()),
                )
                .await
            {
                Err(e) if is_not_found(&e) => {}
                other => return other,
            }
        }
        let mut event = event.clone();
        event.metadata.resource_version = None;
        api.create(&PostParams::default(), &event).await
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
