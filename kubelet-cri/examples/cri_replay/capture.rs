//! The exact requests the kubelet would send for a pod, captured by running the kubelet's own
//! `RemoteRuntime::sync_pod` against an in-process fake CRI server (not timed).
//!
//! The fake keeps the `PodSandboxConfig` and `ContainerConfig` it received, byte for byte what
//! the kubelet builds for that pod (same `Options` as `kubelet-bin`: pod log dir and node name,
//! host resolv.conf). Only the image reference differs: the fake's image ID is replaced, at
//! replay time, by the ID the real runtime's `ImageStatus` returns, as the kubelet does.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_core::backoff::Backoff;
use kubelet_core::kuberuntime::container::pod_logs_dir;
use kubelet_core::kuberuntime::labels::{POD_UID_LABEL, new_pod_annotations};
use kubelet_core::pod::PodExt;
use kubelet_core::runtime::{PodStatus, RunContainerOptions, Runtime, RuntimeHelper};
use kubelet_cri::fake::FakeCriServer;
use kubelet_cri::{Options, RemoteRuntime};

use crate::cri::Error;

/// What to replay for one single-container pod.
#[derive(Clone, Debug)]
pub struct Replay {
    /// `RunPodSandbox` (and `CreateContainer`'s sandbox config).
    pub sandbox: cri::PodSandboxConfig,
    /// `ImageStatus`, as the kubelet's image manager asks it.
    pub image: cri::ImageSpec,
    /// `CreateContainer`; its image is set from `ImageStatus` at replay time.
    pub container: cri::ContainerConfig,
    /// The pod's log directory, created before `RunPodSandbox` as the kubelet does.
    pub pod_log_dir: PathBuf,
    /// The container's log directory, created before `CreateContainer`.
    pub container_log_dir: PathBuf,
    /// The CRI methods the kubelet's `sync_pod` called, in order.
    pub calls: Vec<&'static str>,
}

impl Replay {
    /// The same pod bare: the kubelet's metadata and labels (the poller finds containers by
    /// the pod labels) and the container's image (by tag, resolved by the runtime), command
    /// and args. Nothing else: no log directory or path, hostname, DNS config, port mappings,
    /// security context, cgroup parent, annotations, environment or mounts; the pod network as
    /// the replayed pod's (CNI).
    pub fn minimal(&self) -> (cri::PodSandboxConfig, cri::ContainerConfig) {
        let sandbox = cri::PodSandboxConfig {
            metadata: self.sandbox.metadata.clone(),
            labels: self.sandbox.labels.clone(),
            ..Default::default()
        };
        let container = cri::ContainerConfig {
            metadata: self.container.metadata.clone(),
            image: Some(cri::ImageSpec {
                image: self.image.image.clone(),
                ..Default::default()
            }),
            command: self.container.command.clone(),
            args: self.container.args.clone(),
            labels: self.container.labels.clone(),
            ..Default::default()
        };
        (sandbox, container)
    }
}

/// The container options `kubelet-bin`'s helper gives a pod without volumes: literal env
/// values, no mounts, hostname = `spec.hostname` or the pod name.
struct NoVolumesHelper;

#[async_trait::async_trait]
impl RuntimeHelper for NoVolumesHelper {
    async fn generate_run_container_options(
        &self,
        pod: &Pod,
        container: &Container,
        _pod_ips: &[String],
    ) -> Result<RunContainerOptions, kubelet_core::runtime::RunContainerOptionsError> {
        if container
            .volume_mounts
            .as_ref()
            .is_some_and(|m| !m.is_empty())
        {
            return Err(kubelet_core::runtime::RunContainerOptionsError::Other(
                "cri_replay supports pods without volumes only".into(),
            ));
        }
        Ok(RunContainerOptions {
            envs: container
                .env
                .iter()
                .flatten()
                .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
                .collect(),
            mounts: Vec::new(),
            hostname: pod
                .spec
                .as_ref()
                .and_then(|s| s.hostname.clone())
                .unwrap_or_else(|| pod.name_or_empty().to_owned()),
        })
    }
}

/// A fake CRI server and a kubelet `RemoteRuntime` on it.
pub struct Capture {
    server: FakeCriServer,
    runtime: RemoteRuntime,
    pod_log_root: PathBuf,
    _dir: tempfile::TempDir,
}

impl Capture {
    /// Starts the fake; `node` and `pod_log_root` are the kubelet's `--hostname-override` and
    /// `--pod-log-dir`.
    pub async fn start(node: &str, pod_log_root: &Path) -> Result<Self, Error> {
        let dir = tempfile::tempdir()?;
        let server = FakeCriServer::start(dir.path()).await?;
        let runtime = kubelet_cri::connect(
            &server.endpoint(),
            Options::default()
                .with_pod_logs_dir(pod_log_root)
                .with_node_name(node),
        )?;
        Ok(Self {
            server,
            runtime,
            pod_log_root: pod_log_root.to_owned(),
            _dir: dir,
        })
    }

    /// The requests of a first sync of `pod` (one container, image present).
    pub async fn replay_of(&self, pod: &Pod) -> Result<Replay, Error> {
        let [container] = pod.containers() else {
            return Err("cri_replay supports single-container pods only".into());
        };
        let raw_image = container.image.clone().unwrap_or_default();
        let image = kubelet_core::kuberuntime::image::apply_default_tag(&raw_image)
            .ok_or_else(|| format!("bad image {raw_image:?}"))?;
        let fake = self.server.cri();
        fake.add_image(&image);
        fake.clear_calls();

        let uid = pod.uid();
        let status = PodStatus {
            uid: uid.clone(),
            name: pod.name_or_empty().to_owned(),
            namespace: pod.namespace_or_default().to_owned(),
            ..Default::default()
        };
        let result = self
            .runtime
            .sync_pod(
                pod,
                &status,
                Arc::new(NoVolumesHelper),
                &Backoff::crash_loop_default(),
            )
            .await?;
        if let Some(e) = result.pod_error {
            return Err(e.into());
        }
        if let Some(e) = result.container_errors.first() {
            return Err(format!("{}: {} {}", e.container, e.reason, e.message).into());
        }
        let calls = fake.calls().into_iter().map(|c| c.method).collect();
        let sandbox = fake
            .sandboxes()
            .into_iter()
            .find(|s| s.label(POD_UID_LABEL) == Some(uid.as_str()))
            .ok_or("the kubelet created no sandbox")?;
        let created = fake
            .containers()
            .into_iter()
            .find(|c| c.sandbox_id == sandbox.id)
            .ok_or("the kubelet created no container")?;

        // The kubelet created the log directories; the timed replay must do it again.
        let pod_log_dir = pod_logs_dir(&self.pod_log_root, pod);
        let container_log_dir =
            kubelet_core::kuberuntime::container::container_logs_dir(&pod_log_dir, &container.name);
        let _ = std::fs::remove_dir_all(&pod_log_dir);

        Ok(Replay {
            sandbox: sandbox.config,
            image: cri::ImageSpec {
                image,
                annotations: new_pod_annotations(pod),
                user_specified_image: raw_image,
                runtime_handler: String::new(),
            },
            container: created.config,
            pod_log_dir,
            container_log_dir,
            calls,
        })
    }
}
