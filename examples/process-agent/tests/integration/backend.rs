//! `ProcessRuntimeService` through the `RuntimeService` trait, with real host processes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container as ContainerSpec, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_core::kuberuntime::RuntimeService;
use kubelet_core::kuberuntime::api::{
    ContainerConfig, ContainerFilter, ContainerType, Labels, PodSandboxConfig,
};
use kubelet_core::runtime::{ContainerState, Error, Mount};
use process_agent::ProcessRuntimeService;

/// How long a test waits for a process to do what it was told before failing.
const PATIENCE: Duration = Duration::from_secs(20);

fn pod() -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("uid-web".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Creates container `name` running `sh -c script`, logging under `dir`.
async fn create(rt: &ProcessRuntimeService, dir: &Path, name: &str, script: &str) -> String {
    let pod = pod();
    let spec = ContainerSpec {
        name: name.into(),
        ..Default::default()
    };
    let sandbox = PodSandboxConfig {
        pod: &pod,
        attempt: 0,
        hostname: "web".into(),
        dns: Default::default(),
        log_directory: dir.to_owned(),
        cgroup_parent: String::new(),
        labels: Labels::new(),
        annotations: Labels::new(),
        runtime_handler: String::new(),
    };
    std::fs::create_dir_all(dir.join(name)).expect("log directory");
    let config = ContainerConfig {
        pod: &pod,
        container: &spec,
        container_type: ContainerType::Regular,
        attempt: 0,
        image_ref: "",
        image_user: None,
        command: vec!["sh".into(), "-c".into()],
        args: vec![script.into()],
        envs: vec![("GREETING".into(), "hello".into())],
        mounts: vec![Mount {
            host_path: "/var/lib/kubelet/pods/uid-web/containers/app/1".into(),
            container_path: dir.join("termination-log").to_string_lossy().into_owned(),
            ..Default::default()
        }],
        working_dir: String::new(),
        log_path: PathBuf::from(format!("{name}/0.log")),
        labels: Labels::from([("name".into(), name.into())]),
        annotations: Labels::new(),
        sandbox: &sandbox,
        target_container_id: None,
    };
    rt.create_container("uid-web", &config)
        .await
        .expect("created")
}

/// Polls until the container's log holds `text`: a real process reports no event a test
/// could await.
async fn wait_for_log(rt: &ProcessRuntimeService, id: &str, text: &str) {
    let log_path = rt.container_status(id).await.expect("known").log_path;
    let began = Instant::now();
    while !std::fs::read_to_string(&log_path)
        .unwrap_or_default()
        .contains(text)
    {
        assert!(began.elapsed() < PATIENCE, "{id} never logged {text:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `true` while process `pid` exists and is not a zombie.
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(") ")
            .next()
            .is_some_and(|rest| !rest.starts_with('Z'))
    })
}

async fn exited(rt: &ProcessRuntimeService, id: &str) -> (i32, String) {
    let began = Instant::now();
    loop {
        let status = rt.container_status(id).await.expect("known");
        if status.state == ContainerState::Exited {
            return (status.exit_code, status.reason);
        }
        assert!(began.elapsed() < PATIENCE, "{id} never exited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_process_runs_without_sandbox_or_image_and_its_exit_is_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = ProcessRuntimeService::default();
    assert!(!rt.has_sandboxes());
    assert_eq!(rt.version().await.expect("version").runtime_name, "process");
    assert!(rt.status().await.expect("status").runtime_ready);
    assert!(
        rt.image_status("anything")
            .await
            .expect("imageless")
            .is_some()
    );

    let id = create(
        &rt,
        dir.path(),
        "app",
        "echo $GREETING; echo to-stderr >&2; exit 3",
    )
    .await;
    let created = rt.container_status(&id).await.expect("known");
    assert_eq!(created.state, ContainerState::Created);
    let termination_log = dir.path().join("termination-log");
    assert_eq!(
        created.mounts[0].host_path, termination_log,
        "mounts are not applied"
    );

    rt.start_container(&id).await.expect("starts");
    assert_eq!(exited(&rt, &id).await, (3, "Error".to_owned()));
    let status = rt.container_status(&id).await.expect("known");
    assert_eq!(
        std::fs::read_to_string(&status.log_path).expect("log"),
        "hello\nto-stderr\n"
    );
    let listed = rt
        .list_containers(&ContainerFilter::default())
        .await
        .expect("list");
    assert_eq!(
        (listed.len(), listed[0].sandbox_id.as_str()),
        (1, "uid-web")
    );

    rt.remove_container(&id).await.expect("removed");
    assert!(matches!(
        rt.container_status(&id).await,
        Err(Error::NotFound(_))
    ));
    rt.remove_container(&id)
        .await
        .expect("removing twice succeeds");
}

#[tokio::test]
async fn stop_sends_sigterm_to_the_process_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = ProcessRuntimeService::default();
    let script = "trap 'echo bye; exit 7' TERM; echo ready; while :; do sleep 1; done";
    let id = create(&rt, dir.path(), "app", script).await;
    rt.start_container(&id).await.expect("starts");
    wait_for_log(&rt, &id, "ready").await;
    rt.stop_container(&id, 60).await.expect("stops");
    let status = rt.container_status(&id).await.expect("known");
    assert_eq!(
        (status.state, status.exit_code),
        (ContainerState::Exited, 7)
    );
    assert!(
        std::fs::read_to_string(&status.log_path)
            .expect("log")
            .ends_with("bye\n")
    );
    rt.stop_container(&id, 60)
        .await
        .expect("stopping twice succeeds");
}

#[tokio::test]
async fn stop_sends_sigkill_when_the_grace_period_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = ProcessRuntimeService::default();
    // The background child ignores SIGTERM too, and is not waited for: only killing the
    // process group ends it.
    let script = "trap '' TERM; sleep 300 & echo child=$!; echo ready; while :; do sleep 1; done";
    let id = create(&rt, dir.path(), "app", script).await;
    rt.start_container(&id).await.expect("starts");
    wait_for_log(&rt, &id, "ready").await;
    let log_path = rt.container_status(&id).await.expect("known").log_path;
    let log = std::fs::read_to_string(&log_path).expect("log");
    let child = log
        .lines()
        .find_map(|l| l.strip_prefix("child="))
        .expect("child pid logged")
        .to_owned();
    assert!(alive(&child));
    let began = Instant::now();
    rt.stop_container(&id, 1).await.expect("stops");
    assert!(
        began.elapsed() >= Duration::from_secs(1),
        "SIGTERM was ignored for the grace period"
    );
    let status = rt.container_status(&id).await.expect("known");
    assert_eq!((status.exit_code, status.reason.as_str()), (137, "Error"));
    let began = Instant::now();
    while alive(&child) {
        assert!(
            began.elapsed() < PATIENCE,
            "the group's other process survived SIGKILL"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn exec_sync_runs_on_the_host_with_the_container_env_and_caps_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = ProcessRuntimeService::default();
    let id = create(&rt, dir.path(), "app", "exec sleep 60").await;
    let cmd = |script: &str| vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()];
    assert!(
        rt.exec_sync(&id, &cmd("true"), Duration::ZERO, 10)
            .await
            .is_err(),
        "not running"
    );
    rt.start_container(&id).await.expect("starts");

    let probe = rt
        .exec_sync(&id, &cmd("echo $GREETING world; exit 2"), Duration::ZERO, 8)
        .await;
    let probe = probe.expect("runs");
    assert_eq!(
        (probe.exit_code, probe.stdout.as_slice()),
        (2, &b"hello wo"[..])
    );
    let slow = rt
        .exec_sync(&id, &cmd("sleep 30"), Duration::from_millis(200), 8)
        .await;
    assert!(slow.expect("runs").timed_out);

    rt.remove_container(&id)
        .await
        .expect("removing a running container kills it");
    assert!(
        rt.list_containers(&ContainerFilter::default())
            .await
            .expect("list")
            .is_empty()
    );
}
