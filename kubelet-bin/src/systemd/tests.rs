//! [`DbusSystemd`] against a fake `org.freedesktop.systemd1.Manager` served by zbus on a
//! unix socket, peer to peer as systemd's private socket: what is sent, typed as systemd
//! reads it, and how its answers (jobs, `UnitExists`, `NoSuchUnit`, failed jobs) are taken.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use zbus::object_server::SignalEmitter;
use zbus::zvariant::ObjectPath;

use super::*;

#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop.systemd1")]
enum SystemdError {
    #[zbus(error)]
    ZBus(zbus::Error),
    UnitExists(String),
    NoSuchUnit(String),
}

/// A call as the fake received it.
#[derive(Debug)]
struct Call {
    method: &'static str,
    unit: String,
    mode: String,
    properties: Vec<(String, OwnedValue)>,
}

#[derive(Clone, Default)]
struct State {
    calls: Arc<Mutex<Vec<Call>>>,
    units: Arc<Mutex<BTreeSet<String>>>,
    jobs: Arc<Mutex<u32>>,
}

impl State {
    fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().expect("lock"))
    }
    fn record(
        &self,
        method: &'static str,
        unit: &str,
        mode: &str,
        properties: Vec<(String, OwnedValue)>,
    ) {
        self.calls.lock().expect("lock").push(Call {
            method,
            unit: unit.into(),
            mode: mode.into(),
            properties,
        });
    }
    fn job(&self) -> (u32, OwnedObjectPath) {
        let mut n = self.jobs.lock().expect("lock");
        *n += 1;
        let path = format!("/org/freedesktop/systemd1/job/{n}");
        (*n, OwnedObjectPath::try_from(path).expect("path"))
    }
}

struct FakeManager(State);

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl FakeManager {
    async fn start_transient_unit(
        &self,
        name: String,
        mode: String,
        properties: Vec<(String, OwnedValue)>,
        _aux: Vec<(String, Vec<(String, OwnedValue)>)>,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<OwnedObjectPath, SystemdError> {
        self.0
            .record("StartTransientUnit", &name, &mode, properties);
        if !self.0.units.lock().expect("lock").insert(name.clone()) {
            return Err(SystemdError::UnitExists(format!(
                "Unit {name} was already loaded or has a fragment file."
            )));
        }
        let (id, job) = self.0.job();
        let result = if name.starts_with("fail") {
            "failed"
        } else {
            "done"
        };
        Self::job_removed(&emitter, id, job.as_ref(), &name, result).await?;
        Ok(job)
    }

    async fn set_unit_properties(
        &self,
        name: String,
        runtime: bool,
        properties: Vec<(String, OwnedValue)>,
    ) -> Result<(), SystemdError> {
        self.0
            .record("SetUnitProperties", &name, &runtime.to_string(), properties);
        Ok(())
    }

    async fn stop_unit(
        &self,
        name: String,
        mode: String,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<OwnedObjectPath, SystemdError> {
        self.0.record("StopUnit", &name, &mode, Vec::new());
        if !self.0.units.lock().expect("lock").remove(&name) {
            return Err(SystemdError::NoSuchUnit(format!("Unit {name} not loaded.")));
        }
        let (id, job) = self.0.job();
        Self::job_removed(&emitter, id, job.as_ref(), &name, "done").await?;
        Ok(job)
    }

    async fn reset_failed_unit(&self, name: String) {
        self.0.record("ResetFailedUnit", &name, "", Vec::new());
    }

    async fn subscribe(&self) {}

    #[zbus(property)]
    async fn version(&self) -> String {
        "252.38-1~deb12u1".into()
    }

    #[zbus(signal)]
    async fn job_removed(
        emitter: &SignalEmitter<'_>,
        id: u32,
        job: ObjectPath<'_>,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;
}

/// Serves the fake on `dir/private` (every connection, peer to peer); returns its address.
async fn serve_fake(dir: &Path, state: State) -> String {
    let path = dir.join("private");
    let listener = tokio::net::UnixListener::bind(&path).expect("bind");
    tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            let conn = zbus::connection::Builder::unix_stream(stream)
                .server(zbus::Guid::generate())
                .expect("guid")
                .p2p()
                .serve_at(PATH, FakeManager(state.clone()))
                .expect("serve")
                .build()
                .await
                .expect("server");
            conns.push(conn);
        }
    });
    format!("unix:path={}", path.display())
}

fn prop(name: &'static str, value: PropertyValue) -> UnitProperty {
    UnitProperty { name, value }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("join")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_runc_calls_and_reads_systemd_answers() {
    let dir = tempfile::tempdir().expect("tmp");
    let state = State::default();
    let address = serve_fake(dir.path(), state.clone()).await;
    let sd = Arc::new(
        blocking(move || DbusSystemd::connect(Address::Peer(address)))
            .await
            .expect("connect"),
    );
    assert_eq!(sd.version(), Some(252));

    let props = vec![
        prop(
            "Description",
            PropertyValue::Str("libcontainer container kubepods-pod1.slice".into()),
        ),
        prop(
            "Wants",
            PropertyValue::Strings(vec!["kubepods.slice".into()]),
        ),
        prop("DefaultDependencies", PropertyValue::Bool(false)),
        prop("CPUShares", PropertyValue::U64(102)),
    ];
    let s = sd.clone();
    let p = props.clone();
    blocking(move || s.start_transient_unit("kubepods-pod1.slice", &p))
        .await
        .expect("start");
    let calls = state.take();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let start = &calls[0];
    assert_eq!(
        (start.method, start.unit.as_str(), start.mode.as_str()),
        ("StartTransientUnit", "kubepods-pod1.slice", "replace")
    );
    let sent = &start.properties;
    assert_eq!(
        sent.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["Description", "Wants", "DefaultDependencies", "CPUShares"]
    );
    // Typed as systemd reads them: s, as, b, t.
    assert_eq!(
        String::try_from(sent[0].1.try_clone().expect("clone")).expect("s"),
        "libcontainer container kubepods-pod1.slice"
    );
    assert_eq!(
        Vec::<String>::try_from(sent[1].1.try_clone().expect("clone")).expect("as"),
        ["kubepods.slice"]
    );
    assert!(!bool::try_from(&sent[2].1).expect("b"));
    assert_eq!(u64::try_from(&sent[3].1).expect("t"), 102);

    // An existing unit is success (the kubelet making sure a slice exists).
    let s = sd.clone();
    blocking(move || s.start_transient_unit("kubepods-pod1.slice", &props))
        .await
        .expect("exists is fine");
    assert_eq!(state.take().len(), 1);

    let s = sd.clone();
    blocking(move || {
        s.set_unit_properties(
            "kubepods-burstable.slice",
            &[prop("CPUShares", PropertyValue::U64(307))],
        )
    })
    .await
    .expect("set");
    let calls = state.take();
    assert_eq!(
        (
            calls[0].method,
            calls[0].unit.as_str(),
            calls[0].mode.as_str()
        ),
        ("SetUnitProperties", "kubepods-burstable.slice", "true")
    );
    assert_eq!(u64::try_from(&calls[0].properties[0].1).expect("t"), 307);

    let s = sd.clone();
    blocking(move || s.stop_unit("kubepods-pod1.slice"))
        .await
        .expect("stop");
    let methods: Vec<_> = state
        .take()
        .iter()
        .map(|c| (c.method, c.mode.clone()))
        .collect();
    assert_eq!(
        methods,
        [
            ("StopUnit", "replace".to_owned()),
            ("ResetFailedUnit", String::new())
        ]
    );
    let s = sd.clone();
    blocking(move || s.stop_unit("kubepods-pod1.slice"))
        .await
        .expect("a unit that is gone is success");

    // A job that does not finish `done` fails the call, and the failed unit is reset.
    let s = sd.clone();
    let err = blocking(move || s.start_transient_unit("fail.slice", &[]))
        .await
        .expect_err("failed job");
    assert!(err.to_string().contains("failed"), "{err}");
    let methods: Vec<_> = state.take().iter().map(|c| c.method).collect();
    assert_eq!(
        methods,
        ["StopUnit", "StartTransientUnit", "ResetFailedUnit"]
    );
}
