//! A real node for integration tests: a private containerd (xtask testbed) plus the `kubelet`
//! binary under test, with helpers to write manifests and read `/pods`.

#![allow(dead_code, missing_docs)]

pub mod api;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use xtask::testbed::Testbed;

pub const NODE: &str = "it-node";

/// A node: containerd + kubelet, everything under one directory in /tmp (short socket paths).
pub struct Node {
    pub testbed: Testbed,
    pub dir: PathBuf,
    pub manifests: PathBuf,
    kubelet: Option<Child>,
    pub read_only_port: u16,
    pub healthz_port: u16,
    /// The secure (HTTPS) port, `--port`.
    pub port: u16,
    /// `--node-ip` (default 192.0.2.10, a documentation address nothing dials; 127.0.0.1 for
    /// an API server that must reach the kubelet).
    pub node_ip: String,
    /// `--cgroup-root` of this node's kubelet: its own, so suites never share pod cgroups.
    pub cgroup_root: String,
    starts: u32,
    /// Extra kubelet flags, added after the harness's own (set before `start_kubelet`).
    pub extra_args: Vec<String>,
    /// Extra environment of the kubelet (e.g. `DBUS_SYSTEM_BUS_ADDRESS`).
    pub env: Vec<(String, String)>,
    /// `--container-runtime-endpoint` instead of the testbed's (e.g. a
    /// `kubelet_cri::testing::FaultProxy` in front of it).
    pub runtime_endpoint: Option<String>,
    /// The host PID of the namespaced systemd the kubelet runs under ([`Node::new_in_systemd`]).
    systemd_pid: Option<u32>,
}

/// Four hex digits from this checkout's path, so test runs in two checkouts (git worktrees)
/// never share a testbed directory, while reruns in one checkout reuse (and clean) theirs.
fn checkout_tag() -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    env!("CARGO_MANIFEST_DIR").hash(&mut hasher);
    format!("{:04x}", hasher.finish() & 0xffff)
}

/// A free port for a process the test starts on a known port ([`xtask::ports`]).
pub fn free_port() -> u16 {
    xtask::ports::free_port().expect("a free port")
}

/// The directory of node `name` (everything of [`Node::new`] lives there; a test may prepare
/// it first, e.g. mount a filesystem of its own at `cd`, the testbed's directory).
pub fn node_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rk-it-{}-{name}", checkout_tag()))
}

impl Node {
    /// Starts containerd; the kubelet is started with [`Node::start_kubelet`].
    pub fn new(name: &str) -> Node {
        let dir = node_dir(name);
        let _ = std::fs::remove_dir_all(dir.join("kubelet"));
        let testbed = Testbed::start(&dir.join("cd")).expect("containerd testbed");
        Self::with_testbed(name, dir, testbed)
    }

    /// A node "booted" with `systemd`: containerd (runc's systemd cgroup driver) and the
    /// kubelet (`--cgroup-driver=systemd`, `--cgroup-root=/`) run in its PID, mount and cgroup
    /// namespaces.
    pub fn new_in_systemd(name: &str, systemd: &xtask::systemd::NamespacedSystemd) -> Node {
        let dir = node_dir(name);
        let _ = std::fs::remove_dir_all(dir.join("kubelet"));
        let testbed =
            Testbed::start_in_systemd(&dir.join("cd"), systemd).expect("containerd testbed");
        let mut node = Self::with_testbed(name, dir, testbed);
        node.systemd_pid = Some(systemd.pid());
        node.cgroup_root = "/".into();
        node.extra_args
            .extend(["--cgroup-driver".to_owned(), "systemd".to_owned()]);
        node
    }

    fn with_testbed(name: &str, dir: PathBuf, testbed: Testbed) -> Node {
        let manifests = dir.join("kubelet").join("manifests");
        std::fs::create_dir_all(&manifests).expect("manifest dir");
        Node {
            testbed,
            dir,
            manifests,
            kubelet: None,
            read_only_port: free_port(),
            healthz_port: free_port(),
            port: free_port(),
            node_ip: "192.0.2.10".into(),
            cgroup_root: format!("/rk-it-{}-{name}", checkout_tag()),
            starts: 0,
            extra_args: Vec::new(),
            env: Vec::new(),
            runtime_endpoint: None,
            systemd_pid: None,
        }
    }

    /// Starts containerd and the kubelet.
    pub fn start(name: &str) -> Node {
        let mut node = Node::new(name);
        node.start_kubelet();
        node
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir
            .join("kubelet")
            .join(format!("kubelet-{}.log", self.starts))
    }

    pub fn start_kubelet(&mut self) {
        self.starts += 1;
        let log = std::fs::File::create(self.log_path()).expect("log file");
        let kdir = self.dir.join("kubelet");
        let mut cmd = match self.systemd_pid {
            Some(pid) => xtask::systemd::entered(pid, env!("CARGO_BIN_EXE_kubelet")),
            None => Command::new(env!("CARGO_BIN_EXE_kubelet")),
        };
        let given = |flag: &str| {
            self.extra_args
                .iter()
                .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
        };
        for (flag, value) in [
            ("--file-check-frequency", "2s"),
            ("--sync-frequency", "10s"),
        ] {
            if !given(flag) {
                cmd.args([flag, value]);
            }
        }
        // The suites reach the secure port with `curl -k`: anonymous, under the flags'
        // AlwaysAllow. The kubelet's own default is anonymous off (secure by default).
        if !given("--anonymous-auth") && !given("--config") {
            cmd.arg("--anonymous-auth=true");
        }
        if !given("--eviction-hard") {
            cmd.arg(xtask::testbed::EVICTION_HARD);
        }
        if !given("--pod-infra-container-image") {
            cmd.arg(xtask::testbed::pod_infra_container_image_arg());
        }
        let child = cmd
            .arg("--pod-manifest-path")
            .arg(&self.manifests)
            .arg("--container-runtime-endpoint")
            .arg(
                self.runtime_endpoint
                    .clone()
                    .unwrap_or_else(|| self.testbed.endpoint()),
            )
            .arg("--root-dir")
            .arg(kdir.join("root"))
            .arg("--pod-log-dir")
            .arg(kdir.join("logs"))
            .args(["--hostname-override", NODE, "--node-ip", &self.node_ip])
            .args(["--read-only-port", &self.read_only_port.to_string()])
            .args(["--healthz-port", &self.healthz_port.to_string()])
            .args(["--port", &self.port.to_string()])
            .args(["--cgroup-root", &self.cgroup_root])
            .args(&self.extra_args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn kubelet");
        self.kubelet = Some(child);
    }

    /// SIGKILLs the kubelet (containers keep running).
    pub fn kill9_kubelet(&mut self) {
        if let Some(mut child) = self.kubelet.take() {
            if self.systemd_pid.is_some()
                && let Some(pid) = xtask::systemd::entered_pid(child.id())
            {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERMs the kubelet and returns its exit status.
    pub fn stop_kubelet(&mut self) -> std::process::ExitStatus {
        let mut child = self.kubelet.take().expect("kubelet running");
        let pid = i32::try_from(child.id()).expect("pid");
        send_signal(pid, "TERM");
        child.wait().expect("wait")
    }

    /// The kubelet's pid, while one was started.
    pub fn kubelet_pid(&self) -> Option<u32> {
        self.kubelet.as_ref().map(Child::id)
    }

    /// `true` while the kubelet process is alive.
    pub fn kubelet_alive(&mut self) -> bool {
        self.kubelet
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// What every thread of the kubelet process is doing (the stall watchdog's dump), for
    /// the message of a test that waited in vain.
    pub fn kubelet_threads(&self) -> String {
        match &self.kubelet {
            Some(child) => kubelet_core::watchdog::threads::dump_process(child.id()),
            None => "  (no kubelet running)\n".to_owned(),
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn write_manifest(&self, file: &str, content: &str) {
        // Write then rename, as editors and config managers do, so the kubelet never reads
        // half a file.
        let tmp = self.manifests.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, content).expect("write manifest");
        std::fs::rename(&tmp, self.manifests.join(file)).expect("rename manifest");
    }

    pub fn remove_manifest(&self, file: &str) {
        std::fs::remove_file(self.manifests.join(file)).expect("remove manifest");
    }

    fn get(&self, port: u16, path: &str) -> Option<(u16, String)> {
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .ok()?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_owned()))
    }

    /// `GET path` on `port` with how long it took, connect to last byte (5 s limits on
    /// connect, write and read; `None` when there was no complete answer).
    pub fn timed_get(&self, port: u16, path: &str) -> (Duration, Option<(u16, String)>) {
        let started = Instant::now();
        let answer = self.get(port, path);
        (started.elapsed(), answer)
    }

    /// HTTP status of the healthz port's `/healthz`, `None` when not listening.
    pub fn healthz(&self) -> Option<u16> {
        self.get(self.healthz_port, "/healthz")
            .map(|(code, _)| code)
    }

    /// The `/pods` list items, `None` when the kubelet does not answer.
    pub fn pods(&self) -> Option<Vec<Value>> {
        let (code, body) = self.get(self.read_only_port, "/pods")?;
        if code != 200 {
            return None;
        }
        let list: Value = serde_json::from_str(&body).ok()?;
        assert_eq!(list["kind"], "PodList");
        list["items"].as_array().cloned()
    }

    /// The pod from `/pods` whose manifest name is `name` (the kubelet adds `-<node>`).
    pub fn pod(&self, name: &str) -> Option<Value> {
        let full = format!("{name}-{NODE}");
        self.pods()?
            .into_iter()
            .find(|p| p["metadata"]["name"] == full.as_str())
    }

    /// The pod `name` from `/pods`, waiting up to 15 s for it to be listed (one `GET` of a
    /// loaded machine may time out); panics with the log tail and threads otherwise.
    pub fn listed_pod(&self, name: &str) -> Value {
        self.wait_for(
            Duration::from_secs(15),
            &format!("pod {name} in /pods"),
            |n| n.pod(name),
        )
    }

    /// Polls `check` every 100 ms until it returns `Some`, or panics after `limit` with `what`
    /// and the kubelet's log tail.
    pub fn wait_for<T>(
        &self,
        limit: Duration,
        what: &str,
        mut check: impl FnMut(&Node) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = check(self) {
                return v;
            }
            if Instant::now() > deadline {
                let log = self.log();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let pods = self.pods();
                // The first line says what was wrong: CI keeps only part of a long message.
                panic!(
                    "timed out after {limit:?} waiting for {what}; pods not running: {}\n--- /pods: {pods:?}\n--- kubelet log tail:\n{}\n--- kubelet threads:\n{}",
                    pods.as_deref().map_or("(no /pods)".to_owned(), not_running),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
                    self.kubelet_threads()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Containers (including sandboxes' pause containers) containerd holds for a pod UID.
    pub fn runtime_containers(&self, uid: &str) -> Vec<String> {
        let out = self
            .testbed
            .ctr(&[
                "containers",
                "ls",
                "-q",
                &format!("labels.\"io.kubernetes.pod.uid\"=={uid}"),
            ])
            .expect("ctr containers ls");
        out.lines()
            .map(str::to_owned)
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// Running tasks in containerd.
    pub fn running_tasks(&self) -> usize {
        let out = self.testbed.ctr(&["tasks", "ls"]).expect("ctr tasks ls");
        out.lines()
            .skip(1)
            .filter(|l| l.contains("RUNNING"))
            .count()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9_kubelet();
    }
}

pub fn send_signal(pid: i32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// A busybox pod manifest.
pub fn pod_yaml(name: &str, restart_policy: &str, containers: &[(&str, &str)]) -> String {
    let mut y = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: {restart_policy}\n  terminationGracePeriodSeconds: 2\n  containers:\n"
    );
    for (cname, script) in containers {
        y.push_str(&format!(
            "  - name: {cname}\n    image: docker.io/library/busybox:1.36\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", {script:?}]\n"
        ));
    }
    y
}

/// Path helper for assertions.
pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// One line on the pods that are not Running with every container running: each one's name,
/// phase and its containers' states with their reasons and messages.
pub fn not_running(pods: &[Value]) -> String {
    let mut out = Vec::new();
    for pod in pods {
        let containers = pod["status"]["containerStatuses"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if phase(pod) == "Running"
            && !containers.is_empty()
            && containers.iter().all(|c| c["state"]["running"].is_object())
        {
            continue;
        }
        let states: Vec<String> = containers
            .iter()
            .map(|c| {
                let (state, detail) = c["state"]
                    .as_object()
                    .and_then(|m| m.iter().next())
                    .map_or(("?", &Value::Null), |(k, v)| (k.as_str(), v));
                format!(
                    "{}={state}({} {}) restarts={}",
                    c["name"].as_str().unwrap_or("?"),
                    detail["reason"].as_str().unwrap_or(""),
                    detail["message"].as_str().unwrap_or(""),
                    c["restartCount"]
                )
            })
            .collect();
        out.push(format!(
            "{} {} [{}] {}",
            pod["metadata"]["name"].as_str().unwrap_or("?"),
            phase(pod),
            states.join(", "),
            pod["status"]["message"].as_str().unwrap_or("")
        ));
    }
    if out.is_empty() {
        "none".to_owned()
    } else {
        out.join("; ")
    }
}

pub fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

pub fn container_status<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

pub fn uid(pod: &Value) -> String {
    pod["metadata"]["uid"].as_str().unwrap_or("").to_owned()
}

/// The `(reason, message)` of a container's waiting state, if it is waiting.
pub fn waiting(pod: &Value, container: &str) -> Option<(String, String)> {
    let w = &container_status(pod, container)?["state"]["waiting"];
    Some((
        w["reason"].as_str()?.to_owned(),
        w["message"].as_str().unwrap_or("").to_owned(),
    ))
}

/// A file's text, or `None` while it does not exist (yet).
pub fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Unmounts everything at or under a path when the test ends (the kubelet's volume mounts,
/// and whatever a test mounted or propagated there).
pub struct Unmount(pub PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = kubelet_volumes::mount::unmount_all_under(&self.0);
    }
}

/// A started node for volume tests, an empty `out` directory under it for containers to
/// write into, and a guard that unmounts the kubelet's mounts at the end.
pub fn start_with_volumes(name: &str) -> (Node, PathBuf, Unmount) {
    let node = Node::start(name);
    let out = node.dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("out dir");
    let guard = Unmount(node.dir.join("kubelet"));
    (node, out, guard)
}

/// The name libtest knows test `name` of the module at `module_path` (`module_path!()`) by,
/// for running one test of this binary in a child process (`<exe> --exact <path>`): the module
/// path without the crate's name.
pub fn test_path(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}

/// A real kube-apiserver (+ etcd) with a node identity for [`NODE`], or `None` when
/// kube-apiserver is not built and `KUBELET_REQUIRE_APISERVER` is not set (the test skips).
pub fn node_cluster() -> Option<xtask::apiserver::Cluster> {
    xtask::apiserver::Cluster::builder()
        .node(NODE)
        .start_or_skip()
        .expect("kube-apiserver starts")
}

/// Starts `node`'s kubelet in cluster mode as `system:node:<NODE>` of `cluster` and waits
/// until its Node is Ready.
pub fn join_cluster(cluster: &xtask::apiserver::Cluster, node: &mut Node) {
    let kubeconfig = cluster.node_kubeconfig(NODE).expect("node kubeconfig");
    node.extra_args
        .extend(["--kubeconfig".into(), kubeconfig.display().to_string()]);
    node.start_kubelet();
    kubectl_wait(
        cluster,
        node,
        &["--for=condition=Ready", &format!("node/{NODE}")],
        60,
    );
}

/// A node (not started yet) whose secure port the API server of `cluster` reaches as its client
/// (issue 14): the node's kubeconfig for `system:node:<NODE>`, x509 against the fixture's
/// kubelet client CA (`ClusterBuilder::kubelet_client_certificate`), webhook TokenReview and
/// SubjectAccessReview, no anonymous requests, and node IP 127.0.0.1 so the API server dials
/// loopback.
pub fn api_reachable_node(cluster: &xtask::apiserver::Cluster, name: &str) -> Node {
    let mut node = Node::new(name);
    node.node_ip = "127.0.0.1".into();
    let kubeconfig = cluster.node_kubeconfig(NODE).expect("node kubeconfig");
    let ca = cluster.kubelet_client_ca().expect("kubelet client CA");
    node.extra_args = vec![
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--anonymous-auth=false".into(),
        "--authentication-token-webhook".into(),
        "--authorization-mode".into(),
        "Webhook".into(),
        "--client-ca-file".into(),
        ca.display().to_string(),
    ];
    node
}

/// `kubectl … -o json` as the admin of `cluster`.
pub fn get_json(cluster: &xtask::apiserver::Cluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = cluster.kubectl(&all).expect("kubectl get");
    serde_json::from_str(&out).expect("kubectl prints JSON")
}

/// `kubectl wait … --timeout=<secs>s` as the admin, returning how long it took; on a timeout
/// panics with the kubelet's log tail and the API server's. An object that does not exist yet
/// (a Node the kubelet has not registered) is waited for within the same time: `kubectl wait`
/// itself fails at once on `NotFound`.
pub fn kubectl_wait(
    cluster: &xtask::apiserver::Cluster,
    node: &Node,
    args: &[&str],
    secs: u64,
) -> Duration {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    loop {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_secs()
            .max(1);
        let timeout = format!("--timeout={left}s");
        let mut all = vec!["wait"];
        all.extend(args);
        all.push(&timeout);
        let Err(e) = cluster.kubectl(&all) else {
            return started.elapsed();
        };
        if format!("{e:#}").contains("NotFound") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let log = node.log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        panic!(
            "kubectl {all:?}: {e:#}\n--- kubelet log tail:\n{}\n--- kubelet threads:\n{}\n--- apiserver:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            node.kubelet_threads(),
            cluster.log_tail()
        );
    }
}

/// Writes `yaml` to a file under the node's directory and `kubectl create`s it as the admin.
pub fn kubectl_create(cluster: &xtask::apiserver::Cluster, node: &Node, file: &str, yaml: &str) {
    let path = node.dir.join(file);
    std::fs::write(&path, yaml).expect("write manifest");
    cluster
        .kubectl(&["create", "-f", &path.display().to_string()])
        .expect("kubectl create");
}

/// Removes a node's cgroup tree in every v1 hierarchy (and v2) when dropped: declare it
/// before the node, so that it runs after the node's containerd is gone.
pub struct CgroupCleanup(pub String);

impl Drop for CgroupCleanup {
    fn drop(&mut self) {
        fn rmdir_tree(dir: &Path) {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        rmdir_tree(&e.path());
                    }
                }
            }
            let _ = std::fs::remove_dir(dir);
        }
        if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
            for e in entries.flatten() {
                rmdir_tree(&e.path().join(self.0.trim_start_matches('/')));
            }
        }
        rmdir_tree(&Path::new("/sys/fs/cgroup").join(self.0.trim_start_matches('/')));
    }
}

/// A cgroup v1 file of `controller`'s hierarchy, trimmed.
pub fn cg_read(controller: &str, path: &str, file: &str) -> String {
    let p = Path::new("/sys/fs/cgroup")
        .join(controller)
        .join(path.trim_start_matches('/'))
        .join(file);
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_owned()
}

/// Whether this machine has the cgroup v1 cpu and memory hierarchies.
pub fn v1_cgroups() -> bool {
    Path::new("/sys/fs/cgroup/cpu/cpu.shares").exists()
        && Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists()
}

/// The lines a container wrote to stdout, from its first CRI log file
/// (`<pod-log-dir>/<ns>_<name>_<uid>/<container>/0.log`, lines `<time> <stream> <tag> <text>`).
pub fn log_lines(node: &Node, pod: &Value, container: &str) -> Vec<String> {
    let dir: PathBuf = node.dir.join("kubelet/logs").join(format!(
        "{}_{}_{}",
        pod["metadata"]["namespace"].as_str().unwrap_or(""),
        pod["metadata"]["name"].as_str().unwrap_or(""),
        uid(pod)
    ));
    let text = std::fs::read_to_string(dir.join(container).join("0.log")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(4, ' ');
            let (_, stream, _, msg) = (parts.next()?, parts.next()?, parts.next()?, parts.next());
            (stream == "stdout").then(|| msg.unwrap_or("").to_owned())
        })
        .collect()
}
