//! [`ApiTokenSource`]: the TokenRequest at the wire (fake API server journal), 404 as `None`,
//! retries of transient failures on a paused clock, and no retry of a refusal.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::StatusCode;
use kubelet_core::testing::apiserver::{FakeApiServer, Fault, RequestFilter};
use serde_json::json;

use super::*;
use crate::cluster::test_api::{client, status};

fn request() -> TokenRequest {
    TokenRequest {
        namespace: "ns".into(),
        service_account: "sa".into(),
        audience: String::new(),
        expiration_seconds: 3607,
        pod_name: "web".into(),
        pod_uid: "uid-web".into(),
    }
}

fn pod() -> serde_json::Value {
    json!({"metadata": {"name": "web", "namespace": "ns", "uid": "uid-web"},
           "spec": {"nodeName": "n1", "serviceAccountName": "sa",
                    "containers": [{"name": "c", "image": "busybox"}]}})
}

async fn fake() -> FakeApiServer {
    let fake = FakeApiServer::start().await.expect("fake API server");
    fake.create("v1", "namespaces", "", json!({"metadata": {"name": "ns"}}))
        .expect("namespace");
    fake.create(
        "v1",
        "serviceaccounts",
        "ns",
        json!({"metadata": {"name": "sa"}}),
    )
    .expect("service account");
    fake
}

#[tokio::test]
async fn a_token_request_is_bound_to_the_pod_and_carries_the_lifetime() {
    let fake = fake().await;
    let stored = fake.create("v1", "pods", "ns", pod()).expect("pod");
    let uid = stored["metadata"]["uid"].as_str().expect("uid").to_owned();
    let source = ApiTokenSource::new(fake.client("kubelet-test").expect("client"));
    let mut r = request();
    r.pod_uid = uid.clone();
    let before = SystemTime::now();
    let token = source
        .service_account_token(&r)
        .await
        .expect("token")
        .expect("service account exists");
    assert!(token.token.starts_with("fake-sa-token.ns.sa."), "{token:?}");
    assert_eq!(token.expiration_seconds, Some(3607));
    let expiration = token.expiration.expect("expirationTimestamp");
    let left = expiration.duration_since(before).expect("in the future");
    assert!(
        (3600..=3610).contains(&left.as_secs()),
        "expires in {left:?}"
    );

    let entries = fake.journal().entries();
    let posts: Vec<_> = entries
        .iter()
        .filter(|e| e.is("create", "serviceaccounts/token"))
        .collect();
    assert_eq!(posts.len(), 1, "{entries:#?}");
    assert_eq!(
        posts[0].path,
        "/api/v1/namespaces/ns/serviceaccounts/sa/token"
    );
    assert_eq!(posts[0].status, 201);
    let body = posts[0].json();
    assert_eq!(body["kind"], "TokenRequest", "{body}");
    assert_eq!(body["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(body["spec"]["expirationSeconds"], 3607);
    assert_eq!(
        body["spec"]["audiences"],
        json!([]),
        "no audience: the server's"
    );
    assert_eq!(
        body["spec"]["boundObjectRef"],
        json!({"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": uid})
    );

    // An audience is passed on.
    r.audience = "vault".into();
    source.service_account_token(&r).await.expect("token");
    let last = fake
        .journal()
        .entries()
        .into_iter()
        .rfind(|e| e.is("create", "serviceaccounts/token"))
        .expect("second request");
    assert_eq!(last.json()["spec"]["audiences"], json!(["vault"]));
}

#[tokio::test]
async fn a_missing_service_account_is_none_and_a_wrong_pod_an_error() {
    let fake = fake().await;
    fake.create("v1", "pods", "ns", pod()).expect("pod");
    let source = ApiTokenSource::new(fake.client("kubelet-test").expect("client"));
    let mut r = request();
    r.service_account = "absent".into();
    assert_eq!(
        source.service_account_token(&r).await.expect("answer"),
        None
    );
    // The pod exists with another uid: a refusal, not retried.
    let err = source
        .service_account_token(&request())
        .await
        .expect_err("uid mismatch");
    assert!(matches!(err, objects::Error::Other(_)), "{err:?}");
    assert!(
        err.to_string().starts_with("failed to fetch token"),
        "{err}"
    );
    assert_eq!(
        fake.journal().count("create", "serviceaccounts/token"),
        2,
        "one request each"
    );
}

#[tokio::test]
async fn server_errors_are_retried_over_http() {
    let fake = fake().await;
    let stored = fake.create("v1", "pods", "ns", pod()).expect("pod");
    let mut r = request();
    r.pod_uid = stored["metadata"]["uid"].as_str().expect("uid").to_owned();
    fake.faults().inject(
        Fault::Status(503),
        RequestFilter::any().resource("serviceaccounts/token"),
        Some(2),
    );
    let source = ApiTokenSource::new(fake.client("kubelet-test").expect("client"));
    let token = source.service_account_token(&r).await.expect("third try");
    assert!(token.is_some());
    let statuses: Vec<u16> = fake
        .journal()
        .entries()
        .iter()
        .filter(|e| e.is("create", "serviceaccounts/token"))
        .map(|e| e.status)
        .collect();
    assert_eq!(statuses, vec![503, 503, 201]);
}

#[tokio::test(start_paused = true)]
async fn transient_failures_back_off_then_give_up() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let (c, journal) = client(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        status(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable")
    });
    let source = ApiTokenSource::new(c);
    let started = tokio::time::Instant::now();
    let err = source
        .service_account_token(&request())
        .await
        .expect_err("gives up");
    assert!(matches!(err, objects::Error::Unavailable(_)), "{err:?}");
    assert_eq!(calls.load(Ordering::SeqCst), ATTEMPTS as usize);
    let at: Vec<Duration> = journal.calls().iter().map(|c| c.at - started).collect();
    assert_eq!(
        at,
        vec![
            Duration::ZERO,
            Duration::from_millis(500),
            Duration::from_millis(1500),
            Duration::from_millis(3500)
        ]
    );

    // A refusal (403) is not retried.
    let (c, journal) = client(|_| status(StatusCode::FORBIDDEN, "Forbidden"));
    let err = ApiTokenSource::new(c)
        .service_account_token(&request())
        .await
        .expect_err("forbidden");
    assert!(matches!(err, objects::Error::Other(_)), "{err:?}");
    assert_eq!(journal.calls().len(), 1);
}
