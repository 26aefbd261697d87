//! Wire-level tests: `RemoteRuntime` against `FakeCriServer` over a real unix socket.

// Test code, on the test's own runtime: blocking file calls are fine here.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, ContainerPort, EnvVar, Pod};
use kubelet_core::backoff::Backoff;
use kubelet_core::container::hash_container;
use kubelet_core::kuberuntime::labels::{
    CONTAINER_HASH_ANNOTATION, CONTAINER_NAME_LABEL, CONTAINER_RESTART_COUNT_ANNOTATION,
    CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION, CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION,
    POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_TERMINATION_GRACE_PERIOD_ANNOTATION, POD_UID_LABEL,
};
use kubelet_core::kuberuntime::reasons;
use kubelet_core::pod::{PodExt, PodUid};
use kubelet_core::runtime::{
    ContainerState, Error, Mount, PodStatus, PodSyncResult, RunContainerOptions, Runtime,
    RuntimeHelper, SandboxState, StreamOptions,
};
use kubelet_core::testing::{pod, pod_with};
use kubelet_cri::fake::{FakeCri, FakeCriServer, StreamCall};
use kubelet_cri::{Options, RemoteRuntime};
use tonic::Code;

/// Env and mounts as the kubelet's helper would produce them.
struct TestHelper {
    fail: Option<String>,
}

#[async_trait::async_trait]
impl RuntimeHelper for TestHelper {
    async fn generate_run_container_options(
        &self,
        pod: &Pod,
        container: &Container,
        pod_ips: &[String],
    ) -> Result<RunContainerOptions, kubelet_core::runtime::RunContainerOptionsError> {
        if let Some(msg) = &self.fail {
            return Err(kubelet_core::runtime::RunContainerOptionsError::Other(
                msg.clone(),
            ));
        }
        // The helper owns the whole environment (literal values included), as upstream's
        // makeEnvironmentVariables.
        let literal = container
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()));
        Ok(RunContainerOptions {
            envs: literal
                .chain([
                    (
                        "POD_IP".into(),
                        pod_ips.first().cloned().unwrap_or_default(),
                    ),
                    ("CONTAINER".into(), container.name.clone()),
                ])
                .collect(),
            mounts: vec![Mount {
                host_path: PathBuf::from(format!(
                    "/var/lib/kubelet/pods/{}/volumes/data",
                    pod.uid()
                )),
                container_path: "/data".into(),
                read_only: true,
                ..Default::default()
            }],
            hostname: pod.name_or_empty().into(),
        })
    }
}

fn helper() -> Arc<dyn RuntimeHelper> {
    Arc::new(TestHelper { fail: None })
}

struct Env {
    dir: tempfile::TempDir,
    server: FakeCriServer,
    rt: RemoteRuntime,
}

impl Env {
    fn cri(&self) -> &FakeCri {
        self.server.cri()
    }

    fn logs(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    async fn status(&self, pod: &Pod) -> PodStatus {
        self.rt
            .get_pod_status(&pod.uid(), pod.name_or_empty(), pod.namespace_or_default())
            .await
            .expect("get_pod_status")
    }

    /// One pod worker iteration: fresh status, then sync.
    async fn sync(&self, pod: &Pod, backoff: &Backoff) -> PodSyncResult {
        let status = self.status(pod).await;
        self.rt
            .sync_pod(pod, &status, helper(), backoff)
            .await
            .expect("sync_pod")
    }
}

fn options(dir: &Path) -> Options {
    Options::default()
        .with_pod_logs_dir(dir.join("logs"))
        .with_resolv_conf(dir.join("resolv.conf"))
        .with_request_timeout(Duration::from_secs(10))
        .with_node_name("node-1")
}

async fn setup() -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("resolv.conf"),
        "nameserver 192.0.2.53\nsearch example.com\noptions ndots:2\n",
    )
    .expect("resolv.conf");
    let server = FakeCriServer::start(dir.path())
        .await
        .expect("start fake CRI");
    server.cri().add_image("busybox:1.36");
    let rt = kubelet_cri::connect(&server.endpoint(), options(dir.path())).expect("connect");
    Env { dir, server, rt }
}

/// A pod with labels, annotations, env, ports and a grace period.
fn web_pod() -> Pod {
    let mut p = pod("web");
    p.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
    p.metadata.annotations = Some(BTreeMap::from([("team".into(), "node".into())]));
    let spec = p.spec.as_mut().expect("spec");
    spec.termination_grace_period_seconds = Some(45);
    let c = &mut spec.containers[0];
    c.args = Some(vec!["$(CONTAINER)".into()]);
    c.env = Some(vec![EnvVar {
        name: "GREETING".into(),
        value: Some("hello".into()),
        ..Default::default()
    }]);
    c.ports = Some(vec![ContainerPort {
        container_port: 80,
        host_port: Some(8080),
        ..Default::default()
    }]);
    c.termination_message_path = Some("/dev/termination-log".into());
    c.termination_message_policy = Some("File".into());
    p
}

#[tokio::test]
async fn sync_pod_creates_sandbox_and_container() {
    let env = setup().await;
    let pod = web_pod();
    let backoff = Backoff::crash_loop_default();

    let result = env.sync(&pod, &backoff).await;
    assert!(result.is_ok(), "{result:?}");
    assert!(result.changed);

    // sandbox
    let sandboxes = env.cri().sandboxes();
    assert_eq!(sandboxes.len(), 1);
    let sb = &sandboxes[0];
    let md = sb.config.metadata.as_ref().expect("metadata");
    assert_eq!(
        (
            md.name.as_str(),
            md.namespace.as_str(),
            md.uid.as_str(),
            md.attempt
        ),
        ("web", "default", "uid-web", 0)
    );
    assert_eq!(sb.label(POD_NAME_LABEL), Some("web"));
    assert_eq!(sb.label(POD_NAMESPACE_LABEL), Some("default"));
    assert_eq!(sb.label(POD_UID_LABEL), Some("uid-web"));
    assert_eq!(sb.label("app"), Some("web"));
    assert_eq!(sb.config.annotations["team"], "node");
    assert_eq!(sb.config.hostname, "web");
    let log_dir = env.logs().join("default_web_uid-web");
    assert_eq!(sb.config.log_directory, log_dir.to_string_lossy());
    assert!(log_dir.is_dir(), "pod log dir created");
    let dns = sb.config.dns_config.as_ref().expect("dns");
    assert_eq!(dns.servers, ["192.0.2.53"]);
    assert_eq!(dns.searches, ["example.com"]);
    assert_eq!(dns.options, ["ndots:2"]);
    assert_eq!(sb.config.port_mappings.len(), 1);
    assert_eq!(sb.config.port_mappings[0].host_port, 8080);
    let ns = sb
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
        .expect("namespace options");
    assert_eq!(ns.network, cri::NamespaceMode::Pod as i32);

    // container
    let containers = env.cri().containers();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(c.state, cri::ContainerState::ContainerRunning);
    assert_eq!(c.sandbox_id, sb.id);
    assert_eq!(c.name(), "app");
    assert_eq!(c.label(CONTAINER_NAME_LABEL), Some("app"));
    assert_eq!(c.label(POD_UID_LABEL), Some("uid-web"));
    assert_eq!(c.label(POD_NAME_LABEL), Some("web"));
    assert_eq!(c.label(POD_NAMESPACE_LABEL), Some("default"));
    let spec = &pod.containers()[0];
    assert_eq!(
        c.annotation(CONTAINER_HASH_ANNOTATION),
        Some(format!("{:x}", hash_container(spec)).as_str())
    );
    assert_eq!(c.annotation(CONTAINER_RESTART_COUNT_ANNOTATION), Some("0"));
    assert_eq!(
        c.annotation(POD_TERMINATION_GRACE_PERIOD_ANNOTATION),
        Some("45")
    );
    assert_eq!(
        c.annotation(CONTAINER_TERMINATION_MESSAGE_PATH_ANNOTATION),
        Some("/dev/termination-log")
    );
    assert_eq!(
        c.annotation(CONTAINER_TERMINATION_MESSAGE_POLICY_ANNOTATION),
        Some("File")
    );
    assert_eq!(c.config.log_path, "app/0.log");
    assert!(log_dir.join("app").is_dir(), "container log dir created");
    assert_eq!(c.config.command, ["sleep", "3600"]);
    assert_eq!(
        c.config.args,
        ["app"],
        "args expanded from the helper's env"
    );
    assert_eq!(c.env("GREETING"), Some("hello"));
    assert_eq!(c.env("CONTAINER"), Some("app"));
    assert_eq!(c.env("POD_IP"), Some(sb.ip.as_str()));
    assert_eq!(c.config.mounts.len(), 1);
    assert_eq!(c.config.mounts[0].container_path, "/data");
    assert_eq!(
        c.config.mounts[0].host_path,
        "/var/lib/kubelet/pods/uid-web/volumes/data"
    );
    assert!(c.config.mounts[0].readonly);
    assert_eq!(
        env.cri().methods(),
        [
            "ListPodSandbox",
            "ListContainers",
            "RunPodSandbox",
            "PodSandboxStatus",
            // EnsureImageExists, then the image user for runAsNonRoot (upstream getImageUser).
            "ImageStatus",
            "ImageStatus",
            "CreateContainer",
            "StartContainer"
        ],
        "IfNotPresent with the image present: no pull"
    );

    // a second sync is a no-op
    env.cri().clear_calls();
    let result = env.sync(&pod, &backoff).await;
    assert!(result.is_ok() && !result.changed, "{result:?}");
    let mutating = [
        "RunPodSandbox",
        "CreateContainer",
        "StartContainer",
        "StopContainer",
        "StopPodSandbox",
    ];
    assert!(
        env.cri().methods().iter().all(|m| !mutating.contains(m)),
        "{:?}",
        env.cri().methods()
    );
}

#[tokio::test]
async fn get_pods_groups_by_uid() {
    let env = setup().await;
    let backoff = Backoff::crash_loop_default();
    let a = pod_with("a", "Always", &["one", "two"]);
    let b = pod("b");
    assert!(env.sync(&a, &backoff).await.is_ok());
    assert!(env.sync(&b, &backoff).await.is_ok());
    env.cri().clear_calls();

    let mut pods = env.rt.get_pods(true).await.expect("get_pods");
    assert_eq!(
        env.cri().methods(),
        ["ListPodSandbox", "ListContainers"],
        "two calls, no per-pod calls"
    );
    pods.sort_by(|x, y| x.name.cmp(&y.name));
    assert_eq!(pods.len(), 2);
    assert_eq!(pods[0].uid, PodUid::from("uid-a"));
    assert_eq!(
        (pods[0].name.as_str(), pods[0].namespace.as_str()),
        ("a", "default")
    );
    assert_eq!(pods[0].sandboxes.len(), 1);
    let mut names: Vec<_> = pods[0].containers.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["one", "two"]);
    for c in &pods[0].containers {
        assert_eq!(c.sandbox_id, pods[0].sandboxes[0].id);
        assert_eq!(c.state, ContainerState::Running);
        let spec = a
            .containers()
            .iter()
            .find(|s| s.name == c.name)
            .expect("spec");
        assert_eq!(
            c.hash,
            hash_container(spec),
            "hash from ListContainers annotations"
        );
    }
    assert_eq!(pods[1].uid, PodUid::from("uid-b"));

    // not `all`: only running containers
    assert!(env.cri().exit_container_named("uid-a", "one", 0));
    let pods = env.rt.get_pods(false).await.expect("get_pods");
    let a_now = pods
        .iter()
        .find(|p| p.uid.as_str() == "uid-a")
        .expect("pod a");
    assert_eq!(a_now.containers.len(), 1);
    assert_eq!(a_now.containers[0].name, "two");
}

#[tokio::test]
async fn get_pod_status_reports_ips_and_exit_codes() {
    let env = setup().await;
    let backoff = Backoff::crash_loop_default();
    let pod = pod_with("job", "Never", &["main"]);
    assert!(env.sync(&pod, &backoff).await.is_ok());
    let sb_ip = env.cri().sandboxes()[0].ip.clone();

    let status = env.status(&pod).await;
    assert_eq!(status.ips, [sb_ip.as_str()]);
    assert_eq!(status.sandboxes.len(), 1);
    assert_eq!(status.sandboxes[0].state, SandboxState::Ready);
    assert!(!status.sandboxes[0].host_network);
    let main = status.container("main").expect("main");
    assert_eq!(main.state, ContainerState::Running);
    assert!(main.started_at.is_some());
    assert_eq!(main.image, "busybox:1.36");
    assert!(main.image_ref.starts_with("sha256:"));

    assert!(env.cri().exit_container_named("uid-job", "main", 3));
    let status = env.status(&pod).await;
    let main = status.container("main").expect("main");
    assert_eq!(main.state, ContainerState::Exited);
    assert_eq!(main.exit_code, 3);
    assert_eq!(main.reason, "Error");
    assert!(main.finished_at.is_some() && main.finished_at >= main.started_at);

    // restartPolicy Never: nothing restarts, the sandbox is stopped, exit code kept
    let result = env.sync(&pod, &backoff).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(env.cri().count("CreateContainer"), 1);
    let status = env.status(&pod).await;
    assert_eq!(status.sandboxes[0].state, SandboxState::NotReady);
    assert!(
        status.ips.is_empty(),
        "no IPs from a sandbox that is not ready"
    );
    assert_eq!(status.container("main").map(|c| c.exit_code), Some(3));
}

#[tokio::test]
async fn exited_container_restarts_then_backs_off() {
    let env = setup().await;
    let backoff = Backoff::crash_loop_default();
    let pod = pod("web");
    assert!(env.sync(&pod, &backoff).await.is_ok());
    assert!(env.cri().exit_container_named("uid-web", "app", 1));

    // first restart is immediate, with restart count 1
    let result = env.sync(&pod, &backoff).await;
    assert!(result.is_ok() && result.changed, "{result:?}");
    let instances = env.cri().containers_named("uid-web", "app");
    assert_eq!(instances.len(), 2);
    let second = &instances[1];
    assert_eq!(second.state, cri::ContainerState::ContainerRunning);
    assert_eq!(
        second.annotation(CONTAINER_RESTART_COUNT_ANNOTATION),
        Some("1")
    );
    assert_eq!(second.config.log_path, "app/1.log");
    assert_eq!(second.config.metadata.as_ref().map(|m| m.attempt), Some(1));
    assert_eq!(
        env.status(&pod)
            .await
            .container("app")
            .map(|c| c.restart_count),
        Some(1)
    );

    // crashes again inside the window: CrashLoopBackOff, nothing created
    assert!(env.cri().exit_container(&second.id, 1));
    let result = env.sync(&pod, &backoff).await;
    assert!(!result.changed);
    assert_eq!(result.container_errors.len(), 1, "{result:?}");
    let err = &result.container_errors[0];
    assert_eq!(err.container, "app");
    assert_eq!(err.reason, reasons::CRASH_LOOP_BACK_OFF);
    assert_eq!(
        err.message,
        "back-off 10s restarting failed container=app pod=web_default(uid-web)"
    );
    assert_eq!(env.cri().containers_named("uid-web", "app").len(), 2);
    // the sandbox is kept while a restart is pending
    assert_eq!(
        env.cri().sandboxes()[0].state,
        cri::PodSandboxState::SandboxReady
    );
}

#[tokio::test]
async fn spec_hash_change_restarts_container() {
    let env = setup().await;
    let backoff = Backoff::crash_loop_default();
    let mut pod = pod("web");
    assert!(env.sync(&pod, &backoff).await.is_ok());
    let old = env.cri().containers_named("uid-web", "app")[0].clone();

    env.cri().add_image("busybox:1.37");
    pod.spec.as_mut().expect("spec").containers[0].image = Some("busybox:1.37".into());
    let result = env.sync(&pod, &backoff).await;
    assert!(result.is_ok() && result.changed, "{result:?}");
    let instances = env.cri().containers_named("uid-web", "app");
    assert_eq!(instances.len(), 2);
    assert_eq!(instances[0].id, old.id);
    assert_eq!(instances[0].state, cri::ContainerState::ContainerExited);
    assert_eq!(instances[0].stop_timeout, Some(30));
    assert_eq!(instances[1].state, cri::ContainerState::ContainerRunning);
    assert_eq!(
        instances[1].annotation(CONTAINER_HASH_ANNOTATION),
        Some(format!("{:x}", hash_container(&pod.containers()[0])).as_str())
    );
    assert_eq!(
        instances[1].annotation(CONTAINER_RESTART_COUNT_ANNOTATION),
        Some("1")
    );
    assert_eq!(env.cri().count("RunPodSandbox"), 1, "sandbox kept");
}

#[tokio::test]
async fn dead_sandbox_is_recreated_with_all_containers() {
    let env = setup().await;
    let backoff = Backoff::crash_loop_default();
    let pod = pod_with("web", "Always", &["a", "b"]);
    assert!(env.sync(&pod, &backoff).await.is_ok());
    let first = env.cri().sandboxes()[0].id.clone();
    assert!(env.cri().kill_sandbox(&first));

    let result = env.sync(&pod, &backoff).await;
    assert!(result.is_ok() && result.changed, "{result:?}");
    let sandboxes = env.cri().sandboxes();
    assert_eq!(sandboxes.len(), 2);
    let new = sandboxes
        .iter()
        .find(|s| s.id != first)
        .expect("new sandbox");
    assert_eq!(new.config.metadata.as_ref().map(|m| m.attempt), Some(1));
    assert!(
        env.cri()
            .calls()
            .iter()
            .any(|c| c.method == "StopPodSandbox" && c.target == first)
    );
    for name in ["a", "b"] {
        let instances = env.cri().containers_named("uid-web", name);
        assert_eq!(instances.len(), 2, "{name}");
        assert_eq!(instances[0].state, cri::ContainerState::ContainerExited);
        assert_eq!(instances[1].sandbox_id, new.id);
        assert_eq!(instances[1].state, cri::ContainerState::ContainerRunning);
    }
    let status = env.status(&pod).await;
    assert_eq!(status.sandboxes[0].id, new.id, "newest first");
    assert_eq!(status.ips, [new.ip.as_str()]);
}

#[tokio::test]
async fn init_containers_run_before_app_containers() {
    let env = setup().await;
    let backoff = Backoff::crash_loop_default();
    let mut pod = pod("web");
    pod.spec.as_mut().expect("spec").init_containers = Some(vec![Container {
        name: "init".into(),
        image: Some("busybox:1.36".into()),
        command: Some(vec!["true".into()]),
        ..Default::default()
    }]);
    assert!(env.sync(&pod, &backoff).await.is_ok());
    let names: Vec<_> = env
        .cri()
        .containers()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    assert_eq!(names, ["init"]);
    // still running: nothing new
    assert!(!env.sync(&pod, &backoff).await.changed);
    assert!(env.cri().exit_container_named("uid-web", "init", 0));
    assert!(env.sync(&pod, &backoff).await.is_ok());
    let names: Vec<_> = env
        .cri()
        .containers()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    assert_eq!(names, ["init", "app"]);
}

#[tokio::test]
async fn image_pull_policies() {
    let env = setup().await;
    let backoff = Backoff::crash_loop_default();
    let with_image = |name: &str, image: &str, policy: Option<&str>| {
        let mut p = pod(name);
        let c = &mut p.spec.as_mut().expect("spec").containers[0];
        c.image = Some(image.into());
        c.image_pull_policy = policy.map(Into::into);
        p
    };

    // Never + absent
    let p = with_image("never", "absent:1", Some("Never"));
    let result = env.sync(&p, &backoff).await;
    assert_eq!(result.container_errors.len(), 1);
    assert_eq!(
        result.container_errors[0].reason,
        reasons::ERR_IMAGE_NEVER_PULL
    );
    assert_eq!(
        result.container_errors[0].message,
        "Container image \"absent:1\" is not present with pull policy of Never"
    );
    assert!(result.pod_error.is_none());
    assert_eq!(env.cri().count("PullImage"), 0);

    // IfNotPresent (default for a tag) + absent: pulled
    let p = with_image("pull", "fresh:2", None);
    assert!(env.sync(&p, &backoff).await.is_ok());
    assert_eq!(env.cri().count("PullImage"), 1);

    // latest (no tag) present: pulled anyway (Always), with the default tag applied
    env.cri().add_image("busybox:latest");
    env.cri().clear_calls();
    let p = with_image("latest", "busybox", None);
    assert!(env.sync(&p, &backoff).await.is_ok());
    let pulls: Vec<_> = env
        .cri()
        .calls()
        .into_iter()
        .filter(|c| c.method == "PullImage")
        .collect();
    assert_eq!(pulls.len(), 1);
    assert_eq!(pulls[0].target, "busybox:latest");

    // pull failure
    env.cri().set_unpullable("missing:1");
    let p = with_image("missing", "missing:1", None);
    let result = env.sync(&p, &backoff).await;
    assert_eq!(result.container_errors.len(), 1);
    assert_eq!(result.container_errors[0].reason, reasons::ERR_IMAGE_PULL);
    assert!(result.container_errors[0].message.contains("missing:1"));
    assert_eq!(result.retry_after, None, "ErrImagePull is a plain error");

    // the next start inside the 10 s window does not pull: ImagePullBackOff
    let pulls = env.cri().count("PullImage");
    let pull_error = result.container_errors[0].message.clone();
    let result = env.sync(&p, &backoff).await;
    assert_eq!(result.container_errors.len(), 1);
    assert_eq!(
        result.container_errors[0].reason,
        reasons::IMAGE_PULL_BACK_OFF
    );
    assert_eq!(
        result.container_errors[0].message,
        format!("Back-off pulling image \"missing:1\": ErrImagePull: {pull_error}")
    );
    assert!(
        result
            .retry_after
            .is_some_and(|d| d > Duration::ZERO && d <= Duration::from_secs(10)),
        "{result:?}"
    );
    assert_eq!(env.cri().count("PullImage"), pulls);
}

#[tokio::test]
async fn helper_error_is_create_container_config_error() {
    let env = setup().await;
    let pod = pod("web");
    let status = env.status(&pod).await;
    let helper: Arc<dyn RuntimeHelper> = Arc::new(TestHelper {
        fail: Some("secret \"db\" not found".into()),
    });
    let result = env
        .rt
        .sync_pod(&pod, &status, helper, &Backoff::crash_loop_default())
        .await
        .expect("sync_pod");
    assert_eq!(result.container_errors.len(), 1);
    assert_eq!(
        result.container_errors[0].reason,
        reasons::CREATE_CONTAINER_CONFIG_ERROR
    );
    assert_eq!(
        result.container_errors[0].message,
        "secret \"db\" not found"
    );
    assert_eq!(env.cri().count("CreateContainer"), 0);
}

#[tokio::test]
async fn sandbox_failure_is_pod_error() {
    let env = setup().await;
    env.cri().fail(
        "RunPodSandbox",
        Code::Internal,
        "failed to setup network for sandbox",
    );
    let result = env.sync(&pod("web"), &Backoff::crash_loop_default()).await;
    let msg = result.pod_error.expect("pod error");
    assert!(msg.contains("failed to setup network"), "{msg}");
    assert!(result.container_errors.is_empty());
    assert_eq!(env.cri().count("CreateContainer"), 0);

    // create/start failures are per container
    env.cri().clear_failure("RunPodSandbox");
    env.cri()
        .fail("StartContainer", Code::Unknown, "exec: \"nope\": not found");
    let result = env.sync(&pod("web"), &Backoff::crash_loop_default()).await;
    assert!(result.pod_error.is_none(), "{result:?}");
    assert_eq!(
        result.container_errors[0].reason,
        reasons::RUN_CONTAINER_ERROR
    );
}

#[tokio::test]
async fn kill_pod_stops_everything_and_remove_pod_cleans_up() {
    let env = setup().await;
    let backoff = Backoff::crash_loop_default();
    let mut pod = pod_with("web", "Always", &["a", "b"]);
    pod.spec
        .as_mut()
        .expect("spec")
        .termination_grace_period_seconds = Some(1);
    assert!(env.sync(&pod, &backoff).await.is_ok());
    let running = env
        .rt
        .get_pods(false)
        .await
        .expect("get_pods")
        .into_iter()
        .find(|p| p.uid.as_str() == "uid-web")
        .expect("running pod");

    env.rt
        .kill_pod(Some(&pod), &running, None)
        .await
        .expect("kill_pod");
    for c in env.cri().containers() {
        assert_eq!(
            c.state,
            cri::ContainerState::ContainerExited,
            "{}",
            c.name()
        );
        assert_eq!(
            c.stop_timeout,
            Some(2),
            "grace period raised to the 2 s minimum"
        );
    }
    assert_eq!(
        env.cri().sandboxes()[0].state,
        cri::PodSandboxState::SandboxNotready
    );
    assert_eq!(
        env.cri().containers().len(),
        2,
        "stopped containers are kept"
    );
    // idempotent, and NotFound counts as success
    env.cri().fail("StopContainer", Code::NotFound, "gone");
    env.rt
        .kill_pod(Some(&pod), &running, Some(0))
        .await
        .expect("kill again");
    env.cri().clear_failure("StopContainer");

    let all = env
        .rt
        .get_pods(true)
        .await
        .expect("get_pods")
        .into_iter()
        .find(|p| p.uid.as_str() == "uid-web")
        .expect("pod");
    assert!(all.is_empty_or_stopped());
    env.rt.remove_pod(&all).await.expect("remove_pod");
    assert!(env.cri().containers().is_empty());
    assert!(env.cri().sandboxes().is_empty());
    assert!(
        !env.logs().join("default_web_uid-web").exists(),
        "log dir removed"
    );
    assert!(env.rt.get_pods(true).await.expect("get_pods").is_empty());
}

#[tokio::test]
async fn kill_orphan_uses_annotations_and_override() {
    let env = setup().await;
    let backoff = Backoff::crash_loop_default();
    let mut pod = pod("web");
    pod.spec
        .as_mut()
        .expect("spec")
        .termination_grace_period_seconds = Some(45);
    assert!(env.sync(&pod, &backoff).await.is_ok());
    let running = env.rt.get_pods(false).await.expect("get_pods").remove(0);

    // no pod (e.g. after a kubelet restart): the grace period recorded on the container
    env.rt
        .kill_pod(None, &running, None)
        .await
        .expect("kill_pod");
    assert_eq!(env.cri().containers()[0].stop_timeout, Some(45));

    // a hard-kill override still gets the 2 s minimum (upstream `killContainer`)
    assert!(env.sync(&pod, &backoff).await.is_ok());
    let running = env.rt.get_pods(false).await.expect("get_pods").remove(0);
    env.rt
        .kill_pod(Some(&pod), &running, Some(0))
        .await
        .expect("kill_pod");
    let newest = env.cri().containers().pop().expect("container");
    assert_eq!(newest.stop_timeout, Some(2));
}

#[tokio::test]
async fn delete_container_removes_it() {
    let env = setup().await;
    let pod = pod("web");
    assert!(env.sync(&pod, &Backoff::crash_loop_default()).await.is_ok());
    let c = env.cri().containers()[0].clone();
    let log = env.logs().join("default_web_uid-web/app/0.log");
    assert_eq!(Path::new(&c.log_path), log);
    std::fs::write(&log, b"hello\n").expect("runtime writes the log");
    let id = c.id;
    env.rt.delete_container(&id).await.expect("delete");
    assert!(env.cri().containers().is_empty());
    assert!(!log.exists(), "log file removed with the container");
    env.rt
        .delete_container(&id)
        .await
        .expect("deleting again is fine");
}

#[tokio::test]
async fn version_and_status() {
    let env = setup().await;
    let v = env.rt.version().await.expect("version");
    assert_eq!(v.runtime_name, "fake-cri");
    assert_eq!(v.runtime_api_version, "v1");
    let s = env.rt.status().await.expect("status");
    assert!(s.runtime_ready && s.network_ready);
    env.cri().set_conditions(true, false);
    let s = env.rt.status().await.expect("status");
    assert!(s.runtime_ready && !s.network_ready);
    assert!(s.message.contains("NetworkReady"), "{}", s.message);
    env.cri().fail("Version", Code::Internal, "boom");
    let err = env.rt.version().await.expect_err("scripted failure");
    assert!(
        matches!(err, Error::Runtime { op: "Version", .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn unavailable_until_the_runtime_is_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = FakeCriServer::socket_path_in(dir.path());
    let rt = kubelet_cri::connect(&format!("unix://{}", socket.display()), options(dir.path()))
        .expect("lazy connect");
    let err = rt.version().await.expect_err("not up yet");
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    let err = rt.get_pods(true).await.expect_err("not up yet");
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    let pod = pod("web");
    let err = rt
        .sync_pod(
            &pod,
            &PodStatus::default(),
            helper(),
            &Backoff::crash_loop_default(),
        )
        .await
        .expect_err("sync while down");
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");

    let server = FakeCriServer::start(dir.path()).await.expect("start");
    server.cri().add_image("busybox:1.36");
    assert_eq!(rt.version().await.expect("up now").runtime_name, "fake-cri");
    let result = rt
        .sync_pod(
            &pod,
            &PodStatus::default(),
            helper(),
            &Backoff::crash_loop_default(),
        )
        .await
        .expect("sync");
    assert!(result.is_ok(), "{result:?}");

    // the runtime restarts: unavailable while down, state visible again once back
    let state = server.shutdown().await;
    let err = rt.get_pods(true).await.expect_err("down");
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    let server = FakeCriServer::start_with(dir.path(), state)
        .await
        .expect("restart");
    let pods = rt.get_pods(true).await.expect("back");
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].uid.as_str(), "uid-web");
    server.shutdown().await;
}

#[tokio::test]
async fn stuck_runtime_call_times_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = FakeCriServer::start(dir.path()).await.expect("start");
    let opts = options(dir.path()).with_request_timeout(Duration::from_millis(200));
    let rt = kubelet_cri::connect(&server.endpoint(), opts).expect("connect");
    assert!(rt.version().await.is_ok());

    server.cri().hang("ListContainers");
    let err = rt.get_pods(true).await.expect_err("deadline");
    assert!(
        matches!(err, Error::Runtime { op: "ListContainers", ref message } if message.contains("deadline")),
        "{err:?}"
    );
    assert!(err.is_retryable());
    // other calls on the same connection are unaffected
    server.cri().clear_hang("ListContainers");
    assert!(rt.get_pods(true).await.expect("get_pods").is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn exec_sync_deadline_is_request_timeout_plus_command_timeout_and_none_without_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = FakeCriServer::start(dir.path()).await.expect("start");
    let opts = options(dir.path()).with_request_timeout(Duration::from_millis(100));
    let rt = kubelet_cri::connect(&server.endpoint(), opts).expect("connect");
    server.cri().hang("ExecSync");
    let cmd = ["true".to_owned()];

    // a probe's command (1 s) on a hung runtime: timed out after 1.1 s
    let r = rt
        .exec_sync("c1", &cmd, Duration::from_secs(1), 1024)
        .await
        .expect("a timed-out command is not an error");
    assert!(r.timed_out);

    // a hook's command (no timeout, upstream passes 0): no deadline at all, so it is still
    // waiting well after the request timeout
    let hook = rt.exec_sync("c1", &cmd, Duration::ZERO, 1024);
    assert!(
        tokio::time::timeout(Duration::from_secs(1), hook)
            .await
            .is_err(),
        "no deadline without a command timeout"
    );
    server.cri().clear_hang("ExecSync");
    server.shutdown().await;
}

#[tokio::test]
async fn run_as_non_root_with_a_root_image_is_a_config_error() {
    let env = setup().await;
    let mut p = pod("nonroot");
    if let Some(spec) = p.spec.as_mut() {
        spec.security_context = Some(k8s_openapi::api::core::v1::PodSecurityContext {
            run_as_non_root: Some(true),
            ..Default::default()
        });
    }
    let result = env.sync(&p, &Backoff::crash_loop_default()).await;
    assert_eq!(result.container_errors.len(), 1, "{result:?}");
    let err = &result.container_errors[0];
    assert_eq!(err.reason, reasons::CREATE_CONTAINER_CONFIG_ERROR);
    assert_eq!(
        err.message,
        "container has runAsNonRoot and image will run as root (pod: \"nonroot_default(uid-nonroot)\", container: app)"
    );
    assert_eq!(env.cri().count("CreateContainer"), 0);

    // With a non-root runAsUser the same image runs, as that user.
    if let Some(sc) = p.spec.as_mut().and_then(|s| s.security_context.as_mut()) {
        sc.run_as_user = Some(1000);
    }
    let result = env.sync(&p, &Backoff::crash_loop_default()).await;
    assert!(result.is_ok(), "{result:?}");
    let c = &env.cri().containers()[0];
    let sc = c
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .expect("security context");
    assert_eq!(sc.run_as_user, Some(cri::Int64Value { value: 1000 }));
}

#[tokio::test]
async fn unsafe_sysctls_keep_the_pod_from_starting() {
    let env = setup().await;
    let mut p = pod("sysctl");
    if let Some(spec) = p.spec.as_mut() {
        spec.security_context = Some(k8s_openapi::api::core::v1::PodSecurityContext {
            sysctls: Some(vec![k8s_openapi::api::core::v1::Sysctl {
                name: "kernel.msgmax".into(),
                value: "1".into(),
            }]),
            ..Default::default()
        });
    }
    let result = env.sync(&p, &Backoff::crash_loop_default()).await;
    assert_eq!(
        result.pod_error.as_deref(),
        Some("forbidden sysctl: \"kernel.msgmax\" not allowlisted")
    );
    assert_eq!(env.cri().count("RunPodSandbox"), 0);
}

/// Every CRI call is counted by upstream's `operation_type`; a failing one also as an error
/// (upstream `instrumented_services.go`).
#[tokio::test]
async fn runtime_operations_are_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = FakeCriServer::start(dir.path()).await.expect("start");
    let metrics = kubelet_core::metrics::KubeletMetrics::default();
    let rt =
        kubelet_cri::connect_with_metrics(&server.endpoint(), options(dir.path()), metrics.clone())
            .expect("connect");
    rt.version().await.expect("version");
    assert_eq!(metrics.runtime_operations_total("version"), 1);
    assert_eq!(metrics.runtime_operations_errors_total("version"), 0);

    rt.get_pods(true).await.expect("get_pods");
    assert_eq!(metrics.runtime_operations_total("list_podsandbox"), 1);
    assert_eq!(metrics.runtime_operations_total("list_containers"), 1);

    server
        .cri()
        .fail("ListContainers", Code::Unavailable, "runtime is down");
    rt.get_pods(true).await.expect_err("failing ListContainers");
    assert_eq!(metrics.runtime_operations_total("list_containers"), 2);
    assert_eq!(
        metrics.runtime_operations_errors_total("list_containers"),
        1
    );
    assert_eq!(
        metrics.runtime_operations_errors_total("list_podsandbox"),
        0
    );
    server.shutdown().await;
}

#[tokio::test]
async fn streaming_urls_come_from_cri_exec_attach_and_port_forward() {
    let env = setup().await;
    let p = web_pod();
    assert!(env.sync(&p, &Backoff::crash_loop_default()).await.is_ok());
    let pods = env.rt.get_pods(false).await.expect("get_pods");
    let (container, sandbox) = (&pods[0].containers[0].id, &pods[0].sandboxes[0].id);
    let streams = StreamOptions {
        stdin: true,
        stdout: true,
        stderr: false,
        tty: true,
    };
    let cmd = ["sh".to_owned(), "-c".to_owned(), "ls".to_owned()];
    assert_eq!(
        env.rt
            .get_exec(container, &cmd, streams)
            .await
            .expect("exec"),
        "http://127.0.0.1:10010/exec/1"
    );
    assert_eq!(
        env.rt.get_attach(container, streams).await.expect("attach"),
        "http://127.0.0.1:10010/attach/2"
    );
    assert_eq!(
        env.rt
            .get_port_forward(sandbox, &[80, 8080])
            .await
            .expect("port-forward"),
        "http://127.0.0.1:10010/portforward/3"
    );
    assert_eq!(
        env.cri().streams(),
        [
            StreamCall::Exec(cri::ExecRequest {
                container_id: container.clone(),
                cmd: cmd.to_vec(),
                tty: true,
                stdin: true,
                stdout: true,
                stderr: false,
            }),
            StreamCall::Attach(cri::AttachRequest {
                container_id: container.clone(),
                stdin: true,
                tty: true,
                stdout: true,
                stderr: false,
            }),
            StreamCall::PortForward(cri::PortForwardRequest {
                pod_sandbox_id: sandbox.clone(),
                port: vec![80, 8080],
            }),
        ]
    );
    // The runtime's NotFound is the kubelet's 404.
    assert!(matches!(
        env.rt.get_exec("nope", &cmd, streams).await,
        Err(Error::NotFound(_))
    ));
}
