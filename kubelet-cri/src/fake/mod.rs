//! An in-process CRI server for tests (feature `test-util`): [`FakeCriServer`] serves a
//! stateful fake `RuntimeService` and `ImageService` with tonic on a unix socket, so that
//! [`crate::RemoteRuntime`] (or any CRI client) is tested at the wire level.
//!
//! Like upstream's `pkg/kubelet/cri/remote/fake` (`RemoteRuntime` over `FakeRuntimeService`),
//! the fake keeps sandboxes, containers and images, records every call, can be scripted to
//! fail a method, and lets a test make containers exit. Methods the kubelet does not use yet
//! (streaming, sandbox stats, events, …) answer `Unimplemented`; `ListContainerStats`
//! reports what [`FakeCri::set_container_usage`] set.
//!
//! ```no_run
//! use kubelet_cri::fake::FakeCriServer;
//! use kubelet_cri::Options;
//! use kubelet_core::runtime::Runtime;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = std::env::temp_dir().join("fake-cri");
//! std::fs::create_dir_all(&dir)?;
//! let server = FakeCriServer::start(&dir).await?;
//! let runtime = kubelet_cri::connect(&server.endpoint(), Options::default())?;
//! assert_eq!(runtime.version().await?.runtime_name, "fake-cri");
//! assert_eq!(server.cri().count("Version"), 1);
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod service;
mod state;

use std::path::{Path, PathBuf};

use k8s_cri::v1::image_service_server::ImageServiceServer;
use k8s_cri::v1::runtime_service_server::RuntimeServiceServer;
use tokio::net::UnixListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;

pub use state::{Call, FakeContainer, FakeCri, FakeImage, FakeSandbox, StreamCall};

/// File name of the socket [`FakeCriServer::start`] listens on inside its directory.
pub const SOCKET_NAME: &str = "cri.sock";

/// A running fake CRI server. Dropping it stops serving (without waiting); prefer
/// [`FakeCriServer::shutdown`].
#[derive(Debug)]
pub struct FakeCriServer {
    socket: PathBuf,
    cri: FakeCri,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl FakeCriServer {
    /// The socket path [`FakeCriServer::start`] uses for `dir` (known before it starts, so a
    /// client can be pointed at a server that is not up yet).
    pub fn socket_path_in(dir: &Path) -> PathBuf {
        dir.join(SOCKET_NAME)
    }

    /// Serves a new, empty fake on `<dir>/cri.sock`.
    pub async fn start(dir: &Path) -> std::io::Result<Self> {
        Self::start_with(dir, FakeCri::new()).await
    }

    /// Serves `cri` (e.g. the state of a previous server, to simulate a runtime restart) on
    /// `<dir>/cri.sock`. A stale socket file is replaced.
    pub async fn start_with(dir: &Path, cri: FakeCri) -> std::io::Result<Self> {
        let socket = Self::socket_path_in(dir);
        match tokio::fs::remove_file(&socket).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let listener = UnixListener::bind(&socket)?;
        let (tx, rx) = oneshot::channel();
        let service = service::Service(cri.clone());
        let task = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RuntimeServiceServer::new(service.clone()))
                .add_service(ImageServiceServer::new(service))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = rx.await;
                }),
        );
        Ok(Self {
            socket,
            cri,
            shutdown: Some(tx),
            task: Some(task),
        })
    }

    /// The socket the server listens on.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// `unix://<socket>`, for [`crate::connect`].
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The fake's state.
    pub fn cri(&self) -> &FakeCri {
        &self.cri
    }

    /// Stops serving, waits for the server task and removes the socket; returns the state,
    /// which [`FakeCriServer::start_with`] can serve again.
    pub async fn shutdown(mut self) -> FakeCri {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take()
            && let Ok(Err(e)) = task.await
        {
            tracing::warn!(error = %e, "fake CRI server failed");
        }
        let _ = tokio::fs::remove_file(&self.socket).await;
        self.cri.clone()
    }
}

impl Drop for FakeCriServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
