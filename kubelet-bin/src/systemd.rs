//! systemd over D-Bus for the systemd cgroup driver: [`DbusSystemd`] implements
//! [`SystemdUnits`] with zbus on `org.freedesktop.systemd1.Manager`.
//!
//! Mirrors runc's `libcontainer/cgroups/systemd/common.go` and `dbus.go` (`startUnit` with
//! `ignoreExist`, `stopUnit`, `resetFailedUnit`, `setUnitProperties`, `systemdVersion`,
//! `retryOnDisconnect`) over go-systemd's `dbus.NewWithContext` connection choice: the
//! system bus (`DBUS_SYSTEM_BUS_ADDRESS` or `/run/dbus/system_bus_socket`), else systemd's
//! private socket `/run/systemd/private` as root. A job is waited for through its
//! `JobRemoved` signal, for at most 30 s as runc.
//!
//! The driver's callers block (they run on the blocking pool), zbus is async: one thread
//! owns the connection on its own current-thread runtime and serves requests from a
//! channel; a lost connection is made again once per call.

use std::path::Path;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use futures::StreamExt;
use kubelet_core::cm::systemd::{PropertyValue, SystemdUnits, UnitProperty, parse_systemd_version};
use kubelet_core::cm::{Error, Result};
use tokio::sync::mpsc;
use zbus::zvariant::{OwnedObjectPath, OwnedValue, Value};

/// The manager's bus name.
pub const DESTINATION: &str = "org.freedesktop.systemd1";
/// The manager's object.
pub const PATH: &str = "/org/freedesktop/systemd1";
/// The manager's interface.
pub const MANAGER: &str = "org.freedesktop.systemd1.Manager";
/// systemd's private socket (root only, peer to peer).
pub const PRIVATE_SOCKET: &str = "/run/systemd/private";
/// How long a job may take (runc's 30 s).
pub const JOB_TIMEOUT: Duration = Duration::from_secs(30);

/// Where systemd is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// The system bus, else the private socket (go-systemd `NewWithContext`).
    System,
    /// A message bus at this D-Bus address (`unix:path=…`).
    Bus(String),
    /// systemd itself at this D-Bus address, peer to peer (its private socket).
    Peer(String),
}

enum Op {
    Start(Vec<UnitProperty>),
    Set(Vec<UnitProperty>),
    Stop,
}

struct Request {
    unit: String,
    op: Op,
    reply: std_mpsc::SyncSender<Result<()>>,
}

/// systemd's manager over D-Bus, for [`kubelet_core::cm::systemd::Systemd`].
#[derive(Debug)]
pub struct DbusSystemd {
    requests: mpsc::UnboundedSender<Request>,
    version: Option<u32>,
}

fn error(
    unit: &str,
    op: &str,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> Error {
    Error::Systemd {
        unit: unit.to_owned(),
        op: op.to_owned(),
        source: source.into(),
    }
}

impl DbusSystemd {
    /// Connects to systemd at `address` and reads its version. Blocks: call it on the
    /// blocking pool or before the runtime starts.
    pub fn connect(address: Address) -> Result<Self> {
        let (requests, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = std_mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("systemd-dbus".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready_tx.send(Err(error("-", "runtime", e)));
                        return;
                    }
                };
                runtime.block_on(serve(address, rx, ready_tx));
            });
        if let Err(e) = spawned {
            return Err(error("-", "spawn", e));
        }
        let version = ready_rx.recv().map_err(|e| error("-", "connect", e))??;
        tracing::info!(?version, "connected to systemd");
        Ok(Self { requests, version })
    }

    fn call(&self, unit: &str, op: Op) -> Result<()> {
        let (reply, rx) = std_mpsc::sync_channel(1);
        self.requests
            .send(Request {
                unit: unit.to_owned(),
                op,
                reply,
            })
            .map_err(|_| error(unit, "send", "the D-Bus thread is gone"))?;
        rx.recv()
            .map_err(|_| error(unit, "receive", "the D-Bus thread is gone"))?
    }
}

impl SystemdUnits for DbusSystemd {
    fn start_transient_unit(&self, name: &str, properties: &[UnitProperty]) -> Result<()> {
        self.call(name, Op::Start(properties.to_vec()))
    }
    fn set_unit_properties(&self, name: &str, properties: &[UnitProperty]) -> Result<()> {
        self.call(name, Op::Set(properties.to_vec()))
    }
    fn stop_unit(&self, name: &str) -> Result<()> {
        self.call(name, Op::Stop)
    }
    fn version(&self) -> Option<u32> {
        self.version
    }
}

async fn connect(address: &Address) -> zbus::Result<zbus::Connection> {
    use zbus::connection::Builder;
    match address {
        Address::Bus(a) => Builder::address(a.as_str())?.build().await,
        Address::Peer(a) => Builder::address(a.as_str())?.p2p().build().await,
        Address::System => match zbus::Connection::system().await {
            Ok(c) => Ok(c),
            Err(e) if Path::new(PRIVATE_SOCKET).exists() => {
                tracing::debug!(error = %e, "no system bus; trying systemd's private socket");
                Builder::address(format!("unix:path={PRIVATE_SOCKET}").as_str())?
                    .p2p()
                    .build()
                    .await
            }
            Err(e) => Err(e),
        },
    }
}

/// The manager's `Version` (runc `systemdVersion`).
async fn version(conn: &zbus::Connection) -> zbus::Result<Option<u32>> {
    let reply = conn
        .call_method(
            Some(DESTINATION),
            PATH,
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(MANAGER, "Version"),
        )
        .await?;
    let value: OwnedValue = reply.body().deserialize()?;
    Ok(String::try_from(value)
        .ok()
        .and_then(|v| parse_systemd_version(&v)))
}

async fn serve(
    address: Address,
    mut rx: mpsc::UnboundedReceiver<Request>,
    ready: std_mpsc::SyncSender<Result<Option<u32>>>,
) {
    let mut conn = match connect(&address).await {
        Ok(c) => c,
        Err(e) => {
            let _ = ready.send(Err(error("-", "connect", e)));
            return;
        }
    };
    // Job signals go to subscribers (go-systemd subscribes too); older managers may refuse.
    let _ = call_manager(&conn, "Subscribe", &()).await;
    let v = version(&conn).await.ok().flatten();
    if ready.send(Ok(v)).is_err() {
        return;
    }
    while let Some(req) = rx.recv().await {
        let mut result = handle(&conn, &req).await;
        if let Err(Failure::Transport(e)) = &result {
            // runc `retryOnDisconnect`: connect again, try once more.
            tracing::warn!(error = %e, "systemd D-Bus connection lost; reconnecting");
            match connect(&address).await {
                Ok(c) => {
                    conn = c;
                    let _ = call_manager(&conn, "Subscribe", &()).await;
                    result = handle(&conn, &req).await;
                }
                Err(e) => result = Err(Failure::Transport(e)),
            }
        }
        let op = match req.op {
            Op::Start(_) => "StartTransientUnit",
            Op::Set(_) => "SetUnitProperties",
            Op::Stop => "StopUnit",
        };
        let _ = req
            .reply
            .send(result.map_err(|f| f.into_error(&req.unit, op)));
    }
}

/// Why a call failed: the connection (worth a reconnect) or systemd's answer.
enum Failure {
    Transport(zbus::Error),
    Refused(zbus::Error),
    Job(String),
}

impl Failure {
    fn into_error(self, unit: &str, op: &str) -> Error {
        match self {
            Failure::Transport(e) | Failure::Refused(e) => error(unit, op, e),
            Failure::Job(result) => error(unit, op, format!("job finished {result:?}")),
        }
    }
}

impl From<zbus::Error> for Failure {
    fn from(e: zbus::Error) -> Self {
        match e {
            zbus::Error::MethodError(..) | zbus::Error::FDO(_) => Failure::Refused(e),
            e => Failure::Transport(e),
        }
    }
}

fn method_error_name(e: &zbus::Error) -> Option<&str> {
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.as_str()),
        _ => None,
    }
}

async fn call_manager<B>(
    conn: &zbus::Connection,
    method: &str,
    body: &B,
) -> zbus::Result<zbus::Message>
where
    B: serde::Serialize + zbus::zvariant::DynamicType,
{
    conn.call_method(Some(DESTINATION), PATH, Some(MANAGER), method, body)
        .await
}

fn dbus_properties(props: &[UnitProperty]) -> Vec<(&str, Value<'_>)> {
    props
        .iter()
        .map(|p| {
            let value = match &p.value {
                PropertyValue::Bool(b) => Value::from(*b),
                PropertyValue::U64(n) => Value::from(*n),
                PropertyValue::Str(s) => Value::from(s.as_str()),
                PropertyValue::Strings(list) => Value::from(list.clone()),
            };
            (p.name, value)
        })
        .collect()
}

/// `JobRemoved(u id, o job, s unit, s result)` signals, subscribed before the call.
async fn job_signals(conn: &zbus::Connection) -> zbus::Result<zbus::MessageStream> {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .interface(MANAGER)?
        .member("JobRemoved")?
        .path(PATH)?
        .build();
    zbus::MessageStream::for_match_rule(rule, conn, Some(64)).await
}

/// Waits for `job`'s `JobRemoved` and returns its result (`done`, `failed`, …).
async fn wait_job(
    signals: &mut zbus::MessageStream,
    job: &OwnedObjectPath,
) -> Result<String, Failure> {
    let wait = async {
        while let Some(msg) = signals.next().await {
            let msg = msg?;
            let Ok((_, path, _, result)) = msg
                .body()
                .deserialize::<(u32, OwnedObjectPath, String, String)>()
            else {
                continue;
            };
            if &path == job {
                return Ok(result);
            }
        }
        Err(Failure::Transport(zbus::Error::InputOutput(
            std::sync::Arc::new(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)),
        )))
    };
    match tokio::time::timeout(JOB_TIMEOUT, wait).await {
        Ok(r) => r,
        Err(_) => Err(Failure::Job("timeout".into())),
    }
}

async fn reset_failed(conn: &zbus::Connection, unit: &str) {
    let _ = call_manager(conn, "ResetFailedUnit", &(unit,)).await;
}

async fn handle(conn: &zbus::Connection, req: &Request) -> Result<(), Failure> {
    let unit = req.unit.as_str();
    match &req.op {
        Op::Start(props) => {
            let mut signals = job_signals(conn).await?;
            let aux: Vec<(&str, Vec<(&str, Value<'_>)>)> = Vec::new();
            let reply = call_manager(
                conn,
                "StartTransientUnit",
                &(unit, "replace", dbus_properties(props), aux),
            )
            .await;
            let reply = match reply {
                Err(e) if method_error_name(&e) == Some("org.freedesktop.systemd1.UnitExists") => {
                    return Ok(());
                }
                r => r?,
            };
            let job: OwnedObjectPath = reply.body().deserialize()?;
            let result = wait_job(&mut signals, &job).await;
            match result {
                Ok(r) if r == "done" => Ok(()),
                Ok(r) => {
                    reset_failed(conn, unit).await;
                    Err(Failure::Job(r))
                }
                Err(e) => {
                    reset_failed(conn, unit).await;
                    Err(e)
                }
            }
        }
        Op::Set(props) => {
            call_manager(
                conn,
                "SetUnitProperties",
                &(unit, true, dbus_properties(props)),
            )
            .await?;
            Ok(())
        }
        Op::Stop => {
            let mut signals = job_signals(conn).await?;
            let reply = match call_manager(conn, "StopUnit", &(unit, "replace")).await {
                Err(e) if method_error_name(&e) == Some("org.freedesktop.systemd1.NoSuchUnit") => {
                    return Ok(());
                }
                r => r?,
            };
            let job: OwnedObjectPath = reply.body().deserialize()?;
            let result = wait_job(&mut signals, &job).await;
            // A failed unit stays until reset: let systemd remove it.
            reset_failed(conn, unit).await;
            match result? {
                r if r == "done" => Ok(()),
                r => {
                    tracing::warn!(unit, result = %r, "stopping the unit did not finish done; continuing");
                    Ok(())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
