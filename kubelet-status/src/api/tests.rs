//! Tests of the status syncer against a stateful fake of the three API calls.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, Pod,
    PodCondition, PodSpec, PodStatus as ApiPodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kubelet_core::status::StatusManager;
use kubelet_core::{PodExt, PodUid};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::patch::apply_status_patch;
use super::*;
use crate::LocalStatusManager;
use kubelet_core::pod_manager::PodManager;

#[derive(Clone, Debug)]
struct Call {
    verb: &'static str,
    name: String,
    at: Instant,
    body: Option<Value>,
}

#[derive(Default)]
struct FakeState {
    pods: BTreeMap<String, Pod>,
    resource_version: u64,
    calls: Vec<Call>,
    down: bool,
    refused: BTreeSet<String>,
    dropped: BTreeSet<String>,
}

/// The API's pods in `default`, with UID preconditions, strategic merge of status patches and
/// a switch that fails every call.
#[derive(Default)]
struct FakeApi {
    state: Mutex<FakeState>,
    called: Notify,
}

impl FakeApi {
    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn put(&self, mut pod: Pod) -> Pod {
        let mut s = self.lock();
        s.resource_version += 1;
        pod.metadata.resource_version = Some(s.resource_version.to_string());
        s.pods.insert(pod.name_or_empty().to_owned(), pod.clone());
        pod
    }

    fn pod(&self, name: &str) -> Option<Pod> {
        self.lock().pods.get(name).cloned()
    }

    fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    fn count(&self, verb: &str) -> usize {
        self.lock().calls.iter().filter(|c| c.verb == verb).count()
    }

    fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    fn refuse(&self, name: &str) {
        self.lock().refused.insert(name.to_owned());
    }

    fn drop_field(&self, field: &str) {
        self.lock().dropped.insert(field.to_owned());
    }

    async fn wait_for_calls(&self, n: usize) {
        loop {
            let notified = self.called.notified();
            if self.lock().calls.len() >= n {
                return;
            }
            notified.await;
        }
    }

    fn record(&self, verb: &'static str, name: &str, body: Option<Value>) -> Result<(), Error> {
        let mut s = self.lock();
        s.calls.push(Call {
            verb,
            name: name.to_owned(),
            at: Instant::now(),
            body,
        });
        self.called.notify_waiters();
        if s.down || s.refused.contains(name) {
            let status =
                kube::core::Status::failure("unavailable", "ServiceUnavailable").with_code(503);
            return Err(Error::Api {
                namespace: "default".into(),
                name: name.into(),
                source: kube::Error::Api(status.boxed()),
            });
        }
        Ok(())
    }
}

fn not_found(name: &str) -> Error {
    Error::NotFound {
        namespace: "default".into(),
        name: name.into(),
    }
}

fn conflict(name: &str) -> Error {
    Error::Conflict {
        namespace: "default".into(),
        name: name.into(),
        message: "Precondition failed: UID in precondition".into(),
    }
}

#[async_trait]
impl PodStatusApi for FakeApi {
    async fn get_pod(&self, _namespace: &str, name: &str) -> Result<Option<Pod>, Error> {
        self.record("get", name, None)?;
        Ok(self.pod(name))
    }

    async fn patch_pod_status(
        &self,
        _namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Pod, Error> {
        self.record("patch", name, Some(patch.clone()))?;
        let mut pod = self.pod(name).ok_or_else(|| not_found(name))?;
        if patch["metadata"]["uid"].as_str() != pod.metadata.uid.as_deref() {
            return Err(conflict(name));
        }
        let mut status =
            serde_json::to_value(pod.status.take().unwrap_or_default()).expect("status encodes");
        apply_status_patch(&mut status, &patch["status"]);
        if let Value::Object(map) = &mut status {
            let dropped = self.lock().dropped.clone();
            map.retain(|k, _| !dropped.contains(k));
        }
        pod.status = Some(serde_json::from_value(status).expect("patched status decodes"));
        Ok(self.put(pod))
    }

    async fn delete_pod(&self, _namespace: &str, name: &str, uid: &str) -> Result<(), Error> {
        self.record("delete", name, Some(serde_json::json!({ "uid": uid })))?;
        let pod = self.pod(name).ok_or_else(|| not_found(name))?;
        if pod.metadata.uid.as_deref() != Some(uid) {
            return Err(conflict(name));
        }
        self.lock().pods.remove(name);
        Ok(())
    }
}

fn api_pod(name: &str, uid: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-a".into()),
            containers: vec![k8s_openapi::api::core::v1::Container {
                name: "app".into(),
                image: Some("busybox".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(ApiPodStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        }),
    }
}

fn condition(type_: &str, status: &str) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        ..Default::default()
    }
}

fn container(state: ContainerState) -> ContainerStatus {
    ContainerStatus {
        name: "app".into(),
        image: "busybox".into(),
        image_id: String::new(),
        state: Some(state),
        ..Default::default()
    }
}

fn pending() -> ApiPodStatus {
    ApiPodStatus {
        phase: Some("Pending".into()),
        host_ip: Some("10.0.0.1".into()),
        conditions: Some(vec![
            condition("Ready", "False"),
            condition("PodScheduled", "True"),
        ]),
        container_statuses: Some(vec![container(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ContainerCreating".into()),
                ..Default::default()
            }),
            ..Default::default()
        })]),
        ..Default::default()
    }
}

fn running() -> ApiPodStatus {
    ApiPodStatus {
        phase: Some("Running".into()),
        host_ip: Some("10.0.0.1".into()),
        pod_ip: Some("10.1.0.7".into()),
        conditions: Some(vec![
            condition("Ready", "True"),
            condition("PodScheduled", "True"),
        ]),
        container_statuses: Some(vec![ContainerStatus {
            ready: true,
            ..container(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            })
        }]),
        ..Default::default()
    }
}

fn with_phase(phase: &str) -> ApiPodStatus {
    ApiPodStatus {
        phase: Some(phase.into()),
        ..running()
    }
}

/// A syncer over the fake, a status manager, a pod manager and a switch for whether pods may
/// still run.
struct Harness {
    api: Arc<FakeApi>,
    statuses: Arc<LocalStatusManager>,
    pods: PodManager,
    may_run: Arc<Mutex<HashSet<PodUid>>>,
}

impl Harness {
    fn new() -> Self {
        Self {
            api: Arc::new(FakeApi::default()),
            statuses: Arc::new(LocalStatusManager::new()),
            pods: PodManager::new(),
            may_run: Arc::default(),
        }
    }

    /// The pod in the API and in the pod manager (as the API watch delivers it).
    fn add(&self, pod: Pod) -> Pod {
        let pod = self.api.put(pod);
        self.pods.add_pod(pod.clone());
        pod
    }

    fn syncer(&self) -> ApiStatusSyncer {
        let may_run = self.may_run.clone();
        let safety = move |uid: &PodUid| {
            may_run
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(uid)
        };
        ApiStatusSyncer::with_api(
            self.api.clone(),
            self.statuses.clone(),
            self.pods.clone(),
            Arc::new(self.pods.clone()),
            Arc::new(safety),
        )
    }

    fn api_status(&self, name: &str) -> ApiPodStatus {
        self.api
            .pod(name)
            .and_then(|p| p.status)
            .unwrap_or_default()
    }
}

#[tokio::test]
async fn a_pod_start_costs_two_patches_and_nothing_more() {
    let h = Harness::new();
    let pod = h.add(api_pod("web", "uid-web"));
    let mut syncer = h.syncer();

    h.statuses.set_pod_status(&pod, pending());
    assert_eq!(syncer.sync_batch(false).await.synced, 1);
    h.statuses.set_pod_status(&pod, running());
    assert_eq!(syncer.sync_batch(false).await.synced, 1);
    // Nothing new; the resync finds the API up to date (its copy is the PATCH answer).
    syncer.sync_batch(false).await;
    syncer.sync_batch(true).await;

    assert_eq!(h.api.count("patch"), 2, "{:#?}", h.api.calls());
    assert_eq!(h.api.count("get"), 0);
    let status = h.api_status("web");
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.pod_ip.as_deref(), Some("10.1.0.7"));
    let state = status.container_statuses.expect("containers")[0]
        .state
        .clone();
    assert!(state.is_some_and(|s| s.running.is_some() && s.waiting.is_none()));
    for call in h.api.calls() {
        let body = call.body.expect("patch body");
        assert_eq!(body["metadata"]["uid"], "uid-web");
    }
}

#[tokio::test]
async fn conditions_owned_by_others_are_kept() {
    let h = Harness::new();
    let mut pod = api_pod("web", "uid-web");
    pod.status = Some(ApiPodStatus {
        phase: Some("Pending".into()),
        conditions: Some(vec![condition("example.com/gate", "True")]),
        ..Default::default()
    });
    let pod = h.add(pod);
    h.statuses.set_pod_status(&pod, running());
    let mut syncer = h.syncer();
    syncer.sync_batch(false).await;

    let mut types: Vec<String> = h
        .api_status("web")
        .conditions
        .into_iter()
        .flatten()
        .map(|c| c.type_)
        .collect();
    types.sort();
    assert_eq!(types, ["PodScheduled", "Ready", "example.com/gate"]);
    let patch = h.api.calls()[0].body.clone().expect("body");
    let sent = patch["status"]["conditions"].to_string();
    assert!(!sent.contains("example.com/gate"), "{sent}");
}

#[tokio::test]
async fn a_pod_terminal_in_the_api_never_leaves_its_phase() {
    let h = Harness::new();
    let mut pod = api_pod("job", "uid-job");
    pod.status = Some(ApiPodStatus {
        phase: Some("Failed".into()),
        ..Default::default()
    });
    let pod = h.add(pod);
    h.statuses.set_pod_status(&pod, running());
    h.syncer().sync_batch(false).await;
    let status = h.api_status("job");
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let ready = status
        .conditions
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .expect("ready");
    assert_eq!(ready.status, "False");
}

fn static_pod() -> Pod {
    let mut pod = api_pod("etcd-node-a", "uid-static");
    pod.metadata.annotations = Some(
        [("kubernetes.io/config.source".to_owned(), "file".to_owned())]
            .into_iter()
            .collect(),
    );
    pod
}

#[tokio::test]
async fn a_static_pod_writes_its_mirror_pod_once_there_is_one() {
    let h = Harness::new();
    let local = static_pod();
    h.pods.add_pod(local.clone());
    h.statuses.set_pod_status(&local, running());
    let mut syncer = h.syncer();
    assert_eq!(syncer.sync_batch(false).await, BatchOutcome::default());
    assert!(h.api.calls().is_empty());

    let mut mirror = api_pod("etcd-node-a", "uid-mirror");
    mirror.metadata.annotations = Some(
        [("kubernetes.io/config.mirror".to_owned(), "hash".to_owned())]
            .into_iter()
            .collect(),
    );
    // The API watch delivers the mirror pod to the pod manager.
    h.add(mirror);
    syncer.sync_batch(true).await;
    let calls = h.api.calls();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(calls[0].name, "etcd-node-a");
    let body = calls[0].body.clone().expect("body");
    assert_eq!(body["metadata"]["uid"], "uid-mirror");
    assert_eq!(
        h.api_status("etcd-node-a").phase.as_deref(),
        Some("Running")
    );
}

#[tokio::test]
async fn a_deleted_pod_is_deleted_once_terminal_and_reclaimed() {
    let h = Harness::new();
    let mut pod = api_pod("web", "uid-web");
    pod.metadata.deletion_timestamp = Some(Time(kubelet_core::time::now()));
    pod.metadata.deletion_grace_period_seconds = Some(5);
    let pod = h.add(pod);
    h.may_run.lock().expect("lock").insert(pod.uid());
    let mut syncer = h.syncer();

    // Terminating: containers may still run, so the terminal phase waits.
    h.statuses.set_pod_status(&pod, running());
    syncer.sync_batch(false).await;
    h.statuses.terminate_pod(&pod);
    syncer.sync_batch(false).await;
    assert_eq!(h.api_status("web").phase.as_deref(), Some("Running"));
    assert_eq!(h.api.count("delete"), 0);

    // Containers stopped, but volumes and cgroups are not yet released: terminal, kept.
    h.may_run.lock().expect("lock").clear();
    syncer.sync_batch(true).await;
    assert_eq!(h.api_status("web").phase.as_deref(), Some("Failed"));
    assert_eq!(h.api.count("delete"), 0);

    h.statuses.pod_resources_reclaimed(&pod);
    syncer.sync_batch(false).await;
    syncer.sync_batch(true).await;
    syncer.sync_batch(false).await;
    assert_eq!(h.api.count("delete"), 1, "{:#?}", h.api.calls());
    let delete = h
        .api
        .calls()
        .into_iter()
        .find(|c| c.verb == "delete")
        .expect("delete");
    assert_eq!(delete.body.expect("body")["uid"], "uid-web");
    assert!(h.api.pod("web").is_none());
}

#[tokio::test]
async fn a_pod_not_being_deleted_is_never_deleted() {
    let h = Harness::new();
    let pod = h.add(api_pod("job", "uid-job"));
    h.statuses.set_pod_status(&pod, with_phase("Succeeded"));
    h.statuses.terminate_pod(&pod);
    h.statuses.pod_resources_reclaimed(&pod);
    let mut syncer = h.syncer();
    syncer.sync_batch(false).await;
    syncer.sync_batch(true).await;
    assert_eq!(h.api.count("delete"), 0);
    assert_eq!(h.api_status("job").phase.as_deref(), Some("Succeeded"));
}

#[tokio::test(start_paused = true)]
async fn a_recreated_pod_gets_nothing_of_the_old_one() {
    let h = Harness::new();
    let old = api_pod("web", "uid-old");
    h.pods.add_pod(old.clone());
    h.api.put(api_pod("web", "uid-new"));
    h.statuses.set_pod_status(&old, running());
    let mut syncer = h.syncer();
    assert_eq!(syncer.sync_batch(false).await.failed, 1);
    // The conflict makes the next try (after its backoff) read the pod: another UID, so
    // nothing is written.
    assert_eq!(syncer.sync_batch(false).await.backing_off, 1);
    tokio::time::advance(Duration::from_secs(1)).await;
    let outcome = syncer.sync_batch(false).await;
    assert_eq!((outcome.synced, outcome.failed), (1, 0));
    syncer.sync_batch(false).await;
    let verbs: Vec<&str> = h.api.calls().iter().map(|c| c.verb).collect();
    assert_eq!(verbs, ["patch", "get"]);
    assert_eq!(h.api_status("web").phase.as_deref(), Some("Pending"));
}

#[tokio::test]
async fn a_restarted_kubelet_writes_no_status_that_did_not_change() {
    let h = Harness::new();
    // What the previous kubelet wrote.
    let previous = LocalStatusManager::new();
    let mut pods = Vec::new();
    for i in 0..5 {
        let mut pod = api_pod(&format!("web-{i}"), &format!("uid-{i}"));
        previous.set_pod_status(&pod, running());
        pod.status = previous.pod_status(&pod.uid());
        pods.push(h.add(pod));
    }
    // The new kubelet generates the same statuses from the API's (as generation keeps
    // transition and start times from the pod's status).
    for pod in &pods {
        h.statuses.set_pod_status(pod, running());
    }
    let mut syncer = h.syncer();
    assert_eq!(syncer.sync_batch(false).await.synced, 5);
    syncer.sync_batch(true).await;
    assert!(h.api.calls().is_empty(), "{:#?}", h.api.calls());
}

#[tokio::test]
async fn a_field_the_server_drops_is_learned_and_not_written_again() {
    let h = Harness::new();
    h.api.drop_field("hostIPs");
    let pod = h.add(api_pod("web", "uid-web"));
    let mut status = running();
    status.host_ips = Some(vec![k8s_openapi::api::core::v1::HostIP {
        ip: "10.0.0.1".into(),
    }]);
    h.statuses.set_pod_status(&pod, status);
    let mut syncer = h.syncer();
    syncer.sync_batch(false).await;
    for _ in 0..3 {
        syncer.sync_batch(true).await;
    }
    assert_eq!(h.api.count("patch"), 1, "{:#?}", h.api.calls());
}

fn test_config() -> Config {
    Config {
        resync_interval: Duration::from_secs(60),
        ..Config::default()
    }
}

#[tokio::test(start_paused = true)]
async fn failures_back_off_from_one_to_five_seconds() {
    let h = Harness::new();
    let pod = h.add(api_pod("web", "uid-web"));
    h.api.set_down(true);
    h.statuses.set_pod_status(&pod, running());
    let token = tokio_util::sync::CancellationToken::new();
    let start = Instant::now();
    let task = tokio::spawn(h.syncer().config(test_config()).run(token.clone()));
    h.api.wait_for_calls(6).await;
    // A change while backing off waits for the retry.
    h.statuses.set_pod_status(&pod, pending());
    h.api.set_down(false);
    h.api.wait_for_calls(7).await;
    let offsets: Vec<u64> = h
        .api
        .calls()
        .iter()
        .map(|c| (c.at - start).as_secs())
        .collect();
    assert_eq!(offsets, [0, 1, 3, 7, 12, 17, 22]);
    assert_eq!(h.api_status("web").phase.as_deref(), Some("Pending"));
    token.cancel();
    task.await.expect("syncer stops");
}

#[tokio::test(start_paused = true)]
async fn a_pod_the_server_refuses_does_not_hold_back_the_others() {
    let h = Harness::new();
    let bad = h.add(api_pod("bad", "uid-bad"));
    let good = h.add(api_pod("good", "uid-good"));
    h.api.refuse("bad");
    h.statuses.set_pod_status(&bad, running());
    let token = tokio_util::sync::CancellationToken::new();
    let start = Instant::now();
    let task = tokio::spawn(h.syncer().config(test_config()).run(token.clone()));
    h.api.wait_for_calls(2).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    h.statuses.set_pod_status(&good, running());
    h.api.wait_for_calls(4).await;
    let calls: Vec<(String, u128)> = h
        .api
        .calls()
        .iter()
        .map(|c| (c.name.clone(), (c.at - start).as_millis()))
        .collect();
    let expected = [("bad", 0), ("bad", 1000), ("good", 2500), ("bad", 3000)];
    let expected: Vec<(String, u128)> = expected
        .iter()
        .map(|(n, t)| ((*n).to_owned(), *t))
        .collect();
    assert_eq!(calls, expected);
    assert_eq!(h.api_status("good").phase.as_deref(), Some("Running"));
    token.cancel();
    task.await.expect("syncer stops");
}

#[tokio::test(start_paused = true)]
async fn a_change_is_written_at_once_and_the_resync_reconciles_every_ten_seconds() {
    let h = Harness::new();
    let pod = h.add(api_pod("web", "uid-web"));
    let token = tokio_util::sync::CancellationToken::new();
    let start = Instant::now();
    let task = tokio::spawn(h.syncer().run(token.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    h.statuses.set_pod_status(&pod, running());
    h.api.wait_for_calls(1).await;

    // Someone else turns the status back; the watch delivers it to the pod manager.
    let mut changed = h.api.pod("web").expect("pod");
    changed.status = Some(pending());
    let changed = h.api.put(changed);
    h.pods.add_pod(changed);
    h.api.wait_for_calls(2).await;
    let offsets: Vec<u64> = h
        .api
        .calls()
        .iter()
        .map(|c| (c.at - start).as_secs())
        .collect();
    assert_eq!(offsets, [2, 10]);
    assert_eq!(h.api_status("web").phase.as_deref(), Some("Running"));
    token.cancel();
    task.await.expect("syncer stops");
}

#[test]
fn the_syncer_keeps_only_metadata_and_status_of_a_written_pod() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    let mut pod = api_pod("a", "u1");
    pod.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
    pod.status = Some(running());
    let kept = super::syncer::written_copy(&pod);
    assert_eq!(kept.metadata.managed_fields, None);
    assert_eq!(kept.spec, None);
    assert_eq!(kept.status, pod.status);
    assert_eq!(kept.metadata.uid, pod.metadata.uid);
    assert_eq!(
        kept.metadata.resource_version,
        pod.metadata.resource_version
    );
}
