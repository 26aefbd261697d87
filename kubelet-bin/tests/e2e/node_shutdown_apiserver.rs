//! Issue 34 item 6 on the real containerd and a real kube-apiserver: graceful node shutdown.
//! The `kubelet` binary, configured with `shutdownGracePeriod: 20s` and
//! `shutdownGracePeriodCriticalPods: 5s`, finds logind on a private `dbus-daemon` given as
//! `DBUS_SYSTEM_BUS_ADDRESS`, where this test serves a logind stand-in: the kubelet takes a
//! delay lock; on `PrepareForShutdown(true)` its pod's preStop hook runs its course within
//! the regular pods' 15 s, the pod ends `Failed` with reason `Terminated` and the
//! `DisruptionTarget` condition, the Node turns `NotReady` with `node is shutting down`, a new
//! pod is refused with `NodeShutdown`, and the lock is released.
//!
//! Skipped when kube-apiserver is not built (unless `KUBELET_REQUIRE_APISERVER` is set) or
//! when `dbus-daemon` (Debian package `dbus`) is missing.

use crate::support;

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{NODE, Node, get_json, kubectl_create, kubectl_wait};
use xtask::apiserver::Cluster;
use zbus::object_server::SignalEmitter;

const PATH: &str = "/org/freedesktop/login1";

/// logind's inhibitor part: `Inhibit` hands out one end of a socket pair and keeps the other,
/// whose read sees EOF once the kubelet closed its end (released the lock).
#[derive(Clone, Default)]
struct Locks(Arc<Mutex<Vec<UnixStream>>>);

impl Locks {
    fn held(&self) -> usize {
        use std::io::Read;
        let locks = self.0.lock().expect("lock");
        locks
            .iter()
            .filter(|ours| {
                ours.set_nonblocking(true).expect("nonblocking");
                !matches!((&**ours).read(&mut [0u8; 1]), Ok(0))
            })
            .count()
    }
}

struct Logind(Locks);

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl Logind {
    async fn inhibit(
        &self,
        what: String,
        _who: String,
        _why: String,
        mode: String,
    ) -> zbus::fdo::Result<zbus::zvariant::OwnedFd> {
        if (what.as_str(), mode.as_str()) != ("shutdown", "delay") {
            return Err(zbus::fdo::Error::InvalidArgs(format!("{what} {mode}")));
        }
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| zbus::fdo::Error::Failed(e.to_string()))?;
        self.0.0.lock().expect("lock").push(ours);
        Ok(std::os::fd::OwnedFd::from(theirs).into())
    }

    /// 60 s: enough for the kubelet's 20 s, so it writes no drop-in on this machine.
    #[zbus(property, name = "InhibitDelayMaxUSec")]
    async fn inhibit_delay_max_usec(&self) -> u64 {
        60_000_000
    }

    #[zbus(signal)]
    async fn prepare_for_shutdown(emitter: &SignalEmitter<'_>, start: bool) -> zbus::Result<()>;
}

/// A private message bus, killed on drop.
struct Bus(Child, String);

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn bus(dir: &Path) -> Option<Bus> {
    if !Path::new("/usr/bin/dbus-daemon").exists() {
        eprintln!("dbus-daemon is not installed (Debian package dbus): skipped");
        return None;
    }
    let socket = dir.join("system_bus_socket");
    let _ = std::fs::remove_file(&socket);
    let address = format!("unix:path={}", socket.display());
    let child = Command::new("/usr/bin/dbus-daemon")
        .args(["--session", "--nofork", "--nopidfile"])
        .arg(format!("--address={address}"))
        .stdout(Stdio::null())
        .spawn()
        .expect("dbus-daemon starts");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "dbus-daemon made no socket");
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(Bus(child, address))
}

fn pod_yaml(name: &str, out: &Path) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  nodeName: {NODE}
  terminationGracePeriodSeconds: 60
  containers:
  - name: app
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    lifecycle:
      preStop:
        exec:
          command: ["sh", "-c", "echo start > /out/prestop; sleep 3; echo done >> /out/prestop"]
    volumeMounts:
    - {{name: out, mountPath: /out}}
  volumes:
  - {{name: out, hostPath: {{path: {out}, type: DirectoryOrCreate}}}}
"#,
        out = out.display()
    )
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

#[test]
fn a_shutdown_runs_prestop_fails_the_pod_and_marks_the_node_not_ready() {
    let Some(cluster) = Cluster::builder()
        .node(NODE)
        .start_or_skip()
        .expect("cluster")
    else {
        return;
    };
    let mut node = Node::new("node-shutdown");
    let Some(bus) = bus(&node.dir) else { return };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let locks = Locks::default();
    let logind = runtime.block_on(async {
        zbus::connection::Builder::address(bus.1.as_str())
            .expect("address")
            .name("org.freedesktop.login1")
            .expect("name")
            .serve_at(PATH, Logind(locks.clone()))
            .expect("serve")
            .build()
            .await
            .expect("the stand-in connects")
    });

    let config = node.dir.join("kubelet-config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         shutdownGracePeriod: 20s\nshutdownGracePeriodCriticalPods: 5s\n",
    )
    .expect("config");
    let kubeconfig = cluster.node_kubeconfig(NODE).expect("node kubeconfig");
    node.extra_args = vec![
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--config".into(),
        config.display().to_string(),
    ];
    node.env = vec![("DBUS_SYSTEM_BUS_ADDRESS".into(), bus.1.clone())];
    node.start_kubelet();
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", &format!("node/{NODE}")],
        60,
    );
    node.wait_for(Duration::from_secs(30), "the inhibitor lock", |_| {
        (locks.held() == 1).then_some(())
    });

    let out = node.dir.join("out");
    kubectl_create(
        &cluster,
        &node,
        "graceful.yaml",
        &pod_yaml("graceful", &out),
    );
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", "pod/graceful"],
        90,
    );

    // logind announces the shutdown.
    let started = Instant::now();
    runtime.block_on(async {
        let iface = logind
            .object_server()
            .interface::<_, Logind>(PATH)
            .await
            .expect("served");
        Logind::prepare_for_shutdown(iface.signal_emitter(), true)
            .await
            .expect("emitted");
    });

    // Within the regular pods' 15 s: Failed, Terminated, DisruptionTarget; the preStop hook
    // ran to its end (3 s) first.
    let pod = node.wait_for(Duration::from_secs(15), "the pod Failed", |_| {
        let pod = get_json(&cluster, &["get", "pod", "graceful"]);
        (pod["status"]["phase"] == "Failed").then_some(pod)
    });
    assert_eq!(pod["status"]["reason"], "Terminated", "{pod}");
    assert_eq!(
        pod["status"]["message"], "Pod was terminated in response to imminent node shutdown.",
        "{pod}"
    );
    let disruption = condition(&pod, "DisruptionTarget").expect("DisruptionTarget");
    assert_eq!(disruption["status"], "True", "{disruption}");
    assert_eq!(disruption["reason"], "TerminationByKubelet", "{disruption}");
    let prestop = std::fs::read_to_string(out.join("prestop")).unwrap_or_default();
    assert_eq!(prestop, "start\ndone\n", "the preStop hook had its time");

    // The Node is NotReady with upstream's message, within the period.
    let node_object = node.wait_for(Duration::from_secs(15), "the Node NotReady", |_| {
        let n = get_json(&cluster, &["get", "node", NODE]);
        condition(&n, "Ready")
            .is_some_and(|c| c["status"] == "False")
            .then_some(n)
    });
    let ready = condition(&node_object, "Ready").expect("Ready");
    assert_eq!(ready["reason"], "KubeletNotReady", "{ready}");
    assert_eq!(ready["message"], "node is shutting down", "{ready}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    // The pods are done: the lock is released, and the shutdown may go on.
    node.wait_for(Duration::from_secs(20), "the lock's release", |_| {
        (locks.held() == 0).then_some(())
    });

    // A pod arriving now is refused.
    kubectl_create(&cluster, &node, "late.yaml", &pod_yaml("late", &out));
    let late = node.wait_for(Duration::from_secs(30), "the late pod refused", |_| {
        let pod = get_json(&cluster, &["get", "pod", "late"]);
        (pod["status"]["phase"] == "Failed").then_some(pod)
    });
    assert_eq!(late["status"]["reason"], "NodeShutdown", "{late}");
    assert_eq!(
        late["status"]["message"],
        "Pod was rejected: Pod was rejected as the node is shutting down.",
        "{late}"
    );
}
