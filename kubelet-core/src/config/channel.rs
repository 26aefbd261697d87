//! A pod source fed through a channel: the program that owns the sender decides which pods
//! the kubelet runs (the role of upstream's `PodConfig.Channel` for a caller-driven source).
//! Tests and benchmarks use it to hand pods straight to a node; an agent can use it for pods
//! it learns about in its own way.

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{PodSource, PodUpdate};

/// A [`PodSource`] that forwards what its [`ChannelSourceSender`] sends, under its own name.
///
/// Send [`Operation::Set`](super::Operation::Set) snapshots (the first one marks the source
/// as seen, which gates housekeeping) or incremental `Add`/`Update`/`Remove` updates.
///
/// ```
/// use kubelet_core::config::{ChannelSource, Operation};
/// # async fn demo() {
/// let (source, pods) = ChannelSource::new("test");
/// // … hand `source` to the kubelet, then:
/// pods.send(Operation::Set, vec![]).await.ok();
/// # }
/// ```
#[derive(Debug)]
pub struct ChannelSource {
    name: String,
    updates: mpsc::Receiver<PodUpdate>,
}

/// Sends pods to a [`ChannelSource`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ChannelSourceSender {
    name: String,
    updates: mpsc::Sender<PodUpdate>,
}

/// The [`ChannelSource`] is gone (its node stopped).
#[derive(Debug, thiserror::Error)]
#[error("pod source {0:?} is no longer running")]
pub struct SourceClosed(pub String);

impl ChannelSource {
    /// A source named `name` and its sender.
    pub fn new(name: impl Into<String>) -> (Self, ChannelSourceSender) {
        let name = name.into();
        let (tx, rx) = mpsc::channel(super::PodConfig::DEFAULT_CAPACITY);
        (
            Self {
                name: name.clone(),
                updates: rx,
            },
            ChannelSourceSender { name, updates: tx },
        )
    }
}

impl ChannelSourceSender {
    /// Sends `pods` with operation `op`; waits while the kubelet is behind.
    pub async fn send(
        &self,
        op: super::Operation,
        pods: Vec<k8s_openapi::api::core::v1::Pod>,
    ) -> Result<(), SourceClosed> {
        self.updates
            .send(PodUpdate {
                pods,
                op,
                source: self.name.clone(),
            })
            .await
            .map_err(|_| SourceClosed(self.name.clone()))
    }
}

#[async_trait]
impl PodSource for ChannelSource {
    fn name(&self) -> &str {
        &self.name
    }

    async fn run(mut self: Box<Self>, updates: mpsc::Sender<PodUpdate>, token: CancellationToken) {
        loop {
            let update = tokio::select! {
                biased;
                _ = token.cancelled() => return,
                update = self.updates.recv() => match update {
                    Some(update) => update,
                    None => {
                        // Every sender is gone: the source stays registered but quiet.
                        token.cancelled().await;
                        return;
                    }
                },
            };
            if updates.send(update).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Operation;
    use crate::testing::pod;

    #[tokio::test]
    async fn forwards_updates_under_its_own_name() {
        let (source, sender) = ChannelSource::new("mine");
        let (tx, mut rx) = mpsc::channel(4);
        let token = CancellationToken::new();
        let task = tokio::spawn(Box::new(source).run(tx, token.clone()));
        sender
            .send(Operation::Add, vec![pod("a")])
            .await
            .expect("running");
        let got = rx.recv().await.expect("forwarded");
        assert_eq!((got.op, got.source.as_str()), (Operation::Add, "mine"));
        assert_eq!(got.pods, vec![pod("a")]);
        token.cancel();
        task.await.expect("stops when cancelled");
        assert!(sender.send(Operation::Set, vec![]).await.is_err());
    }
}
