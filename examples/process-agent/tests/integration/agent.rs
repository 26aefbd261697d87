//! The `process-agent` binary end to end: static pod manifests in, host processes and the
//! upstream pod status (`/pods` of the read-only port) out. No container runtime is needed;
//! every container is a host process, so each test tags its containers with `IT_DIR=<its
//! temporary directory>` in their environment and kills whatever still carries the tag when
//! it ends, pass or fail.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// Node name of every agent (`--hostname-override`); static pods are named `<pod>-<node>`.
const NODE: &str = "it-node";

/// How long a test waits for one condition before failing (a loaded 2-core machine).
const PATIENCE: Duration = Duration::from_secs(30);

/// How often a condition is polled: a host process reports no event a test could await.
const POLL: Duration = Duration::from_millis(100);

fn free_port() -> u16 {
    xtask::ports::free_port().expect("a free port")
}

/// Seconds since the epoch, as the containers' `date +%s.%N` writes them.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

/// The flags that shorten the first crash-loop back-off to 100 ms, in whichever spelling the
/// binary accepts: a hidden flag is not listed by `--help`, so each spelling is tried with
/// `--help` after it (clap rejects an unknown flag before it reaches `--help`).
fn short_backoff_flags() -> Vec<String> {
    let candidates = [
        ("--experimental-crash-loop-initial-backoff", "100ms"),
        ("--experimental-crash-loop-initial-backoff-ms", "100"),
    ];
    for (flag, value) in candidates {
        let accepted = Command::new(env!("CARGO_BIN_EXE_process-agent"))
            .args([flag, value, "--pod-manifest-path", "/nonexistent", "--help"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run process-agent --help")
            .success();
        if accepted {
            return vec![flag.to_owned(), value.to_owned()];
        }
    }
    panic!("process-agent accepts no initial crash-loop back-off flag ({candidates:?})");
}

/// One `process-agent` on its own manifest directory, root directory and port.
struct Agent {
    /// Holds everything of this test: manifests, root dir, the agent's log, marker files.
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl Agent {
    fn start() -> Agent {
        let dir = tempfile::tempdir().expect("temporary directory");
        let manifests = dir.path().join("manifests");
        std::fs::create_dir_all(&manifests).expect("manifest directory");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("agent.log")).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_process-agent"))
            .arg("--pod-manifest-path")
            .arg(&manifests)
            .arg("--root-dir")
            .arg(dir.path().join("root"))
            .args(["--read-only-port", &port.to_string()])
            .args(["--hostname-override", NODE])
            .args(short_backoff_flags())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn process-agent");
        let agent = Agent {
            dir,
            port,
            child: Some(child),
        };
        agent.wait_for("the read-only port to answer", |a| a.pods().map(|_| ()));
        agent
    }

    /// The test's directory; scripts write their markers here.
    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    fn read(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(self.path(file)).ok()
    }

    /// Writes a static pod manifest (JSON is YAML) under a hidden name, then renames it, so
    /// the agent never reads half a file.
    fn write_manifest(&self, name: &str, pod: &Value) {
        let manifests = self.path("manifests");
        let tmp = manifests.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, pod.to_string()).expect("write manifest");
        std::fs::rename(&tmp, manifests.join(format!("{name}.yaml"))).expect("rename manifest");
    }

    fn remove_manifest(&self, name: &str) {
        std::fs::remove_file(self.path("manifests").join(format!("{name}.yaml")))
            .expect("remove manifest");
    }

    /// The `/pods` items, `None` while the agent does not answer.
    fn pods(&self) -> Option<Vec<Value>> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(stream, "GET /pods HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        if head.split_whitespace().nth(1) != Some("200") {
            return None;
        }
        let list: Value = serde_json::from_str(body).ok()?;
        assert_eq!(list["kind"], "PodList", "{body}");
        list["items"].as_array().cloned()
    }

    /// The static pod of manifest pod `name` in `/pods`.
    fn pod(&self, name: &str) -> Option<Value> {
        let full = format!("{name}-{NODE}");
        self.pods()?
            .into_iter()
            .find(|p| p["metadata"]["name"] == full.as_str())
    }

    /// Polls `check` every [`POLL`] until it returns `Some`; panics after [`PATIENCE`] with
    /// `what`, `/pods` and the agent's log tail.
    fn wait_for<T>(&self, what: &str, mut check: impl FnMut(&Agent) -> Option<T>) -> T {
        let began = Instant::now();
        loop {
            if let Some(v) = check(self) {
                eprintln!("{what}: after {:?}", began.elapsed());
                return v;
            }
            if began.elapsed() > PATIENCE {
                let log = self.read("agent.log").unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let pods = serde_json::to_string_pretty(&self.pods()).unwrap_or_default();
                panic!(
                    "timed out after {PATIENCE:?} waiting for {what}\n--- /pods:\n{pods}\n--- agent log tail:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// A container spec running `sh -c script`, tagged with this test's `IT_DIR`.
    fn container(&self, name: &str, script: &str) -> Value {
        json!({
            "name": name,
            "image": "host",
            "command": ["sh", "-c", script],
            "env": [{"name": "IT_DIR", "value": self.dir.path()}],
        })
    }

    /// Pids of every process that carries this test's `IT_DIR` tag.
    fn tagged_processes(&self) -> Vec<i32> {
        let tag = format!("IT_DIR={}", self.dir.path().display());
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == tag.as_bytes()))
            })
            .collect()
    }
}

impl Drop for Agent {
    /// SIGKILLs the agent, then every process it started (containers are in their own
    /// process groups and outlive it); repeats until none is left, in case one forked.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for _ in 0..50 {
            let pids = self.tagged_processes();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            std::thread::sleep(POLL);
        }
    }
}

/// `true` while process `pid` exists and is not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}

/// The status of container `name` in the pod's status list `list` (`containerStatuses`,
/// `initContainerStatuses`).
fn container_status<'a>(pod: &'a Value, list: &str, name: &str) -> Option<&'a Value> {
    pod["status"][list]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

#[test]
fn init_container_completes_before_the_app_starts() {
    let agent = Agent::start();
    let flag = agent.path("flag");
    let seen = agent.path("seen");
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "init"},
        "spec": {
            "initContainers": [agent.container("prepare", &format!("echo ready > {}", flag.display()))],
            "containers": [agent.container(
                "app",
                &format!("cat {} > {}; exec sleep 3600", flag.display(), seen.display()),
            )],
        },
    });
    agent.write_manifest("init", &pod);

    let pod = agent.wait_for("pod Running with the app running", |a| {
        let pod = a.pod("init")?;
        let app = container_status(&pod, "containerStatuses", "app")?;
        (pod["status"]["phase"] == "Running" && app["state"]["running"].is_object()).then_some(pod)
    });
    let init =
        container_status(&pod, "initContainerStatuses", "prepare").expect("init container status");
    let terminated = &init["state"]["terminated"];
    assert_eq!(terminated["reason"], "Completed", "{init:#}");
    assert_eq!(terminated["exitCode"], 0, "{init:#}");
    let app = container_status(&pod, "containerStatuses", "app").expect("app status");
    assert_eq!(app["ready"], true, "{app:#}");
    assert_eq!(app["restartCount"], 0, "{app:#}");
    assert!(
        app["containerID"]
            .as_str()
            .is_some_and(|id| id.starts_with("process://")),
        "the container ID carries the runtime's own name: {app:#}"
    );
    // No sandbox: the pod IP is the node's (when the node has one; see NodeBuilder::node_ips).
    assert_eq!(
        pod["status"]["podIP"], pod["status"]["hostIP"],
        "{:#}",
        pod["status"]
    );
    let read = agent.wait_for("the app's copy of the init container's file", |a| {
        a.read("seen").filter(|s| !s.is_empty())
    });
    assert_eq!(read, "ready\n");
}

#[test]
fn a_failing_container_crash_loops_with_growing_back_off() {
    let agent = Agent::start();
    let starts = agent.path("starts");
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "crash"},
        "spec": {
            "restartPolicy": "Always",
            "containers": [agent.container(
                "fail",
                &format!("date +%s.%N >> {}; exit 1", starts.display()),
            )],
        },
    });
    agent.write_manifest("crash", &pod);

    let mut saw_back_off = false;
    // Restarts are noticed by the relisting PLEG (every second): the back-off shows in the
    // gaps only once it outgrows that, from the fifth restart (1.6 s) on.
    let status = agent.wait_for("seven restarts, CrashLoopBackOff seen", |a| {
        let pod = a.pod("crash")?;
        let status = container_status(&pod, "containerStatuses", "fail")?.clone();
        saw_back_off |= status["state"]["waiting"]["reason"] == "CrashLoopBackOff";
        (saw_back_off && status["restartCount"].as_i64()? >= 7).then_some(status)
    });
    let last = &status["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 1, "{status:#}");
    assert_eq!(last["reason"], "Error", "{status:#}");

    let starts: Vec<f64> = agent
        .read("starts")
        .expect("start times")
        .lines()
        .map(|l| l.trim().parse().expect("a date +%s.%N line"))
        .collect();
    let gaps: Vec<f64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!(
        "crash loop: {} starts, gaps between starts (s): {gaps:.3?}",
        starts.len()
    );
    assert!(gaps.len() >= 7, "{gaps:?}");
    let first = gaps[0];
    let last = gaps[gaps.len() - 1];
    assert!(
        last > 2.0 * first,
        "the back-off does not grow: gaps between starts {gaps:.3?}"
    );
}

#[test]
fn deletion_runs_pre_stop_then_term_then_kill_after_the_grace_period() {
    let agent = Agent::start();
    let dir = agent.dir.path().display().to_string();
    // `$$$$`: the kubelet expands `$(VAR)` in commands and turns `$$` into `$`.
    let mut container = agent.container(
        "stubborn",
        &format!(
            "trap 'date +%s.%N > {dir}/term' TERM; echo $$$$ > {dir}/pid; \
             while true; do sleep 0.1; done"
        ),
    );
    container["lifecycle"] = json!({
        "preStop": {"exec": {"command": ["sh", "-c", format!("date +%s.%N > {dir}/prestop")]}}
    });
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "graceful"},
        "spec": {"terminationGracePeriodSeconds": 2, "containers": [container]},
    });
    agent.write_manifest("graceful", &pod);
    agent.wait_for("the container running", |a| {
        let pod = a.pod("graceful")?;
        let status = container_status(&pod, "containerStatuses", "stubborn")?;
        status["state"]["running"].is_object().then_some(())
    });
    let pid: i32 = agent.wait_for("the container's pid", |a| {
        a.read("pid")?.trim().parse().ok()
    });
    assert!(alive(pid));

    let deleted = now();
    agent.remove_manifest("graceful");
    let term: f64 = agent.wait_for("the TERM trap's marker", |a| {
        a.read("term")?.trim().parse().ok()
    });
    assert!(
        alive(pid),
        "the container ignores SIGTERM, so it lives on until the grace period ends"
    );
    let killed = agent.wait_for("the container's process gone", |_| (!alive(pid)).then(now));
    let pre_stop: f64 = agent
        .read("prestop")
        .and_then(|s| s.trim().parse().ok())
        .expect("the preStop hook ran");
    agent.wait_for("the pod gone from /pods", |a| {
        a.pods().filter(|_| a.pod("graceful").is_none()).map(|_| ())
    });
    eprintln!(
        "graceful deletion: preStop at +{:.3}s, SIGTERM at +{:.3}s, process gone at +{:.3}s",
        pre_stop - deleted,
        term - deleted,
        killed - deleted
    );
    assert!(
        pre_stop <= term,
        "preStop ({pre_stop}) must run before SIGTERM ({term})"
    );
    // SIGKILL only at the end of the 2 s grace period (measured from the deletion the test
    // made, which the agent sees later, never earlier).
    assert!(
        killed - deleted >= 2.0,
        "the process was killed {:.3}s after deletion, before the 2 s grace period ended",
        killed - deleted
    );
}

#[test]
fn termination_message_is_read_from_the_file() {
    let agent = Agent::start();
    let msg = agent.path("msg");
    let mut container = agent.container("done", &format!("printf bye > {}", msg.display()));
    container["terminationMessagePath"] = json!(msg);
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "message"},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    });
    agent.write_manifest("message", &pod);

    let pod = agent.wait_for("pod Succeeded", |a| {
        let pod = a.pod("message")?;
        (pod["status"]["phase"] == "Succeeded").then_some(pod)
    });
    let status = container_status(&pod, "containerStatuses", "done").expect("container status");
    let terminated = &status["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 0, "{status:#}");
    assert_eq!(terminated["reason"], "Completed", "{status:#}");
    assert_eq!(terminated["message"], "bye", "{status:#}");
}

#[test]
fn a_failing_liveness_probe_restarts_the_container() {
    let agent = Agent::start();
    let alive_file = agent.path("alive");
    std::fs::write(&alive_file, "").expect("alive marker");
    let mut container = agent.container("probed", "exec sleep 3600");
    container["livenessProbe"] = json!({
        "exec": {"command": ["test", "-f", alive_file]},
        "periodSeconds": 1,
        "failureThreshold": 1,
    });
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probed"},
        "spec": {"containers": [container]},
    });
    agent.write_manifest("probed", &pod);
    let started = agent.wait_for("the container running", |a| {
        let pod = a.pod("probed")?;
        let status = container_status(&pod, "containerStatuses", "probed")?;
        let running = status["state"]["running"]["startedAt"].as_str()?;
        Some(running.to_owned())
    });
    let status = container_status(
        &agent.pod("probed").expect("pod"),
        "containerStatuses",
        "probed",
    )
    .expect("status")
    .clone();
    assert_eq!(
        status["restartCount"], 0,
        "the probe passes while the file exists: {status:#}"
    );

    std::fs::remove_file(&alive_file).expect("remove alive marker");
    let status = agent.wait_for("a restart after the probe fails", |a| {
        let pod = a.pod("probed")?;
        let status = container_status(&pod, "containerStatuses", "probed")?.clone();
        (status["restartCount"].as_i64()? >= 1).then_some(status)
    });
    eprintln!("liveness: first start {started}, status after restart {status}");
    assert!(status["lastState"]["terminated"].is_object(), "{status:#}");
}
