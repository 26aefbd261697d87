//! Image pull secrets at the CRI level, standalone: the kubelet's runtime helper reads the
//! pod's `imagePullSecrets` from an in-memory object source, and `RemoteRuntime` sends the
//! matching credentials as `PullImageRequest.auth` to `FakeCriServer` over a unix socket,
//! which acts as a registry with basic auth.

// Test code, on the test's own runtime: blocking file calls are fine here.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{LocalObjectReference, Pod, Secret};
use kubelet_core::backoff::Backoff;
use kubelet_core::events::reasons as events;
use kubelet_core::kubelet::KubeletRuntimeHelper;
use kubelet_core::kubelet::env::EnvSource;
use kubelet_core::kuberuntime::reasons;
use kubelet_core::objects::InMemoryObjectSource;
use kubelet_core::pod::PodExt;
use kubelet_core::resources::NodeAllocatable;
use kubelet_core::runtime::{PodSyncResult, Runtime, RuntimeHelper};
use kubelet_core::testing::{CollectingRecorder, FakeVolumeManager, pod};
use kubelet_cri::fake::FakeCriServer;
use kubelet_cri::{Options, RemoteRuntime};

const IMAGE: &str = "127.0.0.1:5000/library/busybox:latest";

fn regcred(user: &str, password: &str) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some("regcred".into());
    s.metadata.namespace = Some("default".into());
    s.type_ = Some("kubernetes.io/dockerconfigjson".into());
    let json = format!(
        r#"{{"auths":{{"127.0.0.1:5000":{{"username":"{user}","password":"{password}"}}}}}}"#
    );
    s.data = Some(
        [(
            ".dockerconfigjson".to_owned(),
            ByteString(json.into_bytes()),
        )]
        .into(),
    );
    s
}

fn private_pod() -> Pod {
    let mut p = pod("private");
    p.metadata.namespace = Some("default".into());
    let spec = p.spec.as_mut().expect("spec");
    spec.containers[0].image = Some(IMAGE.into());
    spec.containers[0].image_pull_policy = Some("Always".into());
    spec.image_pull_secrets = Some(vec![LocalObjectReference {
        name: "regcred".into(),
    }]);
    p
}

async fn sync(rt: &RemoteRuntime, helper: &Arc<dyn RuntimeHelper>, p: &Pod) -> PodSyncResult {
    let status = rt
        .get_pod_status(&p.uid(), p.name_or_empty(), p.namespace_or_default())
        .await
        .expect("get_pod_status");
    rt.sync_pod(p, &status, helper.clone(), &Backoff::crash_loop_default())
        .await
        .expect("sync_pod")
}

#[tokio::test]
async fn pull_secrets_reach_the_runtime_as_auth() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("resolv.conf"), "nameserver 192.0.2.53\n").expect("resolv");
    let server = FakeCriServer::start(dir.path()).await.expect("fake CRI");
    server
        .cri()
        .require_pull_credentials(IMAGE, "alice", "s3cret");
    let recorder = CollectingRecorder::default();
    let options = Options::default()
        .with_pod_logs_dir(dir.path().join("logs"))
        .with_resolv_conf(dir.path().join("resolv.conf"))
        .with_request_timeout(Duration::from_secs(10));
    let rt = kubelet_cri::connect(&server.endpoint(), options)
        .expect("connect")
        .with_event_recorder(Arc::new(recorder.clone()));
    let objects = InMemoryObjectSource::new();
    let helper: Arc<dyn RuntimeHelper> = Arc::new(
        KubeletRuntimeHelper::new(Arc::new(FakeVolumeManager::default())).with_env_source(
            EnvSource {
                node_name: "node-1".into(),
                host_ips: Vec::new(),
                allocatable: NodeAllocatable::detect(),
                objects: Arc::new(objects.clone()),
                services: None,
            },
        ),
    );
    let p = private_pod();

    // The secret does not exist yet: the pull goes without credentials and is refused.
    let result = sync(&rt, &helper, &p).await;
    assert_eq!(result.container_errors.len(), 1, "{result:?}");
    let error = &result.container_errors[0];
    assert_eq!(error.reason, reasons::ERR_IMAGE_PULL);
    assert!(error.message.contains("401 Unauthorized"), "{error:?}");
    assert_eq!(server.cri().pull_auths(), [(IMAGE.to_owned(), None)]);
    assert!(recorder.has(
        events::FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET,
        "Unable to retrieve some image pull secrets (regcred); attempting to pull the image may not succeed."
    ));

    // Inside the backoff window: ImagePullBackOff with the registry's refusal, no pull.
    let result = sync(&rt, &helper, &p).await;
    assert_eq!(
        result.container_errors[0].reason,
        reasons::IMAGE_PULL_BACK_OFF
    );
    assert!(
        result.container_errors[0]
            .message
            .contains("401 Unauthorized")
    );
    assert_eq!(server.cri().pull_auths().len(), 1);

    // Wrong credentials: sent, refused.
    objects.set_secret("default", "regcred", regcred("alice", "wrong"));
    skip_backoff().await;
    let result = sync(&rt, &helper, &p).await;
    assert_eq!(result.container_errors[0].reason, reasons::ERR_IMAGE_PULL);
    assert_eq!(
        server.cri().pull_auths().last(),
        Some(&(IMAGE.to_owned(), Some("alice".to_owned())))
    );

    // The admin fixes the secret: the next pull after the window carries it and succeeds.
    objects.set_secret("default", "regcred", regcred("alice", "s3cret"));
    skip_backoff().await;
    let result = sync(&rt, &helper, &p).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(result.started, ["app"]);
    assert_eq!(server.cri().pull_auths().len(), 3);
    assert!(
        server
            .cri()
            .images()
            .iter()
            .any(|i| i.repo_tags.contains(&IMAGE.to_owned()))
    );
}

/// Moves tokio's clock past the longest image pull backoff window used here (20 s).
async fn skip_backoff() {
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(21)).await;
    tokio::time::resume();
}
