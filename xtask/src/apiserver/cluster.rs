//! [`Cluster`]: etcd plus kube-apiserver on free loopback ports in a temporary directory, with an
//! admin and one `system:node:<name>` identity per node, killed and removed on drop.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tempfile::TempDir;

use super::{
    curl::curl,
    files::{self, ADMIN_USER, TokenEntry},
    process::{self, POLL, Processes, READY_TIMEOUT, TAIL_LINES},
    reap,
};
use crate::util;

/// Options for a [`Cluster`]; [`Cluster::builder`] makes one.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ClusterBuilder {
    kubelet_client: bool,
    nodes: Vec<String>,
    users: Vec<(String, Vec<String>)>,
    apiserver_args: Vec<String>,
    bind_node_group: bool,
    service_account_admission: bool,
    binary: Option<PathBuf>,
}

impl ClusterBuilder {
    /// Adds a node identity: a token for user `system:node:<name>` in group `system:nodes`, and
    /// its kubeconfig ([`Cluster::node_kubeconfig`]).
    pub fn node(mut self, name: impl Into<String>) -> Self {
        self.nodes.push(name.into());
        self
    }

    /// Adds a user with a bearer token ([`Cluster::user_token`]) in `groups`, and no
    /// permissions until a test binds it a role.
    pub fn user(mut self, name: impl Into<String>, groups: &[&str]) -> Self {
        self.users.push((
            name.into(),
            groups.iter().map(|g| (*g).to_owned()).collect(),
        ));
        self
    }

    /// Gives kube-apiserver a client certificate for kubelets (`--kubelet-client-certificate`,
    /// `--kubelet-client-key`; CN `kube-apiserver-kubelet-client`, O `system:masters`) signed
    /// by a CA of its own ([`Cluster::kubelet_client_ca`]: the kubelet's `--client-ca-file`),
    /// and has it dial kubelets at their `InternalIP` (`--kubelet-preferred-address-types`), so
    /// `nodes/<node>/proxy/...`, logs and exec reach a kubelet on this machine.
    pub fn kubelet_client_certificate(mut self) -> Self {
        self.kubelet_client = true;
        self
    }

    /// Runs the ServiceAccount admission plugin (off by default, as 1.20's mounts tokens from
    /// Secrets only a controller-manager makes). It then sets a pod's `serviceAccountName`,
    /// copies its service account's `imagePullSecrets` into a pod that has none, and rejects
    /// pods that would mount a token unless they set `automountServiceAccountToken: false`.
    pub fn service_account_admission(mut self) -> Self {
        self.service_account_admission = true;
        self
    }

    /// Adds a kube-apiserver flag (e.g. `--feature-gates=...`) after the fixture's own.
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// Binds group `system:nodes` to ClusterRole `system:node` (ClusterRoleBinding
    /// `e2e:system:nodes`), as clusters from before the Node authorizer did.
    ///
    /// Rarely wanted: the Node authorizer alone already lets a node create TokenReviews and
    /// SubjectAccessReviews (for its authenticated HTTP API; checked by this crate's tests). The
    /// binding adds, through RBAC, reads of every Secret and ConfigMap, which hides the 403s a
    /// real cluster gives.
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
    processes: Processes,
    ca_file: PathBuf,
    admin_token: String,
    admin_kubeconfig: PathBuf,
    /// Per node: its token and kubeconfig.
    nodes: BTreeMap<String, (String, PathBuf)>,
    /// The CA of kube-apiserver's kubelet client certificate, if it has one.
    kubelet_client_ca: Option<PathBuf>,
    /// Per [`ClusterBuilder::user`]: its token.
    users: BTreeMap<String, String>,
    apiserver_log: PathBuf,
    started_in: Duration,
    /// Declared last: removed after the processes are gone (fields drop in order).
    dir: TempDir,
}

impl Cluster {
    /// A builder; [`ClusterBuilder::start`] starts the cluster.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    fn start(opts: &ClusterBuilder, binary: &Path, etcd: &Path) -> Result<Cluster> {
        let started = Instant::now();
        reap::reap_orphans();
        let dir = tempfile::Builder::new()
            .prefix(reap::DIR_PREFIX)
            .tempdir()
            .context("cannot create a temporary directory")?;
        let path = dir.path();
        reap::write_owner(path)?;
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
        let mut user_tokens = BTreeMap::new();
        for (name, groups) in &opts.users {
            user_tokens.insert(name.clone(), (files::random_token()?, groups.clone()));
        }
        let user_groups: Vec<Vec<&str>> = user_tokens
            .values()
            .map(|(_, groups)| groups.iter().map(String::as_str).collect())
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
        entries.extend(
            user_tokens
                .iter()
                .zip(&user_groups)
                .map(|((user, (token, _)), groups)| TokenEntry {
                    token,
                    user,
                    uid: user,
                    groups,
                }),
        );
        let paths = process::Files::new(path);
        files::write_token_file(&paths.tokens, &entries)?;
        let mut extra_args = opts.apiserver_args.clone();
        let kubelet_client_ca = if opts.kubelet_client {
            let dir = path.join("kubelet-client");
            let files::ClientPki { ca, cert, key } = files::write_client_pki(
                &dir,
                "/CN=e2e-kubelet-client-ca",
                "/O=system:masters/CN=kube-apiserver-kubelet-client",
            )?;
            extra_args.extend([
                format!("--kubelet-client-certificate={}", cert.display()),
                format!("--kubelet-client-key={}", key.display()),
                "--kubelet-preferred-address-types=InternalIP".to_owned(),
            ]);
            Some(ca)
        } else {
            None
        };
        files::write_service_account_keys(&paths.sa_key, &paths.sa_pub)?;
        let spec = process::Spec {
            apiserver: binary,
            etcd,
            extra_args: &extra_args,
            service_account_admission: opts.service_account_admission,
            token: &admin_token,
        };
        let processes = process::start(&spec, &paths)?;
        let url = &processes.url;
        let ca_file = paths.ca_file.clone();
        let admin_kubeconfig = path.join("admin.kubeconfig");
        files::write_kubeconfig(&admin_kubeconfig, url, &ca_file, ADMIN_USER, &admin_token)?;
        for (name, (token, kubeconfig)) in &nodes {
            let user = format!("system:node:{name}");
            files::write_kubeconfig(kubeconfig, url, &ca_file, &user, token)?;
        }
        let mut cluster = Cluster {
            apiserver_log: paths.apiserver_log,
            processes,
            ca_file,
            admin_token,
            admin_kubeconfig,
            nodes,
            kubelet_client_ca,
            users: user_tokens
                .into_iter()
                .map(|(name, (token, _))| (name, token))
                .collect(),
            started_in: Duration::ZERO,
            dir,
        };
        cluster
            .create_defaults(opts.bind_node_group)
            .with_context(|| format!("server log:\n{}", cluster.log_tail()))?;
        cluster.started_in = started.elapsed();
        Ok(cluster)
    }

    /// Stops kube-apiserver (killed): clients get refused connections until
    /// [`start_apiserver`](Self::start_apiserver); etcd keeps running with the data.
    pub fn stop_apiserver(&mut self) {
        self.processes.stop_apiserver();
    }

    /// Starts kube-apiserver again on the same port with the same flags, over the same etcd
    /// (a server restart: open watches ended, the objects and their resourceVersions are
    /// kept), and waits until it is ready.
    pub fn start_apiserver(&mut self) -> Result<()> {
        self.processes.start_apiserver()
    }

    /// The server's URL, `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.processes.url
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

    /// The CA that signed kube-apiserver's kubelet client certificate (for the kubelet's
    /// `--client-ca-file`); an error without
    /// [`ClusterBuilder::kubelet_client_certificate`].
    pub fn kubelet_client_ca(&self) -> Result<&Path> {
        self.kubelet_client_ca
            .as_deref()
            .context("no kubelet client certificate (ClusterBuilder::kubelet_client_certificate)")
    }

    /// The bearer token of a [`ClusterBuilder::user`]; an error for another name.
    pub fn user_token(&self, name: &str) -> Result<&str> {
        self.users
            .get(name)
            .map(String::as_str)
            .with_context(|| format!("no user {name:?} in this cluster (ClusterBuilder::user)"))
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

    /// Runs `kubectl --kubeconfig <admin kubeconfig> <args>` and returns its stdout; the error
    /// quotes its stderr. (The machine's kubectl may be newer than the server: fine for `get`,
    /// `apply`, `delete` and `-w`.)
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        util::output(
            Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&self.admin_kubeconfig)
                .args(args),
        )
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
            &self.processes.url,
            &self.ca_file,
            token,
            method,
            path,
            body,
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
