//! A plain CRI v1 client: one lazily dialled HTTP/2 channel on the unix socket, one method per
//! call. No retries, no mapping: what a long-lived kubelet-like process pays for each call and
//! nothing else. Per-call deadlines mirror the kubelet's (`RunPodSandbox` twice the others).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// Errors of the agent, with their message only.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The kubelet's default `--runtime-request-timeout`, used as each call's deadline.
const TIMEOUT: Duration = Duration::from_secs(120);
/// The kubelet's message size limit.
const MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// Clients of both CRI services on one channel. Cheap to clone; clones share the connection.
#[derive(Clone, Debug)]
pub struct Client {
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
}

fn request<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    req.set_timeout(timeout);
    req
}

impl Client {
    /// A client with its own connection to `socket`, dialled on the first call.
    pub fn connect(socket: &Path) -> Self {
        let socket = socket.to_owned();
        let channel =
            Endpoint::from_static("http://[::]:50051")
                .connect_timeout(Duration::from_secs(10))
                .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                    let socket = socket.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(socket).await?))
                    }
                }));
        Self {
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE),
            image: ImageServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE),
        }
    }

    /// `Version`: the runtime's name and version.
    pub async fn version(&self) -> Result<String, Error> {
        let msg = cri::VersionRequest {
            version: "0.1.0".into(),
        };
        let resp = self
            .runtime
            .clone()
            .version(request(msg, TIMEOUT))
            .await?
            .into_inner();
        Ok(format!("{} {}", resp.runtime_name, resp.runtime_version))
    }

    /// `RunPodSandbox`; returns the sandbox ID.
    pub async fn run_pod_sandbox(&self, config: cri::PodSandboxConfig) -> Result<String, Error> {
        let msg = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        };
        let resp = self
            .runtime
            .clone()
            .run_pod_sandbox(request(msg, TIMEOUT * 2))
            .await?;
        Ok(resp.into_inner().pod_sandbox_id)
    }

    /// `PodSandboxStatus` (the kubelet reads the pod IPs from it right after creation).
    pub async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus, Error> {
        let msg = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: false,
        };
        let resp = self
            .runtime
            .clone()
            .pod_sandbox_status(request(msg, TIMEOUT))
            .await?;
        resp.into_inner()
            .status
            .ok_or_else(|| format!("no status for sandbox {id}").into())
    }

    /// `ImageStatus`; returns the image ID, or an error when the image is absent.
    pub async fn image_id(&self, spec: cri::ImageSpec) -> Result<String, Error> {
        let reference = spec.image.clone();
        let msg = cri::ImageStatusRequest {
            image: Some(spec),
            verbose: false,
        };
        let resp = self
            .image
            .clone()
            .image_status(request(msg, TIMEOUT))
            .await?;
        resp.into_inner()
            .image
            .map(|i| i.id)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| format!("image {reference} is not present").into())
    }

    /// `CreateContainer`; returns the container ID.
    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String, Error> {
        let msg = cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let resp = self
            .runtime
            .clone()
            .create_container(request(msg, TIMEOUT))
            .await?;
        Ok(resp.into_inner().container_id)
    }

    /// `StartContainer`.
    pub async fn start_container(&self, id: &str) -> Result<(), Error> {
        let msg = cri::StartContainerRequest {
            container_id: id.into(),
        };
        self.runtime
            .clone()
            .start_container(request(msg, TIMEOUT))
            .await?;
        Ok(())
    }

    /// `StopPodSandbox` (kills the sandbox's containers at once).
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), Error> {
        let msg = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.runtime
            .clone()
            .stop_pod_sandbox(request(msg, TIMEOUT))
            .await?;
        Ok(())
    }

    /// `RemovePodSandbox` (removes its containers too).
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), Error> {
        let msg = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.runtime
            .clone()
            .remove_pod_sandbox(request(msg, TIMEOUT))
            .await?;
        Ok(())
    }

    /// `ListContainers`, optionally only those in `state`.
    pub async fn list_containers(
        &self,
        state: Option<cri::ContainerState>,
    ) -> Result<Vec<cri::Container>, Error> {
        let msg = cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                state: state.map(|s| cri::ContainerStateValue { state: s as i32 }),
                label_selector: HashMap::new(),
                ..Default::default()
            }),
        };
        let resp = self
            .runtime
            .clone()
            .list_containers(request(msg, TIMEOUT))
            .await?;
        Ok(resp.into_inner().containers)
    }

    /// `ListPodSandbox`, every state.
    pub async fn list_pod_sandbox(&self) -> Result<Vec<cri::PodSandbox>, Error> {
        let msg = cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter::default()),
        };
        let resp = self
            .runtime
            .clone()
            .list_pod_sandbox(request(msg, TIMEOUT))
            .await?;
        Ok(resp.into_inner().items)
    }
}
