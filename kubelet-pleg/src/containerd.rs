//! An [`EventSource`] over containerd's native events service
//! (`containerd.services.events.v1.Events/Subscribe`), served on the same socket as CRI.
//!
//! containerd 1.6 has no CRI event stream, but it publishes task and container events of
//! every namespace at once; the CRI plugin's containers live in namespace `k8s.io`. This
//! source subscribes to `/tasks/start`, `/tasks/exit`, `/tasks/delete`, `/tasks/oom` and
//! `/containers/delete` there and maps them to [`Event`]s.
//!
//! containerd sends a stream's response headers only with its first event, so on an idle
//! node a subscription cannot tell on its own whether it is live. [`ContainerdEvents`]
//! confirms it by publishing a marker event (topic [`MARKER_TOPIC`], empty payload) to its own
//! subscription until the stream answers; only then does [`EventSource::subscribe`] return.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use containerd_client::events::{ContainerDelete, TaskDelete, TaskExit, TaskOom, TaskStart};
use containerd_client::services::v1::events_client::EventsClient;
use containerd_client::services::v1::{PublishRequest, SubscribeRequest};
use containerd_client::types::Envelope;
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use prost::Message;
use tonic::transport::Channel;
use tracing::{debug, trace};

use crate::evented::{Error, Event, EventSource, Exit, Kind, Result, Stream};

/// The namespace of the CRI plugin's containers.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// The topic of the marker events that confirm a subscription.
pub const MARKER_TOPIC: &str = "/kubelet/pleg/subscribed";

/// The topics subscribed to, and what each means.
const TOPICS: [(&str, Kind); 5] = [
    ("/tasks/start", Kind::Started),
    ("/tasks/exit", Kind::Exited),
    ("/tasks/delete", Kind::TaskDeleted),
    ("/tasks/oom", Kind::Oom),
    ("/containers/delete", Kind::Removed),
];

/// How often a marker is published while the subscription is unconfirmed.
const MARKER_PERIOD: Duration = Duration::from_millis(100);

/// How long a subscription may stay unconfirmed before it counts as failed.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);

/// containerd's events of one namespace, over its gRPC socket.
#[derive(Debug)]
pub struct ContainerdEvents {
    socket: PathBuf,
    namespace: String,
    markers: AtomicU64,
}

impl ContainerdEvents {
    /// Events of namespace [`CRI_NAMESPACE`] from the containerd listening on `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            namespace: CRI_NAMESPACE.to_owned(),
            markers: AtomicU64::new(0),
        }
    }

    /// Uses another namespace than [`CRI_NAMESPACE`].
    #[must_use]
    pub fn namespace(self, namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            ..self
        }
    }

    fn filters(&self) -> Vec<String> {
        TOPICS
            .iter()
            .map(|(topic, _)| *topic)
            .chain([MARKER_TOPIC])
            .map(|topic| format!("namespace=={},topic==\"{topic}\"", self.namespace))
            .collect()
    }

    /// Publishes marker events until `confirmed` resolves; containerd then has the
    /// subscription.
    async fn confirm<T>(&self, channel: Channel, confirmed: impl Future<Output = T>) -> Result<T> {
        let mut client = EventsClient::new(channel);
        let publish = async {
            let mut tick = tokio::time::interval(MARKER_PERIOD);
            loop {
                tick.tick().await;
                let n = self.markers.fetch_add(1, Ordering::Relaxed);
                let mut request = tonic::Request::new(PublishRequest {
                    topic: MARKER_TOPIC.to_owned(),
                    event: Some(prost_types::Any {
                        type_url: "types.googleapis.com/google.protobuf.Empty".to_owned(),
                        value: Vec::new(),
                    }),
                });
                match self.namespace.parse() {
                    Ok(ns) => {
                        request.metadata_mut().insert("containerd-namespace", ns);
                    }
                    Err(_) => {
                        return Error::Subscribe(format!(
                            "namespace {:?} is not a valid gRPC header value",
                            self.namespace
                        ));
                    }
                }
                if let Err(status) = client.publish(request).await {
                    return Error::Subscribe(format!(
                        "publishing marker event {n}: {}",
                        status.message()
                    ));
                }
                trace!(n, "pleg: published a subscription marker");
            }
        };
        tokio::select! {
            confirmed = confirmed => Ok(confirmed),
            e = publish => Err(e),
            () = tokio::time::sleep(CONFIRM_TIMEOUT) => Err(Error::Subscribe(format!(
                "containerd did not confirm the subscription within {CONFIRM_TIMEOUT:?}"
            ))),
        }
    }
}

/// The [`Event`] an envelope carries, if it is one the PLEG uses.
fn event(envelope: &Envelope) -> Option<Event> {
    let kind = TOPICS
        .iter()
        .find(|(topic, _)| *topic == envelope.topic)
        .map(|(_, kind)| *kind)?;
    let payload = envelope.event.as_ref()?.value.as_slice();
    // An exec'd process (probe, `kubectl exec`) has its own ID; only the init process counts.
    let init = |container: String, process: &str| {
        (process.is_empty() || process == container).then_some(container)
    };
    let id = match kind {
        Kind::Started => TaskStart::decode(payload).ok().map(|e| e.container_id),
        Kind::Exited => {
            let exit = TaskExit::decode(payload).ok()?;
            let details = Exit {
                // containerd's own conversion (`int32(e.ExitStatus)`).
                code: exit.exit_status.cast_signed(),
                at: exit
                    .exited_at
                    .and_then(|t| Timestamp::new(t.seconds, t.nanos).ok()),
            };
            let id = init(exit.container_id, &exit.id)?;
            return (!id.is_empty()).then(|| Event::exited(id, details));
        }
        Kind::TaskDeleted => TaskDelete::decode(payload)
            .ok()
            .and_then(|e| init(e.container_id, &e.id)),
        Kind::Oom => TaskOom::decode(payload).ok().map(|e| e.container_id),
        Kind::Removed => ContainerDelete::decode(payload).ok().map(|e| e.id),
    }?;
    (!id.is_empty()).then(|| Event::new(kind, id))
}

#[async_trait]
impl EventSource for ContainerdEvents {
    async fn subscribe(&self) -> Result<Stream> {
        let channel = containerd_client::connect(&self.socket)
            .await
            .map_err(|e| {
                Error::Subscribe(format!("connecting to {}: {e}", self.socket.display()))
            })?;
        let mut client = EventsClient::new(channel.clone());
        let request = SubscribeRequest {
            filters: self.filters(),
        };
        let response = self
            .confirm(channel, client.subscribe(request))
            .await?
            .map_err(|status| Error::Subscribe(status.message().to_owned()))?;
        debug!(socket = %self.socket.display(), namespace = %self.namespace, "pleg: subscribed to containerd events");
        let stream = response.into_inner().filter_map(|item| async move {
            match item {
                Ok(envelope) => event(&envelope).map(Ok),
                Err(status) => Some(Err(Error::Stream(status.to_string()))),
            }
        });
        Ok(stream.boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(topic: &str, payload: impl Message) -> Envelope {
        Envelope {
            topic: topic.into(),
            namespace: CRI_NAMESPACE.into(),
            event: Some(prost_types::Any {
                type_url: String::new(),
                value: payload.encode_to_vec(),
            }),
            timestamp: None,
        }
    }

    #[test]
    fn maps_topics_to_events() {
        let exit = |id: &str| TaskExit {
            container_id: "c1".into(),
            id: id.into(),
            ..Default::default()
        };
        let success = Exit { code: 0, at: None };
        assert_eq!(
            event(&envelope("/tasks/exit", exit("c1"))),
            Some(Event::exited("c1", success))
        );
        assert_eq!(
            event(&envelope("/tasks/exit", exit(""))),
            Some(Event::exited("c1", success))
        );
        let killed = TaskExit {
            container_id: "c1".into(),
            exit_status: 137,
            exited_at: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 5,
            }),
            ..Default::default()
        };
        assert_eq!(
            event(&envelope("/tasks/exit", killed)),
            Some(Event::exited(
                "c1",
                Exit {
                    code: 137,
                    at: Timestamp::new(1_700_000_000, 5).ok()
                }
            ))
        );
        assert_eq!(
            event(&envelope("/tasks/exit", exit("exec-1"))),
            None,
            "an exec'd process exiting is not the container exiting"
        );
        let start = TaskStart {
            container_id: "c2".into(),
            pid: 7,
        };
        assert_eq!(
            event(&envelope("/tasks/start", start)),
            Some(Event::new(Kind::Started, "c2"))
        );
        let removed = ContainerDelete { id: "c3".into() };
        assert_eq!(
            event(&envelope("/containers/delete", removed)),
            Some(Event::new(Kind::Removed, "c3"))
        );
        assert_eq!(
            event(&envelope(MARKER_TOPIC, TaskStart::default())),
            None,
            "markers are not events"
        );
        let mut garbage = envelope("/tasks/oom", TaskOom::default());
        garbage.event = Some(prost_types::Any {
            type_url: String::new(),
            value: vec![0xff, 0xff],
        });
        assert_eq!(event(&garbage), None);
    }

    #[test]
    fn filters_name_the_namespace_and_topics() {
        let source = ContainerdEvents::new("/run/c.sock").namespace("ns1");
        let filters = source.filters();
        assert!(filters.contains(&"namespace==ns1,topic==\"/tasks/exit\"".to_owned()));
        assert!(filters.contains(&format!("namespace==ns1,topic==\"{MARKER_TOPIC}\"")));
        assert_eq!(filters.len(), TOPICS.len() + 1);
    }
}
