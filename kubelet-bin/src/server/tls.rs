//! The secure port's TLS (upstream `cmd/kubelet/app/server.go` `InitializeTLS` and
//! `k8s.io/component-base/cli/flag` `TLSCipherSuites` / `TLSVersion`): the serving pair from
//! `--tls-cert-file` / `--tls-private-key-file` or a self-signed one in `--cert-dir`
//! ([`super::cert`]), `--tls-min-version`, `--tls-cipher-suites` with upstream's (Go's) names,
//! and `--client-ca-file`.
//!
//! As Go's `tls.RequestClientCert`, a client certificate is asked for but not required and not
//! checked during the handshake (only the handshake signature is, proving the client holds the
//! key): the authenticator ([`super::authn`]) verifies the chain against the client CA, so a
//! bad certificate is a 401, not a failed handshake.
//!
//! rustls speaks TLS 1.2 and 1.3 only and has no CBC, RC4, 3DES or RSA key exchange suites:
//! upstream names for those are errors that name them; `VersionTLS10`/`VersionTLS11` are
//! accepted as minimums, which TLS 1.2 satisfies. As in Go, TLS 1.3 suites are not
//! configurable: all three are always on, and TLS 1.3 names in the list are accepted.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CipherSuite, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme, SupportedCipherSuite, SupportedProtocolVersion,
};

use super::Error;

/// `--tls-min-version` (upstream names `VersionTLS10` … `VersionTLS13`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MinVersion {
    /// `VersionTLS10`: TLS 1.2 and 1.3 are offered (rustls has nothing older).
    Tls10,
    /// `VersionTLS11`: as [`MinVersion::Tls10`].
    Tls11,
    /// `VersionTLS12` (the default).
    #[default]
    Tls12,
    /// `VersionTLS13`: TLS 1.3 only; `--tls-cipher-suites` is ignored, as upstream.
    Tls13,
}

impl MinVersion {
    /// Parses upstream's name; empty is the default.
    pub fn parse(name: &str) -> Result<Self, Error> {
        match name {
            "" | "VersionTLS12" => Ok(Self::Tls12),
            "VersionTLS10" => Ok(Self::Tls10),
            "VersionTLS11" => Ok(Self::Tls11),
            "VersionTLS13" => Ok(Self::Tls13),
            other => Err(Error::TlsVersion(other.to_owned())),
        }
    }

    fn versions(self) -> &'static [&'static SupportedProtocolVersion] {
        static ALL: [&SupportedProtocolVersion; 2] =
            [&rustls::version::TLS13, &rustls::version::TLS12];
        static ONLY_13: [&SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        match self {
            Self::Tls13 => &ONLY_13,
            _ => &ALL,
        }
    }
}

/// Upstream's (Go's) names of suites rustls does not implement.
const UNSUPPORTED_SUITES: &[&str] = &[
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// The rustls suite of an upstream name (`None`: a TLS 1.3 name, which is accepted and has no
/// effect, as in Go).
fn suite(name: &str) -> Result<Option<CipherSuite>, Error> {
    use CipherSuite as C;
    let suite = match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => {
            C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => {
            C::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_AES_128_GCM_SHA256" | "TLS_AES_256_GCM_SHA384" | "TLS_CHACHA20_POLY1305_SHA256" => {
            return Ok(None);
        }
        other if UNSUPPORTED_SUITES.contains(&other) => {
            return Err(Error::UnsupportedCipherSuite(other.to_owned()));
        }
        other => return Err(Error::UnknownCipherSuite(other.to_owned())),
    };
    Ok(Some(suite))
}

/// Checks `--tls-cipher-suites` names: an error names the first unknown or unsupported one.
pub fn check_cipher_suites(names: &[String]) -> Result<(), Error> {
    names.iter().try_for_each(|n| suite(n).map(|_| ()))
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServingCert {
    /// `--tls-cert-file` and `--tls-private-key-file` (PEM; the certificate file may hold the
    /// chain).
    Files {
        /// The certificate (chain).
        cert: PathBuf,
        /// Its private key.
        key: PathBuf,
    },
    /// `kubelet.crt` / `kubelet.key` in this directory (`--cert-dir`), made self-signed for
    /// the node's name and IPs when they cannot be read.
    SelfSigned {
        /// The directory.
        cert_dir: PathBuf,
    },
}

/// The secure port's TLS options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    /// The serving certificate.
    pub cert: ServingCert,
    /// `--tls-min-version`.
    pub min_version: MinVersion,
    /// `--tls-cipher-suites` (upstream names; empty: rustls's defaults).
    pub cipher_suites: Vec<String>,
    /// `--client-ca-file`: client certificates signed by it authenticate (x509).
    pub client_ca_file: Option<PathBuf>,
}

impl TlsOptions {
    /// A self-signed pair in `cert_dir`, TLS 1.2 or newer, rustls's suites, no client CA.
    pub fn self_signed(cert_dir: impl Into<PathBuf>) -> Self {
        Self {
            cert: ServingCert::SelfSigned {
                cert_dir: cert_dir.into(),
            },
            min_version: MinVersion::default(),
            cipher_suites: Vec::new(),
            client_ca_file: None,
        }
    }
}

/// The verifier of client certificates against `--client-ca-file`.
pub type ClientCa = Arc<dyn ClientCertVerifier>;

/// Reads every certificate of a PEM file.
pub(crate) fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| Error::pem(path, e))?;
    if certs.is_empty() {
        return Err(Error::Pem {
            path: path.to_owned(),
            message: "no certificate in it".into(),
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| Error::pem(path, e))
}

/// The client CA verifier of `path` (upstream `certutil.NewPool`).
pub fn client_ca(path: &Path, provider: &Arc<CryptoProvider>) -> Result<ClientCa, Error> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path)? {
        roots
            .add(cert)
            .map_err(|e| Error::pem(path, format!("not a CA certificate: {e}")))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| Error::pem(path, e))
}

/// The crypto provider of the options: ring with the chosen TLS 1.2 suites plus every TLS 1.3
/// suite.
pub(crate) fn provider(opts: &TlsOptions) -> Result<Arc<CryptoProvider>, Error> {
    let mut provider = rustls::crypto::ring::default_provider();
    let chosen = opts
        .cipher_suites
        .iter()
        .map(|n| suite(n))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect::<Vec<_>>();
    if opts.min_version == MinVersion::Tls13 && !opts.cipher_suites.is_empty() {
        tracing::info!("TLS 1.3 cipher suites are not configurable, ignoring --tls-cipher-suites");
    } else if !opts.cipher_suites.is_empty() {
        provider.cipher_suites.retain(|s: &SupportedCipherSuite| {
            s.version() == &rustls::version::TLS13 || chosen.contains(&s.suite())
        });
    }
    Ok(Arc::new(provider))
}

/// The secure port's serving certificate, replaceable while it serves: new handshakes get
/// the pair last [`set`](Self::set) (upstream's `GetCertificate` over the serving certificate
/// manager, `serverTLSBootstrap`).
#[derive(Debug)]
pub struct ServingCertificate {
    current: std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>,
    provider: Arc<CryptoProvider>,
}

impl ServingCertificate {
    fn new(
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, Error> {
        let current =
            rustls::sign::CertifiedKey::from_der(certs, key, &provider).map_err(Error::Tls)?;
        Ok(Self {
            current: std::sync::RwLock::new(Arc::new(current)),
            provider,
        })
    }

    /// Serves `certs` (the leaf first) with `key` from the next handshake on; an error when
    /// the key does not fit the certificate.
    pub fn set(
        &self,
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<(), Error> {
        let pair =
            rustls::sign::CertifiedKey::from_der(certs, key, &self.provider).map_err(Error::Tls)?;
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(pair);
        Ok(())
    }

    /// Serves the certificate and key of the PEM file `path` (e.g. `kubelet-server-current.pem`).
    pub fn set_from_file(&self, path: &Path) -> Result<(), Error> {
        self.set(read_certs(path)?, read_key(path)?)
    }
}

impl rustls::server::ResolvesServerCert for ServingCertificate {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        )
    }
}

/// What [`server_config`] builds: the rustls config, the client CA verifier, the serving
/// certificate's handle.
pub(crate) type ServerTls = (Arc<ServerConfig>, Option<ClientCa>, Arc<ServingCertificate>);

/// The rustls server config of `opts` with this serving pair (replaceable through the
/// returned [`ServingCertificate`]), and the client CA verifier when `--client-ca-file` is set
/// (for [`super::authn`]).
pub(crate) fn server_config(
    opts: &TlsOptions,
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<ServerTls, Error> {
    let provider = provider(opts)?;
    let serving = Arc::new(ServingCertificate::new(certs, key, provider.clone())?);
    let client_ca = opts
        .client_ca_file
        .as_deref()
        .map(|path| client_ca(path, &provider))
        .transpose()?;
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(opts.min_version.versions())
        .map_err(Error::Tls)?;
    let builder = match &client_ca {
        Some(ca) => builder.with_client_cert_verifier(Arc::new(RequestClientCert(ca.clone()))),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(serving.clone());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(config), client_ca, serving))
}

/// The serving pair of `opts`: read from the files, or self-signed (see [`super::cert`]).
pub(crate) fn serving_pair(
    opts: &TlsOptions,
    host: &str,
    ips: &[std::net::IpAddr],
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), Error> {
    let (cert, key) = match &opts.cert {
        ServingCert::Files { cert, key } => (cert.clone(), key.clone()),
        ServingCert::SelfSigned { cert_dir } => super::cert::ensure(cert_dir, host, ips)?,
    };
    Ok((read_certs(&cert)?, read_key(&key)?))
}

/// Go's `tls.RequestClientCert` over a WebPKI verifier: asks for a certificate, checks the
/// handshake signatures, and leaves the chain to the authenticator.
#[derive(Debug)]
struct RequestClientCert(ClientCa);

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(suites: &[&str], min: MinVersion) -> TlsOptions {
        TlsOptions {
            min_version: min,
            cipher_suites: suites.iter().map(|s| (*s).to_owned()).collect(),
            ..TlsOptions::self_signed("/nonexistent")
        }
    }

    #[test]
    fn versions_by_upstream_name() {
        assert_eq!(MinVersion::parse("").expect("default"), MinVersion::Tls12);
        assert_eq!(
            MinVersion::parse("VersionTLS13").expect("valid"),
            MinVersion::Tls13
        );
        assert_eq!(MinVersion::Tls13.versions().len(), 1);
        assert_eq!(MinVersion::Tls10.versions().len(), 2);
        let err = MinVersion::parse("TLS1.2").expect_err("not upstream's name");
        assert!(err.to_string().contains("TLS1.2"), "{err}");
    }

    #[test]
    fn cipher_suites_by_upstream_name() {
        let p = provider(&opts(
            &["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"],
            MinVersion::Tls12,
        ))
        .expect("valid");
        let names: Vec<_> = p.cipher_suites.iter().map(|s| s.suite()).collect();
        assert!(names.contains(&CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256));
        assert!(!names.contains(&CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384));
        // TLS 1.3 suites are always on, as in Go.
        assert!(names.contains(&CipherSuite::TLS13_AES_128_GCM_SHA256));
        assert_eq!(names.len(), 4, "{names:?}");
        // Without a list: rustls's defaults.
        let all = provider(&opts(&[], MinVersion::Tls12)).expect("valid");
        assert_eq!(all.cipher_suites.len(), 9);
        // TLS 1.3 only: the list is ignored.
        let only13 = provider(&opts(
            &["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"],
            MinVersion::Tls13,
        ))
        .expect("valid");
        assert_eq!(only13.cipher_suites.len(), 9);
        // A TLS 1.3 name is accepted and changes nothing for TLS 1.2.
        check_cipher_suites(&["TLS_AES_128_GCM_SHA256".into()]).expect("accepted");
    }

    #[test]
    fn unknown_and_unsupported_suites_are_named() {
        let err = check_cipher_suites(&["TLS_RSA_WITH_AES_128_CBC_SHA".into()]).expect_err("CBC");
        assert!(
            matches!(err, Error::UnsupportedCipherSuite(ref n) if n == "TLS_RSA_WITH_AES_128_CBC_SHA")
        );
        assert!(
            err.to_string().contains("TLS_RSA_WITH_AES_128_CBC_SHA"),
            "{err}"
        );
        let err = check_cipher_suites(&["TLS_FOO".into()]).expect_err("unknown");
        assert!(matches!(err, Error::UnknownCipherSuite(ref n) if n == "TLS_FOO"));
    }

    #[test]
    fn client_ca_file_must_hold_certificates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ca.crt");
        std::fs::write(&path, "not pem").expect("write");
        let provider = provider(&opts(&[], MinVersion::Tls12)).expect("valid");
        let err = client_ca(&path, &provider).expect_err("no certificate");
        assert!(err.to_string().contains("ca.crt"), "{err}");
    }
}
