//! [`DbusLogind`] and the node shutdown manager against a real `dbus-daemon` on a private
//! address, with a logind stand-in on it (`org.freedesktop.login1`: `Inhibit` hands out one
//! end of a socket pair and watches the other for the release, `InhibitDelayMaxUSec`,
//! `PrepareForShutdown`) and a systemd stand-in whose `KillUnit` makes the stand-in logind
//! read the drop-in again, as logind does on SIGHUP.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicU64, Ordering};

use kubelet_core::eviction::{PodTerminator, TerminatePodOptions};
use kubelet_core::nodeshutdown::{Config, Manager};
use tokio_util::sync::CancellationToken;
use zbus::object_server::SignalEmitter;

use super::*;

/// A private message bus, killed on drop.
struct Bus {
    child: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `None` (the test is skipped) when `dbus-daemon` is not installed (Debian package `dbus`).
fn bus() -> Option<Bus> {
    if !Path::new("/usr/bin/dbus-daemon").exists() {
        eprintln!("dbus-daemon is not installed (Debian package dbus): skipped");
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("bus");
    let address = format!("unix:path={}", socket.display());
    let child = Command::new("/usr/bin/dbus-daemon")
        .args(["--session", "--nofork", "--nopidfile"])
        .arg(format!("--address={address}"))
        .stdout(Stdio::null())
        .spawn()
        .expect("dbus-daemon starts");
    for _ in 0..200 {
        if socket.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(socket.exists(), "dbus-daemon made no socket");
    Some(Bus {
        child,
        address,
        _dir: dir,
    })
}

/// What a caller asked `Inhibit` for: what, who, why, mode.
type InhibitArgs = (String, String, String, String);

#[derive(Clone, Default)]
struct LogindState {
    delay_usec: Arc<AtomicU64>,
    /// Our ends of the handed-out locks, with what the caller asked.
    locks: Arc<StdMutex<Vec<(UnixStream, InhibitArgs)>>>,
}

impl LogindState {
    /// Locks whose other end is still open (not released).
    fn held(&self) -> usize {
        let locks = self.locks.lock().expect("lock");
        locks
            .iter()
            .filter(|(ours, _)| {
                ours.set_nonblocking(true).expect("nonblocking");
                let mut buf = [0u8; 1];
                // EOF: every copy of the other end is closed.
                !matches!((&*ours).read(&mut buf), Ok(0))
            })
            .count()
    }
}

struct FakeLogind(LogindState);

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl FakeLogind {
    async fn inhibit(
        &self,
        what: String,
        who: String,
        why: String,
        mode: String,
    ) -> zbus::fdo::Result<zbus::zvariant::OwnedFd> {
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| zbus::fdo::Error::Failed(e.to_string()))?;
        self.0
            .locks
            .lock()
            .expect("lock")
            .push((ours, (what, who, why, mode)));
        Ok(std::os::fd::OwnedFd::from(theirs).into())
    }

    #[zbus(property, name = "InhibitDelayMaxUSec")]
    async fn inhibit_delay_max_usec(&self) -> u64 {
        self.0.delay_usec.load(Ordering::SeqCst)
    }

    #[zbus(signal)]
    async fn prepare_for_shutdown(emitter: &SignalEmitter<'_>, start: bool) -> zbus::Result<()>;
}

/// systemd's `KillUnit` with SIGHUP for `systemd-logind.service`: logind reads its drop-ins.
struct FakeSystemd {
    drop_in: PathBuf,
    logind: LogindState,
}

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl FakeSystemd {
    async fn kill_unit(&self, unit: String, who: String, signal: i32) -> zbus::fdo::Result<()> {
        if (unit.as_str(), who.as_str(), signal) != ("systemd-logind.service", "all", 1) {
            return Err(zbus::fdo::Error::InvalidArgs(format!(
                "{unit} {who} {signal}"
            )));
        }
        let text = std::fs::read_to_string(&self.drop_in).unwrap_or_default();
        if let Some(secs) = text
            .lines()
            .find_map(|l| l.strip_prefix("InhibitDelayMaxSec="))
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            self.logind
                .delay_usec
                .store(secs * 1_000_000, Ordering::SeqCst);
        }
        Ok(())
    }
}

async fn stand_ins(bus: &Bus, state: &LogindState, drop_in: PathBuf) -> zbus::Connection {
    zbus::connection::Builder::address(bus.address.as_str())
        .expect("address")
        .name(DESTINATION)
        .expect("name")
        .name("org.freedesktop.systemd1")
        .expect("name")
        .serve_at(PATH, FakeLogind(state.clone()))
        .expect("serve logind")
        .serve_at(
            "/org/freedesktop/systemd1",
            FakeSystemd {
                drop_in,
                logind: state.clone(),
            },
        )
        .expect("serve systemd")
        .build()
        .await
        .expect("stand-ins connect")
}

async fn emit(conn: &zbus::Connection, start: bool) {
    let iface = conn
        .object_server()
        .interface::<_, FakeLogind>(PATH)
        .await
        .expect("served");
    FakeLogind::prepare_for_shutdown(iface.signal_emitter(), start)
        .await
        .expect("emitted");
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn inhibitor_calls_on_a_real_bus() {
    let Some(bus) = bus() else { return };
    let conf = tempfile::tempdir().expect("tempdir");
    let logind =
        DbusLogind::new(Some(bus.address.clone())).with_conf_dir(conf.path().join("logind.conf.d"));
    let state = LogindState::default();
    state.delay_usec.store(5_000_000, Ordering::SeqCst);
    let stand_ins = stand_ins(&bus, &state, logind.drop_in_path()).await;

    assert_eq!(
        logind.current_inhibit_delay().await.expect("delay"),
        Duration::from_secs(5)
    );
    logind
        .override_inhibit_delay(Duration::from_secs(30))
        .await
        .expect("drop-in");
    assert_eq!(
        std::fs::read_to_string(logind.drop_in_path()).expect("written"),
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=30\n"
    );
    logind.reload_logind_conf().await.expect("reload");
    assert_eq!(
        logind.current_inhibit_delay().await.expect("delay"),
        Duration::from_secs(30)
    );

    let lock = logind.inhibit_shutdown().await.expect("lock");
    assert_eq!(state.held(), 1);
    assert_eq!(
        state.locks.lock().expect("lock")[0].1,
        (
            "shutdown".to_owned(),
            "kubelet".to_owned(),
            "Kubelet needs time to handle node shutdown".to_owned(),
            "delay".to_owned()
        )
    );
    drop(lock);
    eventually("the lock's release", || state.held() == 0).await;

    let mut events = logind.monitor_shutdown().await.expect("monitor");
    emit(&stand_ins, true).await;
    emit(&stand_ins, false).await;
    assert_eq!(events.recv().await, Some(true));
    assert_eq!(events.recv().await, Some(false));
}

/// Ends pods at once, recording them.
#[derive(Default)]
struct Recorder(StdMutex<Vec<(String, TerminatePodOptions)>>);

#[async_trait]
impl PodTerminator for Recorder {
    async fn terminate_pod_abnormally_and_wait(
        &self,
        pod: &k8s_openapi::api::core::v1::Pod,
        options: TerminatePodOptions,
    ) -> Result<(), kubelet_core::eviction::Error> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.0.lock().expect("lock").push((name, options));
        Ok(())
    }
    fn pod_cleaned_up(&self, _pod: &k8s_openapi::api::core::v1::Pod) -> bool {
        true
    }
}

/// The manager on the bus: the delay raised through the drop-in, the lock held until a
/// `PrepareForShutdown(true)` has every pod terminated, then released; taken again after a
/// cancellation.
#[tokio::test]
async fn the_manager_holds_the_lock_until_pods_are_terminated() {
    let Some(bus) = bus() else { return };
    let conf = tempfile::tempdir().expect("tempdir");
    let logind = DbusLogind::new(Some(bus.address.clone())).with_conf_dir(conf.path());
    let state = LogindState::default();
    state.delay_usec.store(5_000_000, Ordering::SeqCst);
    let stand_ins = stand_ins(&bus, &state, logind.drop_in_path()).await;
    let terminator = Arc::new(Recorder::default());
    let mut web = k8s_openapi::api::core::v1::Pod::default();
    web.metadata.name = Some("web".into());
    web.metadata.uid = Some("uid-web".into());
    let config = Config {
        shutdown_grace_period: Duration::from_secs(20),
        shutdown_grace_period_critical_pods: Duration::from_secs(10),
        ..Default::default()
    };
    let manager = Manager::new(
        &config,
        Arc::new(logind),
        terminator.clone(),
        Arc::new(move || vec![web.clone()]),
    )
    .expect("valid")
    .expect("enabled");
    let shutdown = manager.state();
    let token = CancellationToken::new();
    let run = tokio::spawn(Arc::new(manager).run(token.clone()));
    eventually("the lock", || state.held() == 1).await;
    assert_eq!(state.delay_usec.load(Ordering::SeqCst), 20_000_000);

    emit(&stand_ins, true).await;
    eventually("the release", || state.held() == 0).await;
    assert!(shutdown.is_shutting_down());
    let done = terminator.0.lock().expect("lock").clone();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].0, "web");
    assert_eq!(done[0].1.grace_period_override, 10);
    assert_eq!(done[0].1.reason, "Terminated");

    emit(&stand_ins, false).await;
    eventually("the lock again", || state.held() == 1).await;
    assert!(!shutdown.is_shutting_down());
    token.cancel();
    run.await.expect("joins").expect("ran");
}
