//! [`ContainerStore`]: the in-memory container bookkeeping a simple [`RuntimeService`] needs
//! (what containerd's `pkg/cri/store/container` keeps for the CRI plugin): records created
//! from an [`api::ContainerConfig`], their state machine (created → running → exited), the
//! exit code and reason as CRI runtimes report them, and the `ListContainers` filter.
//!
//! A backend keeps the part only it knows — a process ID, a VM handle — as the record's
//! *handle* `H`, given when the container starts. The store never runs anything: it is
//! thread safe behind a `std::sync::Mutex` that no method holds across an `.await`, and
//! [`ContainerStore::wait_exit`] and [`ContainerStore::stop`] give a `stop_container` the CRI
//! stop sequence over the backend's own signals. [`process`] adds what a backend whose
//! containers are plain host processes needs (spawning a record, exit codes, capped exec).
//!
//! [`RuntimeService`]: super::RuntimeService

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use super::api::{self, ContainerConfig, ContainerFilter, Labels};

pub mod process;
use crate::pod::{PodExt, PodUid};
use crate::runtime::{ContainerState, Error, Result};

/// The reason a CRI runtime reports for a container that exited with `exit_code` on its own:
/// `Completed` for 0, `Error` otherwise (containerd's `unknownExitCode` handling aside).
pub fn exit_reason(exit_code: i32) -> &'static str {
    if exit_code == 0 { "Completed" } else { "Error" }
}

/// One container the store keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerRecord<H = ()> {
    /// Sandbox the container was created in.
    pub sandbox_id: String,
    /// UID of the pod it belongs to (from [`ContainerConfig::pod`]).
    pub pod_uid: PodUid,
    /// Everything `ContainerStatus` reports; `status.id` is the container's ID.
    pub status: api::ContainerStatus,
    /// What to run: [`ContainerConfig::command`] followed by [`ContainerConfig::args`].
    pub argv: Vec<String>,
    /// Environment, in order.
    pub envs: Vec<(String, String)>,
    /// Working directory (empty: the runtime's default).
    pub working_dir: String,
    /// The backend's handle, set by [`ContainerStore::start`].
    pub handle: Option<H>,
}

impl<H> ContainerRecord<H> {
    /// The container's ID.
    pub fn id(&self) -> &str {
        &self.status.id
    }

    /// The record as `ListContainers` returns it.
    pub fn to_container(&self) -> api::Container {
        let s = &self.status;
        api::Container {
            id: s.id.clone(),
            sandbox_id: self.sandbox_id.clone(),
            name: s.name.clone(),
            image: s.image.clone(),
            state: s.state,
            created_at: s.created_at,
            labels: s.labels.clone(),
            annotations: s.annotations.clone(),
        }
    }

    /// `true` when the record passes `filter` (state, and every label of the selector).
    pub fn matches(&self, filter: &ContainerFilter) -> bool {
        filter.state.is_none_or(|state| state == self.status.state)
            && labels_match(&self.status.labels, &filter.label_selector)
    }
}

/// `true` when `labels` carries every key of `selector` with the same value (CRI's
/// `label_selector`).
pub fn labels_match(labels: &Labels, selector: &Labels) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// A signal of the CRI stop sequence ([`ContainerStore::stop`]); the backend delivers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopSignal {
    /// Ask the container to exit (SIGTERM).
    Terminate,
    /// Kill it (SIGKILL).
    Kill,
}

impl StopSignal {
    /// The POSIX signal number (15 or 9).
    pub fn number(self) -> i32 {
        match self {
            StopSignal::Terminate => 15,
            StopSignal::Kill => 9,
        }
    }
}

#[derive(Debug)]
struct Records<H> {
    /// Keyed by ID; IDs end in a fixed-width counter, so key order is creation order.
    by_id: BTreeMap<String, ContainerRecord<H>>,
    next: u64,
}

#[derive(Debug)]
struct Shared<H> {
    records: Mutex<Records<H>>,
    /// Bumped whenever a container stops running or is removed; wakes [`ContainerStore::wait_exit`].
    exits: watch::Sender<u64>,
    /// Distinguishes this store's IDs from an earlier process's.
    id_seed: u64,
}

/// Thread-safe in-memory container records with a backend handle `H` each (see the module
/// docs). Cheap to clone; clones share the records.
#[derive(Debug)]
pub struct ContainerStore<H = ()> {
    shared: Arc<Shared<H>>,
}

impl<H> Clone for ContainerStore<H> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<H: Clone> Default for ContainerStore<H> {
    fn default() -> Self {
        Self::new()
    }
}

impl<H: Clone> ContainerStore<H> {
    /// An empty store.
    pub fn new() -> Self {
        let id_seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Self {
            shared: Arc::new(Shared {
                records: Mutex::new(Records {
                    by_id: BTreeMap::new(),
                    next: 0,
                }),
                exits: watch::Sender::new(0),
                id_seed,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Records<H>> {
        self.shared
            .records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn notify_exit(&self) {
        self.shared.exits.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Records a new container in state `Created` from `config` and returns its generated
    /// ID (32 hex digits). Its log path is `sandbox.log_directory/log_path`.
    pub fn create(&self, sandbox_id: &str, config: &ContainerConfig<'_>) -> String {
        let mut records = self.lock();
        records.next += 1;
        let id = format!("{:016x}{:016x}", self.shared.id_seed, records.next);
        let spec = config.container;
        let log_path = config.sandbox.log_directory.join(&config.log_path);
        let status = api::ContainerStatus {
            id: id.clone(),
            name: spec.name.clone(),
            state: ContainerState::Created,
            created_at: Some(crate::time::now()),
            image: spec.image.clone().unwrap_or_default(),
            image_ref: config.image_ref.to_owned(),
            labels: config.labels.clone(),
            annotations: config.annotations.clone(),
            mounts: config.mounts.clone(),
            log_path: log_path.to_string_lossy().into_owned(),
            ..Default::default()
        };
        let record = ContainerRecord {
            sandbox_id: sandbox_id.to_owned(),
            pod_uid: config.pod.uid(),
            status,
            argv: config.command.iter().chain(&config.args).cloned().collect(),
            envs: config.envs.clone(),
            working_dir: config.working_dir.clone(),
            handle: None,
        };
        records.by_id.insert(id.clone(), record);
        id
    }

    /// [`ContainerStore::create`] for a runtime that applies no mounts (its containers see the
    /// node's filesystem): each mount is recorded with `host_path == container_path`, so
    /// whatever reads a file through the reported mounts (the engine's termination message)
    /// reads where the container wrote it.
    pub fn create_on_host(&self, sandbox_id: &str, config: &ContainerConfig<'_>) -> String {
        let mut config = config.clone();
        for mount in &mut config.mounts {
            mount.host_path = mount.container_path.clone().into();
        }
        self.create(sandbox_id, &config)
    }

    /// Marks a created container running with the backend's `handle`. `NotFound` for an
    /// unknown ID; an error for a container that is not in state `Created`.
    pub fn start(&self, id: &str, handle: H) -> Result<()> {
        let mut records = self.lock();
        let record = records.by_id.get_mut(id).ok_or_else(|| not_found(id))?;
        if record.status.state != ContainerState::Created {
            return Err(Error::Runtime {
                op: "StartContainer",
                message: format!("container {id} is {:?}, not Created", record.status.state),
            });
        }
        record.status.state = ContainerState::Running;
        record.status.started_at = Some(crate::time::now());
        record.handle = Some(handle);
        Ok(())
    }

    /// Records that a created or running container exited with `exit_code`, with the reason
    /// a CRI runtime gives ([`exit_reason`]). Returns `false` (and changes nothing) when the
    /// container is unknown or already exited.
    pub fn mark_exited(&self, id: &str, exit_code: i32) -> bool {
        self.mark_exited_with(id, exit_code, exit_reason(exit_code), "")
    }

    /// [`ContainerStore::mark_exited`] with an explicit reason and message (e.g. `OOMKilled`).
    pub fn mark_exited_with(&self, id: &str, exit_code: i32, reason: &str, message: &str) -> bool {
        {
            let mut records = self.lock();
            let Some(record) = records.by_id.get_mut(id) else {
                return false;
            };
            let status = &mut record.status;
            if status.state == ContainerState::Exited {
                return false;
            }
            status.state = ContainerState::Exited;
            status.exit_code = exit_code;
            status.reason = reason.to_owned();
            status.message = message.to_owned();
            status.finished_at = Some(crate::time::now());
        }
        self.notify_exit();
        true
    }

    /// Forgets a container; returns its record, or `None` when it was unknown.
    pub fn remove(&self, id: &str) -> Option<ContainerRecord<H>> {
        let removed = self.lock().by_id.remove(id);
        if removed.is_some() {
            self.notify_exit();
        }
        removed
    }

    /// A copy of one record.
    pub fn get(&self, id: &str) -> Option<ContainerRecord<H>> {
        self.lock().by_id.get(id).cloned()
    }

    /// A copy of one record; `NotFound` for an unknown ID.
    pub fn record(&self, id: &str) -> Result<ContainerRecord<H>> {
        self.get(id).ok_or_else(|| not_found(id))
    }

    /// Copies of every record, oldest first.
    pub fn records(&self) -> Vec<ContainerRecord<H>> {
        self.lock().by_id.values().cloned().collect()
    }

    /// The containers matching `filter`, oldest first (`ListContainers`).
    pub fn list(&self, filter: &ContainerFilter) -> Vec<api::Container> {
        self.lock()
            .by_id
            .values()
            .filter(|r| r.matches(filter))
            .map(ContainerRecord::to_container)
            .collect()
    }

    /// One container's status (`ContainerStatus`); `NotFound` for an unknown ID.
    pub fn status(&self, id: &str) -> Result<api::ContainerStatus> {
        self.lock()
            .by_id
            .get(id)
            .map(|r| r.status.clone())
            .ok_or_else(|| not_found(id))
    }

    /// The handle of a running container; `None` when it is not running; `NotFound` for an
    /// unknown ID.
    pub fn running_handle(&self, id: &str) -> Result<Option<H>> {
        let records = self.lock();
        let record = records.by_id.get(id).ok_or_else(|| not_found(id))?;
        Ok(match record.status.state {
            ContainerState::Running => record.handle.clone(),
            _ => None,
        })
    }

    /// Waits until container `id` is no longer running (exited, never started, or removed),
    /// at most `timeout` (`None`: no limit). Returns `false` when the timeout passed first.
    pub async fn wait_exit(&self, id: &str, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        // Subscribing before checking means no exit recorded after the check is missed.
        let mut exits = self.shared.exits.subscribe();
        while self.is_running(id) {
            let changed = match deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, exits.changed()).await {
                    Ok(changed) => changed,
                    Err(_elapsed) => return !self.is_running(id),
                },
                None => exits.changed().await,
            };
            // The sender lives as long as `self`; an error cannot happen, but must not spin.
            if changed.is_err() {
                return !self.is_running(id);
            }
        }
        true
    }

    /// CRI `StopContainer` over the backend's `signal`: for a running container,
    /// [`StopSignal::Terminate`], a wait of at most `timeout_seconds` for its exit, then
    /// [`StopSignal::Kill`] (also after a timely exit, for whatever the process left behind,
    /// e.g. the rest of its process group) and a wait for the exit. Stopping a container that
    /// is not running succeeds at once; `NotFound` for an unknown ID.
    pub async fn stop(
        &self,
        id: &str,
        timeout_seconds: i64,
        signal: impl Fn(&H, StopSignal),
    ) -> Result<()> {
        let Some(handle) = self.running_handle(id)? else {
            return Ok(());
        };
        signal(&handle, StopSignal::Terminate);
        let grace = Duration::from_secs(timeout_seconds.max(0).unsigned_abs());
        self.wait_exit(id, Some(grace)).await;
        signal(&handle, StopSignal::Kill);
        self.wait_exit(id, None).await;
        Ok(())
    }

    fn is_running(&self, id: &str) -> bool {
        self.lock()
            .by_id
            .get(id)
            .is_some_and(|r| r.status.state == ContainerState::Running)
    }
}

fn not_found(id: &str) -> Error {
    Error::NotFound(format!("container {id}"))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use k8s_openapi::api::core::v1::{Container as ContainerSpec, Pod};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::kuberuntime::api::{ContainerType, PodSandboxConfig};
    use crate::runtime::Mount;

    pub(super) fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    pub(super) fn sandbox(pod: &Pod) -> PodSandboxConfig<'_> {
        PodSandboxConfig {
            pod,
            attempt: 0,
            hostname: "web".into(),
            dns: Default::default(),
            log_directory: PathBuf::from("/var/log/pods/default_web_uid-1"),
            cgroup_parent: String::new(),
            labels: Labels::new(),
            annotations: Labels::new(),
            runtime_handler: String::new(),
        }
    }

    pub(super) fn config<'a>(
        pod: &'a Pod,
        spec: &'a ContainerSpec,
        sandbox: &'a PodSandboxConfig<'a>,
    ) -> ContainerConfig<'a> {
        ContainerConfig {
            pod,
            container: spec,
            container_type: ContainerType::Regular,
            attempt: 0,
            image_ref: "sha256:abc",
            image_user: None,
            command: vec!["sh".into(), "-c".into()],
            args: vec!["exit 3".into()],
            envs: vec![("A".into(), "1".into())],
            mounts: vec![Mount {
                host_path: "/data".into(),
                container_path: "/data".into(),
                ..Default::default()
            }],
            working_dir: "/tmp".into(),
            log_path: PathBuf::from(format!("{}/0.log", spec.name)),
            labels: Labels::from([("app".into(), spec.name.clone())]),
            annotations: Labels::from([("note".into(), "x".into())]),
            sandbox,
            target_container_id: None,
        }
    }

    pub(super) fn spec(name: &str) -> ContainerSpec {
        ContainerSpec {
            name: name.into(),
            image: Some("busybox".into()),
            ..Default::default()
        }
    }

    fn create(store: &ContainerStore<u32>, name: &str) -> String {
        let pod = pod();
        let sandbox = sandbox(&pod);
        let spec = spec(name);
        store.create("sb-1", &config(&pod, &spec, &sandbox))
    }

    #[test]
    fn create_records_the_config_in_state_created() {
        let store = ContainerStore::<u32>::new();
        let id = create(&store, "app");
        let record = store.get(&id).expect("just created");
        assert_eq!(record.id(), id);
        assert_eq!(record.sandbox_id, "sb-1");
        assert_eq!(record.pod_uid, PodUid("uid-1".into()));
        assert_eq!(record.argv, ["sh", "-c", "exit 3"]);
        assert_eq!(record.envs, [("A".to_owned(), "1".to_owned())]);
        assert_eq!(record.working_dir, "/tmp");
        assert_eq!(record.handle, None);
        let status = store.status(&id).expect("known");
        assert_eq!(status.name, "app");
        assert_eq!(status.state, ContainerState::Created);
        assert_eq!(status.image, "busybox");
        assert_eq!(status.image_ref, "sha256:abc");
        assert_eq!(status.labels["app"], "app");
        assert_eq!(status.annotations["note"], "x");
        assert_eq!(status.mounts.len(), 1);
        assert_eq!(status.log_path, "/var/log/pods/default_web_uid-1/app/0.log");
        assert!(status.created_at.is_some());
        assert!(status.started_at.is_none());
    }

    #[test]
    fn ids_are_unique_and_listed_in_creation_order() {
        let store = ContainerStore::<u32>::new();
        let ids: Vec<String> = (0..12).map(|i| create(&store, &format!("c{i}"))).collect();
        let listed: Vec<String> = store
            .list(&ContainerFilter::default())
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(listed, ids);
        assert_eq!(store.records().len(), 12);
    }

    #[test]
    fn start_then_exit_follows_the_cri_state_machine() {
        let store = ContainerStore::<u32>::new();
        let id = create(&store, "app");
        assert_eq!(store.running_handle(&id).expect("known"), None);
        store.start(&id, 42).expect("created container starts");
        assert!(
            store.start(&id, 43).is_err(),
            "a running container cannot start again"
        );
        assert_eq!(store.running_handle(&id).expect("known"), Some(42));
        let status = store.status(&id).expect("known");
        assert_eq!(status.state, ContainerState::Running);
        assert!(status.started_at.is_some());

        assert!(store.mark_exited(&id, 3));
        assert!(!store.mark_exited(&id, 0), "the first exit is kept");
        let status = store.status(&id).expect("known");
        assert_eq!(status.state, ContainerState::Exited);
        assert_eq!(status.exit_code, 3);
        assert_eq!(status.reason, "Error");
        assert!(status.finished_at.is_some());
        assert_eq!(store.running_handle(&id).expect("known"), None);
    }

    #[test]
    fn exit_reasons_are_those_cri_runtimes_report() {
        let store = ContainerStore::<()>::new();
        let pod = pod();
        let sandbox = sandbox(&pod);
        let spec = spec("app");
        let ok = store.create("sb", &config(&pod, &spec, &sandbox));
        let oom = store.create("sb", &config(&pod, &spec, &sandbox));
        store.start(&ok, ()).expect("created");
        assert!(store.mark_exited(&ok, 0));
        assert_eq!(store.status(&ok).expect("known").reason, "Completed");
        assert!(store.mark_exited_with(&oom, 137, "OOMKilled", "out of memory"));
        let status = store.status(&oom).expect("known");
        assert_eq!(
            (status.reason.as_str(), status.message.as_str()),
            ("OOMKilled", "out of memory")
        );
    }

    #[test]
    fn unknown_ids_are_not_found() {
        let store = ContainerStore::<u32>::new();
        assert!(matches!(store.status("nope"), Err(Error::NotFound(_))));
        assert!(matches!(store.start("nope", 1), Err(Error::NotFound(_))));
        assert!(matches!(
            store.running_handle("nope"),
            Err(Error::NotFound(_))
        ));
        assert!(!store.mark_exited("nope", 1));
        assert!(store.remove("nope").is_none());
    }

    #[test]
    fn remove_forgets_the_container() {
        let store = ContainerStore::<u32>::new();
        let id = create(&store, "app");
        let removed = store.remove(&id).expect("known");
        assert_eq!(removed.status.name, "app");
        assert!(store.get(&id).is_none());
        assert!(store.list(&ContainerFilter::default()).is_empty());
    }

    #[test]
    fn list_filters_by_state_and_label_selector() {
        let store = ContainerStore::<u32>::new();
        let a = create(&store, "a");
        let b = create(&store, "b");
        store.start(&a, 1).expect("created");
        let ids = |filter: ContainerFilter| -> Vec<String> {
            store.list(&filter).into_iter().map(|c| c.id).collect()
        };
        assert_eq!(
            ids(ContainerFilter {
                state: Some(ContainerState::Running),
                ..Default::default()
            }),
            [a]
        );
        assert_eq!(
            ids(ContainerFilter {
                label_selector: Labels::from([("app".into(), "b".into())]),
                ..Default::default()
            }),
            [b]
        );
        assert!(
            ids(ContainerFilter {
                state: Some(ContainerState::Running),
                label_selector: Labels::from([("app".into(), "b".into())]),
            })
            .is_empty()
        );
        let listed = store.list(&ContainerFilter::default());
        assert_eq!(listed[0].sandbox_id, "sb-1");
        assert_eq!(listed[0].name, "a");
        assert_eq!(listed[1].state, ContainerState::Created);
    }

    #[tokio::test(start_paused = true)]
    async fn wait_exit_returns_when_the_exit_is_recorded() {
        let store = ContainerStore::<u32>::new();
        let id = create(&store, "app");
        assert!(
            store.wait_exit(&id, Some(Duration::ZERO)).await,
            "created is not running"
        );
        store.start(&id, 1).expect("created");
        let waiter = tokio::spawn({
            let (store, id) = (store.clone(), id.clone());
            async move { store.wait_exit(&id, None).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert!(store.mark_exited(&id, 0));
        assert!(waiter.await.expect("waiter"));
    }

    #[tokio::test(start_paused = true)]
    async fn wait_exit_gives_up_after_the_timeout() {
        let store = ContainerStore::<u32>::new();
        let id = create(&store, "app");
        store.start(&id, 1).expect("created");
        let started = tokio::time::Instant::now();
        assert!(!store.wait_exit(&id, Some(Duration::from_secs(5))).await);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn wait_exit_returns_when_the_container_is_removed() {
        let store = ContainerStore::<u32>::new();
        let id = create(&store, "app");
        store.start(&id, 1).expect("created");
        let waiter = tokio::spawn({
            let (store, id) = (store.clone(), id.clone());
            async move { store.wait_exit(&id, Some(Duration::from_secs(60))).await }
        });
        tokio::task::yield_now().await;
        store.remove(&id);
        assert!(waiter.await.expect("waiter"));
    }

    /// Signals as `stop` sends them, with the (paused) time since the test began.
    type SignalLog = Arc<Mutex<Vec<(StopSignal, Duration)>>>;

    fn recorder(
        store: &ContainerStore<u32>,
        id: &str,
        exits_on: StopSignal,
    ) -> (SignalLog, impl Fn(&u32, StopSignal) + use<>) {
        let log = SignalLog::default();
        let (store, id, log2) = (store.clone(), id.to_owned(), Arc::clone(&log));
        let began = tokio::time::Instant::now();
        let signal = move |handle: &u32, signal: StopSignal| {
            assert_eq!(*handle, 7, "the handle given at start");
            log2.lock().expect("log").push((signal, began.elapsed()));
            if signal == exits_on {
                store.mark_exited(&id, 128 + signal.number());
            }
        };
        (log, signal)
    }

    #[tokio::test(start_paused = true)]
    async fn stop_kills_a_container_that_outlives_the_grace_period() {
        let store = ContainerStore::<u32>::new();
        let id = create(&store, "app");
        store.start(&id, 7).expect("created");
        let (log, signal) = recorder(&store, &id, StopSignal::Kill);
        store.stop(&id, 30, signal).await.expect("stops");
        assert_eq!(
            *log.lock().expect("log"),
            [
                (StopSignal::Terminate, Duration::ZERO),
                (StopSignal::Kill, Duration::from_secs(30))
            ]
        );
        let status = store.status(&id).expect("known");
        assert_eq!((status.exit_code, status.reason.as_str()), (137, "Error"));
    }

    #[tokio::test(start_paused = true)]
    async fn stop_does_not_wait_for_a_container_that_exits_on_terminate() {
        let store = ContainerStore::<u32>::new();
        let id = create(&store, "app");
        store.start(&id, 7).expect("created");
        let (log, signal) = recorder(&store, &id, StopSignal::Terminate);
        store.stop(&id, 30, signal).await.expect("stops");
        assert_eq!(
            *log.lock().expect("log"),
            [
                (StopSignal::Terminate, Duration::ZERO),
                (StopSignal::Kill, Duration::ZERO)
            ],
            "Kill follows at once, for what the process left behind"
        );
        assert_eq!(store.status(&id).expect("known").exit_code, 143);
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_a_container_that_is_not_running_sends_nothing() {
        let store = ContainerStore::<u32>::new();
        let id = create(&store, "app");
        let (log, signal) = recorder(&store, &id, StopSignal::Kill);
        store
            .stop(&id, 30, &signal)
            .await
            .expect("created: nothing to stop");
        store.start(&id, 7).expect("created");
        store.mark_exited(&id, 0);
        store
            .stop(&id, 30, &signal)
            .await
            .expect("exited: nothing to stop");
        assert!(log.lock().expect("log").is_empty());
        assert!(matches!(
            store.stop("nope", 30, &signal).await,
            Err(Error::NotFound(_))
        ));
    }

    #[test]
    fn create_on_host_reports_mounts_at_their_container_path() {
        let store = ContainerStore::<u32>::new();
        let pod = pod();
        let sandbox = sandbox(&pod);
        let spec = spec("app");
        let mut config = config(&pod, &spec, &sandbox);
        config.mounts[0].host_path = "/var/lib/kubelet/pods/uid-1/containers/app/x".into();
        config.mounts[0].container_path = "/dev/termination-log".into();
        let id = store.create_on_host("sb", &config);
        let mounts = store.status(&id).expect("known").mounts;
        assert_eq!(mounts[0].host_path, PathBuf::from("/dev/termination-log"));
        assert_eq!(mounts[0].container_path, "/dev/termination-log");
    }
}
