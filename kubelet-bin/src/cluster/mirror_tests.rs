//! [`KubeMirrorClient`] at the wire, against the scripted API server.

use http::{Method, StatusCode};
use kubelet_core::kubelet::mirror::mirror_pod_of;
use serde_json::json;

use super::*;
use crate::cluster::test_api::{client, status};

fn static_pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": "web-n1", "namespace": "kube-system", "uid": "static-uid",
            "annotations": {"kubernetes.io/config.hash": "h1", "kubernetes.io/config.source": "file"}
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "busybox"}]}
    }))
    .expect("pod")
}

#[tokio::test]
async fn create_posts_the_mirror_pod_owned_by_the_node() {
    let (c, journal) = client(|call| (StatusCode::CREATED, call.body.clone()));
    let mirror = KubeMirrorClient::new(c);
    mirror
        .create_mirror_pod(&mirror_pod_of(&static_pod(), "n1", "node-uid"))
        .await
        .expect("created");
    let calls = journal.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].method, Method::POST);
    assert_eq!(calls[0].path, "/api/v1/namespaces/kube-system/pods");
    let body = &calls[0].body;
    assert_eq!(
        body["metadata"]["annotations"]["kubernetes.io/config.mirror"],
        "h1"
    );
    assert_eq!(
        body["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid", "controller": true}])
    );
    assert!(body["metadata"].get("uid").is_none(), "{body}");
}

#[tokio::test]
async fn an_existing_mirror_pod_is_no_error_but_a_refusal_is() {
    let (c, _) = client(|_| status(StatusCode::CONFLICT, "AlreadyExists"));
    let pod = mirror_pod_of(&static_pod(), "n1", "node-uid");
    KubeMirrorClient::new(c)
        .create_mirror_pod(&pod)
        .await
        .expect("already there");
    let (c, _) = client(|_| status(StatusCode::FORBIDDEN, "Forbidden"));
    let e = KubeMirrorClient::new(c)
        .create_mirror_pod(&pod)
        .await
        .expect_err("forbidden");
    assert!(
        e.to_string()
            .starts_with("create mirror pod web-n1_kube-system: "),
        "{e}"
    );
}

#[tokio::test]
async fn delete_is_immediate_with_the_uid_precondition() {
    let (c, journal) = client(|_| {
        (
            StatusCode::OK,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
        )
    });
    let mirror = KubeMirrorClient::new(c);
    let deleted = mirror
        .delete_mirror_pod("web-n1_kube-system", Some(PodUid::from("m1")))
        .await
        .expect("deleted");
    assert!(deleted);
    let calls = journal.calls();
    assert_eq!(calls[0].method, Method::DELETE);
    assert_eq!(calls[0].path, "/api/v1/namespaces/kube-system/pods/web-n1");
    assert_eq!(calls[0].body["gracePeriodSeconds"], 0);
    assert_eq!(calls[0].body["preconditions"], json!({"uid": "m1"}));

    assert!(
        !mirror
            .delete_mirror_pod("not-a-full-name", None)
            .await
            .expect("nothing to delete")
    );
    assert_eq!(journal.calls().len(), 1, "no request for a bad name");
}

#[tokio::test]
async fn a_missing_pod_or_another_uid_deletes_nothing() {
    for (code, reason) in [
        (StatusCode::NOT_FOUND, "NotFound"),
        (StatusCode::CONFLICT, "Conflict"),
    ] {
        let (c, _) = client(move |_| status(code, reason));
        let deleted = KubeMirrorClient::new(c)
            .delete_mirror_pod("web-n1_kube-system", Some(PodUid::from("old")))
            .await
            .expect("not an error");
        assert!(!deleted, "{reason}");
    }
    let (c, _) = client(|_| status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError"));
    assert!(
        KubeMirrorClient::new(c)
            .delete_mirror_pod("web-n1_kube-system", None)
            .await
            .is_err()
    );
}
