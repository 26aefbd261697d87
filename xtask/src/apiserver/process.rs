//! The two processes of a [`Cluster`](super::Cluster): etcd and kube-apiserver on free loopback
//! ports, started until `/readyz` answers, and killed together.

use std::{
    ffi::OsString,
    fs::{self, File},
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow};

use super::curl::curl;
use crate::util;

/// How long a start waits for `/readyz` (7–12 s is normal on a loaded machine).
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How often readiness is polled.
pub(crate) const POLL: Duration = Duration::from_millis(100);
/// Lines of a log in error messages.
pub(crate) const TAIL_LINES: usize = 40;
/// Attempts when a start failed for a transient reason ([`Failure::Transient`]).
const START_ATTEMPTS: usize = 3;
/// How long etcd may take to answer `/health` before kube-apiserver is started anyway (it then
/// fails with "context deadline exceeded", which is retried).
const ETCD_HEALTH_TIMEOUT: Duration = Duration::from_secs(30);
/// The service-account issuer and the API audience.
const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// What the processes are started with; the files are those of [`Files::new`].
pub(crate) struct Spec<'a> {
    pub(crate) apiserver: &'a Path,
    pub(crate) etcd: &'a Path,
    /// Extra kube-apiserver flags, after the fixture's own.
    pub(crate) extra_args: &'a [String],
    /// Whether the ServiceAccount admission plugin runs (off by default: see [`super::Cluster`]).
    pub(crate) service_account_admission: bool,
    /// A token that may read `/readyz`.
    pub(crate) token: &'a str,
}

/// The paths in the cluster's directory.
pub(crate) struct Files {
    pub(crate) tokens: PathBuf,
    pub(crate) sa_key: PathBuf,
    pub(crate) sa_pub: PathBuf,
    pub(crate) cert_dir: PathBuf,
    /// Written by kube-apiserver: its self-signed certificate followed by its CA.
    pub(crate) ca_file: PathBuf,
    pub(crate) etcd_data: PathBuf,
    pub(crate) etcd_log: PathBuf,
    pub(crate) apiserver_log: PathBuf,
}

impl Files {
    pub(crate) fn new(dir: &Path) -> Files {
        let cert_dir = dir.join("certs");
        Files {
            tokens: dir.join("tokens.csv"),
            sa_key: dir.join("sa.key"),
            sa_pub: dir.join("sa.pub"),
            ca_file: cert_dir.join("apiserver.crt"),
            cert_dir,
            etcd_data: dir.join("etcd"),
            etcd_log: dir.join("etcd.log"),
            apiserver_log: dir.join("kube-apiserver.log"),
        }
    }
}

/// etcd and kube-apiserver, serving; both are killed on drop.
#[derive(Debug)]
pub(crate) struct Processes {
    /// `None` while stopped ([`Processes::stop_apiserver`]).
    apiserver: Option<Child>,
    etcd: Child,
    /// `https://127.0.0.1:<port>`.
    pub(crate) url: String,
    /// How kube-apiserver was started, to start it again the same way.
    apiserver_cmd: (PathBuf, Vec<OsString>),
    apiserver_log: PathBuf,
    ca_file: PathBuf,
    token: String,
}

impl Drop for Processes {
    fn drop(&mut self) {
        if let Some(apiserver) = &mut self.apiserver {
            kill(apiserver);
        }
        kill(&mut self.etcd);
    }
}

impl Processes {
    /// Kills kube-apiserver; etcd keeps running with the data.
    pub(crate) fn stop_apiserver(&mut self) {
        if let Some(mut apiserver) = self.apiserver.take() {
            kill(&mut apiserver);
        }
    }

    /// Starts kube-apiserver again with the same flags and port, and waits for `/readyz`.
    pub(crate) fn start_apiserver(&mut self) -> Result<()> {
        if self.apiserver.is_some() {
            return Ok(());
        }
        let (program, args) = &self.apiserver_cmd;
        let mut apiserver = KillOnDrop(Some(spawn(
            Command::new(program).args(args),
            &self.apiserver_log,
        )?));
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = apiserver.exited() {
                return Err(anyhow!(
                    "kube-apiserver exited ({status}) during its restart:\n{}",
                    util::tail(&self.apiserver_log, TAIL_LINES)
                ));
            }
            if let Ok((200, _)) = curl(
                &self.url,
                &self.ca_file,
                &self.token,
                "GET",
                "/readyz",
                None,
            ) {
                self.apiserver = apiserver.0.take();
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(anyhow!(
                    "kube-apiserver not ready {READY_TIMEOUT:?} after its restart:\n{}",
                    util::tail(&self.apiserver_log, TAIL_LINES)
                ));
            }
            thread::sleep(POLL);
        }
    }
}

/// Starts both and waits for `/readyz`, starting again on other ports after a transient failure.
pub(crate) fn start(spec: &Spec<'_>, files: &Files) -> Result<Processes> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match start_once(spec, files) {
            Ok(running) => return Ok(running),
            Err(Failure::Transient(e)) if attempt < START_ATTEMPTS => {
                eprintln!("apiserver fixture: {e:#}; starting again on other ports");
            }
            Err(Failure::Transient(e) | Failure::Other(e)) => return Err(e),
        }
    }
}

/// Why a start attempt failed: a transient failure is worth another attempt, the rest is not.
enum Failure {
    /// A picked port was taken by someone else before the server bound it, or kube-apiserver gave
    /// up on a slow etcd ("context deadline exceeded" from its storage check on a loaded machine).
    Transient(anyhow::Error),
    Other(anyhow::Error),
}

/// Log lines of an exited process that mark a [`Failure::Transient`] start.
const TRANSIENT_EXITS: [&str; 2] = ["address already in use", "context deadline exceeded"];

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        Failure::Other(e)
    }
}

fn start_once(spec: &Spec<'_>, files: &Files) -> Result<Processes, Failure> {
    let [client, peer, secure] = free_ports()?;
    let etcd_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    // A failed attempt's data would not hurt, but start clean.
    let _ = fs::remove_dir_all(&files.etcd_data);
    let etcd = spawn(
        Command::new(spec.etcd)
            .arg("--name=e2e")
            .arg(format!("--data-dir={}", files.etcd_data.display()))
            .arg(format!("--listen-client-urls={etcd_url}"))
            .arg(format!("--advertise-client-urls={etcd_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=e2e={peer_url}")),
        &files.etcd_log,
    )?;
    let mut etcd = KillOnDrop(Some(etcd));
    wait_for_etcd(client, &mut etcd, &files.etcd_log)?;
    let mut cmd = Command::new(spec.apiserver);
    cmd.arg(format!("--etcd-servers={etcd_url}"))
        .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
        .arg(format!("--secure-port={secure}"))
        .arg(format!("--cert-dir={}", files.cert_dir.display()))
        .arg(format!("--token-auth-file={}", files.tokens.display()))
        .arg("--authorization-mode=Node,RBAC")
        .arg("--enable-admission-plugins=NodeRestriction")
        .arg(format!("--service-account-issuer={ISSUER}"))
        .arg(format!("--api-audiences={ISSUER}"))
        .arg(format!(
            "--service-account-key-file={}",
            files.sa_pub.display()
        ))
        .arg(format!(
            "--service-account-signing-key-file={}",
            files.sa_key.display()
        ))
        .args([
            "--service-cluster-ip-range=10.96.0.0/24",
            "--allow-privileged=true",
        ])
        .args(spec.extra_args);
    if !spec.service_account_admission {
        cmd.arg("--disable-admission-plugins=ServiceAccount");
    }
    let apiserver_cmd = (
        PathBuf::from(cmd.get_program()),
        cmd.get_args().map(ToOwned::to_owned).collect(),
    );
    let mut apiserver = KillOnDrop(Some(spawn(&mut cmd, &files.apiserver_log)?));
    let url = format!("https://127.0.0.1:{secure}");
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut last = String::from("no answer yet");
    loop {
        for (name, child, log) in [
            ("etcd", &mut etcd, &files.etcd_log),
            ("kube-apiserver", &mut apiserver, &files.apiserver_log),
        ] {
            if let Some(status) = child.exited() {
                let tail = util::tail(log, TAIL_LINES);
                let e = anyhow!("{name} exited ({status}) during start:\n{tail}");
                return Err(if TRANSIENT_EXITS.iter().any(|t| tail.contains(t)) {
                    Failure::Transient(e)
                } else {
                    Failure::Other(e)
                });
            }
        }
        if files.ca_file.exists() {
            match curl(&url, &files.ca_file, spec.token, "GET", "/readyz", None) {
                Ok((200, _)) => break,
                Ok((status, body)) => last = format!("{status}: {body}"),
                Err(e) => last = format!("{e:#}"),
            }
        }
        if Instant::now() >= deadline {
            return Err(Failure::Other(anyhow!(
                "kube-apiserver not ready after {READY_TIMEOUT:?} (last /readyz: {last}):\n{}",
                util::tail(&files.apiserver_log, TAIL_LINES)
            )));
        }
        thread::sleep(POLL);
    }
    match (apiserver.0.take(), etcd.0.take()) {
        (Some(apiserver), Some(etcd)) => Ok(Processes {
            apiserver: Some(apiserver),
            etcd,
            url,
            apiserver_cmd,
            apiserver_log: files.apiserver_log.clone(),
            ca_file: files.ca_file.clone(),
            token: spec.token.to_owned(),
        }),
        _ => Err(Failure::Other(anyhow!("a started process went missing"))),
    }
}

/// Waits until etcd answers `/health` with `"health":"true"`, so kube-apiserver's storage check
/// does not race etcd's start (it exits with "context deadline exceeded" when etcd is slow).
/// Gives up quietly after [`ETCD_HEALTH_TIMEOUT`]: kube-apiserver's own failure then says more.
fn wait_for_etcd(port: u16, etcd: &mut KillOnDrop, log: &Path) -> Result<(), Failure> {
    let deadline = Instant::now() + ETCD_HEALTH_TIMEOUT;
    while Instant::now() < deadline {
        if let Some(status) = etcd.exited() {
            let tail = util::tail(log, TAIL_LINES);
            let e = anyhow!("etcd exited ({status}) during start:\n{tail}");
            return Err(if TRANSIENT_EXITS.iter().any(|t| tail.contains(t)) {
                Failure::Transient(e)
            } else {
                Failure::Other(e)
            });
        }
        if etcd_healthy(port) {
            return Ok(());
        }
        thread::sleep(POLL);
    }
    Ok(())
}

/// Whether etcd on `127.0.0.1:<port>` answers `GET /health` with `"health":"true"`.
fn etcd_healthy(port: u16) -> bool {
    let answer = (|| -> std::io::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer)
    })();
    answer.is_ok_and(|a| a.contains(r#""health":"true""#))
}

/// A child that is killed when the start fails half-way.
struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    /// The exit status, if the process has exited.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            kill(child);
        }
    }
}

/// Three distinct free ports ([`crate::ports`]).
fn free_ports() -> Result<[u16; 3]> {
    Ok([
        crate::ports::free_port()?,
        crate::ports::free_port()?,
        crate::ports::free_port()?,
    ])
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves one connection on a free port with `answer`, returning the port.
    fn serve_once(answer: &'static str) -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                let mut request = [0u8; 256];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        port
    }

    #[test]
    fn etcd_is_healthy_only_when_it_says_so() {
        let healthy = serve_once("HTTP/1.0 200 OK\r\n\r\n{\"health\":\"true\",\"reason\":\"\"}");
        assert!(etcd_healthy(healthy));
        let unhealthy = serve_once("HTTP/1.0 503 Unavailable\r\n\r\n{\"health\":\"false\"}");
        assert!(!etcd_healthy(unhealthy));
        let closed = free_ports().expect("ports")[0];
        assert!(!etcd_healthy(closed));
    }
}
