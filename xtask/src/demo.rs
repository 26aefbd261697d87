//! `cargo xtask demo`: the static pods in `examples/manifests`, run by this workspace's kubelet on
//! a private containerd, with no API server. Prints the pods as they come up until Ctrl-C.

use std::{
    env,
    fs::File,
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc::RecvTimeoutError,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use nix::{sys::signal, unistd::Pid};
use serde_json::Value;
use xtask::{project_root, target_dir, testbed};

const READ_ONLY_PORT: u16 = 10255;
const NODE_NAME: &str = "demo-node";

/// Runs the demo with `kubelet`, or with a freshly built `kubelet-bin` when `None`.
pub(crate) fn run(kubelet: Option<PathBuf>) -> Result<()> {
    let interrupted = crate::interrupts()?;
    let demo = target_dir().join("testbed").join("demo");
    let root = project_root();

    // protoc before cargo builds k8s-cri; containerd and friends for the testbed.
    testbed::ensure_packages()?;
    if TcpListener::bind(("127.0.0.1", READ_ONLY_PORT)).is_err() {
        bail!("port {READ_ONLY_PORT} is in use: is another kubelet (or demo) running?");
    }
    let kubelet_bin = match kubelet {
        Some(path) => path,
        None => build_kubelet()?,
    };

    println!("==> starting a private containerd in {}", demo.display());
    let started = Instant::now();
    let testbed = testbed::Testbed::start(&demo.join("containerd"))?;
    println!(
        "    ready in {:.1?}: {}",
        started.elapsed(),
        testbed.endpoint()
    );

    let log_path = demo.join("kubelet.log");
    let log = File::create(&log_path)?;
    let manifests = root.join("examples").join("manifests");
    let mut command = Command::new(&kubelet_bin);
    command
        .arg("--pod-manifest-path")
        .arg(&manifests)
        .arg("--container-runtime-endpoint")
        .arg(testbed.endpoint())
        .arg("--root-dir")
        .arg(demo.join("root"))
        .arg("--pod-log-dir")
        .arg(demo.join("logs"))
        .args(["--hostname-override", NODE_NAME])
        .args(["--read-only-port", &READ_ONLY_PORT.to_string()])
        .arg(crate::testbed::EVICTION_HARD)
        .arg(crate::testbed::pod_infra_container_image_arg())
        .env(
            "RUST_LOG",
            env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
    println!("==> {}", show(&command));
    let mut kubelet = Kubelet(command.spawn().context("cannot start the kubelet")?);
    println!(
        "    kubelet log: {}; container logs: {}",
        log_path.display(),
        demo.join("logs").display()
    );
    println!("    pods: http://127.0.0.1:{READ_ONLY_PORT}/pods; Ctrl-C to stop");

    let started = Instant::now();
    let mut last = String::new();
    loop {
        match interrupted.recv_timeout(Duration::from_secs(1)) {
            Ok(_) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if let Some(status) = kubelet.0.try_wait()? {
            bail!(
                "the kubelet exited ({status}); end of {}:\n{}",
                log_path.display(),
                tail(&log_path)
            );
        }
        let table = match http_get(READ_ONLY_PORT, "/pods") {
            Ok(body) => serde_json::from_str(&body)
                .map(|pods| render(&pods))
                .unwrap_or_else(|e| format!("(cannot parse /pods: {e})")),
            Err(e) => format!("(waiting for the kubelet: {e:#})"),
        };
        if table != last {
            println!("\n[{:>3}s]\n{table}", started.elapsed().as_secs());
            last = table;
        }
    }

    println!("\n==> stopping the kubelet");
    kubelet.stop();
    println!("==> stopping the testbed");
    testbed.shutdown()
}

/// The kubelet child; stopped with SIGTERM (then SIGKILL after 30 s) when dropped.
struct Kubelet(Child);

impl Kubelet {
    fn stop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(None)) {
            return;
        }
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = signal::kill(Pid::from_raw(pid), signal::Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.0.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                eprintln!("the kubelet ignored SIGTERM for 30 s; killing it");
                let _ = self.0.kill();
                let _ = self.0.wait();
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The pods as a small table: name, phase, pod IP, containers' states.
fn render(pods: &Value) -> String {
    let mut rows = vec![[
        "NAME".to_owned(),
        "PHASE".to_owned(),
        "POD IP".to_owned(),
        "CONTAINERS".to_owned(),
    ]];
    for pod in pods["items"].as_array().into_iter().flatten() {
        let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
        let containers: Vec<String> = pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let state = &c["state"];
                let (kind, detail) = if state.get("running").is_some() {
                    ("running", None)
                } else if let Some(s) = state.get("terminated") {
                    ("terminated", Some(format!("exit {}", s["exitCode"])))
                } else if let Some(s) = state.get("waiting") {
                    ("waiting", s["reason"].as_str().map(str::to_owned))
                } else {
                    ("unknown", None)
                };
                let restarts = c["restartCount"].as_u64().unwrap_or(0);
                let mut out = format!("{}={kind}", text(&c["name"]));
                if let Some(d) = detail.filter(|d| !d.is_empty()) {
                    out.push_str(&format!("({d})"));
                }
                if restarts > 0 {
                    out.push_str(&format!(" restarts={restarts}"));
                }
                out
            })
            .collect();
        rows.push([
            text(&pod["metadata"]["name"]),
            text(&pod["status"]["phase"]),
            text(&pod["status"]["podIP"]),
            if containers.is_empty() {
                "-".to_owned()
            } else {
                containers.join(", ")
            },
        ]);
    }
    if rows.len() == 1 {
        return "(no pods yet)".to_owned();
    }
    let width = |i: usize| rows.iter().map(|r| r[i].len()).max().unwrap_or(0);
    let widths = [width(0), width(1), width(2)];
    rows.iter()
        .map(|r| {
            format!(
                "{:w0$}  {:w1$}  {:w2$}  {}",
                r[0],
                r[1],
                r[2],
                r[3],
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A minimal HTTP/1.0 GET to 127.0.0.1; returns the body of a 200 response.
fn http_get(port: u16, path: &str) -> Result<String> {
    let timeout = Duration::from_secs(2);
    let addr = ([127, 0, 0, 1], port).into();
    let mut conn = TcpStream::connect_timeout(&addr, timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    write!(
        conn,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("malformed HTTP response")?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("GET {path}: {status}");
    }
    Ok(body.to_owned())
}

fn show(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Builds the debug kubelet (package kubelet-bin) and returns its path.
pub(crate) fn build_kubelet() -> Result<PathBuf> {
    println!("==> building the kubelet (package kubelet-bin)");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--package", "kubelet-bin", "--bin", "kubelet"])
        .current_dir(project_root())
        .status()?;
    if !status.success() {
        bail!("cannot build the kubelet ({status})");
    }
    Ok(target_dir().join("debug").join("kubelet"))
}
