//! The kubelet under test (arm A): the release `kubelet` binary, started once, long-lived, on
//! an empty manifest directory, with its own ports, root and log directories.

use std::{
    env,
    fs::{self, File},
    io::{Read, Write},
    net::TcpStream,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use nix::{sys::signal, unistd::Pid};

/// Directories of one bench run, all under one work directory.
#[derive(Debug, Clone)]
pub(crate) struct Dirs {
    /// `--pod-manifest-path`: empty at start, the bench writes manifests here.
    pub(crate) manifests: PathBuf,
    /// `--root-dir`.
    pub(crate) root: PathBuf,
    /// `--pod-log-dir` (also the raw arm's, so both send the same log directories).
    pub(crate) pod_logs: PathBuf,
    /// The kubelet's and the agent's output.
    pub(crate) logs: PathBuf,
}

impl Dirs {
    /// Fresh (emptied) directories under `work`.
    pub(crate) fn fresh(work: &Path) -> Result<Dirs> {
        let dirs = Dirs {
            manifests: work.join("manifests"),
            root: work.join("root"),
            pod_logs: work.join("pod-logs"),
            logs: work.join("logs"),
        };
        for dir in [&dirs.manifests, &dirs.root, &dirs.pod_logs, &dirs.logs] {
            match fs::remove_dir_all(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("cannot empty {}", dir.display()));
                }
                _ => {}
            }
            fs::create_dir_all(dir)?;
        }
        Ok(dirs)
    }
}

/// The running kubelet; stopped with SIGTERM (SIGKILL after 30 s) when dropped.
pub(crate) struct Kubelet {
    child: Child,
    healthz_port: u16,
    read_only_port: u16,
    log: PathBuf,
}

impl Kubelet {
    /// Starts `bin` on the CRI `endpoint` as node `node`; output goes to `dirs.logs/kubelet.log`
    /// at `RUST_LOG` (default `info`, and trace for what the bench reads back from the log: the
    /// probe workers' runs and the start path). Returns once `/healthz` answers.
    pub(crate) fn start(bin: &Path, endpoint: &str, dirs: &Dirs, node: &str) -> Result<Kubelet> {
        let filter = format!(
            "info,{},{}",
            super::probes::LOG_RUNS,
            super::breakdown::LOG_FILTER
        );
        Self::start_with(bin, endpoint, dirs, node, &[], &filter)
    }

    /// [`Kubelet::start`] with `extra` flags after the bench's own (e.g. `--kubeconfig`) and
    /// `log_filter` as the default of `RUST_LOG` (`info` where nothing reads the log back).
    pub(crate) fn start_with(
        bin: &Path,
        endpoint: &str,
        dirs: &Dirs,
        node: &str,
        extra: &[String],
        log_filter: &str,
    ) -> Result<Kubelet> {
        let (read_only_port, healthz_port) =
            (xtask::ports::free_port()?, xtask::ports::free_port()?);
        let log = dirs.logs.join("kubelet.log");
        let out = File::create(&log)?;
        let child = Command::new(bin)
            .arg("--pod-manifest-path")
            .arg(&dirs.manifests)
            .args(["--container-runtime-endpoint", endpoint])
            .arg("--root-dir")
            .arg(&dirs.root)
            .arg("--pod-log-dir")
            .arg(&dirs.pod_logs)
            .args(["--hostname-override", node])
            .args(["--read-only-port", &read_only_port.to_string()])
            .args(["--healthz-port", &healthz_port.to_string()])
            .arg(crate::testbed::EVICTION_HARD)
            .arg(crate::testbed::pod_infra_container_image_arg())
            // The secure port: not upstream's 10250, which another kubelet may hold.
            .args(["--port", &xtask::ports::free_port()?.to_string()])
            // Long on purpose: the start path must not depend on the periodic rescan.
            .args(["--file-check-frequency", "20s"])
            // Unix times in the lines the bench reads back (`kubelet_log`).
            .arg(super::kubelet_log::FLAG)
            .args(extra)
            .env(
                "RUST_LOG",
                env::var("RUST_LOG").unwrap_or_else(|_| log_filter.to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let mut kubelet = Kubelet {
            child,
            healthz_port,
            read_only_port,
            log,
        };
        kubelet.wait_healthy(Duration::from_secs(30))?;
        Ok(kubelet)
    }

    /// The kubelet's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its read-only port (`/pods`).
    pub(crate) fn read_only_port(&self) -> u16 {
        self.read_only_port
    }

    /// Its log file.
    pub(crate) fn log(&self) -> &Path {
        &self.log
    }

    /// Freezes the kubelet (SIGSTOP) until the guard is dropped (SIGCONT).
    ///
    /// For the raw arm: its pods carry the kubelet's labels, so a running kubelet would kill
    /// them as pods that no source wants (housekeeping); frozen, it also uses no CPU meanwhile.
    pub(crate) fn freeze(&self) -> Result<Frozen> {
        let pid = Pid::from_raw(i32::try_from(self.child.id())?);
        signal::kill(pid, signal::Signal::SIGSTOP).context("cannot SIGSTOP the kubelet")?;
        Ok(Frozen(pid))
    }

    /// Fails if the kubelet has exited.
    pub(crate) fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the kubelet exited ({status}); see {}", self.log.display());
        }
        Ok(())
    }

    fn wait_healthy(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive()?;
            match http_get(self.healthz_port, "/healthz") {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    bail!("the kubelet's /healthz did not answer within {timeout:?}: {e:#}")
                }
                Err(_) => thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Stops the kubelet (SIGTERM, then SIGKILL after 30 s).
    pub(crate) fn stop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = signal::kill(Pid::from_raw(pid), signal::Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.child.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A frozen kubelet; continues (SIGCONT) when dropped.
pub(crate) struct Frozen(Pid);

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = signal::kill(self.0, signal::Signal::SIGCONT);
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A minimal HTTP/1.0 GET to 127.0.0.1; returns the body of a 200 response.
pub(crate) fn http_get(port: u16, path: &str) -> Result<String> {
    let timeout = Duration::from_secs(2);
    let mut conn = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    write!(
        conn,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )?;
    let mut raw = String::new();
    conn.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").context("malformed response")?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("GET {path}: {status}");
    }
    Ok(body.to_owned())
}
