//! An in-process fake Kubernetes API server for tests (feature `test-util`): real HTTP on
//! `127.0.0.1:0`, reached by the real [`kube::Client`], with the semantics a kubelet depends
//! on — one increasing resourceVersion, field and label selectors, watches with resume,
//! `410 Expired`, bookmarks and selector entry/exit, PUT conflicts, merge/JSON/strategic
//! PATCH, the `/status` subresource, DELETE preconditions, finalizers and graceful pod
//! deletion, a CertificateSigningRequest's `/approval`, TokenRequest/TokenReview/
//! SubjectAccessReview from a policy table — plus
//! [fault switches](Faults) and a [journal](Journal) of every request.
//!
//! It stands in for `kube-apiserver` (`k8s.io/apiserver` and `pkg/registry`); where it and the
//! real server (see `/work/shared/APISERVER.md`) disagree, the fake is wrong.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use k8s_openapi::api::core::v1::Pod;
//! use kube::api::{Api, PostParams};
//! use kubelet_core::testing::apiserver::{FakeApiServer, Fault, RequestFilter};
//!
//! let fake = FakeApiServer::start().await?;
//! let client = fake.client("kubelet/test")?;
//! let pods: Api<Pod> = Api::namespaced(client, "default");
//! let pod = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "p"}, "spec": {"nodeName": "node-1", "containers": []}}))?;
//! pods.create(&PostParams::default(), &pod).await?;
//!
//! // The next two status patches fail with 500; the journal shows what the client did.
//! fake.faults().inject(Fault::Status(500), RequestFilter::any().verb("patch").resource("pods/status"), Some(2));
//! assert_eq!(fake.journal().count("create", "pods"), 1);
//! let entry = fake.journal().wait_for(|e| e.is("patch", "pods/status") && e.status == 200).await;
//! # let _ = entry;
//! # Ok(()) }
//! ```
//!
//! kube 5 retries 429, 503 and 504 itself (many times, with backoff): to observe those
//! statuses, build the client from [`FakeApiServer::kube_config`] with `default_retry = false`.

mod auth;
mod faults;
mod handlers;
mod http;
mod journal;
mod patch;
mod resource;
mod selectors;
mod status;
mod store;
mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper::header::{AUTHORIZATION, HeaderValue, USER_AGENT};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use auth::{Auth, UserInfo};
pub use faults::{Fault, Faults, RequestFilter};
pub use journal::{Entry, Journal};
pub use patch::strategic_merge;

use resource::Gvr;
use store::Store;

/// Errors of the fake API server's own API (not the HTTP errors it serves).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A header value (token, user agent) or the URL is not valid.
    #[error("invalid {what}: {value:?}")]
    Invalid {
        /// What was invalid.
        what: &'static str,
        /// The value.
        value: String,
    },
    /// The kube client could not be built.
    #[error("cannot build a kube client: {0}")]
    Client(#[source] kube::Error),
    /// The kubeconfig file could not be written.
    #[error("cannot write the kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A direct store operation failed as the API would have answered (`code`, `reason`).
    #[error("{code} {reason}: {message}")]
    Api {
        /// The HTTP status code.
        code: u16,
        /// The `Status` reason (`NotFound`, `AlreadyExists`, `Conflict`, …).
        reason: String,
        /// The message.
        message: String,
    },
}

impl From<status::ApiError> for Error {
    fn from(e: status::ApiError) -> Self {
        Self::Api {
            code: e.code,
            reason: e.reason.to_owned(),
            message: e.message,
        }
    }
}

/// `Result` with the fake's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// State shared by the server's tasks.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Mutex<Store>,
    /// Ticks after every change to the store (watches wait on it).
    pub(crate) changed: tokio::sync::watch::Sender<u64>,
    pub(crate) journal: Journal,
    pub(crate) faults: Faults,
    pub(crate) auth: Auth,
    pub(crate) bookmark_interval: Mutex<Duration>,
    /// How far the watch cache that answers `resourceVersion=0` reads lags the store.
    pub(crate) cache_lag: Mutex<Duration>,
}

impl Shared {
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Store) -> T) -> T {
        f(&self.store.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub(crate) fn write<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        let out = f(&mut self.store.lock().unwrap_or_else(PoisonError::into_inner));
        self.changed.send_modify(|n| *n += 1);
        out
    }

    pub(crate) fn restart(&self) {
        self.write(Store::compact);
    }
}

/// The fake API server. Dropping it stops it.
#[derive(Debug)]
pub struct FakeApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: Mutex<Option<JoinHandle<()>>>,
    files: Mutex<Vec<PathBuf>>,
}

fn gvr_of(api_version: &str, resource: &str) -> Gvr {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    Gvr {
        group: group.into(),
        version: version.into(),
        resource: resource.into(),
    }
}

impl FakeApiServer {
    /// Starts a server on `127.0.0.1` on a free port.
    pub async fn start() -> Result<Self> {
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Listen { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::Listen { addr, source })?;
        let shared = Arc::new(Shared {
            store: Mutex::default(),
            changed: tokio::sync::watch::channel(0).0,
            journal: Journal::default(),
            faults: Faults::default(),
            auth: Auth::default(),
            bookmark_interval: Mutex::new(Duration::from_secs(10)),
            cache_lag: Mutex::new(Duration::ZERO),
        });
        let task = tokio::spawn(http::accept_loop(listener, shared.clone()));
        Ok(Self {
            shared,
            addr,
            accept: Mutex::new(Some(task)),
            files: Mutex::default(),
        })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's URL (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client config for this server: bearer `token` (if any) and `User-Agent`
    /// `user_agent` on every request. Set `default_retry = false` on it to see 429/503/504
    /// instead of kube's own retries.
    pub fn kube_config(&self, token: Option<&str>, user_agent: &str) -> Result<kube::Config> {
        let url = self.url();
        let uri = url.parse().map_err(|_| Error::Invalid {
            what: "url",
            value: url,
        })?;
        let mut config = kube::Config::new(uri);
        let ua = HeaderValue::from_str(user_agent).map_err(|_| Error::Invalid {
            what: "user agent",
            value: user_agent.into(),
        })?;
        config.headers.push((USER_AGENT, ua));
        if let Some(token) = token {
            let bearer =
                HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| Error::Invalid {
                    what: "token",
                    value: token.into(),
                })?;
            config.headers.push((AUTHORIZATION, bearer));
        }
        Ok(config)
    }

    /// A client without a token (anonymous), sending `User-Agent: user_agent`.
    pub fn client(&self, user_agent: &str) -> Result<kube::Client> {
        kube::Client::try_from(self.kube_config(None, user_agent)?).map_err(Error::Client)
    }

    /// A client authenticating with a bearer token (see [`Auth::add_token`]).
    pub fn client_with_token(&self, token: &str, user_agent: &str) -> Result<kube::Client> {
        kube::Client::try_from(self.kube_config(Some(token), user_agent)?).map_err(Error::Client)
    }

    /// Writes a kubeconfig file for this server (for a binary's `--kubeconfig`); it is removed
    /// when the server is dropped.
    pub fn kubeconfig_file(&self, token: Option<&str>) -> Result<PathBuf> {
        let n: u64 = rand::random();
        let path = std::env::temp_dir().join(format!(
            "fake-apiserver-{}-{n:016x}.kubeconfig",
            self.addr.port()
        ));
        let user = match token {
            Some(t) => format!("{{token: {}}}", serde_json::Value::from(t)),
            None => "{}".to_owned(),
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"{}\"}}\n\
             users:\n- name: fake\n  user: {user}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: fake}}\n\
             current-context: fake\n",
            self.url()
        );
        std::fs::write(&path, text).map_err(|source| Error::Kubeconfig {
            path: path.clone(),
            source,
        })?;
        self.files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(path.clone());
        Ok(path)
    }

    /// Every request answered so far.
    pub fn journal(&self) -> &Journal {
        &self.shared.journal
    }

    /// The fault switches.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// The authentication and authorization table.
    pub fn auth(&self) -> &Auth {
        &self.shared.auth
    }

    /// How often watches that allow bookmarks get one (default 10 s).
    pub fn set_bookmark_interval(&self, every: Duration) {
        *self
            .shared
            .bookmark_interval
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = every;
    }

    /// Makes a GET with `resourceVersion=0` (served by a real API server from its watch
    /// cache) see the store as it was `lag` ago: an object created less than `lag` ago is
    /// `404`, one changed since is its older self. Default: no lag. A real server's cache
    /// lags by the time etcd's watch takes to deliver, usually milliseconds, more under load.
    pub fn set_watch_cache_lag(&self, lag: Duration) {
        *self
            .shared
            .cache_lag
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = lag;
    }

    /// Closes the listener and every open connection: new connections are refused until
    /// [`FakeApiServer::start_listening`]. The store is kept.
    pub fn stop_listening(&self) {
        if let Some(task) = self
            .accept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }

    /// Listens again on the same port (after [`FakeApiServer::stop_listening`]).
    pub async fn start_listening(&self) -> Result<()> {
        self.stop_listening();
        let listener = TcpListener::bind(self.addr)
            .await
            .map_err(|source| Error::Listen {
                addr: self.addr,
                source,
            })?;
        let task = tokio::spawn(http::accept_loop(listener, self.shared.clone()));
        *self.accept.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
        Ok(())
    }

    /// Simulates a restart that lost the watch history: open watches end, and watching (or
    /// continuing a list) from any resourceVersion handed out before is `410 Gone`. Objects
    /// are kept.
    pub fn restart(&self) {
        self.shared.restart();
    }

    /// Creates an object directly (as a POST would): `api_version` is `v1` or
    /// `group/version`, `resource` the plural (`pods`), `namespace` empty for cluster-scoped.
    pub fn create(
        &self,
        api_version: &str,
        resource: &str,
        namespace: &str,
        object: Value,
    ) -> Result<Value> {
        let gvr = gvr_of(api_version, resource);
        Ok(self.shared.write(|s| s.create(&gvr, namespace, object))?)
    }

    /// An object as stored (with `kind` and `apiVersion`), if it exists.
    pub fn get(
        &self,
        api_version: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        let gvr = gvr_of(api_version, resource);
        self.shared.read(|s| s.get(&gvr, namespace, name).ok())
    }

    /// Replaces an object directly (as a PUT would; `status: true` for `/status`).
    pub fn update(
        &self,
        api_version: &str,
        resource: &str,
        namespace: &str,
        object: Value,
        status: bool,
    ) -> Result<Value> {
        let gvr = gvr_of(api_version, resource);
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let sub = status.then_some("status");
        Ok(self
            .shared
            .write(|s| s.update(&gvr, namespace, &name, object, sub))?)
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.read(Store::rv)
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.stop_listening();
        for f in self
            .files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            let _ = std::fs::remove_file(f);
        }
    }
}
