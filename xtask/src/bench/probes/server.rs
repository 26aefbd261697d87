//! The probed side of the httpGet and tcpSocket probes: one listener on `127.0.0.1` per probe,
//! each on its own thread, noting the wall clock when it accepts a connection. The server is the
//! truth for these probes: its accept time is when the kubelet's probe reached it, whatever the
//! kubelet believes.
//!
//! The threads ask for `SCHED_FIFO` so that the machine's load (runc execs of the exec probes)
//! does not delay the timestamps themselves; without the privilege they run at normal priority
//! and [`Listeners::realtime`] says so.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::Duration,
};

use anyhow::{Context, Result};

use super::timeline::unix_now;

/// What a listener does with a connection after noting its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// tcpSocket probes: the connection is closed at once.
    Tcp,
    /// httpGet probes: the request is read and answered `200 OK`.
    Http,
}

/// Listeners for `count` probes of one protocol.
pub(crate) struct Listeners {
    ports: Vec<u16>,
    hits: Vec<Arc<Mutex<Vec<f64>>>>,
    stop: Arc<AtomicBool>,
    realtime: Arc<AtomicBool>,
}

impl Listeners {
    /// Binds `count` listeners on `127.0.0.1` (free ports) and starts their threads.
    pub(crate) fn start(count: usize, protocol: Protocol) -> Result<Listeners> {
        let stop = Arc::new(AtomicBool::new(false));
        let realtime = Arc::new(AtomicBool::new(true));
        let mut ports = Vec::with_capacity(count);
        let mut hits = Vec::with_capacity(count);
        for i in 0..count {
            let listener =
                TcpListener::bind(("127.0.0.1", 0)).context("cannot bind a probe listener")?;
            ports.push(listener.local_addr()?.port());
            let times = Arc::new(Mutex::new(Vec::new()));
            hits.push(times.clone());
            let (stop, realtime) = (stop.clone(), realtime.clone());
            thread::Builder::new()
                .name(format!("probe-{protocol:?}-{i}"))
                .spawn(move || {
                    if !raise_to_realtime() {
                        realtime.store(false, Ordering::Relaxed);
                    }
                    serve(&listener, protocol, &times, &stop);
                })
                .context("cannot start a probe listener thread")?;
        }
        Ok(Listeners {
            ports,
            hits,
            stop,
            realtime,
        })
    }

    /// The port of probe `i`.
    pub(crate) fn port(&self, i: usize) -> u16 {
        self.ports[i]
    }

    /// The accept times of probe `i` so far, seconds since the epoch, in order.
    pub(crate) fn hits(&self, i: usize) -> Vec<f64> {
        self.hits[i]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether every listener thread runs `SCHED_FIFO`.
    pub(crate) fn realtime(&self) -> bool {
        self.realtime.load(Ordering::Relaxed)
    }
}

impl Drop for Listeners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake each thread out of `accept`; it sees `stop` and returns.
        for port in &self.ports {
            let _ = TcpStream::connect_timeout(
                &([127, 0, 0, 1], *port).into(),
                Duration::from_millis(200),
            );
        }
    }
}

fn serve(listener: &TcpListener, protocol: Protocol, times: &Mutex<Vec<f64>>, stop: &AtomicBool) {
    while let Ok((conn, _)) = listener.accept() {
        let at = unix_now();
        if stop.load(Ordering::Relaxed) {
            return;
        }
        times.lock().unwrap_or_else(|e| e.into_inner()).push(at);
        if protocol == Protocol::Http {
            // A probe that gives up early is the kubelet's failure, not the bench's.
            let _ = answer(conn);
        }
    }
}

/// Reads one request's head and answers `200 OK`; the connection closes when dropped.
fn answer(mut conn: TcpStream) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
}

/// Puts the calling thread in `SCHED_FIFO` (priority 10); `false` without the privilege.
#[allow(unsafe_code)]
fn raise_to_realtime() -> bool {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: `sched_setscheduler` reads `param` and changes the calling thread's (pid 0)
    // policy; it touches no memory of ours.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_each_connection_and_answers_http() {
        let http = Listeners::start(2, Protocol::Http).expect("listeners");
        let mut c = TcpStream::connect(("127.0.0.1", http.port(1))).expect("connect");
        c.write_all(b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("request");
        let mut response = String::new();
        c.read_to_string(&mut response).expect("response");
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert_eq!(http.hits(1).len(), 1);
        assert!(http.hits(0).is_empty());

        let tcp = Listeners::start(1, Protocol::Tcp).expect("listeners");
        drop(TcpStream::connect(("127.0.0.1", tcp.port(0))).expect("connect"));
        // The accept is noted on the listener's thread: wait for it (no fixed sleep).
        while tcp.hits(0).is_empty() {
            thread::yield_now();
        }
        assert_eq!(tcp.hits(0).len(), 1);
    }
}
