//! Tests of the streaming endpoints: upstream's option parsing, the answers before the
//! upgrade, and the proxy end to end against a scripted streaming server on loopback (the
//! fake runtime's `stream_url` points at it).

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use kubelet_core::kuberuntime::api::StreamRequest;
use kubelet_core::pod::PodExt;
use kubelet_core::pod_manager::PodManager;
use kubelet_core::runtime::{Runtime, StreamOptions};
use kubelet_core::testing::{FakeRuntime, FakeRuntimeHelper, FakeStatusManager, pod};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::ServerState;
use super::streaming::{port_forward_ports, routes, stream_options};
use super::ws_frame;

#[test]
fn stream_options_are_upstreams() {
    let o = |q: &str| stream_options(Some(q));
    assert_eq!(
        o("command=ls&output=1&error=1"),
        Ok(StreamOptions {
            stdout: true,
            stderr: true,
            ..Default::default()
        })
    );
    // A terminal has no stderr; "true" is not "1".
    assert_eq!(
        o("input=1&output=1&error=1&tty=1"),
        Ok(StreamOptions {
            stdin: true,
            stdout: true,
            stderr: false,
            tty: true
        })
    );
    for none in ["command=ls", "output=true&input=0", "error=1&tty=1", ""] {
        assert_eq!(
            o(none),
            Err("you must specify at least 1 of stdin, stdout, stderr"),
            "{none}"
        );
    }
    assert!(stream_options(None).is_err());
}

#[test]
fn port_forward_ports_come_from_the_query_for_websockets_only() {
    let mut ws = HeaderMap::new();
    ws.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    ws.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    let mut spdy = ws.clone();
    spdy.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    assert_eq!(port_forward_ports(&spdy, None), Ok(vec![]));
    assert_eq!(
        port_forward_ports(&ws, Some("port=80&port=8080,9090")),
        Ok(vec![80, 8080, 9090])
    );
    assert_eq!(
        port_forward_ports(&ws, None),
        Err("query parameter \"port\" is required".into())
    );
    assert_eq!(
        port_forward_ports(&ws, Some("port=")),
        Err("query parameter \"port\" cannot be empty".into())
    );
    assert_eq!(
        port_forward_ports(&ws, Some("port=0")),
        Err("port \"0\" must be > 0".into())
    );
    let err = port_forward_ports(&ws, Some("port=80,http")).expect_err("not a port");
    assert!(
        err.starts_with("unable to parse \"80,http\" as a port"),
        "{err}"
    );
}

/// A kubelet's streaming routes on loopback over a fake runtime running pod `web` (container
/// `app`), whose streaming server is `backend`.
struct Harness {
    addr: std::net::SocketAddr,
    runtime: FakeRuntime,
    pod_manager: PodManager,
    _server: tokio::task::JoinHandle<()>,
}

async fn harness(backend: &str) -> Harness {
    let runtime = FakeRuntime::new();
    runtime.service().set_stream_server(backend);
    let p = pod("web");
    let status = runtime
        .get_pod_status(&p.uid(), "web", "default")
        .await
        .expect("status");
    let backoff =
        kubelet_core::backoff::Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
    runtime
        .sync_pod(&p, &status, Arc::new(FakeRuntimeHelper), &backoff)
        .await
        .expect("sync");
    let pod_manager = PodManager::new();
    pod_manager.add_pod(p);
    let state = ServerState {
        pod_manager: pod_manager.clone(),
        status: Arc::new(FakeStatusManager::default()),
        runtime: Arc::new(runtime.clone()),
        syncloop: kubelet_core::kubelet::sync_loop::Health::default(),
        metrics: Default::default(),
        stall: kubelet_core::watchdog::Health::default(),
        stats: None,
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let app = routes(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
        let _ = axum::serve(listener, app).await;
    });
    Harness {
        addr,
        runtime,
        pod_manager,
        _server: server,
    }
}

/// Sends `head` (a request without body) and reads the response head.
async fn request(addr: std::net::SocketAddr, head: &str) -> (TcpStream, String) {
    let mut conn = TcpStream::connect(addr).await.expect("connect");
    conn.write_all(head.as_bytes()).await.expect("write");
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        let n = conn.read(&mut byte).await.expect("read");
        assert_eq!(
            n,
            1,
            "connection closed after {:?}",
            String::from_utf8_lossy(&got)
        );
        got.push(byte[0]);
    }
    (conn, String::from_utf8_lossy(&got).into_owned())
}

/// The response to `head`: its status line and body (read until the server closes).
async fn answer(addr: std::net::SocketAddr, head: &str) -> (String, String) {
    let (mut conn, response_head) = request(addr, head).await;
    let status = response_head.lines().next().unwrap_or("").to_owned();
    let length: usize = response_head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(|v| v.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    conn.read_exact(&mut body).await.expect("body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

const UPGRADE: &str =
    "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n";

/// A streaming server that upgrades one connection, echoes what it gets, and reports the
/// request head and the moment the kubelet closed the stream.
async fn echo_backend() -> (String, oneshot::Receiver<String>, oneshot::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let (head_tx, head_rx) = oneshot::channel();
    let (closed_tx, closed_rx) = oneshot::channel();
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.expect("accept");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if conn.read(&mut byte).await.unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        let _ = head_tx.send(String::from_utf8_lossy(&head).into_owned());
        conn.write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
            .await
            .expect("101");
        let mut buf = [0u8; 1024];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if conn.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = closed_tx.send(());
    });
    (url, head_rx, closed_rx)
}

#[tokio::test]
async fn an_exec_is_proxied_to_the_runtimes_streaming_server_and_closed_with_the_client() {
    let (backend, head, closed) = echo_backend().await;
    let h = harness(&backend).await;
    let (mut conn, response) = request(
        h.addr,
        &format!("POST /exec/default/web/app?command=sh&command=-c&command=echo%20hi&input=1&output=1&error=1 HTTP/1.1\r\nHost: kubelet\r\n{UPGRADE}\r\n"),
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 101 "), "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("x-stream-protocol-version: v4.channel.k8s.io"),
        "{response}"
    );
    let head = head.await.expect("the streaming server got the request");
    assert!(head.starts_with("POST /exec/1 HTTP/1.1\r\n"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("upgrade: spdy/3.1"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("x-forwarded-for: 127.0.0.1"),
        "{head}"
    );
    let running = h.runtime.running_pods();
    assert_eq!(
        h.runtime.service().stream_requests(),
        [StreamRequest::Exec {
            container_id: running[0].containers[0].id.clone(),
            cmd: vec!["sh".into(), "-c".into(), "echo hi".into()],
            tty: false,
            stdin: true,
            stdout: true,
            stderr: true,
        }]
    );

    conn.write_all(b"spdy frames").await.expect("write");
    let mut echoed = [0u8; 11];
    conn.read_exact(&mut echoed).await.expect("echo");
    assert_eq!(&echoed, b"spdy frames");
    drop(conn);
    closed.await.expect("the kubelet closed the runtime's side");
}

#[tokio::test]
async fn a_stream_the_runtime_closes_is_closed_for_the_client() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let backend = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.expect("accept");
        let mut buf = [0u8; 4096];
        let _ = conn.read(&mut buf).await;
        let _ = conn
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\nbye")
            .await;
    });
    let h = harness(&backend).await;
    let (mut conn, response) = request(
        h.addr,
        &format!(
            "GET /attach/default/web/uid-web/app?output=1 HTTP/1.1\r\nHost: k\r\n{UPGRADE}\r\n"
        ),
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 101 "), "{response}");
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest)
        .await
        .expect("read to the close");
    assert_eq!(rest, b"bye");
    assert!(matches!(
        h.runtime.service().stream_requests()[..],
        [StreamRequest::Attach {
            stdout: true,
            stdin: false,
            ..
        }]
    ));
}

#[tokio::test]
async fn requests_are_refused_before_the_upgrade_as_upstream() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let backend = format!("http://{}", listener.local_addr().expect("addr"));
    // The streaming server refuses (as containerd does an unknown token).
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf).await;
            let _ = conn
                .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nno token\n")
                .await;
        }
    });
    let h = harness(&backend).await;
    let get = |path: &str, upgrade: bool| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: k\r\nConnection: close\r\n{}\r\n",
            if upgrade {
                "Upgrade: SPDY/3.1\r\nConnection: Upgrade\r\n"
            } else {
                ""
            }
        )
    };
    let cases = [
        (
            "/exec/default/web/app?command=ls",
            true,
            "HTTP/1.1 400 Bad Request",
            "you must specify at least 1 of stdin, stdout, stderr",
        ),
        (
            "/exec/default/nope/app?command=ls&output=1",
            true,
            "HTTP/1.1 404 Not Found",
            "pod does not exist",
        ),
        (
            "/exec/other/web/app?command=ls&output=1",
            true,
            "HTTP/1.1 404 Not Found",
            "pod does not exist",
        ),
        (
            "/exec/default/web/sidecar?command=ls&output=1",
            true,
            "HTTP/1.1 404 Not Found",
            "container not found (\"sidecar\")",
        ),
        (
            "/exec/default/web/uid-other/app?command=ls&output=1",
            true,
            "HTTP/1.1 404 Not Found",
            "container not found (\"app\")",
        ),
        (
            "/attach/default/web/app?output=1",
            false,
            "HTTP/1.1 500 Internal Server Error",
            "Upgrade request required\n",
        ),
        (
            "/portForward/default/web/uid-other",
            true,
            "HTTP/1.1 404 Not Found",
            "pod not found",
        ),
        (
            "/portForward/default/web",
            true,
            "HTTP/1.1 404 Not Found",
            "no token\n",
        ),
    ];
    for (path, upgrade, status, body) in cases {
        let (got_status, got_body) = answer(h.addr, &get(path, upgrade)).await;
        assert_eq!(
            (got_status.as_str(), got_body.as_str()),
            (status, body),
            "{path}"
        );
    }
    let sandbox = h.runtime.running_pods()[0].sandboxes[0].id.clone();
    assert_eq!(
        h.runtime.service().stream_requests().last(),
        Some(&StreamRequest::PortForward {
            sandbox_id: sandbox,
            ports: vec![]
        })
    );
}

#[tokio::test]
async fn a_mirror_pods_uid_stands_for_its_static_pod() {
    let (backend, head, _closed) = echo_backend().await;
    let h = harness(&backend).await;
    let mut mirror = pod("web");
    mirror.metadata.uid = Some("uid-mirror".into());
    mirror.metadata.annotations = Some(
        [(
            kubelet_core::config::CONFIG_MIRROR_ANNOTATION.to_owned(),
            "hash".to_owned(),
        )]
        .into(),
    );
    h.pod_manager.add_pod(mirror);
    let (_conn, response) = request(
        h.addr,
        &format!(
            "POST /exec/default/web/uid-mirror/app?command=ls&output=1 HTTP/1.1\r\nHost: k\r\n{UPGRADE}\r\n"
        ),
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 101 "), "{response}");
    assert!(head.await.expect("proxied").starts_with("POST /exec/1 "));
}

#[tokio::test]
async fn run_execs_the_space_separated_cmd_and_answers_its_output() {
    let h = harness("http://127.0.0.1:9").await;
    let id = h.runtime.running_pods()[0].containers[0].id.clone();
    let post = |path: &str| format!("POST {path} HTTP/1.1\r\nHost: k\r\nConnection: close\r\n\r\n");
    let service = h.runtime.service();
    service.set_exec_result(
        &id,
        kubelet_core::runtime::ExecResult {
            stdout: b"hi\n".to_vec(),
            stderr: b"warn\n".to_vec(),
            ..Default::default()
        },
    );
    let (status, body) = answer(h.addr, &post("/run/default/web/app?cmd=echo%20hi")).await;
    assert_eq!(
        (status.as_str(), body.as_str()),
        ("HTTP/1.1 200 OK", "hi\nwarn\n")
    );
    assert!(
        h.runtime
            .calls()
            .contains(&kubelet_core::testing::Call::ExecSync(
                id.clone(),
                vec!["echo".into(), "hi".into()]
            ))
    );
    service.set_exec_result(
        &id,
        kubelet_core::runtime::ExecResult {
            exit_code: 3,
            stderr: b"bad".to_vec(),
            ..Default::default()
        },
    );
    let (status, body) = answer(h.addr, &post("/run/default/web/uid-web/app?cmd=false%20x")).await;
    assert_eq!(
        (status.as_str(), body.as_str()),
        (
            "HTTP/1.1 500 Internal Server Error",
            "command 'false x' exited with 3: bad"
        )
    );
    let (status, body) = answer(h.addr, &post("/run/default/nope/app?cmd=ls")).await;
    assert_eq!(
        (status.as_str(), body.as_str()),
        ("HTTP/1.1 404 Not Found", "pod does not exist")
    );
    let get = "GET /run/default/web/app?cmd=ls HTTP/1.1\r\nHost: k\r\nConnection: close\r\n\r\n";
    assert_eq!(
        answer(h.addr, get).await.0,
        "HTTP/1.1 405 Method Not Allowed"
    );
}

/// A v4 websocket streaming server for one session: checks the kubelet's upgrade, sends
/// stdout, then reports every message the kubelet sends until its close.
async fn v4_backend() -> (String, oneshot::Receiver<(String, Vec<ws_frame::Message>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.expect("accept");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if conn.read(&mut byte).await.unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let key = head
            .lines()
            .find_map(|l| l.strip_prefix("sec-websocket-key: "))
            .unwrap_or_default()
            .to_owned();
        let reply = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {}\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n",
            ws_frame::accept_key(&key)
        );
        conn.write_all(reply.as_bytes()).await.expect("101");
        ws_frame::send(&mut conn, ws_frame::BINARY, b"\x01out", false)
            .await
            .expect("stdout");
        ws_frame::send(&mut conn, ws_frame::PING, b"are you there", false)
            .await
            .expect("ping");
        let (read, mut write) = conn.split();
        let mut reader = ws_frame::Reader::new(read);
        let mut got = Vec::new();
        while let Ok(Some(m)) = reader.next().await {
            let close = m.opcode == ws_frame::CLOSE;
            got.push(m);
            if close {
                let _ = ws_frame::send(&mut write, ws_frame::CLOSE, b"\x03\xe8", false).await;
                break;
            }
        }
        let _ = tx.send((head, got));
    });
    (url, rx)
}

#[tokio::test]
async fn a_v5_client_without_stdin_is_served_over_v4_to_the_runtime() {
    let (backend, seen) = v4_backend().await;
    let h = harness(&backend).await;
    let (conn, response) = request(
        h.addr,
        "GET /exec/default/web/app?command=ls&output=1&tty=1 HTTP/1.1\r\nHost: k\r\n\
         Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n",
    )
    .await;
    let lower = response.to_ascii_lowercase();
    assert!(response.starts_with("HTTP/1.1 101 "), "{response}");
    assert!(
        lower.contains("sec-websocket-protocol: v5.channel.k8s.io"),
        "{response}"
    );
    assert!(
        lower.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{response}"
    );
    let (read, mut write) = tokio::io::split(conn);
    let mut reader = ws_frame::Reader::new(read);
    let stdout = reader.next().await.expect("a message").expect("open");
    assert_eq!(
        (stdout.opcode, stdout.payload),
        (ws_frame::BINARY, b"\x01out".to_vec())
    );
    ws_frame::send(&mut write, ws_frame::PING, b"hi", true)
        .await
        .expect("ping");
    let pong = reader.next().await.expect("a message").expect("open");
    assert_eq!(
        (pong.opcode, pong.payload),
        (ws_frame::PONG, b"hi".to_vec())
    );
    // A resize goes on; a CLOSE signal has nothing to close.
    ws_frame::send(&mut write, ws_frame::BINARY, b"\x04{\"Width\":80}", true)
        .await
        .expect("resize");
    ws_frame::send(&mut write, ws_frame::BINARY, &[255, 1], true)
        .await
        .expect("CLOSE");
    ws_frame::send(&mut write, ws_frame::CLOSE, b"\x03\xe8", true)
        .await
        .expect("close");
    let close = reader.next().await.expect("a message").expect("open");
    assert_eq!(close.opcode, ws_frame::CLOSE, "the close answered");

    let (head, got) = seen.await.expect("the backend saw the session");
    assert!(head.starts_with("GET /exec/1 HTTP/1.1\r\n"), "{head}");
    assert!(
        head.contains("sec-websocket-protocol: v4.channel.k8s.io\r\n"),
        "{head}"
    );
    assert!(head.contains("upgrade: websocket\r\n"), "{head}");
    let (pongs, data): (Vec<_>, Vec<_>) = got
        .into_iter()
        .map(|m| (m.opcode, m.payload))
        .partition(|(opcode, _)| *opcode == ws_frame::PONG);
    assert_eq!(pongs, [(ws_frame::PONG, b"are you there".to_vec())]);
    assert_eq!(
        data,
        [
            (ws_frame::BINARY, b"\x04{\"Width\":80}".to_vec()),
            (ws_frame::CLOSE, b"\x03\xe8".to_vec()),
        ]
    );
}

/// What a SPDY streaming server saw of one session: the request head, the streams opened
/// (id, `streamtype`) and the data frames received (stream id, flags, data).
struct SpdySession {
    head: String,
    streams: Vec<(u32, String)>,
    data: Vec<(u32, u8, Vec<u8>)>,
}

/// A v4-over-SPDY streaming server for one session, as upstream's (`httpstream.go`,
/// spdystream): takes the upgrade, replies to each stream, echoes stdin to stdout until its
/// FIN, then writes `status` on the error stream, resets every stream, sends GOAWAY and
/// closes.
async fn spdy_backend(status: &'static str) -> (String, oneshot::Receiver<SpdySession>) {
    use super::spdy::frame::{CANCEL, Decoder, Encoder, FLAG_FIN, Frame};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.expect("accept");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if conn.read(&mut byte).await.unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        conn.write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
              X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n",
        )
        .await
        .expect("101");
        let (read, mut write) = conn.into_split();
        let mut frames = Decoder::new(read);
        let mut encoder = Encoder::new().expect("encoder");
        let mut session = SpdySession {
            head: String::from_utf8_lossy(&head).into_owned(),
            streams: Vec::new(),
            data: Vec::new(),
        };
        let id = |session: &SpdySession, kind: &str| {
            session
                .streams
                .iter()
                .find(|(_, k)| k == kind)
                .map(|(id, _)| *id)
        };
        while let Ok(Some(frame)) = frames.next().await {
            let reply = match frame {
                Frame::SynStream {
                    stream_id, headers, ..
                } => {
                    let kind = headers
                        .iter()
                        .find(|(n, _)| n == "streamtype")
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default();
                    session.streams.push((stream_id, kind));
                    Some(Frame::SynReply {
                        stream_id,
                        flags: 0,
                        headers: vec![],
                    })
                }
                Frame::Data {
                    stream_id,
                    flags,
                    data,
                } => {
                    session.data.push((stream_id, flags, data.clone()));
                    let stdin = Some(stream_id) == id(&session, "stdin");
                    if stdin && flags & FLAG_FIN != 0 {
                        break;
                    }
                    match id(&session, "stdout") {
                        Some(stdout) if stdin => Some(Frame::Data {
                            stream_id: stdout,
                            flags: 0,
                            data,
                        }),
                        _ => None,
                    }
                }
                _ => None,
            };
            if let Some(reply) = reply {
                let bytes = encoder.encode(&reply).expect("encode");
                write.write_all(&bytes).await.expect("reply");
            }
        }
        let mut end = vec![Frame::Data {
            stream_id: id(&session, "error").unwrap_or(1),
            flags: 0,
            data: status.as_bytes().to_vec(),
        }];
        for (stream_id, _) in &session.streams {
            end.push(Frame::RstStream {
                stream_id: *stream_id,
                status: CANCEL,
            });
        }
        end.push(Frame::GoAway {
            last_good_stream_id: 0,
            status: 0,
        });
        for frame in &end {
            let bytes = encoder.encode(frame).expect("encode");
            let _ = write.write_all(&bytes).await;
        }
        drop(write);
        let _ = tx.send(session);
    });
    (url, rx)
}

/// Opens a v5 websocket session on `path`; its reader and writer.
async fn v5_client(
    addr: std::net::SocketAddr,
    path: &str,
) -> (
    ws_frame::Reader<tokio::io::ReadHalf<TcpStream>>,
    tokio::io::WriteHalf<TcpStream>,
) {
    let (conn, response) = request(
        addr,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: k\r\n\
             Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n"
        ),
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 101 "), "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("sec-websocket-protocol: v5.channel.k8s.io"),
        "{response}"
    );
    let (read, write) = tokio::io::split(conn);
    (ws_frame::Reader::new(read), write)
}

async fn next_message(
    reader: &mut ws_frame::Reader<tokio::io::ReadHalf<TcpStream>>,
) -> (u8, Vec<u8>) {
    let m = reader.next().await.expect("a message").expect("open");
    (m.opcode, m.payload)
}

const EXIT_3: &str = r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;

#[tokio::test]
async fn a_v5_exec_with_stdin_is_relayed_over_spdy_and_its_close_is_a_fin() {
    let (backend, seen) = spdy_backend(EXIT_3).await;
    let h = harness(&backend).await;
    let (mut reader, mut write) = v5_client(
        h.addr,
        "/exec/default/web/app?command=cat&input=1&output=1&error=1",
    )
    .await;
    ws_frame::send(&mut write, ws_frame::BINARY, b"\x00hello\n", true)
        .await
        .expect("stdin");
    assert_eq!(
        next_message(&mut reader).await,
        (ws_frame::BINARY, b"\x01hello\n".to_vec())
    );
    ws_frame::send(&mut write, ws_frame::PING, b"hi", true)
        .await
        .expect("ping");
    assert_eq!(
        next_message(&mut reader).await,
        (ws_frame::PONG, b"hi".to_vec())
    );
    // v5's CLOSE of stdin: the runtime sees a FIN, and the exit status comes back.
    ws_frame::send(&mut write, ws_frame::BINARY, &[255, 0], true)
        .await
        .expect("CLOSE");
    let mut status = b"\x03".to_vec();
    status.extend_from_slice(EXIT_3.as_bytes());
    assert_eq!(next_message(&mut reader).await, (ws_frame::BINARY, status));
    assert_eq!(
        next_message(&mut reader).await,
        (ws_frame::CLOSE, 1000u16.to_be_bytes().to_vec())
    );

    let session = seen.await.expect("the runtime saw the session");
    let head = session.head.to_ascii_lowercase();
    assert!(head.starts_with("post /exec/1 http/1.1\r\n"), "{head}");
    assert!(head.contains("upgrade: spdy/3.1\r\n"), "{head}");
    assert!(
        head.contains("x-stream-protocol-version: v4.channel.k8s.io\r\n"),
        "{head}"
    );
    assert!(!head.contains("sec-websocket"), "{head}");
    let streams: Vec<_> = session
        .streams
        .iter()
        .map(|(id, kind)| (*id, kind.as_str()))
        .collect();
    assert_eq!(
        streams,
        [(1, "error"), (3, "stdin"), (5, "stdout"), (7, "stderr")]
    );
    assert_eq!(
        session.data,
        [(3, 0, b"hello\n".to_vec()), (3, 1, Vec::new())]
    );
}

#[tokio::test]
async fn a_v5_attach_with_a_terminal_relays_resizes_over_spdy() {
    let success = r#"{"metadata":{},"status":"Success"}"#;
    let (backend, seen) = spdy_backend(success).await;
    let h = harness(&backend).await;
    let (mut reader, mut write) =
        v5_client(h.addr, "/attach/default/web/app?input=1&output=1&tty=1").await;
    ws_frame::send(
        &mut write,
        ws_frame::BINARY,
        b"\x04{\"Width\":80,\"Height\":24}",
        true,
    )
    .await
    .expect("resize");
    ws_frame::send(&mut write, ws_frame::BINARY, b"\x00ls\r", true)
        .await
        .expect("stdin");
    assert_eq!(
        next_message(&mut reader).await,
        (ws_frame::BINARY, b"\x01ls\r".to_vec())
    );
    // A CLOSE of a stream the client does not write is nothing to the runtime.
    ws_frame::send(&mut write, ws_frame::BINARY, &[255, 1], true)
        .await
        .expect("CLOSE stdout");
    ws_frame::send(&mut write, ws_frame::BINARY, &[255, 0], true)
        .await
        .expect("CLOSE stdin");
    let mut status = b"\x03".to_vec();
    status.extend_from_slice(success.as_bytes());
    assert_eq!(next_message(&mut reader).await, (ws_frame::BINARY, status));
    assert_eq!(next_message(&mut reader).await.0, ws_frame::CLOSE);

    let session = seen.await.expect("the runtime saw the session");
    let streams: Vec<_> = session
        .streams
        .iter()
        .map(|(id, kind)| (*id, kind.as_str()))
        .collect();
    assert_eq!(
        streams,
        [(1, "error"), (3, "stdin"), (5, "stdout"), (7, "resize")]
    );
    assert_eq!(
        session.data,
        [
            (7, 0, b"{\"Width\":80,\"Height\":24}".to_vec()),
            (3, 0, b"ls\r".to_vec()),
            (3, 1, Vec::new()),
        ]
    );
    assert!(matches!(
        h.runtime.service().stream_requests()[..],
        [StreamRequest::Attach {
            stdin: true,
            tty: true,
            ..
        }]
    ));
}
