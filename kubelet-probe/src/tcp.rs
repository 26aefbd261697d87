//! TCP socket probes (upstream `pkg/probe/tcp`): success when a connection opens within the
//! timeout.

use std::time::Duration;

use tokio::net::TcpStream;

use crate::prober::Outcome;

/// Connects to `host:port`; the connection is closed at once.
pub async fn probe(host: &str, port: u16, timeout: Duration) -> Outcome {
    let addr = crate::http::join_host_port(host, port);
    match tokio::time::timeout(timeout, TcpStream::connect(&addr)).await {
        Ok(Ok(_stream)) => Outcome::success(String::new()),
        Ok(Err(e)) => Outcome::failure(format!("dial tcp {addr}: {e}")),
        Err(_) => Outcome::failure(format!("dial tcp {addr}: i/o timeout")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn open_and_closed_ports() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = l.local_addr().expect("addr").port();
        assert!(
            probe("127.0.0.1", port, Duration::from_secs(1))
                .await
                .success
        );
        drop(l);
        let o = probe("127.0.0.1", port, Duration::from_secs(1)).await;
        assert!(!o.success, "{o:?}");
    }
}
