//! [`Cluster`]: etcd plus kube-apiserver on free loopback ports in a temporary directory, with an
//! admin and one `system:node:<name>` identity per node, killed and removed on drop.

use std::{
    collections::BTreeMap,
    fs::{self, File},
    io::Write,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tempfile::TempDir;

use super::files::{self, ADMIN_USER, TokenEntry};
use crate::util;

/// How long [`ClusterBuilder::start`] waits for `/readyz` (7–12 s is normal on a loaded machine).
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(100);
/// Attempts when a picked port was taken by someone else before the server bound it.
const PORT_ATTEMPTS: usize = 3;
/// The service-account issuer and the API audience.
const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Lines of the server's log in error messages and [`Cluster::log_tail`].
const TAIL_LINES: usize = 40;

/// Options for a [`Cluster`]; [`Cluster::builder`] makes one.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ClusterBuilder {
    nodes: Vec<String>,
    apiserver_args: Vec<String>,
    bind_node_group: bool,
    binary: Option<PathBuf>,
}

impl ClusterBuilder {
    /// Adds a node identity: a token for user `system:node:<name>` in group `system:nodes`, and
    /// its kubeconfig ([`Cluster::node_kubeconfig`]).
    pub fn node(mut self, name: impl Into<String>) -> Self {
        self.nodes.push(name.into());
        self
    }

    /// Adds a kube-apiserver flag (e.g. `--feature-gates=...`) after the fixture's own.
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// Binds group `system:nodes` to ClusterRole `system:node` (ClusterRoleBinding
    /// `e2e:system:nodes`), which a kubelet needs to create TokenReviews and
    /// SubjectAccessReviews (its authenticated HTTP API).
    ///
    /// Opt-in because it weakens the Node authorizer: through RBAC a node may then read every
    /// Secret and ConfigMap, which hides the 403s a real cluster gives.
    pub fn bind_node_group(mut self) -> Self {
        self.bind_node_group = true;
        self
    }

    /// Runs this kube-apiserver binary instead of the cached one.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Starts etcd and kube-apiserver, waits for `/readyz`, creates the `default` ServiceAccount
    /// and the `kube-root-ca.crt` ConfigMap in namespace `default`.
    ///
    /// Blocks for a few seconds (up to 90 s before it gives up): from async code call it in
    /// `tokio::task::spawn_blocking`. Fails when the binary is not cached; see
    /// [`start_or_skip`](Self::start_or_skip) for tests.
    pub fn start(self) -> Result<Cluster> {
        let binary = match &self.binary {
            Some(path) => path.clone(),
            None => super::cached_binary().with_context(|| {
                format!(
                    "kube-apiserver {} is not built: run `cargo xtask apiserver` (expected at {})",
                    super::VERSION,
                    super::binary_path().display()
                )
            })?,
        };
        let etcd = util::find_program("etcd").context(
            "etcd is not installed: run `cargo xtask apiserver` (or apt-get install etcd-server)",
        )?;
        Cluster::start(&self, &binary, &etcd)
    }

    /// Like [`start`](Self::start), but when the binary is not cached returns `Ok(None)` after
    /// printing why the test is skipped, unless [`REQUIRE_ENV`](super::REQUIRE_ENV) is set: then
    /// that is an error.
    pub fn start_or_skip(self) -> Result<Option<Cluster>> {
        if self.binary.is_none() && super::cached_binary().is_none() {
            let why = format!(
                "kube-apiserver {} is not built (expected at {}); `cargo xtask apiserver` builds it",
                super::VERSION,
                super::binary_path().display()
            );
            if super::required() {
                bail!("{why}, and {} is set", super::REQUIRE_ENV);
            }
            eprintln!("SKIPPED: {why}");
            return Ok(None);
        }
        self.start().map(Some)
    }
}

/// A running etcd + kube-apiserver on loopback; both are killed and the directory removed on
/// drop.
///
/// Authentication is by static bearer tokens: an admin in `system:masters` and a
/// `system:node:<name>` in `system:nodes` per [`ClusterBuilder::node`]. Authorization is
/// `Node,RBAC`; admission has `NodeRestriction` on and `ServiceAccount` off (1.20's waits for token
/// Secrets that only a controller-manager creates).
#[derive(Debug)]
pub struct Cluster {
    apiserver: Child,
    etcd: Child,
    url: String,
    ca_file: PathBuf,
    admin_token: String,
    admin_kubeconfig: PathBuf,
    /// Per node: its token and kubeconfig.
    nodes: BTreeMap<String, (String, PathBuf)>,
    apiserver_log: PathBuf,
    started_in: Duration,
    /// Declared last: removed after the processes are gone.
    dir: TempDir,
}

impl Cluster {
    /// A builder; [`ClusterBuilder::start`] starts the cluster.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    fn start(opts: &ClusterBuilder, binary: &Path, etcd: &Path) -> Result<Cluster> {
        let started = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("kube-apiserver-")
            .tempdir()
            .context("cannot create a temporary directory")?;
        let path = dir.path();
        let admin_token = files::random_token()?;
        let mut nodes = BTreeMap::new();
        for name in &opts.nodes {
            let kubeconfig = path.join(format!("node-{name}.kubeconfig"));
            nodes.insert(name.clone(), (files::random_token()?, kubeconfig));
        }
        let users: Vec<(String, String)> = nodes
            .iter()
            .map(|(name, (token, _))| (format!("system:node:{name}"), token.clone()))
            .collect();
        let mut entries = vec![TokenEntry {
            token: &admin_token,
            user: ADMIN_USER,
            uid: ADMIN_USER,
            groups: &["system:masters"],
        }];
        entries.extend(users.iter().map(|(user, token)| TokenEntry {
            token,
            user,
            uid: user,
            groups: &["system:nodes"],
        }));
        files::write_token_file(&path.join("tokens.csv"), &entries)?;
        files::write_service_account_keys(&path.join("sa.key"), &path.join("sa.pub"))?;
        let cert_dir = path.join("certs");
        let ca_file = cert_dir.join("apiserver.crt");
        let apiserver_log = path.join("kube-apiserver.log");

        let mut attempt = 0;
        let (apiserver, etcd, url) = loop {
            attempt += 1;
            match spawn_and_wait(opts, binary, etcd, path, &admin_token) {
                Ok(running) => break running,
                Err(Spawned::PortTaken(e)) if attempt < PORT_ATTEMPTS => {
                    eprintln!("apiserver fixture: {e:#}; retrying with other ports");
                }
                Err(Spawned::PortTaken(e) | Spawned::Failed(e)) => return Err(e),
            }
        };
        let admin_kubeconfig = path.join("admin.kubeconfig");
        files::write_kubeconfig(&admin_kubeconfig, &url, &ca_file, ADMIN_USER, &admin_token)?;
        for (name, (token, kubeconfig)) in &nodes {
            let user = format!("system:node:{name}");
            files::write_kubeconfig(kubeconfig, &url, &ca_file, &user, token)?;
        }
        let mut cluster = Cluster {
            apiserver,
            etcd,
            url,
            ca_file,
            admin_token,
            admin_kubeconfig,
            nodes,
            apiserver_log,
            started_in: Duration::ZERO,
            dir,
        };
        cluster
            .create_defaults(opts.bind_node_group)
            .with_context(|| format!("server log:\n{}", cluster.log_tail()))?;
        cluster.started_in = started.elapsed();
        Ok(cluster)
    }

    /// The server's URL, `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The PEM file that verifies the server's self-signed certificate.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// The admin's bearer token (user `admin`, group `system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The bearer token of `system:node:<name>`; an error if `name` was not given to
    /// [`ClusterBuilder::node`].
    pub fn node_token(&self, name: &str) -> Result<&str> {
        Ok(&self.node(name)?.0)
    }

    /// A kubeconfig file for the admin, for `kubectl --kubeconfig`.
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// A kubeconfig file for `system:node:<name>`: the kubelet's `--kubeconfig`.
    pub fn node_kubeconfig(&self, name: &str) -> Result<&Path> {
        Ok(&self.node(name)?.1)
    }

    fn node(&self, name: &str) -> Result<&(String, PathBuf)> {
        self.nodes
            .get(name)
            .with_context(|| format!("no node {name:?} in this cluster (ClusterBuilder::node)"))
    }

    /// The temporary directory with the logs, tokens, keys and kubeconfigs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last 40 lines of kube-apiserver's log, for assertion messages.
    pub fn log_tail(&self) -> String {
        util::tail(&self.apiserver_log, TAIL_LINES)
    }

    /// How long [`ClusterBuilder::start`] took, defaults created.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// An API request as the admin; see [`request`](Self::request).
    pub fn admin_request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value)> {
        self.request(&self.admin_token, method, path, body)
    }

    /// An API request with `token` (`method` like `"POST"`, `path` like `/api/v1/nodes`, a JSON
    /// body); returns the HTTP status and the response as JSON (a JSON string when it is not
    /// JSON). Goes through `curl`; an error only when curl cannot talk to the server.
    pub fn request(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value)> {
        let (status, text) = curl(
            &self.url,
            Some(&self.ca_file),
            token,
            method,
            path,
            body,
            "application/json",
        )?;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, value))
    }

    /// What a controller-manager would have made: the `default` ServiceAccount and the
    /// `kube-root-ca.crt` ConfigMap in `default`, and the opt-in node group binding.
    fn create_defaults(&self, bind_node_group: bool) -> Result<()> {
        // The bootstrap controller creates namespace `default` shortly after /readyz.
        let deadline = Instant::now() + READY_TIMEOUT;
        while self
            .admin_request("GET", "/api/v1/namespaces/default", None)?
            .0
            != 200
        {
            if Instant::now() >= deadline {
                bail!("namespace default was not created");
            }
            thread::sleep(POLL);
        }
        let ca = fs::read_to_string(&self.ca_file)
            .with_context(|| format!("cannot read {}", self.ca_file.display()))?;
        self.create(
            "/api/v1/namespaces/default/serviceaccounts",
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}),
        )?;
        self.create(
            "/api/v1/namespaces/default/configmaps",
            &json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "kube-root-ca.crt"},
                "data": {"ca.crt": ca},
            }),
        )?;
        if bind_node_group {
            self.create(
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                &json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": "e2e:system:nodes"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
                }),
            )?;
        }
        Ok(())
    }

    /// POSTs `object` as the admin; 201 or 409 (already there) is success.
    fn create(&self, path: &str, object: &Value) -> Result<()> {
        let (status, body) = self.admin_request("POST", path, Some(object))?;
        if status != 201 && status != 409 {
            bail!("POST {path} answered {status}: {body}");
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in [&mut self.apiserver, &mut self.etcd] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Why a start attempt failed: a port race is worth another attempt, the rest is not.
enum Spawned {
    PortTaken(anyhow::Error),
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for Spawned {
    fn from(e: anyhow::Error) -> Spawned {
        Spawned::Failed(e)
    }
}

/// Picks ports, starts etcd and kube-apiserver and waits for `/readyz`; returns both children
/// and the server's URL. Kills what it started when it fails.
fn spawn_and_wait(
    opts: &ClusterBuilder,
    binary: &Path,
    etcd_bin: &Path,
    dir: &Path,
    admin_token: &str,
) -> Result<(Child, Child, String), Spawned> {
    let [client, peer, secure] = free_ports()?;
    let etcd_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let data_dir = dir.join("etcd");
    // A failed attempt's data would not hurt, but start clean.
    let _ = fs::remove_dir_all(&data_dir);
    let etcd_log = dir.join("etcd.log");
    let mut etcd = spawn(
        Command::new(etcd_bin)
            .arg("--name=e2e")
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--listen-client-urls={etcd_url}"))
            .arg(format!("--advertise-client-urls={etcd_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=e2e={peer_url}")),
        &etcd_log,
    )?;
    let log = dir.join("kube-apiserver.log");
    let mut cmd = Command::new(binary);
    cmd.arg(format!("--etcd-servers={etcd_url}"))
        .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
        .arg(format!("--secure-port={secure}"))
        .arg("--insecure-port=0")
        .arg(format!("--cert-dir={}", dir.join("certs").display()))
        .arg(format!(
            "--token-auth-file={}",
            dir.join("tokens.csv").display()
        ))
        .args([
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
        ])
        .arg("--disable-admission-plugins=ServiceAccount")
        .arg(format!("--service-account-issuer={ISSUER}"))
        .arg(format!("--api-audiences={ISSUER}"))
        .arg(format!(
            "--service-account-key-file={}",
            dir.join("sa.pub").display()
        ))
        .arg(format!(
            "--service-account-signing-key-file={}",
            dir.join("sa.key").display()
        ))
        .args([
            "--service-cluster-ip-range=10.96.0.0/24",
            "--allow-privileged=true",
        ])
        .args(&opts.apiserver_args);
    let mut apiserver = match spawn(&mut cmd, &log) {
        Ok(child) => child,
        Err(e) => {
            kill(&mut etcd);
            return Err(e.into());
        }
    };
    let url = format!("https://127.0.0.1:{secure}");
    match wait_ready(
        &url,
        &dir.join("certs").join("apiserver.crt"),
        admin_token,
        &mut etcd,
        &mut apiserver,
        &etcd_log,
        &log,
    ) {
        Ok(()) => Ok((apiserver, etcd, url)),
        Err(e) => {
            kill(&mut apiserver);
            kill(&mut etcd);
            Err(e)
        }
    }
}

/// Polls `/readyz` until it answers 200; fails early when a process exits.
fn wait_ready(
    url: &str,
    ca_file: &Path,
    token: &str,
    etcd: &mut Child,
    apiserver: &mut Child,
    etcd_log: &Path,
    log: &Path,
) -> Result<(), Spawned> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut last = String::from("no answer yet");
    loop {
        for (name, child, log) in [
            ("etcd", &mut *etcd, etcd_log),
            ("kube-apiserver", &mut *apiserver, log),
        ] {
            if let Ok(Some(status)) = child.try_wait() {
                let tail = util::tail(log, TAIL_LINES);
                let e = anyhow::anyhow!("{name} exited ({status}) during start:\n{tail}");
                return Err(if tail.contains("address already in use") {
                    Spawned::PortTaken(e)
                } else {
                    Spawned::Failed(e)
                });
            }
        }
        if ca_file.exists() {
            match curl(
                url,
                Some(ca_file),
                token,
                "GET",
                "/readyz",
                None,
                "text/plain",
            ) {
                Ok((200, _)) => return Ok(()),
                Ok((status, body)) => last = format!("{status}: {body}"),
                Err(e) => last = format!("{e:#}"),
            }
        }
        if Instant::now() >= deadline {
            return Err(Spawned::Failed(anyhow::anyhow!(
                "kube-apiserver not ready after {READY_TIMEOUT:?} (last /readyz: {last}):\n{}",
                util::tail(log, TAIL_LINES)
            )));
        }
        thread::sleep(POLL);
    }
}

/// Three distinct free loopback ports (held together while picking, so they differ).
fn free_ports() -> Result<[u16; 3]> {
    let listeners = [(); 3].map(|()| TcpListener::bind("127.0.0.1:0"));
    let mut ports = [0u16; 3];
    for (port, listener) in ports.iter_mut().zip(listeners) {
        *port = listener
            .and_then(|l| l.local_addr())
            .context("cannot pick a free loopback port")?
            .port();
    }
    Ok(ports)
}

/// Spawns `cmd` with stdout and stderr appended to `log`.
fn spawn(cmd: &mut Command, log: &Path) -> Result<Child> {
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    let err = out.try_clone()?;
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("cannot start `{}`", util::display(cmd)))
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// One request through `curl`: the HTTP status and the body. `ca_file` verifies the server.
fn curl(
    url: &str,
    ca_file: Option<&Path>,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    accept: &str,
) -> Result<(u16, String)> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "30", "-X", method])
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .arg("-H")
        .arg(format!("Accept: {accept}"))
        .args(["-w", "\n%{http_code}"]);
    if let Some(ca) = ca_file {
        cmd.arg("--cacert").arg(ca);
    }
    let input = match body {
        Some(body) => {
            let content_type = if method == "PATCH" {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            cmd.arg("-H")
                .arg(format!("Content-Type: {content_type}"))
                .args(["--data-binary", "@-"]);
            serde_json::to_vec(body)?
        }
        None => Vec::new(),
    };
    cmd.arg(format!("{url}{path}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().context("cannot run curl")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(&input)
            .context("cannot write curl's input")?;
    }
    let out = child.wait_with_output().context("curl failed")?;
    if !out.status.success() {
        bail!(
            "curl {method} {url}{path} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let code = code
        .trim()
        .parse()
        .with_context(|| format!("curl printed no status code: {text}"))?;
    Ok((code, body.to_owned()))
}
