//! Issue 34 item 2 in the 1.25+ API shape, which the real 1.20 server does not serve: a
//! whole node in cluster mode (on the fake runtime) against the in-process fake API server;
//! a strategic merge patch of the `Pod` on `pods/ephemeralcontainers` (what `kubectl debug`
//! 1.32 sends) reaches the kubelet through its watch, and the debug container shows in the
//! `ephemeralContainerStatuses` of its status PATCH, running, with its image and container ID.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kubelet::NodeBuilder;
use kubelet::cluster::ClusterOptions;
use kubelet_core::testing::FakeRuntime;
use kubelet_core::testing::apiserver::FakeApiServer;
use serde_json::{Value, json};
use tokio::time::timeout;

const NODE: &str = "node-a";
const PATIENCE: Duration = Duration::from_secs(60);
const UA: &str = "kubelet/v0.1.0 (linux/amd64) kubernetes/test";

/// Waits for a status PATCH of pod `web` whose body passes `check`; returns the body.
async fn wait_status(fake: &FakeApiServer, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let entry = timeout(
        PATIENCE,
        fake.journal().wait_for(|e| {
            e.is("patch", "pods/status") && e.name.as_deref() == Some("web") && check(&e.json())
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("no status PATCH of web with {what}"));
    entry.json()
}

#[tokio::test]
async fn a_debug_container_added_in_the_1_25_shape_runs_and_shows_in_the_status()
-> anyhow::Result<()> {
    let fake = FakeApiServer::start().await?;
    fake.create(
        "v1",
        "pods",
        "default",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "busybox:1.36"}]},
        }),
    )?;
    let root = tempfile::tempdir()?;
    let runtime = FakeRuntime::new();
    let mut node = NodeBuilder::new(move |ctx: &kubelet::RuntimeContext| {
        Ok::<_, std::convert::Infallible>(runtime.with_event_recorder(ctx.event_recorder.clone()))
    })
    .node_name(NODE)
    .root_dir(root.path())
    .no_probes()
    .cluster(ClusterOptions::new(fake.kube_config(None, UA)?))
    .build()
    .await?;
    node.spawn().await;
    wait_status(&fake, "phase Running", |b| {
        b["status"]["phase"] == "Running"
    })
    .await;

    let pods: Api<Pod> = Api::namespaced(fake.client(UA)?, "default");
    pods.patch_subresource(
        "ephemeralcontainers",
        "web",
        &PatchParams::default(),
        &Patch::Strategic(json!({
            "apiVersion": "v1", "kind": "Pod",
            "spec": {"ephemeralContainers": [{
                "name": "debugger", "image": "busybox:1.36", "targetContainerName": "app",
                "stdin": true, "tty": true,
            }]},
        })),
    )
    .await?;
    let body = wait_status(&fake, "a running debugger", |b| {
        b["status"]["ephemeralContainerStatuses"][0]["state"]["running"].is_object()
    })
    .await;
    let debugger = &body["status"]["ephemeralContainerStatuses"][0];
    assert_eq!(debugger["name"], "debugger", "{debugger}");
    assert_eq!(debugger["restartCount"], 0, "{debugger}");
    assert!(
        debugger["containerID"]
            .as_str()
            .is_some_and(|id| id.contains("://")),
        "{debugger}"
    );
    // The stored pod has it too (the status PATCH merged by name), and the app is untouched.
    let stored = fake
        .get("v1", "pods", "default", "web")
        .expect("the pod is stored");
    assert_eq!(
        stored["status"]["ephemeralContainerStatuses"][0]["name"],
        "debugger"
    );
    assert_eq!(stored["status"]["containerStatuses"][0]["restartCount"], 0);
    node.stop().await;
    Ok(())
}
