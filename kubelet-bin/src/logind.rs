//! systemd-logind over D-Bus for graceful node shutdown: [`DbusLogind`] implements
//! [`Inhibitor`] with zbus on `org.freedesktop.login1.Manager`.
//!
//! Mirrors upstream `pkg/kubelet/nodeshutdown/systemd/inhibit_linux.go`:
//! `InhibitDelayMaxUSec` read as a property, `Inhibit("shutdown", "kubelet", …, "delay")`
//! whose file descriptor is the lock (closing it releases the lock), the `PrepareForShutdown`
//! signal, the `99-kubelet.conf` drop-in under `/etc/systemd/logind.conf.d/` that raises
//! `InhibitDelayMaxSec`, and logind's reload by `KillUnit("systemd-logind.service", "all",
//! SIGHUP)` through systemd. Upstream uses the system bus; the address can be another bus
//! (tests run a private `dbus-daemon` with a logind stand-in).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use kubelet_core::nodeshutdown::{Error, InhibitLock, Inhibitor, Result};
use tokio::sync::{Mutex, mpsc};
use zbus::zvariant::OwnedValue;

#[cfg(test)]
mod tests;

/// logind's bus name.
pub const DESTINATION: &str = "org.freedesktop.login1";
/// logind's manager object.
pub const PATH: &str = "/org/freedesktop/login1";
/// logind's manager interface.
pub const MANAGER: &str = "org.freedesktop.login1.Manager";
/// Where upstream writes its logind drop-in (upstream `logindConfigDirectory`).
pub const CONF_DIR: &str = "/etc/systemd/logind.conf.d";
/// The drop-in's name (upstream `kubeletLogindConf`).
pub const DROP_IN: &str = "99-kubelet.conf";
/// What the lock is for, who holds it and why (upstream `InhibitShutdown`).
const INHIBIT: (&str, &str, &str, &str) = (
    "shutdown",
    "kubelet",
    "Kubelet needs time to handle node shutdown",
    "delay",
);

/// logind over D-Bus. One connection, made on first use and again after it was lost.
#[derive(Debug)]
pub struct DbusLogind {
    address: Option<String>,
    conf_dir: PathBuf,
    conn: Arc<Mutex<Option<zbus::Connection>>>,
}

fn error(op: &'static str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::Inhibitor {
        op,
        source: source.into(),
    }
}

impl DbusLogind {
    /// logind on the message bus at `address` (`unix:path=…`), or on the system bus when
    /// `None` (`DBUS_SYSTEM_BUS_ADDRESS` or `/run/dbus/system_bus_socket`).
    pub fn new(address: Option<String>) -> Self {
        Self {
            address,
            conf_dir: PathBuf::from(CONF_DIR),
            conn: Arc::default(),
        }
    }

    /// Writes the `InhibitDelayMaxSec` drop-in under `dir` instead of [`CONF_DIR`].
    #[must_use]
    pub fn with_conf_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.conf_dir = dir.into();
        self
    }

    /// The drop-in's path.
    pub fn drop_in_path(&self) -> PathBuf {
        self.conf_dir.join(DROP_IN)
    }

    async fn connection(&self) -> Result<zbus::Connection> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        let conn = match &self.address {
            Some(address) => {
                zbus::connection::Builder::address(address.as_str())
                    .map_err(|e| error("invalid D-Bus address", e))?
                    .build()
                    .await
            }
            None => zbus::Connection::system().await,
        }
        .map_err(|e| error("failed connecting to the system bus", e))?;
        *slot = Some(conn.clone());
        Ok(conn)
    }
}

#[async_trait]
impl Inhibitor for DbusLogind {
    async fn current_inhibit_delay(&self) -> Result<Duration> {
        const OP: &str = "failed reading InhibitDelayMaxUSec property from logind";
        let conn = self.connection().await?;
        let reply = conn
            .call_method(
                Some(DESTINATION),
                PATH,
                Some("org.freedesktop.DBus.Properties"),
                "Get",
                &(MANAGER, "InhibitDelayMaxUSec"),
            )
            .await
            .map_err(|e| error(OP, e))?;
        let value: OwnedValue = reply.body().deserialize().map_err(|e| error(OP, e))?;
        let usec = u64::try_from(value).map_err(|_| {
            error(
                OP,
                "InhibitDelayMaxUSec from logind is not a uint64 as expected",
            )
        })?;
        Ok(Duration::from_micros(usec))
    }

    async fn inhibit_shutdown(&self) -> Result<InhibitLock> {
        let conn = self.connection().await?;
        let reply = conn
            .call_method(Some(DESTINATION), PATH, Some(MANAGER), "Inhibit", &INHIBIT)
            .await
            .map_err(|e| error("failed creating systemd inhibitor", e))?;
        let fd: zbus::zvariant::OwnedFd = reply
            .body()
            .deserialize()
            .map_err(|e| error("failed storing inhibit lock file descriptor", e))?;
        Ok(InhibitLock::new(fd))
    }

    async fn override_inhibit_delay(&self, delay: Duration) -> Result<()> {
        tokio::fs::create_dir_all(&self.conf_dir)
            .await
            .map_err(|e| {
                error(
                    "failed creating the logind.conf.d directory",
                    format!("{}: {e}", self.conf_dir.display()),
                )
            })?;
        // logind's `InhibitDelayMaxSec` is in seconds (the property is in microseconds).
        let contents = format!(
            "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={}\n",
            delay.as_secs_f64().round()
        );
        let path = self.drop_in_path();
        tokio::fs::write(&path, contents).await.map_err(|e| {
            error(
                "failed writing logind shutdown inhibit override file",
                format!("{}: {e}", path.display()),
            )
        })
    }

    async fn reload_logind_conf(&self) -> Result<()> {
        let conn = self.connection().await?;
        conn.call_method(
            Some("org.freedesktop.systemd1"),
            "/org/freedesktop/systemd1",
            Some("org.freedesktop.systemd1.Manager"),
            "KillUnit",
            &("systemd-logind.service", "all", 1i32),
        )
        .await
        .map_err(|e| error("unable to reload logind conf", e))?;
        Ok(())
    }

    async fn monitor_shutdown(&self) -> Result<mpsc::Receiver<bool>> {
        const OP: &str = "failed to monitor shutdown";
        let conn = self.connection().await?;
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .interface(MANAGER)
            .and_then(|b| b.member("PrepareForShutdown"))
            .and_then(|b| b.path(PATH))
            .map_err(|e| error(OP, e))?
            .build();
        let mut stream = zbus::MessageStream::for_match_rule(rule, &conn, Some(16))
            .await
            .map_err(|e| error(OP, e))?;
        let (tx, rx) = mpsc::channel(4);
        let slot = self.conn.clone();
        tokio::spawn(async move {
            while let Some(message) = stream.next().await {
                let message = match message {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(error = %e, "logind D-Bus connection failed");
                        break;
                    }
                };
                match message.body().deserialize::<bool>() {
                    Ok(active) => {
                        if tx.send(active).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => tracing::error!(
                        error = %e,
                        "Failed obtaining shutdown event, PrepareForShutdown event was not bool type as expected"
                    ),
                }
            }
            // Lost: the next start connects again.
            slot.lock().await.take();
        });
        Ok(rx)
    }
}
