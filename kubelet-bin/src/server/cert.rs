//! The self-signed serving pair of the secure port (upstream `cmd/kubelet/app/server.go`
//! `InitializeTLS` and `k8s.io/client-go/util/cert` `GenerateSelfSignedCertKey`): without
//! `--tls-cert-file` / `--tls-private-key-file`, the kubelet serves `kubelet.crt` /
//! `kubelet.key` from `--cert-dir`, and makes them when they cannot be read: a CA
//! `<host>-ca@<unix time>` signs a serving certificate `<host>@<unix time>` for the host name
//! (or IP) and the node's IPs, valid from an hour ago for a year; `kubelet.crt` holds the
//! certificate then the CA, `kubelet.key` (mode 0600) the certificate's key.
//!
//! Upstream's keys are RSA 2048; these are ECDSA P-256 (what rcgen makes with ring).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use super::Error;

/// The serving certificate's file name in the cert directory.
pub const CERT_FILE: &str = "kubelet.crt";
/// The serving key's file name in the cert directory.
pub const KEY_FILE: &str = "kubelet.key";

/// How long a self-signed pair is valid (upstream: one year).
const VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// How far back its validity starts, against clock skew (upstream: one hour).
const BACKDATE: Duration = Duration::from_secs(3600);

/// The paths of `kubelet.crt` and `kubelet.key` in `cert_dir`, made for `host` and `ips`
/// unless both can already be read (upstream `certutil.CanReadCertAndKey`).
pub fn ensure(cert_dir: &Path, host: &str, ips: &[IpAddr]) -> Result<(PathBuf, PathBuf), Error> {
    let (cert, key) = (cert_dir.join(CERT_FILE), cert_dir.join(KEY_FILE));
    if std::fs::File::open(&cert).is_ok() && std::fs::File::open(&key).is_ok() {
        return Ok((cert, key));
    }
    let (cert_pem, key_pem) = self_signed(host, ips).map_err(Error::SelfSigned)?;
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Write { path, source }
    };
    std::fs::create_dir_all(cert_dir).map_err(io(cert_dir))?;
    std::fs::write(&cert, cert_pem).map_err(io(&cert))?;
    write_private(&key, key_pem.as_bytes()).map_err(io(&key))?;
    tracing::info!(cert = %cert.display(), key = %key.display(), "using a self-signed serving certificate");
    Ok((cert, key))
}

fn write_private(path: &Path, content: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(content)
}

fn time(t: SystemTime) -> time::OffsetDateTime {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    time::OffsetDateTime::UNIX_EPOCH.saturating_add(time::Duration::seconds(
        i64::try_from(secs).unwrap_or(i64::MAX),
    ))
}

/// A serving certificate (then its CA) and the certificate's key, in PEM.
pub fn self_signed(host: &str, ips: &[IpAddr]) -> Result<(String, String), rcgen::Error> {
    let now = SystemTime::now();
    let unix = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let not_before = time(now - BACKDATE);
    let not_after = time(now - BACKDATE + VALIDITY);

    let mut ca = CertificateParams::default();
    ca.distinguished_name = DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, format!("{host}-ca@{unix}"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
    ];
    (ca.not_before, ca.not_after) = (not_before, not_after);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut leaf = CertificateParams::default();
    leaf.distinguished_name = DistinguishedName::new();
    leaf.distinguished_name
        .push(DnType::CommonName, format!("{host}@{unix}"));
    leaf.key_usages = vec![
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::DigitalSignature,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.subject_alt_names = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SanType::IpAddress(ip)],
        Err(_) => vec![SanType::DnsName(host.try_into()?)],
    };
    leaf.subject_alt_names
        .extend(ips.iter().copied().map(SanType::IpAddress));
    (leaf.not_before, leaf.not_after) = (not_before, not_after);
    let key = KeyPair::generate()?;
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok((
        format!("{}{}", cert.pem(), ca_cert.pem()),
        key.serialize_pem(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_then_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = dir.path().join("pki");
        let ips = ["192.0.2.10".parse().expect("ip")];
        let (cert, key) = ensure(&pki, "node-a", &ips).expect("made");
        assert_eq!(cert, pki.join("kubelet.crt"));
        let first = std::fs::read_to_string(&cert).expect("cert");
        assert_eq!(
            first.matches("BEGIN CERTIFICATE").count(),
            2,
            "cert then CA"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).expect("key").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let certs = super::super::tls::read_certs(&cert).expect("parses");
        let leaf = super::super::x509::subject(&certs[0]).expect("subject");
        assert!(leaf.common_name.starts_with("node-a@"), "{leaf:?}");
        let ca = super::super::x509::subject(&certs[1]).expect("subject");
        assert!(ca.common_name.starts_with("node-a-ca@"), "{ca:?}");
        ensure(&pki, "node-a", &ips).expect("reused");
        assert_eq!(std::fs::read_to_string(&cert).expect("cert"), first);
    }
}
