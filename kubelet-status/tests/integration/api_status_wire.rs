//! The status syncer's requests as the API server sees them: a real `kube::Client` over a
//! tower service that records each request and answers like the API server.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::client::Body;
use kubelet_core::PodUid;
use kubelet_core::pod_manager::PodManager;
use kubelet_core::status::StatusManager;
use kubelet_status::LocalStatusManager;
use kubelet_status::api::patch::apply_status_patch;
use kubelet_status::api::{ApiStatusSyncer, Error, KubePodStatusApi, NoMirrorPods, PodStatusApi};
use serde_json::{Value, json};

#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    content_type: Option<String>,
    body: Value,
}

type Log = Arc<Mutex<Vec<Seen>>>;
type Responder = dyn Fn(&Seen) -> (StatusCode, Value) + Send + Sync;

fn client(log: Log, respond: Arc<Responder>) -> kube::Client {
    let service = tower::service_fn(move |req: Request<Body>| {
        let (log, respond) = (log.clone(), respond.clone());
        async move {
            let (parts, body) = req.into_parts();
            let bytes = match body.collect().await {
                Ok(collected) => collected.to_bytes().to_vec(),
                Err(_) => Vec::new(),
            };
            let seen = Seen {
                method: parts.method.to_string(),
                path: parts.uri.path().to_owned(),
                content_type: parts
                    .headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            log.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(seen.clone());
            let (code, value) = respond(&seen);
            let response = Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(value.to_string().into_bytes()))
                .unwrap_or_else(|_| Response::new(Body::from(Vec::new())));
            Ok::<_, Infallible>(response)
        }
    });
    kube::Client::new(service, "default")
}

fn failure(code: u16, reason: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("the server says {reason}"), "reason": reason, "code": code,
    })
}

fn pod() -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("uid-web".into()),
            resource_version: Some("7".into()),
            deletion_timestamp: Some(Time(kubelet_core::time::now())),
            deletion_grace_period_seconds: Some(5),
            ..Default::default()
        },
        spec: Some(Default::default()),
        status: Some(ApiPodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn terminated_pod_is_patched_then_deleted_with_grace_zero_and_its_uid() {
    let log: Log = Arc::default();
    let api_pod = Arc::new(Mutex::new(pod()));
    let answer = api_pod.clone();
    let respond: Arc<Responder> = Arc::new(move |seen: &Seen| {
        let mut pod = answer.lock().unwrap_or_else(|e| e.into_inner());
        match seen.method.as_str() {
            "PATCH" => {
                let mut status = serde_json::to_value(pod.status.take()).unwrap_or(Value::Null);
                apply_status_patch(&mut status, &seen.body["status"]);
                pod.status = serde_json::from_value(status).ok();
                pod.metadata.resource_version = Some("8".into());
                (
                    StatusCode::OK,
                    serde_json::to_value(&*pod).unwrap_or(Value::Null),
                )
            }
            "DELETE" => (
                StatusCode::OK,
                serde_json::to_value(&*pod).unwrap_or(Value::Null),
            ),
            _ => (StatusCode::NOT_FOUND, failure(404, "NotFound")),
        }
    });
    let statuses = Arc::new(LocalStatusManager::new());
    let pods = PodManager::new();
    let local = pod();
    pods.add_pod(local.clone());
    statuses.set_pod_status(
        &local,
        ApiPodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        },
    );
    statuses.terminate_pod(&local);
    statuses.pod_resources_reclaimed(&local);
    let no_containers = |_: &PodUid| false;
    let mut syncer = ApiStatusSyncer::new(
        client(log.clone(), respond),
        statuses,
        pods,
        Arc::new(NoMirrorPods),
        Arc::new(no_containers),
    );
    let outcome = syncer.sync_batch(false).await;
    assert_eq!(outcome.failed, 0, "{outcome:?}");

    let seen = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let requests: Vec<(&str, &str)> = seen
        .iter()
        .map(|s| (s.method.as_str(), s.path.as_str()))
        .collect();
    assert_eq!(
        requests,
        [
            ("PATCH", "/api/v1/namespaces/default/pods/web/status"),
            ("DELETE", "/api/v1/namespaces/default/pods/web"),
        ]
    );
    let patch = &seen[0];
    assert_eq!(
        patch.content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
    assert_eq!(patch.body["metadata"]["uid"], "uid-web");
    assert_eq!(patch.body["status"]["phase"], "Failed");
    let delete = &seen[1];
    assert_eq!(delete.body["gracePeriodSeconds"], 0);
    assert_eq!(delete.body["preconditions"]["uid"], "uid-web");
}

#[tokio::test]
async fn api_errors_are_typed() {
    for (code, reason) in [
        (404, "NotFound"),
        (409, "Conflict"),
        (503, "ServiceUnavailable"),
    ] {
        let respond: Arc<Responder> = Arc::new(move |_: &Seen| {
            (
                StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                failure(code, reason),
            )
        });
        let api = KubePodStatusApi::new(client(Arc::default(), respond));
        let err = api
            .patch_pod_status("default", "web", &json!({ "metadata": { "uid": "u" } }))
            .await
            .expect_err("the server fails");
        match (code, &err) {
            (404, Error::NotFound { name, .. }) => assert_eq!(name, "web"),
            (409, Error::Conflict { message, .. }) => assert!(message.contains("Conflict")),
            (503, Error::Api { .. }) => {}
            _ => panic!("{code} gave {err:?}"),
        }
        let delete = api.delete_pod("default", "web", "u").await;
        assert!(delete.is_err(), "{code}");
    }
    let respond: Arc<Responder> =
        Arc::new(|_: &Seen| (StatusCode::NOT_FOUND, failure(404, "NotFound")));
    let api = KubePodStatusApi::new(client(Arc::default(), respond));
    assert!(
        api.get_pod("default", "web")
            .await
            .expect("404 is none")
            .is_none()
    );
}
