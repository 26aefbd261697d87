//! Issue 16's watchdog acceptance: a deliberately blocking task on an async worker of a node's
//! runtime (two workers, as on a two-core machine) makes the node log the stall, with the
//! stuck thread's state and span, and fail `/healthz` within 6 s; `/healthz` passes again
//! once the task returns.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kubelet::NodeBuilder;
use kubelet_core::testing::FakeRuntime;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Log lines, captured.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}

/// `GET path` from this (non-runtime) thread: status code and body; `None` when the node does
/// not answer within 3 s.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    Some((
        head.split_whitespace().nth(1)?.parse().ok()?,
        body.to_owned(),
    ))
}

#[test]
fn a_blocked_worker_is_logged_and_fails_healthz_within_6_s() {
    let log = Capture::default();
    let writer = log.clone();
    tracing_subscriber::registry()
        .with(tracing_subscriber::EnvFilter::new("info"))
        .with(tracing_subscriber::fmt::layer().with_writer(move || writer.clone()))
        .with(kubelet::span_stacks::SpanStacks)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let root = tempfile::tempdir().expect("tempdir");
    let mut node = runtime
        .block_on(
            NodeBuilder::with_runtime(Arc::new(FakeRuntime::new()))
                .node_name("stall-node")
                .root_dir(root.path())
                .healthz_addr("127.0.0.1:0".parse().expect("an address"))
                .build(),
        )
        .expect("builds");
    let addr = node.healthz_addr().expect("healthz endpoints");
    runtime.block_on(node.spawn());
    let healthy = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match get(addr, "/healthz") {
                Some((200, _)) => return,
                answer if Instant::now() > deadline => panic!("{what}: {answer:?}"),
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    };
    healthy("/healthz never passes once the node runs");

    let (release, released) = std::sync::mpsc::channel::<()>();
    let blocked_at = Instant::now();
    runtime.spawn(async move {
        let _span = tracing::info_span!("deliberately_blocking").entered();
        // A blocking call on an async worker: what the watchdog is for.
        let _ = released.recv();
    });
    let deadline = blocked_at + Duration::from_secs(6);
    let body = loop {
        match get(addr, "/healthz") {
            Some((500, body)) => break body,
            _ if Instant::now() > deadline => {
                panic!(
                    "/healthz still passes 6 s after a worker blocked; log:\n{}",
                    log.text()
                )
            }
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    assert!(
        body.contains("[+]ping ok\n")
            && body.contains("[-]asyncruntime failed: async runtime worker ")
            && body.contains("has made no progress for ")
            && body.ends_with("healthz check failed\n"),
        "{body}"
    );
    let (code, single) = get(addr, "/healthz/asyncruntime").expect("an answer");
    assert_eq!(code, 500, "{single}");
    let text = log.text();
    let stall = text
        .lines()
        .position(|l| l.contains("the async runtime is stalled"))
        .unwrap_or_else(|| panic!("no stall log in:\n{text}"));
    let dump: Vec<&str> = text.lines().skip(stall).collect();
    assert!(
        dump.iter().any(|l| l.contains("tokio-rt-worker")
            && l.contains("syscall=futex")
            && l.contains("spans=deliberately_blocking")),
        "the dump shows the blocked worker in its futex wait and its span:\n{}",
        dump.join("\n")
    );

    drop(release);
    healthy("/healthz still fails after the release");
    assert!(
        log.text()
            .contains("the async runtime makes progress again")
    );
    assert!(runtime.block_on(node.stop()), "every task stops");
}
