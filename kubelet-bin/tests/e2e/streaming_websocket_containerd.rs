//! The streaming endpoints over websockets, straight to the `kubelet` binary's secure port
//! (standalone, anonymous (the harness's --anonymous-auth=true) + AlwaysAllow) on a private containerd: the kubelet
//! proxies the upgrade to containerd's streaming server, which speaks
//! `v4.channel.k8s.io` (one byte of channel, then data: 0 stdin, 1 stdout, 2 stderr, 3 the
//! exit status as a `metav1.Status`). The client is written by hand here (RFC 6455 frames
//! over rustls, trusting the CA of the kubelet's self-signed pair):
//!
//! - exec with output and the exit code, exec with stdin;
//! - port-forward (`?port=8080`) carrying an HTTP request; `/run` (no streaming);
//! - a container the pod does not have → 404 before any upgrade;
//! - a client that disconnects mid-session: the kubelet closes the runtime's side, and the
//!   exec (reading its stdin) ends, and an exec that ignores its stdin is killed while a
//!   concurrent one of the same command is not (issue 14 acceptance 5);
//! - `v5.channel.k8s.io` (which containerd 1.6 refuses), served by the kubelet over v4 for
//!   a session without stdin (the exit code); with stdin, containerd's refusal.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use support::{NODE, Node};

const POD: &str = "stream";

fn pod_yaml() -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {POD}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "mkdir -p /www && echo hello-from-the-pod > /www/index.html && exec httpd -f -p 8080 -h /www"]
"#
    )
}

/// A websocket client session (RFC 6455, client frames masked).
struct Ws {
    tls: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
}

/// The TLS config trusting the CA of the kubelet's self-signed pair (`kubelet.crt` holds the
/// serving certificate, then its CA).
fn tls_config(node: &Node) -> Arc<rustls::ClientConfig> {
    let crt = node.dir.join("kubelet/root/pki/kubelet.crt");
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&crt)
        .expect("kubelet.crt")
        .collect::<Result<_, _>>()
        .expect("PEM");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(certs[1].clone()).expect("the CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// Sends a websocket upgrade for `path` offering `v4.channel.k8s.io`; the response head and
/// the session.
fn connect(node: &Node, path: &str) -> (String, Ws) {
    connect_with(node, path, "v4.channel.k8s.io")
}

/// Sends a websocket upgrade for `path` offering `protocol`; the response head and the
/// session.
fn connect_with(node: &Node, path: &str, protocol: &str) -> (String, Ws) {
    let tcp = TcpStream::connect(("127.0.0.1", node.port)).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let conn = rustls::ClientConnection::new(tls_config(node), name).expect("TLS");
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Protocol: {protocol}\r\n\r\n"
    )
    .expect("request");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tls.read_exact(&mut byte).expect("response head");
        head.push(byte[0]);
    }
    (String::from_utf8_lossy(&head).into_owned(), Ws { tls })
}

impl Ws {
    /// The next frame's opcode and payload; `None` at the end of the connection.
    fn read_frame(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut b = [0u8; 2];
        self.tls.read_exact(&mut b).ok()?;
        let mut len = u64::from(b[1] & 0x7f);
        if len == 126 {
            let mut l = [0u8; 2];
            self.tls.read_exact(&mut l).ok()?;
            len = u64::from(u16::from_be_bytes(l));
        } else if len == 127 {
            let mut l = [0u8; 8];
            self.tls.read_exact(&mut l).ok()?;
            len = u64::from_be_bytes(l);
        }
        let mut mask = [0u8; 4];
        if b[1] & 0x80 != 0 {
            self.tls.read_exact(&mut mask).ok()?;
        }
        let mut payload = vec![0u8; usize::try_from(len).ok()?];
        self.tls.read_exact(&mut payload).ok()?;
        for (i, byte) in payload.iter_mut().enumerate() {
            *byte ^= mask[i % 4];
        }
        Some((b[0] & 0x0f, payload))
    }

    /// Sends a binary frame on `channel`.
    fn send(&mut self, channel: u8, data: &[u8]) {
        let mut payload = vec![channel];
        payload.extend_from_slice(data);
        let mask = [0x12u8, 0x34, 0x56, 0x78];
        let mut frame = vec![0x82u8];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | u8::try_from(n).expect("short")),
            n => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&u16::try_from(n).expect("< 64 KiB").to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.tls.write_all(&frame).expect("send");
        self.tls.flush().expect("flush");
    }

    /// Every channel's data until the server closes the session.
    fn channels_until_close(&mut self) -> [Vec<u8>; 4] {
        let mut out: [Vec<u8>; 4] = Default::default();
        while let Some((opcode, payload)) = self.read_frame() {
            match opcode {
                8 => break,
                1 | 2 => {
                    if let Some((&channel, data)) = payload.split_first()
                        && let Some(buf) = out.get_mut(usize::from(channel))
                    {
                        buf.extend_from_slice(data);
                    }
                }
                _ => {}
            }
        }
        out
    }
}

/// The PID of the kubelet listening on the node's secure port.
fn kubelet_pid(node: &Node) -> u32 {
    let out = Command::new("ss")
        .args(["-tlnpH", &format!("sport = :{}", node.port)])
        .output()
        .expect("ss");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("pid=")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no kubelet on port {}: {text}", node.port))
}

/// The established TCP connections of process `pid`.
fn established(pid: u32) -> Vec<String> {
    let out = Command::new("ss")
        .args(["-tnpH", "state", "established"])
        .output()
        .expect("ss");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("pid={pid},")))
        .map(str::to_owned)
        .collect()
}

/// `?command=…` for `cmd`.
fn command_query(cmd: &[&str]) -> String {
    cmd.iter()
        .map(|c| {
            let encoded: String = c
                .bytes()
                .map(|b| match b {
                    b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                        char::from(b).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect();
            format!("command={encoded}")
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn exec_path(cmd: &[&str], streams: &str) -> String {
    format!(
        "/exec/default/{POD}-{NODE}/web?{}&{streams}",
        command_query(cmd)
    )
}

/// Runs `cmd` in `web` with stdout and stderr: (stdout, stderr, status channel).
fn exec(node: &Node, cmd: &[&str]) -> (String, String, String) {
    let (head, mut ws) = connect(node, &exec_path(cmd, "output=1&error=1"));
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let [_, stdout, stderr, status] = ws.channels_until_close();
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (text(stdout), text(stderr), text(status))
}

#[test]
fn exec_and_port_forward_over_websockets_straight_to_the_kubelet() {
    let mut node = Node::new("stream-ws");
    node.node_ip = "127.0.0.1".into();
    node.start_kubelet();
    node.write_manifest("stream.yaml", &pod_yaml());
    node.wait_for(Duration::from_secs(90), "the pod running", |n| {
        let pod = n.pod(POD)?;
        (support::container_status(&pod, "web")?["ready"] == true).then_some(())
    });

    // Output, and the exit code on the status channel.
    let (stdout, stderr, status) = exec(&node, &["sh", "-c", "echo out; echo err >&2; exit 7"]);
    assert_eq!((stdout.as_str(), stderr.as_str()), ("out\n", "err\n"));
    let status: serde_json::Value = serde_json::from_str(&status).expect("a Status");
    assert_eq!(status["status"], "Failure", "{status}");
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(status["details"]["causes"][0]["message"], "7", "{status}");
    let (_, _, status) = exec(&node, &["true"]);
    let status: serde_json::Value = serde_json::from_str(&status).expect("a Status");
    assert_eq!(status["status"], "Success", "{status}");

    // Stdin.
    let (head, mut ws) = connect(
        &node,
        &exec_path(&["sh", "-c", "read l; echo got:$l"], "input=1&output=1"),
    );
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    ws.send(0, b"hello\n");
    let [_, stdout, _, _] = ws.channels_until_close();
    assert_eq!(String::from_utf8_lossy(&stdout), "got:hello\n");

    // Port-forward: each port's data and error channels first carry the port (2 bytes, LE).
    let (head, mut ws) = connect(
        &node,
        &format!("/portForward/default/{POD}-{NODE}?port=8080"),
    );
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    ws.send(0, b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n");
    let mut data = Vec::new();
    while !String::from_utf8_lossy(&data).contains("hello-from-the-pod") {
        let Some((_, payload)) = ws.read_frame() else {
            panic!(
                "port-forward ended with {:?}",
                String::from_utf8_lossy(&data)
            );
        };
        if let Some((0, rest)) = payload.split_first() {
            data.extend_from_slice(rest);
        }
    }
    assert_eq!(data[..2], 8080u16.to_le_bytes(), "the port first");
    let response = String::from_utf8_lossy(&data[2..]);
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    drop(ws);

    // `/run`: the command's output, no streaming.
    let out = Command::new("curl")
        .args(["-sS", "-k", "-X", "POST", "--max-time", "30"])
        .arg(format!(
            "https://127.0.0.1:{}/run/default/{POD}-{NODE}/web?cmd=echo%20run%20ok",
            node.port
        ))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "run ok\n");

    // A container the pod does not have: 404, no upgrade.
    let (head, _) = connect(
        &node,
        &format!("/exec/default/{POD}-{NODE}/nope?command=ls&output=1"),
    );
    assert!(head.starts_with("HTTP/1.1 404 "), "{head}");

    // A client gone mid-session: the kubelet closes the runtime's side at once (no
    // connection, so no splice task, is left), and the exec's stdin ends with the stream.
    let pid = kubelet_pid(&node);
    node.wait_for(
        Duration::from_secs(30),
        "the earlier sessions closed",
        |_| established(pid).is_empty().then_some(()),
    );
    let (head, ws) = connect(&node, &exec_path(&["cat", "-"], "input=1&output=1"));
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let connections = established(pid);
    assert_eq!(
        connections.len(),
        2,
        "the client's and the runtime's: {connections:?}"
    );
    drop(ws);
    node.wait_for(
        Duration::from_secs(30),
        "the kubelet to close the session",
        |_| established(pid).is_empty().then_some(()),
    );
    node.wait_for(Duration::from_secs(30), "the exec's process to end", |n| {
        let ps = exec(n, &["ps"]).0;
        (!ps.lines().any(|l| l.ends_with(" cat -"))).then_some(())
    });

    // A process that ignores its stdin: containerd 1.6 runs the exec under a context of its
    // own, not the stream's, so the kubelet kills it when the session ends, and only it: a
    // second session of the same command, still connected, keeps its process.
    let sleeps = |n: &Node| -> Vec<String> {
        exec(n, &["ps"])
            .0
            .lines()
            .filter(|l| l.ends_with(" sleep 600"))
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect()
    };
    let sleep_path = exec_path(&["sleep", "600"], "input=1&output=1");
    let (head, kept) = connect(&node, &sleep_path);
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let kept_pid = node.wait_for(
        Duration::from_secs(30),
        "the first sleep",
        |n| match sleeps(n).as_slice() {
            [pid] => Some(pid.clone()),
            _ => None,
        },
    );
    let (head, dropped) = connect(&node, &sleep_path);
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    node.wait_for(Duration::from_secs(30), "the second sleep", |n| {
        (sleeps(n).len() == 2).then_some(())
    });
    drop(dropped);
    node.wait_for(
        Duration::from_secs(30),
        "the dropped session's sleep to be killed",
        |n| (sleeps(n).len() == 1).then_some(()),
    );
    assert_eq!(
        sleeps(&node),
        [kept_pid],
        "the connected session's sleep is kept"
    );
    drop(kept);
    node.wait_for(
        Duration::from_secs(30),
        "the last sleep to be killed",
        |n| sleeps(n).is_empty().then_some(()),
    );

    // v5.channel.k8s.io, which containerd 1.6 refuses: the kubelet serves it over v4.
    let v5 = |cmd: &[&str], streams: &str| {
        let (head, ws) = connect_with(&node, &exec_path(cmd, streams), "v5.channel.k8s.io");
        assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("sec-websocket-protocol: v5.channel.k8s.io"),
            "{head}"
        );
        ws
    };
    let [_, stdout, stderr, status] = v5(
        &["sh", "-c", "echo out; echo err >&2; exit 7"],
        "output=1&error=1",
    )
    .channels_until_close();
    assert_eq!(
        (stdout.as_slice(), stderr.as_slice()),
        (&b"out\n"[..], &b"err\n"[..])
    );
    let status: serde_json::Value = serde_json::from_slice(&status).expect("a Status");
    assert_eq!(status["details"]["causes"][0]["message"], "7", "{status}");
    // With stdin, v5 is relayed to containerd over SPDY (v4 cannot close stdin alone, SPDY
    // can): the kubelet accepts it as v5 itself.
    let (head, _) = connect_with(
        &node,
        &exec_path(&["cat"], "input=1&output=1"),
        "v5.channel.k8s.io",
    );
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert!(
        head.contains("sec-websocket-protocol: v5.channel.k8s.io"),
        "{head}"
    );
}
