//! The fake's CRI `RuntimeService` and `ImageService` implementations.
//!
//! Behaviour follows the CRI contract as containerd implements it where tests care: stop and
//! remove are idempotent for sandboxes and removal of containers; `StopContainer`,
//! `ContainerStatus` and `PodSandboxStatus` of an unknown ID are `NotFound`; stopping a sandbox
//! stops its containers; a sandbox name (pod name, namespace, UID, attempt) and a container
//! name (name, attempt) within a sandbox are reserved, as containerd does.

use std::collections::HashMap;

use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_server::ImageService;
use k8s_cri::v1::runtime_service_server::RuntimeService;
use tonic::{Request, Response, Status};

use std::sync::MutexGuard;

use super::state::{FakeContainer, FakeCri, FakeImage, FakeSandbox, State, StreamCall, image_id};
use crate::convert::{NETWORK_READY, RUNTIME_READY};

fn unimplemented(method: &str) -> Status {
    Status::unimplemented(format!(
        "{method} is not implemented by the fake CRI server"
    ))
}

fn matches_labels(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn sandbox_message(s: &FakeSandbox) -> cri::PodSandbox {
    cri::PodSandbox {
        id: s.id.clone(),
        metadata: s.config.metadata.clone(),
        state: s.state as i32,
        created_at: s.created_at,
        labels: s.config.labels.clone(),
        annotations: s.config.annotations.clone(),
        runtime_handler: s.runtime_handler.clone(),
    }
}

fn container_message(c: &FakeContainer) -> cri::Container {
    cri::Container {
        id: c.id.clone(),
        pod_sandbox_id: c.sandbox_id.clone(),
        metadata: c.config.metadata.clone(),
        image: c.config.image.clone(),
        image_ref: c.image_ref.clone(),
        state: c.state as i32,
        created_at: c.created_at,
        labels: c.config.labels.clone(),
        annotations: c.config.annotations.clone(),
        image_id: c.image_ref.clone(),
    }
}

fn image_message(i: &FakeImage) -> cri::Image {
    cri::Image {
        id: i.id.clone(),
        repo_tags: i.repo_tags.clone(),
        size: 1024,
        ..Default::default()
    }
}

/// The tonic service: a [`FakeCri`] behind both CRI services.
#[derive(Clone, Debug)]
pub(crate) struct Service(pub(crate) FakeCri);

impl Service {
    /// Records the call, then never answers if the method is scripted to hang, else fails it
    /// if scripted to fail.
    async fn enter(
        &self,
        method: &'static str,
        target: &str,
    ) -> Result<MutexGuard<'_, State>, Status> {
        if self.0.record(method, target) {
            std::future::pending::<()>().await;
        }
        self.0.check(method)
    }
}

#[tonic::async_trait]
impl RuntimeService for Service {
    async fn version(
        &self,
        _: Request<cri::VersionRequest>,
    ) -> Result<Response<cri::VersionResponse>, Status> {
        drop(self.enter("Version", "").await?);
        Ok(Response::new(cri::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake-cri".into(),
            runtime_version: "0.1.0".into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn status(
        &self,
        _: Request<cri::StatusRequest>,
    ) -> Result<Response<cri::StatusResponse>, Status> {
        let st = self.enter("Status", "").await?;
        let condition = |ty: &str, ok: bool| cri::RuntimeCondition {
            r#type: ty.into(),
            status: ok,
            reason: if ok {
                String::new()
            } else {
                format!("{ty}False")
            },
            message: String::new(),
        };
        Ok(Response::new(cri::StatusResponse {
            status: Some(cri::RuntimeStatus {
                conditions: vec![
                    condition(RUNTIME_READY, st.runtime_ready),
                    condition(NETWORK_READY, st.network_ready),
                ],
            }),
            runtime_handlers: st
                .runtime_handlers
                .iter()
                .flat_map(|known| std::iter::once(String::new()).chain(known.iter().cloned()))
                .map(|name| cri::RuntimeHandler {
                    name,
                    features: Some(cri::RuntimeHandlerFeatures::default()),
                })
                .collect(),
            ..Default::default()
        }))
    }

    async fn run_pod_sandbox(
        &self,
        request: Request<cri::RunPodSandboxRequest>,
    ) -> Result<Response<cri::RunPodSandboxResponse>, Status> {
        let request = request.into_inner();
        let runtime_handler = request.runtime_handler;
        let config = request
            .config
            .ok_or_else(|| Status::invalid_argument("sandbox config is required"))?;
        let md = config
            .metadata
            .clone()
            .ok_or_else(|| Status::invalid_argument("sandbox metadata is required"))?;
        let mut st = self.enter("RunPodSandbox", &md.name).await?;
        if let Some(known) = &st.runtime_handlers
            && !runtime_handler.is_empty()
            && !known.contains(&runtime_handler)
        {
            // containerd 1.6 `RunPodSandbox`.
            return Err(Status::unknown(format!(
                "failed to get sandbox runtime: no runtime for {runtime_handler:?} is configured"
            )));
        }
        if st
            .sandboxes
            .values()
            .any(|s| s.config.metadata.as_ref() == Some(&md))
        {
            return Err(Status::already_exists(format!(
                "name {}_{}_{}_{} is reserved",
                md.name, md.namespace, md.uid, md.attempt
            )));
        }
        let host_network = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .is_some_and(|o| o.network == cri::NamespaceMode::Node as i32);
        let id = st.next_id("sandbox");
        let ip = if host_network {
            String::new()
        } else {
            st.next_ip()
        };
        let created_at = st.now();
        st.sandboxes.insert(
            id.clone(),
            FakeSandbox {
                id: id.clone(),
                config,
                state: cri::PodSandboxState::SandboxReady,
                created_at,
                ip,
                runtime_handler,
            },
        );
        Ok(Response::new(cri::RunPodSandboxResponse {
            pod_sandbox_id: id,
        }))
    }

    async fn stop_pod_sandbox(
        &self,
        request: Request<cri::StopPodSandboxRequest>,
    ) -> Result<Response<cri::StopPodSandboxResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        let mut st = self.enter("StopPodSandbox", &id).await?;
        if let Some(s) = st.sandboxes.get_mut(&id) {
            s.state = cri::PodSandboxState::SandboxNotready;
            let running: Vec<String> = st
                .containers
                .values()
                .filter(|c| c.sandbox_id == id && c.state == cri::ContainerState::ContainerRunning)
                .map(|c| c.id.clone())
                .collect();
            for c in running {
                st.exit(&c, 137, "Error");
            }
        }
        Ok(Response::new(cri::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        request: Request<cri::RemovePodSandboxRequest>,
    ) -> Result<Response<cri::RemovePodSandboxResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        let mut st = self.enter("RemovePodSandbox", &id).await?;
        st.sandboxes.remove(&id);
        st.containers.retain(|_, c| c.sandbox_id != id);
        Ok(Response::new(cri::RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<cri::PodSandboxStatusRequest>,
    ) -> Result<Response<cri::PodSandboxStatusResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        let st = self.enter("PodSandboxStatus", &id).await?;
        let s = st
            .sandboxes
            .get(&id)
            .ok_or_else(|| Status::not_found(format!("sandbox {id} not found")))?;
        let options = s
            .config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|c| c.namespace_options.clone());
        Ok(Response::new(cri::PodSandboxStatusResponse {
            status: Some(cri::PodSandboxStatus {
                id: s.id.clone(),
                metadata: s.config.metadata.clone(),
                state: s.state as i32,
                created_at: s.created_at,
                network: Some(cri::PodSandboxNetworkStatus {
                    ip: s.ip.clone(),
                    additional_ips: Vec::new(),
                }),
                linux: Some(cri::LinuxPodSandboxStatus {
                    namespaces: Some(cri::Namespace { options }),
                }),
                labels: s.config.labels.clone(),
                annotations: s.config.annotations.clone(),
                runtime_handler: s.runtime_handler.clone(),
            }),
            ..Default::default()
        }))
    }

    async fn list_pod_sandbox(
        &self,
        request: Request<cri::ListPodSandboxRequest>,
    ) -> Result<Response<cri::ListPodSandboxResponse>, Status> {
        let filter = request.into_inner().filter.unwrap_or_default();
        let st = self.enter("ListPodSandbox", "").await?;
        let items = st
            .sandboxes
            .values()
            .filter(|s| filter.id.is_empty() || s.id == filter.id)
            .filter(|s| filter.state.is_none_or(|v| v.state == s.state as i32))
            .filter(|s| matches_labels(&s.config.labels, &filter.label_selector))
            .map(sandbox_message)
            .collect();
        Ok(Response::new(cri::ListPodSandboxResponse { items }))
    }

    async fn create_container(
        &self,
        request: Request<cri::CreateContainerRequest>,
    ) -> Result<Response<cri::CreateContainerResponse>, Status> {
        let req = request.into_inner();
        let config = req
            .config
            .ok_or_else(|| Status::invalid_argument("container config is required"))?;
        let md = config
            .metadata
            .clone()
            .ok_or_else(|| Status::invalid_argument("container metadata is required"))?;
        let mut st = self.enter("CreateContainer", &md.name).await?;
        let sandbox = st.sandboxes.get(&req.pod_sandbox_id).ok_or_else(|| {
            Status::not_found(format!("sandbox {} not found", req.pod_sandbox_id))
        })?;
        if sandbox.state != cri::PodSandboxState::SandboxReady {
            return Err(Status::failed_precondition(format!(
                "sandbox {} is not ready",
                req.pod_sandbox_id
            )));
        }
        let log_path = format!("{}/{}", sandbox.config.log_directory, config.log_path);
        if st
            .containers
            .values()
            .any(|c| c.sandbox_id == req.pod_sandbox_id && c.config.metadata.as_ref() == Some(&md))
        {
            return Err(Status::already_exists(format!(
                "container name {}_{} is reserved in sandbox {}",
                md.name, md.attempt, req.pod_sandbox_id
            )));
        }
        let image = config.image.as_ref().map_or("", |i| i.image.as_str());
        let image_ref = st
            .find_image(image)
            .map(|i| i.id.clone())
            .ok_or_else(|| Status::not_found(format!("image {image:?} not found")))?;
        let id = st.next_id("container");
        let created_at = st.now();
        st.containers.insert(
            id.clone(),
            FakeContainer {
                id: id.clone(),
                sandbox_id: req.pod_sandbox_id,
                config,
                image_ref,
                state: cri::ContainerState::ContainerCreated,
                created_at,
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
                reason: String::new(),
                message: String::new(),
                stop_timeout: None,
                log_path,
            },
        );
        Ok(Response::new(cri::CreateContainerResponse {
            container_id: id,
        }))
    }

    async fn start_container(
        &self,
        request: Request<cri::StartContainerRequest>,
    ) -> Result<Response<cri::StartContainerResponse>, Status> {
        let id = request.into_inner().container_id;
        let mut st = self.enter("StartContainer", &id).await?;
        let now = st.now();
        let c = st
            .containers
            .get_mut(&id)
            .ok_or_else(|| Status::not_found(format!("container {id} not found")))?;
        if c.state != cri::ContainerState::ContainerCreated {
            return Err(Status::failed_precondition(format!(
                "container {id} is not in created state"
            )));
        }
        c.state = cri::ContainerState::ContainerRunning;
        c.started_at = now;
        Ok(Response::new(cri::StartContainerResponse {}))
    }

    async fn stop_container(
        &self,
        request: Request<cri::StopContainerRequest>,
    ) -> Result<Response<cri::StopContainerResponse>, Status> {
        let req = request.into_inner();
        let mut st = self.enter("StopContainer", &req.container_id).await?;
        let c = st.containers.get_mut(&req.container_id).ok_or_else(|| {
            Status::not_found(format!("container {} not found", req.container_id))
        })?;
        c.stop_timeout = Some(req.timeout);
        st.exit(&req.container_id, 137, "Error");
        Ok(Response::new(cri::StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        request: Request<cri::RemoveContainerRequest>,
    ) -> Result<Response<cri::RemoveContainerResponse>, Status> {
        let id = request.into_inner().container_id;
        let mut st = self.enter("RemoveContainer", &id).await?;
        st.containers.remove(&id);
        Ok(Response::new(cri::RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        request: Request<cri::ListContainersRequest>,
    ) -> Result<Response<cri::ListContainersResponse>, Status> {
        let filter = request.into_inner().filter.unwrap_or_default();
        let st = self.enter("ListContainers", "").await?;
        let containers = st
            .containers
            .values()
            .filter(|c| filter.id.is_empty() || c.id == filter.id)
            .filter(|c| filter.pod_sandbox_id.is_empty() || c.sandbox_id == filter.pod_sandbox_id)
            .filter(|c| filter.state.is_none_or(|v| v.state == c.state as i32))
            .filter(|c| matches_labels(&c.config.labels, &filter.label_selector))
            .map(container_message)
            .collect();
        Ok(Response::new(cri::ListContainersResponse { containers }))
    }

    async fn container_status(
        &self,
        request: Request<cri::ContainerStatusRequest>,
    ) -> Result<Response<cri::ContainerStatusResponse>, Status> {
        let id = request.into_inner().container_id;
        let st = self.enter("ContainerStatus", &id).await?;
        let c = st
            .containers
            .get(&id)
            .ok_or_else(|| Status::not_found(format!("container {id} not found")))?;
        Ok(Response::new(cri::ContainerStatusResponse {
            status: Some(cri::ContainerStatus {
                id: c.id.clone(),
                metadata: c.config.metadata.clone(),
                state: c.state as i32,
                created_at: c.created_at,
                started_at: c.started_at,
                finished_at: c.finished_at,
                exit_code: c.exit_code,
                image: c.config.image.clone(),
                image_ref: c.image_ref.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                mounts: c.config.mounts.clone(),
                log_path: c.log_path.clone(),
                image_id: c.image_ref.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    type GetContainerEventsStream =
        futures::stream::Empty<Result<cri::ContainerEventResponse, Status>>;

    async fn get_container_events(
        &self,
        _: Request<cri::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        Err(unimplemented("GetContainerEvents"))
    }

    async fn update_container_resources(
        &self,
        _: Request<cri::UpdateContainerResourcesRequest>,
    ) -> Result<Response<cri::UpdateContainerResourcesResponse>, Status> {
        Err(unimplemented("UpdateContainerResources"))
    }
    async fn reopen_container_log(
        &self,
        _: Request<cri::ReopenContainerLogRequest>,
    ) -> Result<Response<cri::ReopenContainerLogResponse>, Status> {
        Err(unimplemented("ReopenContainerLog"))
    }
    async fn exec_sync(
        &self,
        request: Request<cri::ExecSyncRequest>,
    ) -> Result<Response<cri::ExecSyncResponse>, Status> {
        let req = request.into_inner();
        let mut st = self.enter("ExecSync", &req.container_id).await?;
        let running = st
            .containers
            .get(&req.container_id)
            .is_some_and(|c| c.state == cri::ContainerState::ContainerRunning);
        if !running {
            return Err(Status::not_found(format!(
                "container {} is not running",
                req.container_id
            )));
        }
        st.execs.push((req.container_id, req.cmd));
        let (exit_code, stderr) = st.exec_result.clone();
        Ok(Response::new(cri::ExecSyncResponse {
            stdout: Vec::new(),
            stderr: stderr.into_bytes(),
            exit_code,
        }))
    }
    async fn exec(
        &self,
        request: Request<cri::ExecRequest>,
    ) -> Result<Response<cri::ExecResponse>, Status> {
        let req = request.into_inner();
        let mut st = self.enter("Exec", &req.container_id).await?;
        running(&st, &req.container_id)?;
        let url = stream_url(&mut st, "exec", StreamCall::Exec(req));
        Ok(Response::new(cri::ExecResponse { url }))
    }
    async fn attach(
        &self,
        request: Request<cri::AttachRequest>,
    ) -> Result<Response<cri::AttachResponse>, Status> {
        let req = request.into_inner();
        let mut st = self.enter("Attach", &req.container_id).await?;
        running(&st, &req.container_id)?;
        let url = stream_url(&mut st, "attach", StreamCall::Attach(req));
        Ok(Response::new(cri::AttachResponse { url }))
    }
    async fn port_forward(
        &self,
        request: Request<cri::PortForwardRequest>,
    ) -> Result<Response<cri::PortForwardResponse>, Status> {
        let req = request.into_inner();
        let mut st = self.enter("PortForward", &req.pod_sandbox_id).await?;
        if !st.sandboxes.contains_key(&req.pod_sandbox_id) {
            return Err(Status::not_found(format!(
                "failed to find sandbox {:?}",
                req.pod_sandbox_id
            )));
        }
        let url = stream_url(&mut st, "portforward", StreamCall::PortForward(req));
        Ok(Response::new(cri::PortForwardResponse { url }))
    }
    async fn container_stats(
        &self,
        _: Request<cri::ContainerStatsRequest>,
    ) -> Result<Response<cri::ContainerStatsResponse>, Status> {
        Err(unimplemented("ContainerStats"))
    }
    async fn list_container_stats(
        &self,
        _: Request<cri::ListContainerStatsRequest>,
    ) -> Result<Response<cri::ListContainerStatsResponse>, Status> {
        let mut st = self.enter("ListContainerStats", "").await?;
        let now = st.now();
        let stats = st
            .containers
            .values()
            .map(|c| {
                let (cpu, ws) = st.usage.get(&c.id).copied().unwrap_or_default();
                let v = |value| Some(cri::UInt64Value { value });
                cri::ContainerStats {
                    attributes: Some(cri::ContainerAttributes {
                        id: c.id.clone(),
                        metadata: c.config.metadata.clone(),
                        labels: c.config.labels.clone(),
                        annotations: c.config.annotations.clone(),
                    }),
                    cpu: Some(cri::CpuUsage {
                        timestamp: now,
                        usage_core_nano_seconds: v(cpu),
                        usage_nano_cores: None,
                    }),
                    memory: Some(cri::MemoryUsage {
                        timestamp: now,
                        working_set_bytes: v(ws),
                        ..Default::default()
                    }),
                    writable_layer: Some(cri::FilesystemUsage {
                        timestamp: now,
                        fs_id: Some(cri::FilesystemIdentifier {
                            mountpoint: "/".into(),
                        }),
                        used_bytes: v(4096),
                        inodes_used: v(1),
                    }),
                    swap: None,
                }
            })
            .collect();
        Ok(Response::new(cri::ListContainerStatsResponse { stats }))
    }
    async fn pod_sandbox_stats(
        &self,
        _: Request<cri::PodSandboxStatsRequest>,
    ) -> Result<Response<cri::PodSandboxStatsResponse>, Status> {
        Err(unimplemented("PodSandboxStats"))
    }
    async fn list_pod_sandbox_stats(
        &self,
        _: Request<cri::ListPodSandboxStatsRequest>,
    ) -> Result<Response<cri::ListPodSandboxStatsResponse>, Status> {
        Err(unimplemented("ListPodSandboxStats"))
    }
    async fn update_runtime_config(
        &self,
        _: Request<cri::UpdateRuntimeConfigRequest>,
    ) -> Result<Response<cri::UpdateRuntimeConfigResponse>, Status> {
        Err(unimplemented("UpdateRuntimeConfig"))
    }
    async fn checkpoint_container(
        &self,
        _: Request<cri::CheckpointContainerRequest>,
    ) -> Result<Response<cri::CheckpointContainerResponse>, Status> {
        Err(unimplemented("CheckpointContainer"))
    }
    async fn list_metric_descriptors(
        &self,
        _: Request<cri::ListMetricDescriptorsRequest>,
    ) -> Result<Response<cri::ListMetricDescriptorsResponse>, Status> {
        Err(unimplemented("ListMetricDescriptors"))
    }
    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<cri::ListPodSandboxMetricsRequest>,
    ) -> Result<Response<cri::ListPodSandboxMetricsResponse>, Status> {
        Err(unimplemented("ListPodSandboxMetrics"))
    }
    async fn runtime_config(
        &self,
        _: Request<cri::RuntimeConfigRequest>,
    ) -> Result<Response<cri::RuntimeConfigResponse>, Status> {
        Err(unimplemented("RuntimeConfig"))
    }
}

#[tonic::async_trait]
impl ImageService for Service {
    async fn list_images(
        &self,
        _: Request<cri::ListImagesRequest>,
    ) -> Result<Response<cri::ListImagesResponse>, Status> {
        let st = self.enter("ListImages", "").await?;
        Ok(Response::new(cri::ListImagesResponse {
            images: st.images.iter().map(image_message).collect(),
        }))
    }

    async fn image_status(
        &self,
        request: Request<cri::ImageStatusRequest>,
    ) -> Result<Response<cri::ImageStatusResponse>, Status> {
        let image = request.into_inner().image.unwrap_or_default().image;
        let st = self.enter("ImageStatus", &image).await?;
        Ok(Response::new(cri::ImageStatusResponse {
            image: st.find_image(&image).map(image_message),
            ..Default::default()
        }))
    }

    async fn pull_image(
        &self,
        request: Request<cri::PullImageRequest>,
    ) -> Result<Response<cri::PullImageResponse>, Status> {
        let request = request.into_inner();
        let image = request.image.unwrap_or_default().image;
        let mut st = self.enter("PullImage", &image).await?;
        st.pull_auths.push((
            image.clone(),
            request.auth.as_ref().map(|a| a.username.clone()),
        ));
        if let Some((user, password)) = st.pull_credentials.get(&image) {
            let sent = request.auth.as_ref().map(|a| (&a.username, &a.password));
            if sent != Some((user, password)) {
                return Err(Status::unknown(format!(
                    "failed to pull and unpack image {image:?}: failed to resolve reference \
                     {image:?}: unexpected status code 401 Unauthorized"
                )));
            }
        }
        if st.unpullable.contains(&image) {
            return Err(Status::not_found(format!(
                "failed to resolve reference {image:?}: not found"
            )));
        }
        if let Some(i) = st.find_image(&image) {
            return Ok(Response::new(cri::PullImageResponse {
                image_ref: i.id.clone(),
            }));
        }
        let id = image_id(&image);
        st.images.push(FakeImage {
            id: id.clone(),
            repo_tags: vec![image],
        });
        Ok(Response::new(cri::PullImageResponse { image_ref: id }))
    }

    async fn remove_image(
        &self,
        request: Request<cri::RemoveImageRequest>,
    ) -> Result<Response<cri::RemoveImageResponse>, Status> {
        let image = request.into_inner().image.unwrap_or_default().image;
        let mut st = self.enter("RemoveImage", &image).await?;
        st.images
            .retain(|i| i.id != image && !i.repo_tags.contains(&image));
        Ok(Response::new(cri::RemoveImageResponse {}))
    }

    async fn image_fs_info(
        &self,
        _: Request<cri::ImageFsInfoRequest>,
    ) -> Result<Response<cri::ImageFsInfoResponse>, Status> {
        let mut st = self.enter("ImageFsInfo", "").await?;
        let images = st.images.len() as u64;
        let usage = cri::FilesystemUsage {
            timestamp: st.now(),
            fs_id: Some(cri::FilesystemIdentifier {
                mountpoint: "/".into(),
            }),
            // image_message's size of each image.
            used_bytes: Some(cri::UInt64Value {
                value: images * 1024,
            }),
            inodes_used: Some(cri::UInt64Value { value: images }),
        };
        Ok(Response::new(cri::ImageFsInfoResponse {
            image_filesystems: vec![usage],
            container_filesystems: Vec::new(),
        }))
    }
}

/// containerd's answer to a streaming request for a container that is not running.
fn running(st: &State, id: &str) -> Result<(), Status> {
    match st.containers.get(id) {
        Some(c) if c.state == cri::ContainerState::ContainerRunning => Ok(()),
        Some(_) => Err(Status::failed_precondition(format!(
            "container {id} is not running"
        ))),
        None => Err(Status::not_found(format!(
            "failed to find container {id:?}"
        ))),
    }
}

/// Records `call` and returns its URL on the (imaginary) streaming server.
fn stream_url(st: &mut State, kind: &str, call: StreamCall) -> String {
    st.streams.push(call);
    format!("http://127.0.0.1:10010/{kind}/{}", st.streams.len())
}
