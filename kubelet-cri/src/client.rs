//! The gRPC client: a lazily connected channel over a unix socket, one method per CRI call,
//! each with a deadline and mapped errors.
//!
//! Mirrors upstream `pkg/kubelet/cri/remote/remote_runtime.go` and `remote_image.go`
//! (per-call `context.WithTimeout`, 16 MiB message limit, `RunPodSandbox` deadline doubled,
//! `StopContainer` and `ExecSync` deadlines extended by the grace period or command timeout,
//! no deadline for `PullImage` or an `ExecSync` without a timeout), instrumented in one place as upstream
//! `pkg/kubelet/kuberuntime/instrumented_services.go`: every call counts in
//! `kubelet_runtime_operations_total`, `_duration_seconds` and, when it fails,
//! `_errors_total`, labelled with upstream's `operation_type` ([`operation_type`]).

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use kubelet_core::kuberuntime::api;
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::runtime::{Error, Result};
use kubelet_core::start_path;
use tokio::net::UnixStream;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::error::{ConnectError, from_status};

/// Upstream's `maxMsgSize`: large enough for `ListContainers` on a busy node.
const MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// The kubelet's CRI API version sent in `Version` (upstream `kubeRuntimeAPIVersion`).
const KUBE_RUNTIME_API_VERSION: &str = "0.1.0";

/// Parses `unix:///path` or a plain path into the socket path.
pub(crate) fn socket_path(endpoint: &str) -> Result<PathBuf, ConnectError> {
    let path = match endpoint.split_once("://") {
        Some(("unix", path)) => path,
        Some(_) => return Err(ConnectError::UnsupportedEndpoint(endpoint.to_owned())),
        None => endpoint,
    };
    if path.is_empty() {
        return Err(ConnectError::UnsupportedEndpoint(endpoint.to_owned()));
    }
    Ok(PathBuf::from(path))
}

/// The `pid` of a verbose `ContainerStatus`'s `info` JSON (0 or absent: none).
fn verbose_info_pid(info: &str) -> Option<u32> {
    let info: serde_json::Value = serde_json::from_str(info).ok()?;
    let pid = u32::try_from(info.get("pid")?.as_u64()?).ok()?;
    (pid > 0).then_some(pid)
}

/// Clients of both CRI services sharing one lazily connected channel. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct CriClient {
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
    timeout: Duration,
    metrics: KubeletMetrics,
}

/// Upstream's `operation_type` of a CRI method (`instrumented_services.go`).
pub(crate) fn operation_type(method: &'static str) -> &'static str {
    match method {
        "Version" => "version",
        "Status" => "status",
        "CreateContainer" => "create_container",
        "StartContainer" => "start_container",
        "StopContainer" => "stop_container",
        "RemoveContainer" => "remove_container",
        "ListContainers" => "list_containers",
        "ContainerStatus" => "container_status",
        "UpdateContainerResources" => "update_container",
        "ReopenContainerLog" => "reopen_container_log",
        "ExecSync" => "exec_sync",
        "Exec" => "exec",
        "Attach" => "attach",
        "PortForward" => "port_forward",
        "RunPodSandbox" => "run_podsandbox",
        "StopPodSandbox" => "stop_podsandbox",
        "RemovePodSandbox" => "remove_podsandbox",
        "PodSandboxStatus" => "podsandbox_status",
        "ListPodSandbox" => "list_podsandbox",
        "ContainerStats" => "container_stats",
        "ListContainerStats" => "list_container_stats",
        "PodSandboxStats" => "podsandbox_stats",
        "ListPodSandboxStats" => "list_podsandbox_stats",
        "UpdateRuntimeConfig" => "update_runtime_config",
        "ListImages" => "list_images",
        "ImageStatus" => "image_status",
        "PullImage" => "pull_image",
        "RemoveImage" => "remove_image",
        "ImageFsInfo" => "image_fs_info",
        other => other,
    }
}

/// Awaits one unary call with a deadline and maps its error.
async fn unary_call<T>(
    op: &'static str,
    timeout: Option<Duration>,
    call: impl Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T> {
    let started = std::time::Instant::now();
    let result = match timeout {
        Some(t) => match tokio::time::timeout(t, call).await {
            Ok(r) => r,
            Err(_) => {
                return Err(Error::Runtime {
                    op,
                    message: format!("deadline exceeded after {t:?}"),
                });
            }
        },
        None => call.await,
    };
    tracing::trace!(
        target: start_path::TARGET,
        op,
        us = started.elapsed().as_micros() as u64,
        "cri call"
    );
    result.map(tonic::Response::into_inner).map_err(|s| {
        tracing::debug!(op, code = ?s.code(), message = s.message(), "CRI call failed");
        match (timeout, s.code()) {
            // The deadline also travels as `grpc-timeout`; whichever side notices first, the
            // caller sees the same error.
            (Some(t), tonic::Code::DeadlineExceeded | tonic::Code::Cancelled) => Error::Runtime {
                op,
                message: format!("deadline exceeded after {t:?}: {}", s.message()),
            },
            _ => from_status(op, &s),
        }
    })
}

fn request<T>(message: T, timeout: Option<Duration>) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    if let Some(t) = timeout {
        req.set_timeout(t);
    }
    req
}

impl CriClient {
    /// A client for the socket at `path`; nothing is dialled until the first call, and a
    /// failed connection is retried on the next call.
    pub(crate) fn connect_lazy(path: &Path, timeout: Duration) -> Result<Self, ConnectError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(ConnectError::NoRuntime);
        }
        let path = path.to_owned();
        // The URI is ignored by the connector; tonic needs a syntactically valid one.
        let channel =
            Endpoint::from_static("http://[::]:50051")
                .connect_timeout(timeout)
                .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?))
                    }
                }));
        Ok(Self {
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE),
            image: ImageServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE),
            timeout,
            metrics: KubeletMetrics::default(),
        })
    }

    /// Records every call in `metrics` (by default in a set nobody reads).
    pub(crate) fn with_metrics(mut self, metrics: KubeletMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// One unary call `op` with a deadline (`unary_call`), recorded in the metrics.
    async fn unary<T>(
        &self,
        op: &'static str,
        timeout: Option<Duration>,
        call: impl Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T> {
        let started = Instant::now();
        let result = unary_call(op, timeout, call).await;
        self.metrics.record_runtime_operation(
            operation_type(op),
            started.elapsed(),
            result.is_err(),
        );
        result
    }

    fn t(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    pub(crate) async fn version(&self) -> Result<cri::VersionResponse> {
        let msg = cri::VersionRequest {
            version: KUBE_RUNTIME_API_VERSION.into(),
        };
        let mut c = self.runtime.clone();
        self.unary("Version", self.t(), c.version(request(msg, self.t())))
            .await
    }

    /// `ExecSync` with the command's own `timeout` (zero: none). The call's deadline is the
    /// request timeout plus `timeout`, and there is none when `timeout` is zero (lifecycle
    /// hooks), as upstream; `Ok(None)` when the command timed out (the runtime answers
    /// `DeadlineExceeded`, or the deadline passes).
    pub(crate) async fn exec_sync(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<Option<cri::ExecSyncResponse>> {
        let msg = cri::ExecSyncRequest {
            container_id: id.into(),
            cmd: cmd.to_vec(),
            timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        };
        let deadline = (!timeout.is_zero()).then(|| self.timeout + timeout);
        let mut c = self.runtime.clone();
        let started = Instant::now();
        let call = c.exec_sync(request(msg, deadline));
        let answer = match deadline {
            Some(d) => tokio::time::timeout(d, call).await.ok(),
            None => Some(call.await),
        };
        let result = match answer {
            None => Ok(None),
            Some(Ok(resp)) => Ok(Some(resp.into_inner())),
            Some(Err(s)) if s.code() == tonic::Code::DeadlineExceeded => Ok(None),
            // tonic enforces the `grpc-timeout` it sends as well, and reports its own expiry
            // as `Cancelled` ("Timeout expired"), whichever timer fires first.
            Some(Err(s)) if deadline.is_some() && s.code() == tonic::Code::Cancelled => Ok(None),
            Some(Err(s)) => Err(from_status("ExecSync", &s)),
        };
        // A command that timed out is an error of the call, as upstream counts it.
        let failed = !matches!(result, Ok(Some(_)));
        self.metrics
            .record_runtime_operation("exec_sync", started.elapsed(), failed);
        result
    }

    /// `Exec`, `Attach` or `PortForward` (upstream `remoteRuntimeService.Exec`, …): the URL
    /// of the session on the runtime's streaming server.
    pub(crate) async fn stream_url(&self, stream: &api::StreamRequest) -> Result<String> {
        let mut c = self.runtime.clone();
        let t = self.t();
        let (op, url) = match stream.clone() {
            api::StreamRequest::Exec {
                container_id,
                cmd,
                tty,
                stdin,
                stdout,
                stderr,
            } => {
                let msg = cri::ExecRequest {
                    container_id,
                    cmd,
                    tty,
                    stdin,
                    stdout,
                    stderr,
                };
                (
                    "Exec",
                    self.unary("Exec", t, c.exec(request(msg, t))).await?.url,
                )
            }
            api::StreamRequest::Attach {
                container_id,
                tty,
                stdin,
                stdout,
                stderr,
            } => {
                let msg = cri::AttachRequest {
                    container_id,
                    stdin,
                    tty,
                    stdout,
                    stderr,
                };
                let resp = self.unary("Attach", t, c.attach(request(msg, t))).await?;
                ("Attach", resp.url)
            }
            api::StreamRequest::PortForward { sandbox_id, ports } => {
                let msg = cri::PortForwardRequest {
                    pod_sandbox_id: sandbox_id,
                    port: ports,
                };
                let resp = self
                    .unary("PortForward", t, c.port_forward(request(msg, t)))
                    .await?;
                ("PortForward", resp.url)
            }
        };
        if url.is_empty() {
            return Err(Error::Runtime {
                op,
                message: "runtime returned an empty streaming URL".into(),
            });
        }
        Ok(url)
    }

    pub(crate) async fn status(&self) -> Result<cri::StatusResponse> {
        let msg = cri::StatusRequest { verbose: false };
        let mut c = self.runtime.clone();
        self.unary("Status", self.t(), c.status(request(msg, self.t())))
            .await
    }

    pub(crate) async fn run_pod_sandbox(
        &self,
        config: cri::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        let msg = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: runtime_handler.to_owned(),
        };
        let handler = msg.runtime_handler.clone();
        let mut c = self.runtime.clone();
        // Upstream doubles the deadline: sandbox creation includes CNI setup.
        let t = Some(self.timeout * 2);
        let started = Instant::now();
        let resp = self
            .unary("RunPodSandbox", t, c.run_pod_sandbox(request(msg, t)))
            .await;
        // Upstream `instrumentedRuntimeService.RunPodSandbox`: by RuntimeClass handler.
        self.metrics
            .record_run_podsandbox(&handler, started.elapsed(), resp.is_err());
        let resp = resp?;
        if resp.pod_sandbox_id.is_empty() {
            return Err(Error::Runtime {
                op: "RunPodSandbox",
                message: "runtime returned an empty sandbox id".into(),
            });
        }
        Ok(resp.pod_sandbox_id)
    }

    pub(crate) async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        let msg = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        let mut c = self.runtime.clone();
        self.unary(
            "StopPodSandbox",
            self.t(),
            c.stop_pod_sandbox(request(msg, self.t())),
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        let msg = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        let mut c = self.runtime.clone();
        self.unary(
            "RemovePodSandbox",
            self.t(),
            c.remove_pod_sandbox(request(msg, self.t())),
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus> {
        let msg = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: false,
        };
        let mut c = self.runtime.clone();
        let resp = self
            .unary(
                "PodSandboxStatus",
                self.t(),
                c.pod_sandbox_status(request(msg, self.t())),
            )
            .await?;
        resp.status.ok_or_else(|| Error::Runtime {
            op: "PodSandboxStatus",
            message: format!("pod sandbox status of {id} is nil"),
        })
    }

    pub(crate) async fn list_pod_sandbox(
        &self,
        state: Option<cri::PodSandboxState>,
        label_selector: HashMap<String, String>,
    ) -> Result<Vec<cri::PodSandbox>> {
        let msg = cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                id: String::new(),
                state: state.map(|s| cri::PodSandboxStateValue { state: s as i32 }),
                label_selector,
            }),
        };
        let mut c = self.runtime.clone();
        let resp = self
            .unary(
                "ListPodSandbox",
                self.t(),
                c.list_pod_sandbox(request(msg, self.t())),
            )
            .await?;
        Ok(resp.items)
    }

    pub(crate) async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String> {
        let msg = cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let mut c = self.runtime.clone();
        let resp = self
            .unary(
                "CreateContainer",
                self.t(),
                c.create_container(request(msg, self.t())),
            )
            .await?;
        if resp.container_id.is_empty() {
            return Err(Error::Runtime {
                op: "CreateContainer",
                message: "runtime returned an empty container id".into(),
            });
        }
        Ok(resp.container_id)
    }

    pub(crate) async fn start_container(&self, id: &str) -> Result<()> {
        let msg = cri::StartContainerRequest {
            container_id: id.into(),
        };
        let mut c = self.runtime.clone();
        self.unary(
            "StartContainer",
            self.t(),
            c.start_container(request(msg, self.t())),
        )
        .await?;
        Ok(())
    }

    /// Stops a container, giving it `grace_seconds` before SIGKILL; the deadline of the call is
    /// the request timeout plus the grace period.
    pub(crate) async fn stop_container(&self, id: &str, grace_seconds: i64) -> Result<()> {
        let grace = grace_seconds.max(0);
        let msg = cri::StopContainerRequest {
            container_id: id.into(),
            timeout: grace,
        };
        let t = Some(self.timeout + Duration::from_secs(grace.unsigned_abs()));
        let mut c = self.runtime.clone();
        self.unary("StopContainer", t, c.stop_container(request(msg, t)))
            .await?;
        Ok(())
    }

    pub(crate) async fn remove_container(&self, id: &str) -> Result<()> {
        let msg = cri::RemoveContainerRequest {
            container_id: id.into(),
        };
        let mut c = self.runtime.clone();
        self.unary(
            "RemoveContainer",
            self.t(),
            c.remove_container(request(msg, self.t())),
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn reopen_container_log(&self, id: &str) -> Result<()> {
        let msg = cri::ReopenContainerLogRequest {
            container_id: id.into(),
        };
        let mut c = self.runtime.clone();
        self.unary(
            "ReopenContainerLog",
            self.t(),
            c.reopen_container_log(request(msg, self.t())),
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn list_containers(
        &self,
        state: Option<cri::ContainerState>,
        label_selector: HashMap<String, String>,
    ) -> Result<Vec<cri::Container>> {
        let msg = cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                id: String::new(),
                state: state.map(|s| cri::ContainerStateValue { state: s as i32 }),
                pod_sandbox_id: String::new(),
                label_selector,
            }),
        };
        let mut c = self.runtime.clone();
        let resp = self
            .unary(
                "ListContainers",
                self.t(),
                c.list_containers(request(msg, self.t())),
            )
            .await?;
        Ok(resp.containers)
    }

    pub(crate) async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus> {
        let msg = cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        };
        let mut c = self.runtime.clone();
        let resp = self
            .unary(
                "ContainerStatus",
                self.t(),
                c.container_status(request(msg, self.t())),
            )
            .await?;
        resp.status.ok_or_else(|| Error::Runtime {
            op: "ContainerStatus",
            message: format!("container status of {id} is nil"),
        })
    }

    /// The process ID of a container's init process, from the verbose `ContainerStatus`'s
    /// `info` (containerd and CRI-O put a JSON object with `pid` under the key `info`, as
    /// `crictl inspect` shows it); `None` when the runtime does not say.
    pub(crate) async fn container_pid(&self, id: &str) -> Result<Option<u32>> {
        let msg = cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: true,
        };
        let mut c = self.runtime.clone();
        let resp = self
            .unary(
                "ContainerStatus",
                self.t(),
                c.container_status(request(msg, self.t())),
            )
            .await?;
        Ok(resp
            .info
            .get("info")
            .and_then(|info| verbose_info_pid(info)))
    }

    /// Every image the runtime has.
    pub(crate) async fn list_images(&self) -> Result<Vec<cri::Image>> {
        let msg = cri::ListImagesRequest { filter: None };
        let mut c = self.image.clone();
        let resp = self
            .unary(
                "ListImages",
                self.t(),
                c.list_images(request(msg, self.t())),
            )
            .await?;
        Ok(resp.images)
    }

    /// Removes an image (by ID or reference; removing an absent one succeeds, as CRI says).
    pub(crate) async fn remove_image(&self, spec: cri::ImageSpec) -> Result<()> {
        let msg = cri::RemoveImageRequest { image: Some(spec) };
        let mut c = self.image.clone();
        self.unary(
            "RemoveImage",
            self.t(),
            c.remove_image(request(msg, self.t())),
        )
        .await?;
        Ok(())
    }

    /// The image if the runtime has it (`None` when absent, as CRI reports it).
    pub(crate) async fn image_status(&self, spec: cri::ImageSpec) -> Result<Option<cri::Image>> {
        let msg = cri::ImageStatusRequest {
            image: Some(spec),
            verbose: false,
        };
        let mut c = self.image.clone();
        let resp = self
            .unary(
                "ImageStatus",
                self.t(),
                c.image_status(request(msg, self.t())),
            )
            .await?;
        Ok(resp.image.filter(|i| !i.id.is_empty()))
    }

    /// Stats of every container (upstream `ListContainerStats` with an empty filter).
    pub(crate) async fn list_container_stats(&self) -> Result<Vec<cri::ContainerStats>> {
        let msg = cri::ListContainerStatsRequest { filter: None };
        let mut c = self.runtime.clone();
        let resp = self
            .unary(
                "ListContainerStats",
                self.t(),
                c.list_container_stats(request(msg, self.t())),
            )
            .await?;
        Ok(resp.stats)
    }

    /// Stats of every sandbox (`ListPodSandboxStats`; runtimes without it answer
    /// `Unimplemented`).
    pub(crate) async fn list_pod_sandbox_stats(&self) -> Result<Vec<cri::PodSandboxStats>> {
        let msg = cri::ListPodSandboxStatsRequest { filter: None };
        let mut c = self.runtime.clone();
        let resp = self
            .unary(
                "ListPodSandboxStats",
                self.t(),
                c.list_pod_sandbox_stats(request(msg, self.t())),
            )
            .await?;
        Ok(resp.stats)
    }

    /// Usage of the image filesystems (`ImageFsInfo`).
    pub(crate) async fn image_fs_info(&self) -> Result<Vec<cri::FilesystemUsage>> {
        let msg = cri::ImageFsInfoRequest {};
        let mut c = self.image.clone();
        let resp = self
            .unary(
                "ImageFsInfo",
                self.t(),
                c.image_fs_info(request(msg, self.t())),
            )
            .await?;
        Ok(resp.image_filesystems)
    }

    /// Pulls an image. No deadline, as upstream: pulls of large images take long; dropping the
    /// future cancels the call.
    pub(crate) async fn pull_image(
        &self,
        spec: cri::ImageSpec,
        auth: Option<cri::AuthConfig>,
        sandbox_config: cri::PodSandboxConfig,
    ) -> Result<String> {
        let msg = cri::PullImageRequest {
            image: Some(spec),
            auth,
            sandbox_config: Some(sandbox_config),
        };
        let mut c = self.image.clone();
        let resp = self
            .unary("PullImage", None, c.pull_image(request(msg, None)))
            .await?;
        if resp.image_ref.is_empty() {
            return Err(Error::Runtime {
                op: "PullImage",
                message: "runtime returned an empty image reference".into(),
            });
        }
        Ok(resp.image_ref)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints() {
        assert_eq!(
            socket_path("unix:///run/containerd/containerd.sock").expect("unix url"),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(
            socket_path("/run/crio/crio.sock").expect("path"),
            PathBuf::from("/run/crio/crio.sock")
        );
        assert!(socket_path("tcp://127.0.0.1:1234").is_err());
        assert!(socket_path("unix://").is_err());
        assert!(socket_path("").is_err());
    }

    #[test]
    fn the_init_pid_is_the_verbose_infos_pid() {
        assert_eq!(
            verbose_info_pid(r#"{"sandboxID":"abc","pid":4242,"removing":false}"#),
            Some(4242)
        );
        for none in [
            r#"{"pid":0}"#,
            r#"{"pid":-1}"#,
            r#"{"sandboxID":"abc"}"#,
            "not json",
        ] {
            assert_eq!(verbose_info_pid(none), None, "{none}");
        }
    }

    #[test]
    fn connect_needs_a_runtime() {
        let err = CriClient::connect_lazy(Path::new("/nonexistent.sock"), Duration::from_secs(1))
            .expect_err("no runtime");
        assert!(matches!(err, ConnectError::NoRuntime));
    }
}
