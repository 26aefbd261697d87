//! Dialling the runtime's streaming server for the proxy ([`super::proxy`]): its URL as an
//! address and a request target, and a connection to it, plain for `http` and TLS for
//! `https` (upstream `UpgradeAwareHandler` dials with `utilnet.DialURL`, TLS with the
//! transport's config; the kubelet's is Go's default: the system's roots, the URL's host as
//! the server name).

use std::sync::Arc;
use std::time::Duration;

use axum::http::Uri;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::proxy::Error;

/// How long dialling the runtime's streaming server (TCP and TLS handshake) may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to the streaming server.
pub(crate) trait Conn: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Conn for T {}

/// The runtime's streaming URL, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Location {
    /// `https`.
    pub(crate) tls: bool,
    /// The host (for TLS's server name), without brackets.
    pub(crate) host: String,
    /// `host:port` to dial (the scheme's port when the URL has none).
    pub(crate) authority: String,
    /// The request target: path and query.
    pub(crate) target: String,
}

impl Location {
    /// Parses the runtime's URL: `http` or `https`, with a host.
    pub(crate) fn parse(location: &str) -> Result<Self, Error> {
        let invalid = |reason| Error::Location {
            url: location.to_owned(),
            reason,
        };
        let uri: Uri = location.parse().map_err(|_| invalid("not a URL"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                return Err(invalid(
                    "only http and https streaming servers are supported",
                ));
            }
        };
        let authority = uri.authority().ok_or_else(|| invalid("no host"))?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let authority = match authority.port_u16() {
            Some(_) => authority.as_str().to_owned(),
            None => format!("{}:{}", authority.host(), if tls { 443 } else { 80 }),
        };
        let target = uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |pq| pq.as_str().to_owned());
        Ok(Self {
            tls,
            host,
            authority,
            target,
        })
    }
}

/// The TLS client config of `https` streaming servers: the system's roots (as Go's default
/// transport; `SSL_CERT_FILE` and `SSL_CERT_DIR` are honoured), read once.
async fn system_tls() -> Result<Arc<rustls::ClientConfig>, Error> {
    static CONFIG: tokio::sync::OnceCell<Arc<rustls::ClientConfig>> =
        tokio::sync::OnceCell::const_new();
    CONFIG
        .get_or_try_init(|| async {
            let roots = tokio::task::spawn_blocking(|| {
                let found = rustls_native_certs::load_native_certs();
                for e in &found.errors {
                    tracing::warn!(error = %e, "reading the system's TLS roots");
                }
                let mut roots = rustls::RootCertStore::empty();
                let (added, ignored) = roots.add_parsable_certificates(found.certs);
                tracing::debug!(added, ignored, "the system's TLS roots");
                roots
            })
            .await
            .map_err(|e| Error::Tls(e.to_string()))?;
            client_config(roots)
        })
        .await
        .cloned()
}

/// A TLS client config trusting `roots`, with the kubelet's crypto provider (ring).
pub(crate) fn client_config(
    roots: rustls::RootCertStore,
) -> Result<Arc<rustls::ClientConfig>, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Connects to the streaming server at `location` (TLS with the system's roots for
/// `https`), within [`DIAL_TIMEOUT`].
pub(crate) async fn dial(location: &Location) -> Result<Box<dyn Conn>, Error> {
    let tls = if location.tls {
        Some(system_tls().await?)
    } else {
        None
    };
    dial_with(location, tls).await
}

/// [`dial`] with the TLS config of `https` given.
pub(crate) async fn dial_with(
    location: &Location,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<Box<dyn Conn>, Error> {
    let connect = async {
        let tcp = TcpStream::connect(&location.authority)
            .await
            .map_err(Error::Dial)?;
        let _ = tcp.set_nodelay(true);
        if !location.tls {
            return Ok(Box::new(tcp) as Box<dyn Conn>);
        }
        let config = tls.ok_or_else(|| Error::Tls("no TLS client config".into()))?;
        let name =
            ServerName::try_from(location.host.clone()).map_err(|e| Error::Tls(e.to_string()))?;
        let stream = TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(Error::Dial)?;
        Ok(Box::new(stream) as Box<dyn Conn>)
    };
    match tokio::time::timeout(DIAL_TIMEOUT, connect).await {
        Ok(result) => result,
        Err(_) => Err(Error::DialTimeout(DIAL_TIMEOUT)),
    }
}

#[cfg(test)]
mod tests {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[test]
    fn locations_are_http_or_https_urls_of_the_streaming_server() {
        let l = |url| Location::parse(url).expect("valid");
        assert_eq!(
            l("http://127.0.0.1:4321/exec/AbC?x=1"),
            Location {
                tls: false,
                host: "127.0.0.1".into(),
                authority: "127.0.0.1:4321".into(),
                target: "/exec/AbC?x=1".into(),
            }
        );
        assert_eq!(
            l("http://[::1]/attach/t"),
            Location {
                tls: false,
                host: "::1".into(),
                authority: "[::1]:80".into(),
                target: "/attach/t".into(),
            }
        );
        assert_eq!(
            l("https://cri.example/exec/t"),
            Location {
                tls: true,
                host: "cri.example".into(),
                authority: "cri.example:443".into(),
                target: "/exec/t".into(),
            }
        );
        for bad in ["ftp://127.0.0.1:1/exec/t", "/exec/t", "not a url"] {
            assert!(
                matches!(Location::parse(bad), Err(Error::Location { .. })),
                "{bad}"
            );
        }
    }

    /// A TLS server on loopback (a certificate for 127.0.0.1 from a test CA) that echoes
    /// what each connection sends; its URL and the CA.
    async fn tls_echo_server() -> (String, CertificateDer<'static>) {
        let (chain, key) = super::super::cert::self_signed("127.0.0.1", &[]).expect("pair");
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain.as_bytes())
            .collect::<Result<_, _>>()
            .expect("PEM");
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![certs[0].clone()], key)
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!(
            "https://{}/exec/token",
            listener.local_addr().expect("addr")
        );
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = [0u8; 64];
                    while let Ok(n) = tls.read(&mut buf).await {
                        if n == 0 || tls.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (url, certs[1].clone())
    }

    #[tokio::test]
    async fn https_streaming_servers_are_dialled_over_tls_trusting_the_roots() {
        let (url, ca) = tls_echo_server().await;
        let location = Location::parse(&url).expect("valid");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).expect("the CA");
        let mut conn = dial_with(&location, Some(client_config(roots).expect("config")))
            .await
            .expect("dials");
        conn.write_all(b"over TLS").await.expect("write");
        let mut echoed = [0u8; 8];
        conn.read_exact(&mut echoed).await.expect("echo");
        assert_eq!(&echoed, b"over TLS");

        // A server the roots do not vouch for (the system's roots, here) is refused.
        let untrusted = client_config(rustls::RootCertStore::empty()).expect("config");
        let err = dial_with(&location, Some(untrusted))
            .await
            .err()
            .expect("refused");
        assert!(matches!(err, Error::Dial(_)), "{err}");
        assert!(err.to_string().contains("certificate"), "{err}");
    }
}
