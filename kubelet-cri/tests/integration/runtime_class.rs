//! RuntimeClass over the CRI (upstream `createPodSandbox` with the RuntimeClass manager):
//! the class's handler reaches `RunPodSandboxRequest.runtime_handler`, a handler the runtime
//! lacks and a class that does not exist fail the sandbox with upstream's
//! `FailedCreatePodSandBox` event, and the runtime's handlers come back from `Status`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kubelet_core::backoff::Backoff;
use kubelet_core::events::reasons;
use kubelet_core::pod::PodExt;
use kubelet_core::runtime::{Runtime, RuntimeHelper};
use kubelet_core::runtimeclass::InMemoryRuntimeClasses;
use kubelet_core::testing::{CollectingRecorder, FakeRuntimeHelper, pod};
use kubelet_cri::Options;
use kubelet_cri::fake::FakeCriServer;

fn with_class(name: &str, class: &str) -> Pod {
    let mut p = pod(name);
    p.spec.as_mut().expect("spec").runtime_class_name = Some(class.to_owned());
    p
}

#[tokio::test]
async fn the_class_handler_reaches_the_runtime_and_failures_are_sandbox_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = FakeCriServer::start(dir.path()).await.expect("fake CRI");
    server.cri().add_image("busybox:1.36");
    server.cri().set_runtime_handlers(&["kata"]);
    let classes = InMemoryRuntimeClasses::new();
    classes.insert("kata", "kata");
    classes.insert("gvisor", "runsc");
    let events = CollectingRecorder::default();
    let rt = kubelet_cri::connect(
        &server.endpoint(),
        Options::default()
            .with_pod_logs_dir(dir.path().join("logs"))
            .with_resolv_conf(""),
    )
    .expect("connect")
    .with_runtime_classes(Arc::new(classes.clone()))
    .with_event_recorder(Arc::new(events.clone()));
    let helper: Arc<dyn RuntimeHelper> = Arc::new(FakeRuntimeHelper);
    let sync = |p: Pod| {
        let (rt, helper) = (rt.clone(), helper.clone());
        async move {
            let status = rt
                .get_pod_status(&p.uid(), p.name_or_empty(), p.namespace_or_default())
                .await
                .expect("status");
            rt.sync_pod(&p, &status, helper, &Backoff::crash_loop_default())
                .await
                .expect("sync")
        }
    };

    // A known class: its handler is on the sandbox; no class: the default handler.
    let result = sync(with_class("secure", "kata")).await;
    assert!(result.pod_error.is_none(), "{result:?}");
    let result = sync(pod("plain")).await;
    assert!(result.pod_error.is_none(), "{result:?}");
    let mut handlers: Vec<_> = server
        .cri()
        .sandboxes()
        .into_iter()
        .map(|s| s.runtime_handler)
        .collect();
    handlers.sort();
    assert_eq!(handlers, ["", "kata"]);

    // A handler the runtime lacks: containerd's refusal, as upstream's event.
    let result = sync(with_class("sandboxed", "gvisor")).await;
    let error = result.pod_error.expect("pod error");
    assert!(
        error.contains(r#"no runtime for "runsc" is configured"#),
        "{error}"
    );
    let messages: Vec<_> = events
        .events()
        .into_iter()
        .filter(|e| e.reason == reasons::FAILED_CREATE_POD_SANDBOX)
        .map(|e| e.message)
        .collect();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(
        messages[0].starts_with("Failed to create pod sandbox: ")
            && messages[0].contains(r#"no runtime for "runsc" is configured"#),
        "{messages:?}"
    );

    // A class that does not exist: upstream's NotFound, and no RunPodSandbox at all.
    let before = server.cri().count("RunPodSandbox");
    let result = sync(with_class("lost", "missing")).await;
    assert_eq!(
        result.pod_error.as_deref(),
        Some(r#"failed to create pod sandbox: runtimeclass.node.k8s.io "missing" not found"#)
    );
    assert!(events.has(
        reasons::FAILED_CREATE_POD_SANDBOX,
        r#"Failed to create pod sandbox: runtimeclass.node.k8s.io "missing" not found"#
    ));
    assert_eq!(server.cri().count("RunPodSandbox"), before);

    // The class appears: the next sync creates the sandbox.
    classes.insert("missing", "kata");
    let result = sync(with_class("lost", "missing")).await;
    assert!(result.pod_error.is_none(), "{result:?}");

    // The runtime's handlers, the default first, from CRI Status.
    let status = rt.status().await.expect("status");
    let names: Vec<_> = status.handlers.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["", "kata"]);
}
