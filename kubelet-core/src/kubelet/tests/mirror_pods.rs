//! Mirror pods and predicate admission in the assembled kubelet: a static pod gets its
//! mirror pod, which is recreated when deleted or out of date and deleted once orphaned;
//! mirror pods are never run; a pod that does not fit the node fails without reaching the
//! runtime.

use std::collections::BTreeMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Node as ApiNode;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::config::{
    API_SERVER_SOURCE, CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION, ChannelSource,
};
use crate::kubelet::mirror::{self, MirrorClient};
use crate::kubelet::node::{FixedNode, standalone_node};

#[derive(Clone, Debug, PartialEq)]
enum MirrorCall {
    Create(Box<Pod>),
    Delete(String, Option<PodUid>),
}

/// Records the mirror pod calls; every call succeeds.
#[derive(Clone, Default)]
struct FakeMirrorClient {
    calls: Arc<Mutex<Vec<MirrorCall>>>,
}

impl FakeMirrorClient {
    fn calls(&self) -> Vec<MirrorCall> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    fn creates(&self) -> Vec<Pod> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                MirrorCall::Create(p) => Some(*p),
                MirrorCall::Delete(..) => None,
            })
            .collect()
    }

    fn push(&self, call: MirrorCall) {
        if let Ok(mut c) = self.calls.lock() {
            c.push(call);
        }
    }
}

#[async_trait]
impl MirrorClient for FakeMirrorClient {
    async fn create_mirror_pod(&self, mirror_pod: &Pod) -> Result<(), mirror::Error> {
        self.push(MirrorCall::Create(Box::new(mirror_pod.clone())));
        Ok(())
    }

    async fn delete_mirror_pod(
        &self,
        full_name: &str,
        uid: Option<PodUid>,
    ) -> Result<bool, mirror::Error> {
        self.push(MirrorCall::Delete(full_name.to_owned(), uid));
        Ok(true)
    }
}

fn api_node(cpu: &str) -> ApiNode {
    let capacity = [("cpu", cpu), ("memory", "8Gi"), ("pods", "110")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
        .collect();
    let mut node = standalone_node("n1", capacity, BTreeMap::new());
    node.metadata.uid = Some("node-uid".into());
    node
}

fn static_pod(name: &str, hash: &str) -> Pod {
    let mut p = pod(name);
    p.metadata.annotations = Some(BTreeMap::from([(
        CONFIG_HASH_ANNOTATION.to_owned(),
        hash.to_owned(),
    )]));
    p
}

/// The API's copy of `name` with mirror hash `hash` and UID `uid`.
fn mirror(name: &str, hash: &str, uid: &str) -> Pod {
    let mut p = static_pod(name, hash);
    p.metadata.uid = Some(uid.into());
    p.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(CONFIG_MIRROR_ANNOTATION.to_owned(), hash.to_owned());
    p
}

struct Cluster {
    node: Node,
    api: ChannelSourceSender,
    mirrors: FakeMirrorClient,
}

async fn cluster(cpu: &str) -> Cluster {
    let mirrors = FakeMirrorClient::default();
    let (api_source, api) = ChannelSource::new(API_SERVER_SOURCE);
    let client = mirrors.clone();
    let node = node_built(
        Arc::new(crate::probe::NoProbes),
        FakeRuntime::new(),
        move |b| {
            b.source(Box::new(api_source))
                .mirror_client(Arc::new(client))
                .node_provider(Arc::new(FixedNode::new(api_node(cpu))))
        },
    )
    .await;
    Cluster { node, api, mirrors }
}

impl Cluster {
    async fn api_set(&self, pods: Vec<Pod>) {
        self.api.send(Operation::Set, pods).await.expect("running");
    }
}

#[tokio::test(start_paused = true)]
async fn a_static_pods_mirror_is_created_recreated_and_deleted_when_orphaned() {
    let c = cluster("4").await;
    let web = static_pod("web", "h1");
    c.node.send(Operation::Set, vec![web.clone()]).await;
    // A mirror pod without a static pod: never run, deleted by housekeeping.
    let ghost = mirror("ghost", "g1", "ghost-uid");
    c.api_set(vec![ghost.clone()]).await;

    eventually(Duration::from_secs(30), "the mirror pod is created", || {
        !c.mirrors.creates().is_empty()
    })
    .await;
    let created = &c.mirrors.creates()[0];
    assert_eq!(created.annotation(CONFIG_MIRROR_ANNOTATION), Some("h1"));
    assert_eq!(created.metadata.uid, None, "the API server sets the UID");
    let owner = &created.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Node", "n1", "node-uid")
    );
    assert_eq!(owner.controller, Some(true));
    eventually(Duration::from_secs(30), "the orphan is deleted", || {
        c.mirrors
            .calls()
            .contains(&MirrorCall::Delete("ghost_default".into(), None))
    })
    .await;

    // The API has it now: resyncs leave it alone.
    c.api_set(vec![mirror("web", "h1", "m1")]).await;
    tokio::time::sleep(Duration::from_secs(90)).await;
    assert_eq!(c.mirrors.creates().len(), 1);
    assert!(
        !c.mirrors
            .calls()
            .iter()
            .any(|call| matches!(call, MirrorCall::Delete(n, _) if n == "web_default")),
        "{:?}",
        c.mirrors.calls()
    );

    // Deleted in the API: created again.
    c.api_set(vec![]).await;
    eventually(
        Duration::from_secs(30),
        "the mirror pod is recreated",
        || c.mirrors.creates().len() == 2,
    )
    .await;

    // Out of date (another hash): deleted by its UID, then created again.
    c.api_set(vec![mirror("web", "h0", "m2")]).await;
    eventually(
        Duration::from_secs(30),
        "the outdated mirror is replaced",
        || c.mirrors.creates().len() == 3,
    )
    .await;
    assert!(c.mirrors.calls().contains(&MirrorCall::Delete(
        "web_default".into(),
        Some(PodUid::from("m2"))
    )));

    // The manifest goes: once the static pod is gone, its mirror is an orphan.
    c.api_set(vec![mirror("web", "h1", "m3")]).await;
    c.node.send(Operation::Set, vec![]).await;
    eventually(
        Duration::from_secs(60),
        "the orphaned mirror is deleted",
        || {
            c.mirrors
                .calls()
                .contains(&MirrorCall::Delete("web_default".into(), None))
        },
    )
    .await;
    assert!(
        c.node
            .runtime
            .running_pods()
            .iter()
            .all(|p| p.uid != web.uid()),
        "the static pod was killed first"
    );
    let ran_mirrors: Vec<_> = c
        .node
        .runtime
        .calls()
        .into_iter()
        .filter(|call| {
            matches!(call, crate::testing::Call::RunSandbox(u) if ["ghost-uid", "m1", "m2", "m3"].contains(&u.as_str()))
        })
        .collect();
    assert!(
        ran_mirrors.is_empty(),
        "mirror pods are never run: {ran_mirrors:?}"
    );
    c.node.token.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_pod_asking_for_more_cpu_than_allocatable_fails_and_never_runs() {
    let c = cluster("1").await;
    let mut big = pod("big");
    big.spec.as_mut().expect("spec").containers[0].resources =
        Some(k8s_openapi::api::core::v1::ResourceRequirements {
            requests: crate::testing::resource_list(&[("cpu", "2")]),
            ..Default::default()
        });
    let small = pod("small");
    c.api_set(vec![big.clone(), small.clone()]).await;
    c.node.send(Operation::Set, vec![]).await;
    eventually(Duration::from_secs(30), "the small pod runs", || {
        running(&c.node.runtime, &small.uid(), "app").is_some()
    })
    .await;
    let status = c.node.status.pod_status(&big.uid()).expect("status");
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(status.reason.as_deref(), Some("OutOfcpu"));
    assert_eq!(
        status.message.as_deref(),
        Some(
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 0, capacity: 1000"
        )
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        !c.node
            .runtime
            .calls()
            .contains(&crate::testing::Call::RunSandbox(big.uid())),
        "the rejected pod never reaches the runtime"
    );
    c.node.token.cancel();
}
