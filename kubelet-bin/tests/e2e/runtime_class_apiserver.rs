//! Issue 34 items 1 and 8 with every component real: the `kubelet` binary in cluster mode (as
//! `system:node:it-node`) on a private containerd 1.6 and a real kube-apiserver v1.20.2, which
//! serves `node.k8s.io/v1` RuntimeClasses and copies a class's `overhead` into its pods.
//!
//! - A pod whose RuntimeClass names a handler containerd lacks stays Pending
//!   (`ContainerCreating`) with upstream's `FailedCreatePodSandBox` event carrying containerd's
//!   `no runtime for "<handler>" is configured`, retried; a pod whose class names `runc` (the
//!   testbed's runtime) runs, and its pod cgroup's memory limit includes the class overhead.
//! - A dual-stack `--node-ip` registers two `InternalIP` addresses, the primary first.
//!
//! Skipped when kube-apiserver is not built, unless `KUBELET_REQUIRE_APISERVER` is set (CI).

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::{CgroupCleanup, NODE, Node, get_json, kubectl_create, kubectl_wait, waiting};

const CLASSES: &str = "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: missing-handler\n\
handler: no-such-handler\n---\napiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: plain-runc\n\
handler: runc\noverhead:\n  podFixed:\n    cpu: 50m\n    memory: 64Mi\n";

fn pod(name: &str, class: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  \
         nodeName: {NODE}\n  runtimeClassName: {class}\n  terminationGracePeriodSeconds: 1\n  \
         containers:\n  - name: app\n    image: docker.io/library/busybox:1.36\n    imagePullPolicy: IfNotPresent\n    \
         command: [\"sleep\", \"3600\"]\n    resources:\n      limits: {{cpu: 100m, memory: 32Mi}}\n"
    )
}

fn sandbox_events(cluster: &xtask::apiserver::Cluster, pod: &str) -> Vec<String> {
    let events = get_json(
        cluster,
        &[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={pod},reason=FailedCreatePodSandBox"),
        ],
    );
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            format!(
                "{} x{}",
                e["message"].as_str().unwrap_or_default(),
                e["count"].as_i64().unwrap_or(1)
            )
        })
        .collect()
}

#[test]
fn a_handler_containerd_lacks_keeps_the_pod_pending_and_runc_runs() {
    let Some(cluster) = support::node_cluster() else {
        return;
    };
    let mut cleanup = CgroupCleanup(String::new());
    let mut node = Node::new("runtime-class");
    cleanup.0 = node.cgroup_root.clone();
    support::join_cluster(&cluster, &mut node);
    kubectl_create(&cluster, &node, "classes.yaml", CLASSES);
    kubectl_create(
        &cluster,
        &node,
        "lacking.yaml",
        &pod("lacking", "missing-handler"),
    );
    kubectl_create(
        &cluster,
        &node,
        "runc.yaml",
        &pod("with-runc", "plain-runc"),
    );

    // `runc` is containerd's runtime: the pod runs, with the class overhead in its pod cgroup.
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", "pod/with-runc"],
        60,
    );
    let running = get_json(&cluster, &["get", "pod", "with-runc"]);
    assert_eq!(
        running["spec"]["overhead"]["memory"], "64Mi",
        "the API server's RuntimeClass admission copied the overhead: {running}"
    );
    if support::v1_cgroups() {
        let uid = support::uid(&running);
        let pod_cgroup = format!("{}/kubepods/pod{uid}", node.cgroup_root);
        assert_eq!(
            support::cg_read("memory", &pod_cgroup, "memory.limit_in_bytes"),
            ((32 + 64) << 20).to_string(),
            "the pod cgroup's limit is the container's plus the overhead"
        );
    }

    // The handler containerd lacks: Pending, ContainerCreating, and upstream's event with
    // containerd's refusal, repeated as the sandbox is retried.
    let events = node.wait_for(
        Duration::from_secs(60),
        "FailedCreatePodSandBox retried for the lacking handler",
        |_| {
            let events = sandbox_events(&cluster, "lacking");
            let retried = events.iter().any(|e| !e.ends_with(" x1")) || events.len() > 1;
            retried.then_some(events)
        },
    );
    println!("{events:?}");
    assert!(
        events
            .iter()
            .all(|e| e.starts_with("Failed to create pod sandbox: ")
                && e.contains(r#"no runtime for "no-such-handler" is configured"#)),
        "{events:?}"
    );
    let lacking = get_json(&cluster, &["get", "pod", "lacking"]);
    assert_eq!(lacking["status"]["phase"], "Pending", "{lacking}");
    assert_eq!(
        waiting(&lacking, "app")
            .map(|(reason, _)| reason)
            .as_deref(),
        Some("ContainerCreating"),
        "{lacking}"
    );
    assert_eq!(
        node.runtime_containers(&support::uid(&lacking)),
        Vec::<String>::new()
    );
}

#[test]
fn a_dual_stack_node_ip_is_two_internal_addresses_primary_first() {
    let Some(cluster) = support::node_cluster() else {
        return;
    };
    let mut node = Node::new("dual-stack");
    node.node_ip = "2001:db8::10,192.0.2.10".into();
    support::join_cluster(&cluster, &mut node);
    let n = get_json(&cluster, &["get", "node", NODE]);
    let addresses: Vec<(String, String)> = n["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a: &Value| {
            (
                a["type"].as_str().unwrap_or_default().to_owned(),
                a["address"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        addresses,
        [
            ("InternalIP".to_owned(), "2001:db8::10".to_owned()),
            ("InternalIP".to_owned(), "192.0.2.10".to_owned()),
            ("Hostname".to_owned(), NODE.to_owned()),
        ],
        "{n}"
    );
}
