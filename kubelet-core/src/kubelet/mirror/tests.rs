//! Tests of mirror pod construction and reconciliation (upstream `mirror_client_test.go`,
//! `TestSyncPodsDeletesWhenSourcesAreReadyPerQOS`-style mirror cases of `kubelet_test.go`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::config::CONFIG_SOURCE_ANNOTATION;
use crate::kubelet::node::FixedNode;
use crate::testing::pod;

fn static_pod(hash: &str) -> Pod {
    let mut p = pod("web");
    p.metadata.annotations = Some(BTreeMap::from([
        (CONFIG_HASH_ANNOTATION.to_owned(), hash.to_owned()),
        (CONFIG_SOURCE_ANNOTATION.to_owned(), "file".to_owned()),
    ]));
    p
}

fn node(uid: Option<&str>) -> FixedNode {
    let mut n = Node::default();
    n.metadata.name = Some("n1".into());
    n.metadata.uid = uid.map(str::to_owned);
    FixedNode::new(n)
}

#[test]
fn the_mirror_pod_carries_the_hash_and_the_node_as_owner() {
    let mut s = static_pod("h1");
    s.metadata.resource_version = Some("7".into());
    let m = mirror_pod_of(&s, "n1", "node-uid");
    assert_eq!(m.annotation(CONFIG_MIRROR_ANNOTATION), Some("h1"));
    assert_eq!(m.annotation(CONFIG_HASH_ANNOTATION), Some("h1"));
    assert_eq!(m.metadata.uid, None);
    assert_eq!(m.metadata.resource_version, None);
    let owners = m.metadata.owner_references.as_deref().expect("owners");
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].api_version, "v1");
    assert_eq!(owners[0].uid, "node-uid");
    assert!(crate::pod::is_mirror_pod(&m));
    assert!(is_mirror_pod_of(&m, &s));
    assert!(!is_mirror_pod_of(&m, &static_pod("h2")));
    let mut other = s.clone();
    other.metadata.name = Some("db".into());
    assert!(!is_mirror_pod_of(&m, &other));
    assert!(!is_mirror_pod_of(&s, &s), "no mirror annotation");
}

#[tokio::test]
async fn a_missing_mirror_is_created_only_for_a_registered_node() {
    let s = static_pod("h1");
    let mut client = MockMirrorClient::new();
    client
        .expect_create_mirror_pod()
        .withf(|m| m.annotation(CONFIG_MIRROR_ANNOTATION) == Some("h1"))
        .times(1)
        .returning(|_| Ok(()));
    reconcile(&client, &node(Some("node-uid")), &s, None).await;

    // No UID (a node the kubelet made up) or a node being deleted: nothing is created.
    let mut client = MockMirrorClient::new();
    client.expect_create_mirror_pod().never();
    reconcile(&client, &node(None), &s, None).await;
    let mut deleted = node(Some("node-uid")).node().as_ref().clone();
    deleted.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    reconcile(&client, &FixedNode::new(deleted), &s, None).await;

    // Not a static pod: nothing to mirror.
    reconcile(&client, &node(Some("node-uid")), &pod("api"), None).await;
}

#[tokio::test]
async fn a_matching_mirror_is_left_alone_and_a_stale_one_replaced() {
    let s = static_pod("h1");
    let mut current = mirror_pod_of(&s, "n1", "node-uid");
    current.metadata.uid = Some("m1".into());
    let mut client = MockMirrorClient::new();
    client.expect_create_mirror_pod().never();
    client.expect_delete_mirror_pod().never();
    reconcile(&client, &node(Some("node-uid")), &s, Some(&current)).await;

    let stale = {
        let mut m = mirror_pod_of(&static_pod("h0"), "n1", "node-uid");
        m.metadata.uid = Some("m0".into());
        m
    };
    let mut client = MockMirrorClient::new();
    client
        .expect_delete_mirror_pod()
        .withf(|name, uid| name == "web_default" && uid.as_ref().map(PodUid::as_str) == Some("m0"))
        .times(1)
        .returning(|_, _| Ok(true));
    client
        .expect_create_mirror_pod()
        .times(1)
        .returning(|_| Ok(()));
    reconcile(&client, &node(Some("node-uid")), &s, Some(&stale)).await;

    // The delete found nothing to delete (another UID by now): no create this time.
    let mut client = MockMirrorClient::new();
    client
        .expect_delete_mirror_pod()
        .times(1)
        .returning(|_, _| Ok(false));
    client.expect_create_mirror_pod().never();
    reconcile(&client, &node(Some("node-uid")), &s, Some(&stale)).await;
}

#[tokio::test]
async fn orphans_are_deleted_unless_their_static_pod_terminates() {
    let mut client = MockMirrorClient::new();
    client
        .expect_delete_mirror_pod()
        .withf(|name, uid| name == "a_default" && uid.is_none())
        .times(1)
        .returning(|_, _| Ok(true));
    let client: Arc<dyn MirrorClient> = Arc::new(client);
    delete_orphans(
        &client,
        vec!["a_default".into(), "b_default".into()],
        |name| name == "b_default",
    )
    .await;
}
