//! The secure port's listener: TCP connections become TLS streams (each handshake in a task
//! of its own, bounded by a timeout, so a slow client never holds up the others), handed to
//! `axum::serve` with their peer certificates as connect info ([`Peer`]).
//!
//! A client that speaks plain HTTP gets Go's answer (`net/http` on a TLS listener): `400 Bad
//! Request` "Client sent an HTTP request to an HTTPS server." and the connection closed; it is
//! never served.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use rustls::ServerConfig;
use rustls::pki_types::CertificateDer;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::task::AbortOnDropHandle;

/// How long a client may take to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Go's reply to plain HTTP on a TLS port.
const HTTP_ON_HTTPS: &[u8] =
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// The connect info of a request: the peer's address and the certificates it presented.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The client's address.
    pub addr: SocketAddr,
    /// Its certificate chain, leaf first (empty when it sent none); not verified yet.
    pub certificates: Arc<[CertificateDer<'static>]>,
}

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        let certificates = stream
            .io()
            .get_ref()
            .1
            .peer_certificates()
            .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
            .unwrap_or_default();
        Self {
            addr: *stream.remote_addr(),
            certificates,
        }
    }
}

/// TLS connections of a TCP listener.
#[derive(Debug)]
pub struct TlsListener {
    incoming: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_addr: SocketAddr,
    _accept: AbortOnDropHandle<()>,
}

impl TlsListener {
    /// Starts accepting on `tcp` with `config`; stops when dropped.
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<Self> {
        let local_addr = tcp.local_addr()?;
        let (tx, incoming) = mpsc::channel(64);
        let acceptor = TlsAcceptor::from(config);
        let accept = tokio::spawn(async move {
            loop {
                let (stream, addr) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // EMFILE and friends: wait instead of spinning (as axum's listener).
                        tracing::warn!(error = %e, "secure port: accept failed");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(
                        HANDSHAKE_TIMEOUT,
                        handshake(&acceptor, stream, addr),
                    )
                    .await
                    {
                        Ok(Some(tls)) => {
                            let _ = tx.send((tls, addr)).await;
                        }
                        Ok(None) => {}
                        Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            incoming,
            local_addr,
            _accept: AbortOnDropHandle::new(accept),
        })
    }
}

/// Go's `tlsRecordHeaderLooksLikeHTTP`.
fn looks_like_http(header: &[u8]) -> bool {
    matches!(header, b"GET /" | b"HEAD " | b"POST " | b"PUT /" | b"OPTIO")
}

async fn handshake(
    acceptor: &TlsAcceptor,
    mut stream: TcpStream,
    addr: SocketAddr,
) -> Option<TlsStream<TcpStream>> {
    let mut header = [0u8; 5];
    if let Ok(5) = stream.peek(&mut header).await
        && looks_like_http(&header)
    {
        let _ = stream.write_all(HTTP_ON_HTTPS).await;
        let _ = stream.shutdown().await;
        return None;
    }
    match acceptor.accept(stream).await {
        Ok(tls) => Some(tls),
        Err(e) => {
            match refused_client_certificate(&e) {
                Some(reason) => tracing::warn!(
                    %addr,
                    reason,
                    "TLS handshake failed: the client's certificate was refused (Go's TLS accepts some that rustls does not, e.g. an X.509 v1 certificate: reissue it as v3)"
                ),
                None => tracing::debug!(%addr, error = %e, "TLS handshake failed"),
            }
            None
        }
    }
}

/// Why the handshake refused the client's certificate, when that is why it failed: rustls
/// parses the certificate to check the handshake signature and refuses some that Go accepts
/// (an X.509 v1 certificate, an unusual encoding), which the client sees only as a TLS alert.
fn refused_client_certificate(error: &std::io::Error) -> Option<String> {
    match error.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(reason) => Some(format!("{reason:?}")),
        _ => None,
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(accepted) => accepted,
            // The accept task is gone only when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_client_certificate_is_named_and_other_failures_are_not() {
        let refused = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding),
        );
        assert_eq!(
            refused_client_certificate(&refused).as_deref(),
            Some("BadEncoding")
        );
        let other = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::NoCertificatesPresented,
        );
        assert_eq!(refused_client_certificate(&other), None);
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(refused_client_certificate(&reset), None);
    }

    #[test]
    fn http_methods_are_recognised_as_go_does() {
        assert!(looks_like_http(b"GET /"));
        assert!(looks_like_http(b"OPTIO"));
        assert!(!looks_like_http(b"GET  "));
        assert!(!looks_like_http(&[0x16, 3, 1, 0, 0xc8]));
    }
}
