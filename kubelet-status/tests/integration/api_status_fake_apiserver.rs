//! The status syncer against the in-process fake API server, over real HTTP with a real
//! `kube::Client`: the requests a pod's life costs (from the fake's journal), outages, and
//! graceful deletion.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, Pod,
    PodCondition, PodStatus as ApiPodStatus,
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubelet_core::PodUid;
use kubelet_core::pod_manager::PodManager;
use kubelet_core::status::StatusManager;
use kubelet_core::testing::apiserver::FakeApiServer;
use kubelet_status::LocalStatusManager;
use kubelet_status::api::ApiStatusSyncer;
use serde_json::json;

const UA: &str = "kubelet/test";

fn condition(type_: &str, status: &str) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        ..Default::default()
    }
}

fn container(state: ContainerState, ready: bool) -> ContainerStatus {
    ContainerStatus {
        name: "app".into(),
        image: "busybox".into(),
        image_id: String::new(),
        ready,
        state: Some(state),
        ..Default::default()
    }
}

fn pending() -> ApiPodStatus {
    ApiPodStatus {
        phase: Some("Pending".into()),
        host_ip: Some("127.0.0.1".into()),
        conditions: Some(vec![
            condition("Ready", "False"),
            condition("PodScheduled", "True"),
        ]),
        container_statuses: Some(vec![container(
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ContainerCreating".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            false,
        )]),
        ..Default::default()
    }
}

fn running() -> ApiPodStatus {
    ApiPodStatus {
        phase: Some("Running".into()),
        host_ip: Some("127.0.0.1".into()),
        pod_ip: Some("10.88.0.4".into()),
        conditions: Some(vec![
            condition("Ready", "True"),
            condition("PodScheduled", "True"),
        ]),
        container_statuses: Some(vec![container(
            ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            },
            true,
        )]),
        ..Default::default()
    }
}

struct Setup {
    fake: FakeApiServer,
    admin: Api<Pod>,
    pods: PodManager,
    statuses: Arc<LocalStatusManager>,
    syncer: ApiStatusSyncer,
}

async fn setup() -> Setup {
    let fake = FakeApiServer::start().await.expect("fake starts");
    let admin: Api<Pod> = Api::namespaced(fake.client("admin/test").expect("client"), "default");
    let pods = PodManager::new();
    let statuses = Arc::new(LocalStatusManager::new());
    let no_containers = |_: &PodUid| false;
    let syncer = ApiStatusSyncer::new(
        fake.client(UA).expect("client"),
        statuses.clone(),
        pods.clone(),
        Arc::new(pods.clone()),
        Arc::new(no_containers),
    );
    Setup {
        fake,
        admin,
        pods,
        statuses,
        syncer,
    }
}

/// Creates a pod bound to the node and hands the API's copy to the pod manager, as the
/// API watch would.
async fn create(s: &Setup, name: &str) -> Pod {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": "default" },
        "spec": { "nodeName": "node-a", "containers": [{ "name": "app", "image": "busybox" }] },
    }))
    .expect("pod");
    let created = s
        .admin
        .create(&PostParams::default(), &pod)
        .await
        .expect("created");
    s.pods.add_pod(created.clone());
    created
}

fn kubelet_requests(fake: &FakeApiServer) -> Vec<(String, String)> {
    fake.journal()
        .entries()
        .into_iter()
        .filter(|e| e.user_agent.as_deref() == Some(UA))
        .map(|e| (e.verb, e.resource))
        .collect()
}

#[tokio::test]
async fn a_pod_start_costs_two_status_patches_and_nothing_else() {
    let mut s = setup().await;
    let pod = create(&s, "web").await;
    s.statuses.set_pod_status(&pod, pending());
    s.syncer.sync_batch(false).await;
    s.statuses.set_pod_status(&pod, running());
    s.syncer.sync_batch(false).await;
    s.syncer.sync_batch(false).await;
    // (That a resync then writes nothing is shown against the real kube-apiserver in
    // kubelet-bin/tests/status_sync_apiserver.rs: this fake merges `containerStatuses` by
    // name, where the real API replaces that atomic list, so a container's old `waiting`
    // state stays beside its `running` one here.)

    let requests = kubelet_requests(&s.fake);
    let patch = ("patch".to_owned(), "pods/status".to_owned());
    assert_eq!(requests, [patch.clone(), patch], "{requests:?}");
    let status = s
        .admin
        .get("web")
        .await
        .expect("pod")
        .status
        .expect("status");
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.pod_ip.as_deref(), Some("10.88.0.4"));
    assert!(
        status.container_statuses.expect("containers")[0]
            .state
            .as_ref()
            .is_some_and(|s| s.running.is_some())
    );
    let first = s
        .fake
        .journal()
        .entries()
        .into_iter()
        .find(|e| e.user_agent.as_deref() == Some(UA));
    let first = first.expect("a patch");
    assert_eq!(
        first.content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
    assert_eq!(first.json()["metadata"]["uid"], json!(pod.metadata.uid));
}

#[tokio::test]
async fn others_conditions_survive_and_writes_resume_after_an_outage() {
    let mut s = setup().await;
    let pod = create(&s, "web").await;
    let gate =
        json!({ "status": { "conditions": [{ "type": "example.com/gate", "status": "True" }] } });
    s.admin
        .patch_status("web", &PatchParams::default(), &Patch::Strategic(&gate))
        .await
        .expect("gate");

    s.fake.stop_listening();
    s.statuses.set_pod_status(&pod, running());
    let outcome = s.syncer.sync_batch(false).await;
    assert_eq!(outcome.failed, 1, "{outcome:?}");
    assert!(outcome.next_retry.is_some());
    s.fake.start_listening().await.expect("listening again");
    // Still backing off: nothing is sent before the retry time.
    assert_eq!(s.syncer.sync_batch(false).await.backing_off, 1);
    // The backoff (1 s) ends: the tokio clock is moved on rather than slept through (it is
    // paused only for the move, so the HTTP client's own timers run on real time).
    tokio::time::pause();
    tokio::time::advance(std::time::Duration::from_millis(1001)).await;
    tokio::time::resume();
    let outcome = s.syncer.sync_batch(false).await;
    assert_eq!((outcome.synced, outcome.failed), (1, 0), "{outcome:?}");

    let status = s
        .admin
        .get("web")
        .await
        .expect("pod")
        .status
        .expect("status");
    let mut types: Vec<String> = status
        .conditions
        .into_iter()
        .flatten()
        .map(|c| c.type_)
        .collect();
    types.sort();
    assert_eq!(types, ["PodScheduled", "Ready", "example.com/gate"]);
}

#[tokio::test]
async fn a_gracefully_deleted_pod_goes_once_terminal_and_reclaimed() {
    let mut s = setup().await;
    let pod = create(&s, "web").await;
    s.statuses.set_pod_status(&pod, running());
    s.syncer.sync_batch(false).await;

    s.admin
        .delete("web", &DeleteParams::default().grace_period(5))
        .await
        .expect("graceful delete");
    let deleting = s.admin.get("web").await.expect("kept while terminating");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    s.pods.add_pod(deleting.clone());
    s.statuses.terminate_pod(&deleting);
    s.syncer.sync_batch(false).await;
    assert!(
        s.admin.get_opt("web").await.expect("get").is_some(),
        "not reclaimed yet"
    );

    s.statuses.pod_resources_reclaimed(&deleting);
    s.syncer.sync_batch(false).await;
    s.syncer.sync_batch(true).await;
    assert!(s.admin.get_opt("web").await.expect("get").is_none());
    let deletes: Vec<_> = s
        .fake
        .journal()
        .entries()
        .into_iter()
        .filter(|e| e.user_agent.as_deref() == Some(UA) && e.is("delete", "pods"))
        .collect();
    assert_eq!(deletes.len(), 1);
    let body = deletes[0].json();
    assert_eq!(body["gracePeriodSeconds"], 0);
    assert_eq!(body["preconditions"]["uid"], json!(pod.metadata.uid));
}
