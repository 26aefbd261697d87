//! A PLEG driven by the runtime's own event stream, with the relist as a slow safety net
//! (upstream `pkg/kubelet/pleg/evented.go`, `EventedPLEG`).
//!
//! Upstream's evented PLEG needs CRI `GetContainerEvents` (containerd ≥ 1.7). This one takes
//! any [`EventSource`], such as containerd's native events service
//! (`containerd::ContainerdEvents`, feature `containerd`), which containerd 1.6
//! already serves. For each event it re-inspects only the pod holding the container, from the
//! [`GenericPleg`]'s last listing ([`GenericPleg::relist_container`]); a container no listing
//! knows yet asks for a full relist. Because the runtime's own view (what CRI reports) can
//! trail its event a little, the pod is re-inspected with a short backoff until the runtime
//! shows what the event says. An exit event that carries the exit status is first passed to
//! the runtime ([`runtime::Runtime::observe_exit`]), so the first inspection already shows
//! it: containerd's CRI plugin reports an exit only after it has deleted the task, tens of
//! milliseconds after `/tasks/exit`.
//!
//! While the stream is up, the generic relist runs every [`Config::safety_net_period`]; when
//! the stream cannot be opened or breaks, it runs every [`Config::fallback_period`] again and
//! the stream is re-opened with backoff. Every (re)subscription is followed by a full relist,
//! so no change made while no stream was up is lost.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::jiff::Timestamp;
use kubelet_core::PodUid;
use kubelet_core::backoff::Backoff;
use kubelet_core::pleg::{HealthError, Pleg};
use kubelet_core::runtime::{self, ObservedExit};
use kubelet_core::start_path;
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, trace, warn};

use crate::events::PlegState;
use crate::generic::{ContainerRelist, GenericPleg};

/// What happened to a container (or a sandbox's container), as the runtime reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Its process started (containerd `/tasks/start`).
    Started,
    /// Its main process exited (containerd `/tasks/exit` of the init process).
    Exited,
    /// Its task was deleted after an exit or a stop (containerd `/tasks/delete`).
    TaskDeleted,
    /// It hit its memory limit (containerd `/tasks/oom`); an exit usually follows.
    Oom,
    /// The container itself was removed (containerd `/containers/delete`).
    Removed,
}

impl Kind {
    /// Whether the runtime's view of the container, `state`, already shows this event.
    fn shown_by(self, state: PlegState) -> bool {
        match self {
            // A container that started and exited at once never shows as running.
            Kind::Started => matches!(state, PlegState::Running | PlegState::Exited),
            Kind::Exited | Kind::TaskDeleted => state != PlegState::Running,
            Kind::Removed => state == PlegState::NonExistent,
            Kind::Oom => true,
        }
    }
}

/// One runtime event about one container or sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: Kind,
    /// Runtime ID of the container or sandbox.
    pub container_id: String,
    /// For [`Kind::Exited`]: the exit status and time, when the runtime's event carries them.
    pub exit: Option<Exit>,
}

/// How a container's main process exited, as the runtime's exit event says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    /// The exit status.
    pub code: i32,
    /// When it exited.
    pub at: Option<Timestamp>,
}

impl Event {
    /// An event of `kind` about `container_id`.
    pub fn new(kind: Kind, container_id: impl Into<String>) -> Self {
        Self {
            kind,
            container_id: container_id.into(),
            exit: None,
        }
    }

    /// A [`Kind::Exited`] event that says how the container exited.
    pub fn exited(container_id: impl Into<String>, exit: Exit) -> Self {
        Self {
            exit: Some(exit),
            ..Self::new(Kind::Exited, container_id)
        }
    }
}

pub use crate::error::{Error, Result};

/// An open event stream; it ends (or yields an error) when the subscription is lost.
pub type Stream = BoxStream<'static, Result<Event>>;

/// Where runtime events come from (containerd's events service; a fake in tests).
#[async_trait]
pub trait EventSource: Send + Sync + 'static {
    /// Opens a stream. Returns once the subscription is live: every change after that is
    /// delivered. Cancel safe.
    async fn subscribe(&self) -> Result<Stream>;
}

/// Timing of an [`EventedPleg`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Relist period while the stream is up. Default 60 s.
    pub safety_net_period: Duration,
    /// Relist period while no stream is up. Default 1 s (the generic PLEG's).
    pub fallback_period: Duration,
    /// First wait before subscribing again; doubles per failure. Default 1 s.
    pub resubscribe_initial: Duration,
    /// Longest wait before subscribing again. Default 30 s.
    pub resubscribe_max: Duration,
    /// First wait before re-inspecting a pod whose runtime view does not show its event yet;
    /// doubles per try. Default 5 ms.
    pub settle_initial: Duration,
    /// Longest wait between such re-inspections during [`Config::settle_fast_window`]: the
    /// runtime usually catches up within tens of milliseconds. Default 20 ms.
    pub settle_fast_max: Duration,
    /// How long re-inspections stay frequent. Default 1 s.
    pub settle_fast_window: Duration,
    /// Longest wait between re-inspections after that. Default 500 ms.
    pub settle_max: Duration,
    /// How long to keep re-inspecting before leaving the change to the relist. Default 10 s.
    pub settle_timeout: Duration,
    /// Wait between re-inspections after a [`Kind::TaskDeleted`] event, during
    /// [`Config::settle_after_delete_window`]: containerd's CRI plugin reports a container
    /// exited only once it has deleted the task, right after that event (containerd 1.6
    /// `handleContainerExit`), so the change is due any moment. Default 2 ms.
    pub settle_after_delete: Duration,
    /// How long re-inspections stay that frequent after a task delete; then they back off as
    /// for any event. Default 100 ms.
    pub settle_after_delete_window: Duration,
    /// Wait before re-inspecting after a [`Kind::Exited`] event the runtime does not show at
    /// once. containerd's CRI plugin shows an exit only once it has deleted the task, and that
    /// delete has its own event ([`Kind::TaskDeleted`]), whose re-inspection replaces this
    /// one; so this wait only matters when no such event comes, and re-inspecting sooner
    /// would only load the runtime while it handles the exit. Default 50 ms.
    pub settle_after_exit: Duration,
    /// Wait before the full relist that a [`Kind::Started`] event about a container no listing
    /// knows asks for. Such a container is nearly always one the kubelet's own pod worker is
    /// starting at that moment (a sandbox, then each container), and the worker reads the
    /// pod's status itself when it is done; relisting at once would only compete with that
    /// start for the runtime, twice per pod. A later event about the container (its exit)
    /// replaces the wait. Default 100 ms.
    pub settle_unknown_start: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            safety_net_period: Duration::from_secs(60),
            fallback_period: Duration::from_secs(1),
            resubscribe_initial: Duration::from_secs(1),
            resubscribe_max: Duration::from_secs(30),
            settle_initial: Duration::from_millis(5),
            settle_fast_max: Duration::from_millis(20),
            settle_fast_window: Duration::from_secs(1),
            settle_max: Duration::from_millis(500),
            settle_timeout: Duration::from_secs(10),
            settle_after_delete: Duration::from_millis(2),
            settle_after_delete_window: Duration::from_millis(100),
            settle_after_exit: Duration::from_millis(50),
            settle_unknown_start: Duration::from_millis(100),
        }
    }
}

impl Config {
    /// Sets [`Config::safety_net_period`].
    #[must_use]
    pub fn safety_net_period(self, safety_net_period: Duration) -> Self {
        Self {
            safety_net_period,
            ..self
        }
    }

    /// Sets [`Config::fallback_period`].
    #[must_use]
    pub fn fallback_period(self, fallback_period: Duration) -> Self {
        Self {
            fallback_period,
            ..self
        }
    }
}

/// Whether the PLEG currently learns of changes from events or only from relisting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// No stream is up: relisting every [`Config::fallback_period`].
    Relisting,
    /// The stream is up: events, plus a relist every [`Config::safety_net_period`].
    Events,
}

/// The backoff key of the subscription.
const SUBSCRIBE: &str = "subscribe";

/// An event-driven PLEG over a [`GenericPleg`]. Cheap to clone; clones share state.
///
/// Spawn [`EventedPleg::run`] instead of the generic PLEG's own `run`; the generic PLEG's
/// event receiver stays the one the sync loop reads.
#[doc(alias = "EventedPLEG")]
#[derive(Clone)]
pub struct EventedPleg {
    generic: GenericPleg,
    source: Arc<dyn EventSource>,
    config: Config,
    mode: Arc<watch::Sender<Mode>>,
}

impl std::fmt::Debug for EventedPleg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventedPleg")
            .field("generic", &self.generic)
            .field("config", &self.config)
            .field("mode", &self.mode())
            .finish_non_exhaustive()
    }
}

impl EventedPleg {
    /// An evented PLEG that drives `generic` from `source`'s events.
    pub fn new(generic: GenericPleg, source: Arc<dyn EventSource>, config: Config) -> Self {
        Self {
            generic,
            source,
            config,
            mode: Arc::new(watch::Sender::new(Mode::Relisting)),
        }
    }

    /// The relisting PLEG underneath.
    pub fn generic(&self) -> &GenericPleg {
        &self.generic
    }

    /// Whether the event stream is up now.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Runs the generic relist loop and the event subscription until `token` is cancelled.
    pub async fn run(self, token: CancellationToken) {
        self.generic.set_relist_period(self.config.fallback_period);
        let relist = self.generic.clone().run(token.child_token());
        tokio::join!(relist, self.watch(token));
    }

    fn set_mode(&self, mode: Mode) {
        let previous = self.mode.send_replace(mode);
        let period = match mode {
            Mode::Events => self.config.safety_net_period,
            Mode::Relisting => self.config.fallback_period,
        };
        self.generic.set_relist_period(period);
        match (previous, mode) {
            (Mode::Relisting, Mode::Events) => info!(
                safety_net = ?period,
                "pleg: runtime event stream is up; relisting only as a safety net"
            ),
            (Mode::Events, Mode::Relisting) => {
                warn!(every = ?period, "pleg: runtime event stream is down; relisting");
            }
            _ => {}
        }
    }

    /// Subscribes, consumes the stream, falls back and re-subscribes with backoff.
    async fn watch(&self, token: CancellationToken) {
        let backoff = Backoff::new(self.config.resubscribe_initial, self.config.resubscribe_max);
        let mut settling = JoinSet::new();
        loop {
            let subscribed = tokio::select! {
                biased;
                () = token.cancelled() => break,
                subscribed = self.source.subscribe() => subscribed,
            };
            match subscribed {
                Ok(stream) => {
                    backoff.reset(SUBSCRIBE);
                    self.set_mode(Mode::Events);
                    // Whatever changed while no stream was up.
                    self.generic.relist_now();
                    let Some(e) = self.consume(stream, &mut settling, &token).await else {
                        break;
                    };
                    warn!(error = %e, "pleg: lost the runtime event stream");
                    self.set_mode(Mode::Relisting);
                    // Whatever changed since the stream broke.
                    self.generic.relist_now();
                }
                Err(e) => {
                    self.set_mode(Mode::Relisting);
                    debug!(error = %e, "pleg: no runtime event stream");
                }
            }
            let wait = backoff.next(SUBSCRIBE);
            debug!(?wait, "pleg: subscribing to runtime events again later");
            tokio::select! {
                biased;
                () = token.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        settling.abort_all();
        debug!("evented pleg stopped");
    }

    /// Handles events until the stream ends (returns why) or `token` is cancelled (`None`).
    async fn consume(
        &self,
        mut stream: Stream,
        settling: &mut JoinSet<()>,
        token: &CancellationToken,
    ) -> Option<Error> {
        // The re-inspection under way per container: a newer event about the container
        // replaces it (the new one re-inspects the pod anyway).
        let mut by_container: HashMap<String, AbortHandle> = HashMap::new();
        // Containers the runtime reported out of memory: their exit is `OOMKilled`.
        let mut oom_killed: HashSet<String> = HashSet::new();
        loop {
            tokio::select! {
                biased;
                () = token.cancelled() => return None,
                Some(_) = settling.join_next(), if !settling.is_empty() => {
                    // A finished task's memory goes with its last handle: once every
                    // re-inspection is done, let go of them all (a burst's would otherwise
                    // stay until the next event; issue 17).
                    if settling.is_empty() {
                        by_container = HashMap::new();
                    }
                }
                next = stream.next() => match next {
                    Some(Ok(event)) => {
                        kubelet_core::start_step!(
                            start_path::RUNTIME_EVENT,
                            kind = ?event.kind,
                            container = %event.container_id
                        );
                        by_container.retain(|_, task| !task.is_finished());
                        self.pass_on_exit(&event, &mut oom_killed);
                        let id = event.container_id.clone();
                        let task = settling.spawn(settle(self.generic.clone(), event, self.config));
                        if let Some(older) = by_container.insert(id, task) {
                            older.abort();
                        }
                    }
                    Some(Err(e)) => return Some(e),
                    None => return Some(Error::Stream("the runtime ended the stream".into())),
                },
            }
        }
    }
}

impl EventedPleg {
    /// Tells the runtime of an exit the event describes before the pod is re-inspected, so
    /// that the inspection shows it even when the runtime's status API trails its events
    /// ([`runtime::Runtime::observe_exit`]); remembers out-of-memory kills for that.
    fn pass_on_exit(&self, event: &Event, oom_killed: &mut HashSet<String>) {
        match (event.kind, event.exit) {
            (Kind::Oom, _) => {
                oom_killed.insert(event.container_id.clone());
            }
            (Kind::Exited, Some(exit)) => {
                self.generic.runtime().observe_exit(ObservedExit {
                    container_id: event.container_id.clone(),
                    exit_code: exit.code,
                    finished_at: exit.at,
                    oom_killed: oom_killed.remove(&event.container_id),
                });
            }
            (Kind::Removed, _) => {
                oom_killed.remove(&event.container_id);
            }
            _ => {}
        }
    }
}

/// Re-inspects the pod of `event`'s container until the runtime shows the event, with backoff
/// (a full relist first when no listing knows the container, after
/// [`Config::settle_unknown_start`] for a start); after a task delete, every
/// [`Config::settle_after_delete`] at first; after an exit, next after
/// [`Config::settle_after_exit`].
async fn settle(generic: GenericPleg, event: Event, config: Config) {
    let start = Instant::now();
    let deadline = start + config.settle_timeout;
    let after_delete = event.kind == Kind::TaskDeleted;
    let mut delay = match event.kind {
        Kind::TaskDeleted => config.settle_after_delete,
        Kind::Exited => config.settle_after_exit,
        _ => config.settle_initial,
    };
    let mut relisted_all = false;
    let mut waited_for_the_start = event.kind != Kind::Started;
    loop {
        match generic.relist_container(&event.container_id).await {
            Ok(ContainerRelist::Relisted(state)) if event.kind.shown_by(state) => {
                kubelet_core::start_step!(
                    start_path::PLEG_EVENT,
                    kind = ?event.kind,
                    container = %event.container_id,
                    waited = ?start.elapsed()
                );
                return;
            }
            Ok(ContainerRelist::Relisted(state)) => {
                trace!(
                    ?event,
                    ?state,
                    "pleg: the runtime does not show the event yet"
                );
            }
            Ok(ContainerRelist::Unknown) if relisted_all => {
                trace!(?event, "pleg: event about a container of no kubelet pod");
                return;
            }
            // No listing had it, so its removal changes nothing a relist could report.
            Ok(ContainerRelist::Unknown) if event.kind == Kind::Removed => {
                trace!(?event, "pleg: a container no listing knew was removed");
                return;
            }
            Ok(ContainerRelist::Unknown) if !waited_for_the_start => {
                tokio::time::sleep(config.settle_unknown_start).await;
                waited_for_the_start = true;
                continue;
            }
            Ok(ContainerRelist::Unknown) => {
                generic.relist_and_wait().await;
                relisted_all = true;
                continue;
            }
            Err(e) => debug!(?event, error = %e, "pleg: inspecting the pod of an event"),
        }
        if Instant::now() + delay > deadline {
            debug!(
                ?event,
                "pleg: the runtime did not show the event in time; leaving it to the relist"
            );
            return;
        }
        tokio::time::sleep(delay).await;
        let elapsed = start.elapsed();
        delay = if after_delete && elapsed < config.settle_after_delete_window {
            config.settle_after_delete
        } else if elapsed < config.settle_fast_window {
            (delay * 2).min(config.settle_fast_max)
        } else {
            (delay * 2).min(config.settle_max)
        };
    }
}

#[async_trait]
impl Pleg for EventedPleg {
    async fn relist_pod(
        &self,
        uid: &PodUid,
        name: &str,
        namespace: &str,
    ) -> Result<(), runtime::Error> {
        self.generic.relist_pod(uid, name, namespace).await
    }

    /// As the generic PLEG: the safety-net relist keeps running while the stream is up, so
    /// a stuck runtime still shows (its period must stay below the threshold).
    fn healthy(&self) -> std::result::Result<(), HealthError> {
        self.generic.healthy()
    }
}
