use std::collections::BTreeMap;
use std::sync::Arc;

use kubelet_core::cache::PodCache;
use kubelet_core::kubelet::RuntimeState;
use kubelet_core::testing::{CollectingRecorder, FakePleg, FakeRuntime};
use serde_json::json;

use super::super::test_api::FakeNodeApi;
use super::*;

struct Harness {
    api: FakeNodeApi,
    runtime: Arc<FakeRuntime>,
    state: RuntimeState,
    events: CollectingRecorder,
    handle: NodeStatusHandle,
    token: CancellationToken,
}

fn machine() -> MachineInfo {
    MachineInfo {
        num_cores: 2,
        memory_bytes: 4 << 30,
        hugepages: BTreeMap::new(),
        root_fs_bytes: Some(50 << 30),
        machine_id: "mid".to_owned(),
        system_uuid: "uuid".to_owned(),
        boot_id: "boot".to_owned(),
        kernel_version: "6.1.0".to_owned(),
        os_image: "Debian".to_owned(),
    }
}

fn start(api: FakeNodeApi) -> Harness {
    let runtime = Arc::new(FakeRuntime::new());
    let state = RuntimeState::new(Arc::new(FakePleg::new(runtime.clone(), PodCache::new())));
    let events = CollectingRecorder::default();
    let inputs = NodeStatusInputs::new(runtime.clone(), state.clone())
        .events(Arc::new(events.clone()))
        .machine_info(machine());
    let mut opts = NodeStatusOptions::new("node-a");
    opts.node_ips = vec![std::net::Ipv4Addr::new(10, 0, 0, 5).into()];
    let token = CancellationToken::new();
    let tracker = TaskTracker::new();
    let handle = spawn(api.client(), opts, inputs, &tracker, token.clone());
    Harness {
        api,
        runtime,
        state,
        events,
        handle,
        token,
    }
}

impl Harness {
    /// Keeps the runtime state fresh as the kubelet's runtime status loop does.
    async fn runtime_up(&self) {
        self.state.update(self.runtime.as_ref()).await;
        tokio::spawn(self.state.clone().run(
            self.runtime.clone(),
            Duration::from_secs(5),
            self.token.clone(),
        ));
    }

    async fn wait_for(&self, f: impl Fn(&Node) -> bool) -> Arc<Node> {
        let mut rx = self.handle.node();
        let node = rx
            .wait_for(|n| n.as_deref().is_some_and(&f))
            .await
            .map(|n| n.clone());
        node.ok().flatten().unwrap_or_default()
    }

    fn stored_ready(&self) -> Option<String> {
        let node = self.api.node()?;
        node["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")
            .and_then(|c| c["status"].as_str().map(str::to_owned))
    }
}

#[tokio::test(start_paused = true)]
async fn registers_not_ready_then_reports_ready_fast() {
    let h = start(FakeNodeApi::default());
    h.wait_for(|_| true).await;
    assert_eq!(h.api.count("POST", "/api/v1/nodes"), 1);
    assert_eq!(h.stored_ready().as_deref(), Some("False"));
    let created = h.api.node().unwrap_or_default();
    assert_eq!(
        created["metadata"]["labels"]["kubernetes.io/hostname"],
        "node-a"
    );
    assert_eq!(created["status"]["capacity"]["cpu"], "2");
    assert_eq!(
        created["status"]["nodeInfo"]["containerRuntimeVersion"],
        "fake://0.1.0"
    );

    let before = tokio::time::Instant::now();
    h.runtime_up().await;
    h.wait_for(is_ready).await;
    assert!(
        before.elapsed() <= FAST_STATUS_PERIOD * 2,
        "{:?}",
        before.elapsed()
    );
    assert_eq!(h.stored_ready().as_deref(), Some("True"));
    assert!(
        h.events
            .has("NodeReady", "Node node-a status is now: NodeReady")
    );
    h.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn unchanged_status_is_written_only_every_report_frequency() {
    let h = start(FakeNodeApi::default());
    h.runtime_up().await;
    h.wait_for(is_ready).await;
    // Let the fast phase end, then count over ten minutes of 10 s rounds.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (gets, patches) = (
        h.api.count("GET", "/nodes/node-a"),
        h.api.count("PATCH", "/nodes/node-a/status"),
    );
    tokio::time::sleep(Duration::from_secs(600)).await;
    let gets = h.api.count("GET", "/nodes/node-a") - gets;
    let patches = h.api.count("PATCH", "/nodes/node-a/status") - patches;
    assert!((59..=61).contains(&gets), "{gets} rounds");
    assert_eq!(patches, 2, "one write per 5 minutes");
    let first_get = h
        .api
        .journal()
        .into_iter()
        .find(|c| c.method == "GET")
        .map(|c| c.query)
        .unwrap_or_default();
    assert!(first_get.contains("resourceVersion=0"), "{first_get}");
    h.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn adopts_an_existing_node_and_keeps_foreign_labels() {
    let api = FakeNodeApi::default();
    api.set_node(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-a", "uid": "u0", "labels": {
            "kubernetes.io/hostname": "old", "team": "ops"}},
        "status": {"conditions": [{"type": "NetworkUnavailable", "status": "False"}]},
    }));
    let h = start(api);
    h.runtime_up().await;
    h.wait_for(is_ready).await;
    let node = h.api.node().unwrap_or_default();
    assert_eq!(
        node["metadata"]["labels"]["kubernetes.io/hostname"],
        "node-a"
    );
    assert_eq!(node["metadata"]["labels"]["team"], "ops");
    assert_eq!(node["metadata"]["uid"], "u0");
    let merge = h
        .api
        .journal()
        .into_iter()
        .find(|c| c.method == "PATCH" && c.path == "/api/v1/nodes/node-a");
    assert!(merge.is_some_and(|c| c.body["metadata"]["labels"].get("team").is_none()));
    let conditions = node["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(conditions.iter().any(|c| c["type"] == "NetworkUnavailable"));
    h.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn registration_and_updates_retry_after_failures() {
    let api = FakeNodeApi::default();
    api.fail_next(3);
    let h = start(api);
    h.wait_for(|_| true).await;
    assert_eq!(h.api.count("POST", "/api/v1/nodes"), 4);
    h.runtime_up().await;
    h.wait_for(is_ready).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // A whole round fails (5 tries); the next one writes again.
    let gets = h.api.count("GET", "/nodes/node-a");
    h.api.fail_next(NODE_STATUS_UPDATE_RETRY);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        h.api.count("GET", "/nodes/node-a") - gets,
        NODE_STATUS_UPDATE_RETRY
    );

    // A deleted Node is registered again.
    h.api.delete_node();
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert_eq!(h.api.count("POST", "/api/v1/nodes"), 5);
    assert!(h.api.node().is_some());
    h.token.cancel();
}
