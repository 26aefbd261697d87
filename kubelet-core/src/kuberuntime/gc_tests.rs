//! Tests of the pod engine's garbage collection against a scripted runtime listing.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::super::api::{
    Container, ContainerConfig, ContainerFilter, ContainerStatus, PodSandbox, PodSandboxFilter,
};
use super::super::labels::{
    CONTAINER_NAME_LABEL, CONTAINER_RESTART_COUNT_ANNOTATION, POD_NAME_LABEL, POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
};
use super::super::{KubeRuntimeManager, Options, RuntimeService};
use crate::container_gc::{PodStateProvider, Policy};
use crate::pod::PodUid;
use crate::runtime::{
    ContainerState, Error, Result, Runtime, RuntimeStatus, SandboxState, Version,
};

/// A runtime that holds listed containers and sandboxes and records what was stopped and
/// removed.
#[derive(Default)]
struct Listing {
    containers: Mutex<Vec<(Container, String)>>,
    sandboxes: Mutex<Vec<PodSandbox>>,
    stopped: Mutex<Vec<String>>,
    removed: Mutex<Vec<String>>,
}

impl Listing {
    fn ids(&self) -> HashSet<String> {
        let containers = self.containers.lock().expect("lock");
        let sandboxes = self.sandboxes.lock().expect("lock");
        containers
            .iter()
            .map(|(c, _)| c.id.clone())
            .chain(sandboxes.iter().map(|s| s.id.clone()))
            .collect()
    }
}

#[async_trait]
impl RuntimeService for Arc<Listing> {
    async fn version(&self) -> Result<Version> {
        Ok(Version::default())
    }
    async fn status(&self) -> Result<RuntimeStatus> {
        Ok(RuntimeStatus::default())
    }
    async fn create_container<'a>(&self, _: &str, _: &ContainerConfig<'a>) -> Result<String> {
        Err(Error::Unsupported("CreateContainer"))
    }
    async fn start_container(&self, _: &str) -> Result<()> {
        Err(Error::Unsupported("StartContainer"))
    }
    async fn stop_container(&self, id: &str, _: i64) -> Result<()> {
        self.stopped.lock().expect("lock").push(id.to_owned());
        Ok(())
    }
    async fn remove_container(&self, id: &str) -> Result<()> {
        self.removed.lock().expect("lock").push(id.to_owned());
        self.containers
            .lock()
            .expect("lock")
            .retain(|(c, _)| c.id != id);
        Ok(())
    }
    async fn list_containers(&self, _: &ContainerFilter) -> Result<Vec<Container>> {
        let containers = self.containers.lock().expect("lock");
        Ok(containers.iter().map(|(c, _)| c.clone()).collect())
    }
    async fn container_status(&self, id: &str) -> Result<ContainerStatus> {
        let containers = self.containers.lock().expect("lock");
        let (c, log_path) = containers
            .iter()
            .find(|(c, _)| c.id == id)
            .ok_or_else(|| Error::NotFound(id.to_owned()))?;
        Ok(ContainerStatus {
            id: c.id.clone(),
            state: c.state,
            labels: c.labels.clone(),
            log_path: log_path.clone(),
            ..Default::default()
        })
    }
    async fn list_pod_sandbox(&self, _: &PodSandboxFilter) -> Result<Vec<PodSandbox>> {
        Ok(self.sandboxes.lock().expect("lock").clone())
    }
    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        self.stopped.lock().expect("lock").push(id.to_owned());
        Ok(())
    }
    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        self.removed.lock().expect("lock").push(id.to_owned());
        self.sandboxes.lock().expect("lock").retain(|s| s.id != id);
        Ok(())
    }
}

/// Which pods are gone.
#[derive(Default)]
struct Pods {
    content_gone: HashSet<PodUid>,
    runtime_gone: HashSet<PodUid>,
}

impl PodStateProvider for Pods {
    fn should_pod_content_be_removed(&self, uid: &PodUid) -> bool {
        self.content_gone.contains(uid)
    }
    fn should_pod_runtime_be_removed(&self, uid: &PodUid) -> bool {
        self.runtime_gone.contains(uid) || self.content_gone.contains(uid)
    }
}

fn ago(minutes: i64) -> Option<Timestamp> {
    crate::time::now()
        .checked_sub(SignedDuration::from_mins(minutes))
        .ok()
}

fn pod_labels(uid: &str) -> HashMap<String, String> {
    HashMap::from([
        (POD_UID_LABEL.to_owned(), uid.to_owned()),
        (POD_NAME_LABEL.to_owned(), format!("pod-{uid}")),
        (POD_NAMESPACE_LABEL.to_owned(), "default".to_owned()),
    ])
}

struct Fixture {
    listing: Arc<Listing>,
    engine: KubeRuntimeManager<Arc<Listing>>,
    logs: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let logs = tempfile::tempdir().expect("tempdir");
        let listing = Arc::new(Listing::default());
        let engine = KubeRuntimeManager::new(
            listing.clone(),
            Options::default().with_pod_logs_dir(logs.path()),
        );
        Self {
            listing,
            engine,
            logs,
        }
    }

    /// A container `id` of pod `uid` called `name`, attempt `attempt`, created
    /// `minutes_ago`, with a log file (and one rotated log) under the pod log root.
    fn container(
        &self,
        uid: &str,
        name: &str,
        id: &str,
        attempt: u32,
        state: ContainerState,
        minutes_ago: i64,
    ) -> PathBuf {
        let dir = self
            .logs
            .path()
            .join(format!("default_pod-{uid}_{uid}/{name}"));
        std::fs::create_dir_all(&dir).expect("log dir");
        let log = dir.join(format!("{attempt}.log"));
        std::fs::write(&log, "line\n").expect("log");
        std::fs::write(dir.join(format!("{attempt}.log.20240101-000000.gz")), "old")
            .expect("rotated log");
        let mut labels = pod_labels(uid);
        labels.insert(CONTAINER_NAME_LABEL.to_owned(), name.to_owned());
        let container = Container {
            id: id.to_owned(),
            sandbox_id: format!("sandbox-{uid}"),
            name: name.to_owned(),
            state,
            created_at: ago(minutes_ago),
            labels,
            annotations: HashMap::from([(
                CONTAINER_RESTART_COUNT_ANNOTATION.to_owned(),
                attempt.to_string(),
            )]),
            ..Default::default()
        };
        let path = log.to_string_lossy().into_owned();
        self.listing
            .containers
            .lock()
            .expect("lock")
            .push((container, path));
        log
    }

    fn sandbox(&self, uid: &str, id: &str, attempt: u32, state: SandboxState, minutes_ago: i64) {
        self.listing
            .sandboxes
            .lock()
            .expect("lock")
            .push(PodSandbox {
                id: id.to_owned(),
                state,
                attempt,
                created_at: ago(minutes_ago),
                labels: pod_labels(uid),
                annotations: HashMap::new(),
            });
    }

    async fn collect(&self, policy: Policy, ready: bool, evict_all: bool, pods: Pods) {
        self.engine
            .garbage_collect(policy, ready, evict_all, Arc::new(pods))
            .await
            .expect("gc");
    }

    fn remaining(&self) -> HashSet<String> {
        self.listing.ids()
    }
}

fn set(ids: &[&str]) -> HashSet<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn a_crash_looping_container_keeps_the_running_one_and_the_newest_dead_one() {
    let f = Fixture::new();
    let mut logs = Vec::new();
    for attempt in 0..5 {
        let id = format!("app-{attempt}");
        logs.push(f.container(
            "a",
            "app",
            &id,
            attempt,
            ContainerState::Exited,
            10 - i64::from(attempt),
        ));
    }
    f.container("a", "app", "app-5", 5, ContainerState::Running, 1);
    f.collect(Policy::default(), true, false, Pods::default())
        .await;
    assert_eq!(f.remaining(), set(&["app-4", "app-5"]));
    // Removed oldest first, with their logs (rotated ones too).
    assert_eq!(
        *f.listing.removed.lock().expect("lock"),
        ["app-0", "app-1", "app-2", "app-3"]
    );
    for log in &logs[..4] {
        assert!(!log.exists(), "{} kept", log.display());
        let rotated = PathBuf::from(format!("{}.20240101-000000.gz", log.display()));
        assert!(!rotated.exists(), "{} kept", rotated.display());
    }
    assert!(logs[4].exists());
}

#[tokio::test]
async fn the_attempt_decides_which_dead_container_is_newest() {
    let f = Fixture::new();
    // Attempt 3 was created before attempt 2 (a clock step): the attempt wins.
    f.container("a", "app", "app-2", 2, ContainerState::Exited, 1);
    f.container("a", "app", "app-3", 3, ContainerState::Exited, 5);
    f.collect(Policy::default(), true, false, Pods::default())
        .await;
    assert_eq!(f.remaining(), set(&["app-3"]));
}

#[tokio::test]
async fn containers_younger_than_min_age_stay() {
    let f = Fixture::new();
    f.container("a", "app", "old", 0, ContainerState::Exited, 30);
    f.container("a", "app", "older", 1, ContainerState::Exited, 20);
    f.container("a", "app", "young", 2, ContainerState::Exited, 1);
    let policy = Policy {
        min_age: Duration::from_secs(10 * 60),
        ..Policy::default()
    };
    f.collect(policy, true, false, Pods::default()).await;
    // Of the two old enough, the newest stays; the young one is not counted at all.
    assert_eq!(f.remaining(), set(&["older", "young"]));
}

#[tokio::test]
async fn a_deleted_pod_loses_every_dead_container_once_all_sources_are_ready() {
    let f = Fixture::new();
    f.container("gone", "app", "g-0", 0, ContainerState::Exited, 3);
    f.container("gone", "app", "g-1", 1, ContainerState::Exited, 2);
    let gone = || Pods {
        content_gone: HashSet::from([PodUid::from("gone")]),
        ..Pods::default()
    };
    f.collect(Policy::default(), false, false, gone()).await;
    assert_eq!(
        f.remaining(),
        set(&["g-1"]),
        "sources not ready: only the policy"
    );
    f.collect(Policy::default(), true, false, gone()).await;
    assert!(f.remaining().is_empty(), "{:?}", f.remaining());
}

#[tokio::test]
async fn a_terminated_pod_keeps_its_containers_unless_everything_unused_goes() {
    let f = Fixture::new();
    f.container("done", "app", "d-0", 0, ContainerState::Exited, 3);
    let done = || Pods {
        runtime_gone: HashSet::from([PodUid::from("done")]),
        ..Pods::default()
    };
    f.collect(Policy::default(), true, false, done()).await;
    assert_eq!(f.remaining(), set(&["d-0"]));
    f.collect(Policy::default(), true, true, done()).await;
    assert!(f.remaining().is_empty());
}

#[tokio::test]
async fn max_containers_leaves_an_equal_share_then_removes_the_oldest() {
    let f = Fixture::new();
    for (uid, base) in [("a", 10), ("b", 20), ("c", 30)] {
        for attempt in 0..3 {
            let id = format!("{uid}-{attempt}");
            f.container(
                uid,
                "app",
                &id,
                attempt,
                ContainerState::Exited,
                base - i64::from(attempt),
            );
        }
    }
    let policy = Policy {
        max_per_pod_container: -1,
        max_containers: 2,
        ..Policy::default()
    };
    f.collect(policy, true, false, Pods::default()).await;
    // Share max(2 / 3, 1) = 1 per unit, then the oldest of the three newest (c-2) goes.
    assert_eq!(f.remaining(), set(&["a-2", "b-2"]));
}

#[tokio::test]
async fn a_container_in_an_unknown_state_is_stopped_before_removal() {
    let f = Fixture::new();
    f.container("a", "app", "lost", 0, ContainerState::Unknown, 3);
    f.container("a", "app", "dead", 1, ContainerState::Exited, 2);
    f.collect(Policy::default(), true, false, Pods::default())
        .await;
    assert_eq!(f.remaining(), set(&["dead"]));
    assert_eq!(*f.listing.stopped.lock().expect("lock"), ["lost"]);
}

#[tokio::test]
async fn objects_without_our_labels_are_never_touched() {
    let f = Fixture::new();
    f.listing.containers.lock().expect("lock").push((
        Container {
            id: "foreign".into(),
            state: ContainerState::Exited,
            ..Default::default()
        },
        String::new(),
    ));
    f.listing.sandboxes.lock().expect("lock").push(PodSandbox {
        id: "foreign-sandbox".into(),
        ..Default::default()
    });
    f.collect(Policy::default(), true, true, Pods::default())
        .await;
    assert_eq!(f.remaining(), set(&["foreign", "foreign-sandbox"]));
}

#[tokio::test]
async fn sandboxes_keep_the_newest_of_a_live_pod_and_every_active_one() {
    let f = Fixture::new();
    f.sandbox("a", "s-old", 0, SandboxState::NotReady, 30);
    f.sandbox("a", "s-with-container", 1, SandboxState::NotReady, 20);
    f.sandbox("a", "s-newest", 2, SandboxState::NotReady, 10);
    f.container("a", "app", "c", 0, ContainerState::Exited, 20);
    f.listing.containers.lock().expect("lock")[0].0.sandbox_id = "s-with-container".into();
    f.sandbox("gone", "g-ready", 1, SandboxState::Ready, 5);
    f.sandbox("gone", "g-dead", 0, SandboxState::NotReady, 6);
    let pods = Pods {
        content_gone: HashSet::from([PodUid::from("gone")]),
        ..Pods::default()
    };
    f.collect(Policy::default(), false, false, pods).await;
    assert_eq!(
        f.remaining(),
        set(&["s-with-container", "s-newest", "c", "g-ready"])
    );
    // Stopped first, in case they were not.
    let stopped = f.listing.stopped.lock().expect("lock").clone();
    assert!(stopped.contains(&"s-old".to_owned()) && stopped.contains(&"g-dead".to_owned()));
}

#[tokio::test]
async fn log_directories_of_gone_pods_go_once_all_sources_are_ready() {
    let f = Fixture::new();
    let live = f.logs.path().join("default_web_uid-live");
    let gone = f.logs.path().join("kube-system_old_uid-gone");
    for dir in [&live, &gone] {
        std::fs::create_dir_all(dir.join("app")).expect("dir");
        std::fs::write(dir.join("app/0.log"), "x").expect("log");
    }
    let pods = || Pods {
        content_gone: HashSet::from([PodUid::from("uid-gone")]),
        ..Pods::default()
    };
    f.collect(Policy::default(), false, false, pods()).await;
    assert!(gone.exists(), "removed before all sources were ready");
    f.collect(Policy::default(), true, false, pods()).await;
    assert!(!gone.exists());
    assert!(live.exists());
}

#[tokio::test]
async fn a_missing_pod_log_root_is_nothing_to_collect() {
    let listing = Arc::new(Listing::default());
    let engine = KubeRuntimeManager::new(
        listing,
        Options::default().with_pod_logs_dir("/nonexistent/pod/logs"),
    );
    engine
        .garbage_collect(Policy::default(), true, false, Arc::new(Pods::default()))
        .await
        .expect("gc");
}

#[test]
fn the_pod_uid_is_the_last_part_of_a_log_directory_name() {
    assert_eq!(
        super::pod_uid_from_logs_directory("default_web_1234-abcd"),
        PodUid::from("1234-abcd")
    );
    assert_eq!(
        super::pod_uid_from_logs_directory("plain"),
        PodUid::from("plain")
    );
}
