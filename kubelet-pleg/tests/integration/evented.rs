//! The event-driven PLEG over the fake runtime and a fake event stream, on paused time:
//! events re-inspect only the affected pod, a broken stream falls back to fast relisting, and
//! a re-subscription relists everything missed while no stream was up.

use crate::common;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::{drain, ev, settle};
use futures::StreamExt;
use futures::channel::mpsc::{UnboundedSender, unbounded};
use k8s_openapi::jiff::Timestamp;
use kubelet_core::PodUid;
use kubelet_core::backoff::Backoff;
use kubelet_core::cache::PodCache;
use kubelet_core::pleg::EventType;
use kubelet_core::runtime::{ContainerState, Runtime};
use kubelet_core::testing::{Call, FakeRuntime, FakeRuntimeHelper, pod_with};
use kubelet_pleg::evented::{self, Event, EventSource, Kind, Mode};
use kubelet_pleg::{EventedPleg, GenericPleg};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A scripted event source: `subscribe` fails while `down`, otherwise hands out a stream the
/// test feeds through [`FakeSource::send`].
#[derive(Default)]
struct FakeSource {
    down: Mutex<bool>,
    stream: Mutex<Option<UnboundedSender<evented::Result<Event>>>>,
    /// Events to deliver right after the next subscription.
    queued: Mutex<VecDeque<Event>>,
    subscriptions: AtomicUsize,
}

impl FakeSource {
    fn set_down(&self, down: bool) {
        *self.down.lock().expect("lock") = down;
    }

    fn send(&self, event: Event) {
        let stream = self.stream.lock().expect("lock");
        stream
            .as_ref()
            .expect("subscribed")
            .unbounded_send(Ok(event))
            .expect("stream open");
    }

    fn break_stream(&self, error: Option<&str>) {
        let stream = self
            .stream
            .lock()
            .expect("lock")
            .take()
            .expect("subscribed");
        if let Some(e) = error {
            stream
                .unbounded_send(Err(evented::Error::Stream(e.into())))
                .expect("stream open");
        }
    }

    fn subscriptions(&self) -> usize {
        self.subscriptions.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl EventSource for FakeSource {
    async fn subscribe(&self) -> evented::Result<evented::Stream> {
        self.subscriptions.fetch_add(1, Ordering::SeqCst);
        if *self.down.lock().expect("lock") {
            return Err(evented::Error::Subscribe("connection refused".into()));
        }
        let (tx, rx) = unbounded();
        for event in self.queued.lock().expect("lock").drain(..) {
            tx.unbounded_send(Ok(event)).expect("open");
        }
        *self.stream.lock().expect("lock") = Some(tx);
        Ok(rx.boxed())
    }
}

struct Harness {
    runtime: FakeRuntime,
    source: Arc<FakeSource>,
    pleg: EventedPleg,
    cache: PodCache,
    rx: mpsc::Receiver<kubelet_core::pleg::Event>,
    token: CancellationToken,
}

impl Harness {
    /// A running evented PLEG (60 s safety net, 1 s fallback) over a runtime holding one
    /// running pod per name (container `app`), after its first relist.
    async fn start(pods: &[&str], config: evented::Config) -> Harness {
        let runtime = FakeRuntime::new();
        for name in pods {
            start_pod(&runtime, name).await;
        }
        let cache = PodCache::new();
        let (generic, rx) = GenericPleg::new(
            Arc::new(runtime.clone()),
            cache.clone(),
            kubelet_pleg::Config::default(),
        );
        let source = Arc::new(FakeSource::default());
        let pleg = EventedPleg::new(generic, source.clone(), config);
        let token = CancellationToken::new();
        tokio::spawn(pleg.clone().run(token.clone()));
        settle().await;
        let mut h = Harness {
            runtime,
            source,
            pleg,
            cache,
            rx,
            token,
        };
        h.events();
        h.runtime.clear_calls();
        h
    }

    fn events(&mut self) -> Vec<(EventType, String, String)> {
        drain(&mut self.rx)
    }

    fn get_pods_calls(&self) -> usize {
        self.runtime
            .calls()
            .iter()
            .filter(|c| **c == Call::GetPods)
            .count()
    }

    fn status_calls(&self, name: &str) -> usize {
        let uid = uid(name);
        self.runtime
            .calls()
            .iter()
            .filter(|c| **c == Call::GetPodStatus(uid.clone()))
            .count()
    }

    /// ID of the container `app` of pod `name`.
    fn app_id(&self, name: &str) -> String {
        self.runtime
            .running_pods()
            .into_iter()
            .find(|p| p.name == name)
            .and_then(|p| p.containers.into_iter().find(|c| c.name == "app"))
            .map(|c| c.id)
            .expect("container app")
    }

    fn cached_state(&self, name: &str) -> Option<ContainerState> {
        let (status, _) = self.cache.get(&uid(name))?;
        status.container("app").map(|c| c.state)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

fn uid(name: &str) -> PodUid {
    PodUid::from(format!("uid-{name}").as_str())
}

async fn start_pod(runtime: &FakeRuntime, name: &str) {
    runtime
        .sync_pod(
            &pod_with(name, "Never", &["app"]),
            &Default::default(),
            Arc::new(FakeRuntimeHelper),
            &Backoff::crash_loop_default(),
        )
        .await
        .expect("sync");
}

fn died(name: &str, id: &str) -> (EventType, String, String) {
    ev(EventType::ContainerDied, &format!("uid-{name}"), id)
}

#[tokio::test(start_paused = true)]
async fn subscribes_and_slows_the_relist_to_the_safety_net() {
    let h = Harness::start(&["a"], evented::Config::default()).await;
    assert_eq!(h.pleg.mode(), Mode::Events);
    assert_eq!(h.source.subscriptions(), 1);
    assert_eq!(h.pleg.generic().relist_period(), Duration::from_secs(60));

    tokio::time::advance(Duration::from_secs(59)).await;
    settle().await;
    assert_eq!(
        h.get_pods_calls(),
        0,
        "no relist before the safety net period"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    settle().await;
    assert_eq!(h.get_pods_calls(), 1, "the safety net relist");
}

#[tokio::test(start_paused = true)]
async fn exit_event_reinspects_only_its_pod_within_no_relist_tick() {
    let mut h = Harness::start(&["a", "b"], evented::Config::default()).await;
    let id = h.app_id("a");
    assert!(h.runtime.exit_container(&uid("a"), "app", 3));
    h.source.send(Event::new(Kind::Exited, &id));
    settle().await;

    assert_eq!(h.events(), vec![died("a", &id)]);
    assert_eq!(h.cached_state("a"), Some(ContainerState::Exited));
    assert_eq!(h.get_pods_calls(), 0, "no full relist");
    assert_eq!(h.status_calls("a"), 1);
    assert_eq!(h.status_calls("b"), 0, "only the affected pod");

    // The next safety-net relist does not report the exit a second time.
    tokio::time::advance(Duration::from_secs(60)).await;
    settle().await;
    assert_eq!(h.get_pods_calls(), 1);
    assert_eq!(h.events(), vec![]);
}

#[tokio::test(start_paused = true)]
async fn exit_ahead_of_the_runtime_view_is_inspected_again_after_a_pause() {
    let mut h = Harness::start(&["a"], evented::Config::default()).await;
    let id = h.app_id("a");
    // containerd reports the exit before its CRI plugin shows the container exited.
    h.source.send(Event::new(Kind::Exited, &id));
    settle().await;
    assert_eq!(h.events(), vec![]);
    assert_eq!(h.status_calls("a"), 1);

    assert!(h.runtime.exit_container(&uid("a"), "app", 0));
    // No re-inspection while containerd handles the exit (it sends a task delete next).
    tokio::time::advance(Duration::from_millis(49)).await;
    settle().await;
    assert_eq!(h.status_calls("a"), 1);
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert_eq!(h.events(), vec![died("a", &id)]);
    assert_eq!(h.status_calls("a"), 2);
    assert_eq!(h.get_pods_calls(), 0);

    // Settled: no more inspections.
    tokio::time::advance(Duration::from_secs(5)).await;
    settle().await;
    assert_eq!(h.status_calls("a"), 2);
}

/// The exit code and reason the cache holds for container `app` of pod `name`.
fn cached_exit(h: &Harness, name: &str) -> Option<(i32, String)> {
    let (status, _) = h.cache.get(&uid(name))?;
    status
        .container("app")
        .map(|c| (c.exit_code, c.reason.clone()))
}

#[tokio::test(start_paused = true)]
async fn an_exit_event_s_status_is_shown_before_the_runtime_view_catches_up() {
    let mut h = Harness::start(&["a", "b"], evented::Config::default()).await;
    let (a, b) = (h.app_id("a"), h.app_id("b"));
    let exit = |code| evented::Exit {
        code,
        at: Timestamp::from_second(1_700_000_000).ok(),
    };
    // containerd's events: an OOM kill of b's container, then both exits; the fake runtime
    // still shows both containers running.
    h.source.send(Event::new(Kind::Oom, &b));
    h.source.send(Event::exited(&a, exit(3)));
    h.source.send(Event::exited(&b, exit(137)));
    settle().await;

    assert_eq!(h.events(), vec![died("a", &a), died("b", &b)]);
    assert_eq!(h.cached_state("a"), Some(ContainerState::Exited));
    assert_eq!(cached_exit(&h, "a"), Some((3, "Error".to_owned())));
    assert_eq!(cached_exit(&h, "b"), Some((137, "OOMKilled".to_owned())));
    let (status, _) = h.cache.get(&uid("a")).expect("cached");
    assert_eq!(
        status.container("app").and_then(|c| c.finished_at),
        exit(3).at
    );
    assert_eq!(h.status_calls("a"), 1, "one inspection, no retry");
    assert_eq!(h.get_pods_calls(), 0);

    // The safety-net relist, the runtime still behind: nothing flips back to running.
    tokio::time::advance(Duration::from_secs(60)).await;
    settle().await;
    assert_eq!(h.get_pods_calls(), 1);
    assert_eq!(h.events(), vec![]);
    assert_eq!(h.cached_state("a"), Some(ContainerState::Exited));

    // The runtime catches up with its own exit code: that is what stays.
    assert!(h.runtime.exit_container(&uid("a"), "app", 3));
    tokio::time::advance(Duration::from_secs(60)).await;
    settle().await;
    assert_eq!(h.events(), vec![]);
    assert_eq!(cached_exit(&h, "a"), Some((3, "Error".to_owned())));
}

#[tokio::test(start_paused = true)]
async fn task_delete_replaces_the_exit_reinspection_of_its_container() {
    let mut h = Harness::start(&["a"], evented::Config::default()).await;
    let id = h.app_id("a");
    h.source.send(Event::new(Kind::Exited, &id));
    settle().await;
    assert_eq!(h.status_calls("a"), 1);

    tokio::time::advance(Duration::from_millis(20)).await;
    assert!(h.runtime.exit_container(&uid("a"), "app", 0));
    h.source.send(Event::new(Kind::TaskDeleted, &id));
    settle().await;
    assert_eq!(h.events(), vec![died("a", &id)]);
    assert_eq!(h.status_calls("a"), 2);

    // The exit's own re-inspection (due at 50 ms) was replaced, so it never runs.
    tokio::time::advance(Duration::from_secs(1)).await;
    settle().await;
    assert_eq!(h.status_calls("a"), 2);
}

#[tokio::test(start_paused = true)]
async fn reinspection_stays_frequent_for_a_second_then_backs_off() {
    let mut h = Harness::start(&["a"], evented::Config::default()).await;
    let id = h.app_id("a");
    // The container is never removed, so the runtime never shows this event.
    h.source.send(Event::new(Kind::Removed, &id));
    settle().await;
    // Inspections at 0, 5, 15, 35, 55, 75, 95 ms: the wait doubles to 20 ms and stays there.
    for _ in 0..100 {
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
    }
    assert_eq!(h.status_calls("a"), 7);
    // After the first second the wait doubles on to 500 ms.
    tokio::time::advance(Duration::from_millis(900)).await;
    settle().await;
    let at_one_second = h.status_calls("a");
    for _ in 0..5 {
        tokio::time::advance(Duration::from_millis(500)).await;
        settle().await;
    }
    let later = h.status_calls("a") - at_one_second;
    assert!(
        (3..=5).contains(&later),
        "{later} inspections in the 2.5 s after the first second"
    );
    assert_eq!(h.events(), vec![], "the runtime never showed the removal");
}

#[tokio::test(start_paused = true)]
async fn start_of_an_unknown_container_relists_everything_after_a_pause() {
    let mut h = Harness::start(&["a"], evented::Config::default()).await;
    start_pod(&h.runtime, "new").await;
    let id = h.app_id("new");
    h.source.send(Event::new(Kind::Started, &id));
    settle().await;
    // The pod worker starting it reads its pod's status itself: no relist competes with it.
    tokio::time::advance(Duration::from_millis(99)).await;
    settle().await;
    assert_eq!(h.get_pods_calls(), 0);
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert_eq!(h.get_pods_calls(), 1, "one full relist finds the new pod");
    let events = h.events();
    assert!(
        events.contains(&ev(EventType::ContainerStarted, "uid-new", &id)),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn exit_of_an_unknown_container_relists_everything_at_once() {
    let mut h = Harness::start(&["a"], evented::Config::default()).await;
    start_pod(&h.runtime, "new").await;
    let id = h.app_id("new");
    assert!(h.runtime.exit_container(&uid("new"), "app", 1));
    h.source.send(Event::new(Kind::TaskDeleted, &id));
    settle().await;
    assert_eq!(h.get_pods_calls(), 1);
    let events = h.events();
    assert!(events.contains(&died("new", &id)), "{events:?}");
}

#[tokio::test(start_paused = true)]
async fn stream_error_falls_back_to_fast_relisting() {
    let mut h = Harness::start(&["a"], evented::Config::default()).await;
    h.source.set_down(true);
    h.source.break_stream(Some("transport is closing"));
    settle().await;
    assert_eq!(h.pleg.mode(), Mode::Relisting);
    assert_eq!(h.pleg.generic().relist_period(), Duration::from_secs(1));
    assert_eq!(
        h.get_pods_calls(),
        1,
        "a relist right when the stream breaks"
    );

    // An exit nobody reports is seen by the next 1 s relist.
    let id = h.app_id("a");
    assert!(h.runtime.exit_container(&uid("a"), "app", 1));
    tokio::time::advance(Duration::from_secs(1)).await;
    settle().await;
    assert_eq!(h.events(), vec![died("a", &id)]);
    assert_eq!(h.get_pods_calls(), 2);

    // Re-subscription with backoff: 1 s, then 2 s, then 4 s.
    assert_eq!(h.source.subscriptions(), 2);
    tokio::time::advance(Duration::from_secs(2)).await;
    settle().await;
    assert_eq!(h.source.subscriptions(), 3);
    tokio::time::advance(Duration::from_secs(3)).await;
    settle().await;
    assert_eq!(h.source.subscriptions(), 3, "backoff doubled");
    h.source.set_down(false);
    tokio::time::advance(Duration::from_secs(1)).await;
    settle().await;
    assert_eq!(h.source.subscriptions(), 4);
    assert_eq!(h.pleg.mode(), Mode::Events);
    assert_eq!(h.pleg.generic().relist_period(), Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn resubscription_relists_the_exit_missed_while_down() {
    // A fallback period far away, so only the re-subscription's relist can see the exit.
    let config = evented::Config::default().fallback_period(Duration::from_secs(3600));
    let mut h = Harness::start(&["a"], config).await;
    h.source.set_down(true);
    h.source.break_stream(None);
    settle().await;
    assert_eq!(h.pleg.mode(), Mode::Relisting);
    h.runtime.clear_calls();

    let id = h.app_id("a");
    assert!(h.runtime.exit_container(&uid("a"), "app", 2));
    h.source.set_down(false);
    tokio::time::advance(Duration::from_millis(999)).await;
    settle().await;
    assert_eq!(h.events(), vec![], "still waiting to subscribe again");
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert_eq!(h.pleg.mode(), Mode::Events);
    assert_eq!(h.get_pods_calls(), 1, "a full relist after subscribing");
    assert_eq!(h.events(), vec![died("a", &id)]);
}

#[tokio::test(start_paused = true)]
async fn no_stream_at_start_means_relisting_every_second() {
    let runtime = FakeRuntime::new();
    let (generic, _rx) = GenericPleg::new(
        Arc::new(runtime.clone()),
        PodCache::new(),
        kubelet_pleg::Config::default(),
    );
    let source = Arc::new(FakeSource::default());
    source.set_down(true);
    let pleg = EventedPleg::new(generic, source.clone(), evented::Config::default());
    let token = CancellationToken::new();
    let task = tokio::spawn(pleg.clone().run(token.clone()));
    settle().await;
    assert_eq!(pleg.mode(), Mode::Relisting);
    for _ in 0..3 {
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
    }
    let relists = runtime
        .calls()
        .iter()
        .filter(|c| **c == Call::GetPods)
        .count();
    assert_eq!(relists, 4, "right away, then every second");
    token.cancel();
    task.await.expect("run returns on cancel");
}

#[tokio::test(start_paused = true)]
async fn after_a_task_delete_the_pod_is_reinspected_every_2_ms_for_100_ms() {
    let mut h = Harness::start(&["a"], evented::Config::default()).await;
    let id = h.app_id("a");
    // containerd deleted the task; its CRI plugin shows the exit a moment later.
    h.source.send(Event::new(Kind::TaskDeleted, &id));
    settle().await;
    assert_eq!(h.status_calls("a"), 1);
    for _ in 0..10 {
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
    }
    // Inspections at 0, 2, 4, 6, 8 and 10 ms.
    assert_eq!(h.status_calls("a"), 6);
    assert!(h.runtime.exit_container(&uid("a"), "app", 0));
    tokio::time::advance(Duration::from_millis(2)).await;
    settle().await;
    assert_eq!(h.events(), vec![died("a", &id)]);
    assert_eq!(h.status_calls("a"), 7);
    // Settled: no more inspections.
    tokio::time::advance(Duration::from_secs(5)).await;
    settle().await;
    assert_eq!(h.status_calls("a"), 7);
}

#[tokio::test(start_paused = true)]
async fn after_a_task_delete_the_frequent_reinspections_end_after_100_ms() {
    let mut h = Harness::start(&["a"], evented::Config::default()).await;
    let id = h.app_id("a");
    h.source.send(Event::new(Kind::TaskDeleted, &id));
    settle().await;
    for _ in 0..100 {
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
    }
    // Every 2 ms: 0, 2, …, 100 ms.
    assert_eq!(h.status_calls("a"), 51);
    // Then the usual doubling, capped at 20 ms within the first second.
    for _ in 0..100 {
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
    }
    let next = h.status_calls("a") - 51;
    assert!(
        (4..=7).contains(&next),
        "{next} inspections in the next 100 ms"
    );
    assert_eq!(h.events(), vec![], "the runtime never showed the exit");
}

#[tokio::test(start_paused = true)]
async fn removal_of_a_container_no_listing_knew_relists_nothing() {
    let mut h = Harness::start(&["a"], evented::Config::default()).await;
    h.source.send(Event::new(Kind::Removed, "never-listed"));
    settle().await;
    tokio::time::advance(Duration::from_secs(1)).await;
    settle().await;
    assert_eq!(h.get_pods_calls(), 0);
    assert_eq!(h.events(), vec![]);
}
