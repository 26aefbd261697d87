//! Wire-level tests of lifecycle hooks and graceful termination: `RemoteRuntime` against
//! `FakeCriServer` over a real unix socket.

// Test code, on the test's own runtime: blocking file calls are fine here.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Duration;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    Container, ExecAction, Lifecycle, LifecycleHandler, Pod, SleepAction,
};
use kubelet_core::backoff::Backoff;
use kubelet_core::kuberuntime::reasons::POST_START_HOOK_ERROR;
use kubelet_core::pod::PodExt;
use kubelet_core::runtime::{PodSyncResult, Runtime, RuntimeHelper};
use kubelet_core::testing::{FakeRuntimeHelper, pod_with};
use kubelet_cri::fake::{FakeCri, FakeCriServer};
use kubelet_cri::{Options, RemoteRuntime};

struct Env {
    dir: tempfile::TempDir,
    server: FakeCriServer,
    rt: RemoteRuntime,
}

impl Env {
    async fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("resolv.conf"), "nameserver 192.0.2.53\n")
            .expect("resolv.conf");
        let server = FakeCriServer::start(dir.path()).await.expect("fake CRI");
        server.cri().add_image("busybox:1.36");
        let opts = Options::default()
            .with_pod_logs_dir(dir.path().join("logs"))
            .with_resolv_conf(dir.path().join("resolv.conf"))
            .with_request_timeout(Duration::from_secs(10))
            .with_root_dir(dir.path().join("root"));
        let rt = kubelet_cri::connect(&server.endpoint(), opts).expect("connect");
        Self { dir, server, rt }
    }

    fn cri(&self) -> &FakeCri {
        self.server.cri()
    }

    async fn sync(&self, pod: &Pod) -> PodSyncResult {
        let status = self
            .rt
            .get_pod_status(&pod.uid(), pod.name_or_empty(), pod.namespace_or_default())
            .await
            .expect("status");
        let helper: Arc<dyn RuntimeHelper> = Arc::new(FakeRuntimeHelper);
        self.rt
            .sync_pod(pod, &status, helper, &Backoff::crash_loop_default())
            .await
            .expect("sync_pod")
    }

    async fn kill(&self, pod: &Pod, grace: Option<i64>) {
        let running = self
            .rt
            .get_pods(false)
            .await
            .expect("get_pods")
            .into_iter()
            .find(|p| p.uid == pod.uid())
            .expect("running pod");
        self.rt
            .kill_pod(Some(pod), &running, grace)
            .await
            .expect("kill_pod");
    }

    fn stop_timeout(&self, name: &str) -> Option<i64> {
        self.cri()
            .containers()
            .into_iter()
            .find(|c| c.name() == name)
            .and_then(|c| c.stop_timeout)
    }
}

fn exec(cmd: &[&str]) -> LifecycleHandler {
    LifecycleHandler {
        exec: Some(ExecAction {
            command: Some(cmd.iter().map(|s| (*s).to_owned()).collect()),
        }),
        ..Default::default()
    }
}

fn with_lifecycle(mut pod: Pod, index: usize, lifecycle: Lifecycle) -> Pod {
    if let Some(c) = pod.spec.as_mut().and_then(|s| s.containers.get_mut(index)) {
        c.lifecycle = Some(lifecycle);
    }
    pod
}

fn grace(mut pod: Pod, seconds: i64) -> Pod {
    if let Some(s) = pod.spec.as_mut() {
        s.termination_grace_period_seconds = Some(seconds);
    }
    pod
}

#[tokio::test]
async fn pre_stop_exec_runs_before_stop_container() {
    let env = Env::new().await;
    let pod = with_lifecycle(
        grace(pod_with("web", "Always", &["app"]), 20),
        0,
        Lifecycle {
            pre_stop: Some(exec(&["sh", "-c", "nginx -s quit"])),
            ..Default::default()
        },
    );
    assert!(env.sync(&pod).await.is_ok());
    env.cri().clear_calls();
    env.kill(&pod, None).await;
    let methods = env.cri().methods();
    let exec_at = methods.iter().position(|m| *m == "ExecSync");
    let stop_at = methods.iter().position(|m| *m == "StopContainer");
    assert!(
        exec_at.is_some() && exec_at < stop_at,
        "preStop before StopContainer: {methods:?}"
    );
    let execs = env.cri().execs();
    assert_eq!(execs.len(), 1);
    assert_eq!(execs[0].1, ["sh", "-c", "nginx -s quit"]);
    // The exec answered at once: no whole second is taken off.
    assert_eq!(env.stop_timeout("app"), Some(20));
}

#[tokio::test]
async fn failing_pre_stop_still_stops_and_override_gets_the_floor() {
    let env = Env::new().await;
    env.cri().set_exec_result(1, "boom");
    let pod = with_lifecycle(
        pod_with("web", "Always", &["app"]),
        0,
        Lifecycle {
            pre_stop: Some(exec(&["false"])),
            ..Default::default()
        },
    );
    assert!(env.sync(&pod).await.is_ok());
    env.kill(&pod, Some(0)).await;
    assert!(
        env.cri().execs().is_empty(),
        "no preStop with a zero grace period"
    );
    assert_eq!(env.stop_timeout("app"), Some(2), "upstream's 2 s floor");
    let c = &env.cri().containers()[0];
    assert_eq!(c.state, cri::ContainerState::ContainerExited);
}

#[tokio::test]
async fn sleep_pre_stop_counts_against_the_grace_period() {
    let env = Env::new().await;
    let pod = with_lifecycle(
        grace(pod_with("web", "Always", &["app"]), 4),
        0,
        Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction { seconds: 1 }),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    assert!(env.sync(&pod).await.is_ok());
    env.kill(&pod, None).await;
    // 4 s minus the 1 s sleep (the floor of 2 s does not apply).
    assert_eq!(env.stop_timeout("app"), Some(3));
}

#[tokio::test]
async fn failing_post_start_kills_the_container_and_reports_the_hook_error() {
    let env = Env::new().await;
    env.cri().set_exec_result(7, "not ready");
    let pod = with_lifecycle(
        grace(pod_with("web", "Always", &["app", "other"]), 9),
        0,
        Lifecycle {
            post_start: Some(exec(&["check"])),
            ..Default::default()
        },
    );
    let result = env.sync(&pod).await;
    assert_eq!(result.container_errors.len(), 1, "{result:?}");
    let err = &result.container_errors[0];
    assert_eq!(err.container, "app");
    assert_eq!(err.reason, POST_START_HOOK_ERROR);
    assert!(
        err.message.starts_with(
            "Exec lifecycle hook ([check]) for Container \"app\" in Pod \"web_default(uid-web)\" failed - error: command 'check' exited with 7: not ready"
        ),
        "{}",
        err.message
    );
    let app = env
        .cri()
        .containers()
        .into_iter()
        .find(|c| c.name() == "app")
        .expect("app");
    assert_eq!(app.state, cri::ContainerState::ContainerExited);
    assert_eq!(
        app.stop_timeout,
        Some(9),
        "killed with the pod's grace period"
    );
    let other = env
        .cri()
        .containers()
        .into_iter()
        .find(|c| c.name() == "other")
        .expect("other");
    assert_eq!(other.state, cri::ContainerState::ContainerRunning);
}

#[tokio::test]
async fn sidecars_stop_after_app_containers() {
    let env = Env::new().await;
    // Start both as app containers (starting sidecars is the sync's business), then stop
    // them as the pod that declares `proxy` a sidecar.
    let running = grace(pod_with("web", "Always", &["proxy", "app"]), 10);
    assert!(env.sync(&running).await.is_ok());
    let mut pod = grace(pod_with("web", "Always", &["app"]), 10);
    let sidecar = Container {
        name: "proxy".into(),
        image: Some("busybox:1.36".into()),
        restart_policy: Some("Always".into()),
        ..Default::default()
    };
    if let Some(s) = pod.spec.as_mut() {
        s.init_containers = Some(vec![sidecar]);
    }
    env.cri().clear_calls();
    env.kill(&pod, None).await;
    let stops: Vec<String> = env
        .cri()
        .calls()
        .into_iter()
        .filter(|c| c.method == "StopContainer")
        .map(|c| c.target)
        .collect();
    let name_of = |id: &str| {
        env.cri()
            .containers()
            .into_iter()
            .find(|c| c.id == id)
            .map(|c| c.name().to_owned())
            .unwrap_or_default()
    };
    let order: Vec<String> = stops.iter().map(|id| name_of(id)).collect();
    assert_eq!(order, ["app", "proxy"]);
}

#[tokio::test]
async fn termination_message_file_is_mounted_and_read_on_exit() {
    let env = Env::new().await;
    let mut pod = pod_with("web", "Never", &["app", "custom"]);
    if let Some(s) = pod.spec.as_mut() {
        s.containers[1].termination_message_path = Some("/tmp/why".into());
    }
    assert!(env.sync(&pod).await.is_ok());
    let containers = env.cri().containers();
    let host_file = |name: &str, path: &str| {
        let c = containers
            .iter()
            .find(|c| c.name() == name)
            .expect("container");
        let m = c
            .config
            .mounts
            .iter()
            .find(|m| m.container_path == path)
            .expect("termination log mounted");
        (c.id.clone(), std::path::PathBuf::from(&m.host_path))
    };
    let (app_id, app_file) = host_file("app", "/dev/termination-log");
    let (custom_id, custom_file) = host_file("custom", "/tmp/why");
    let pod_dir = env.dir.path().join("root/pods/uid-web/containers");
    assert!(app_file.starts_with(pod_dir.join("app")), "{app_file:?}");
    assert!(custom_file.starts_with(pod_dir.join("custom")));
    assert_eq!(std::fs::read(&app_file).expect("file exists"), b"");

    std::fs::write(&app_file, "disk full").expect("write");
    std::fs::write(&custom_file, "x".repeat(5000)).expect("write");
    assert!(env.cri().exit_container(&app_id, 1));
    assert!(env.cri().exit_container(&custom_id, 0));
    let status = env
        .rt
        .get_pod_status(&pod.uid(), pod.name_or_empty(), pod.namespace_or_default())
        .await
        .expect("status");
    let app = status.container("app").expect("app");
    assert_eq!(app.message, "disk full");
    let custom = status.container("custom").expect("custom");
    assert_eq!(custom.message.len(), 4096, "cut to 4 KiB");
}
