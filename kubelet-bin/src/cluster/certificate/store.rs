//! Where certificates live (client-go `util/certificate/certificate_store.go`):
//! `<dir>/<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` files holding a certificate and its key (mode
//! 0600), and the link `<dir>/<prefix>-current.pem` to the one in use, moved atomically (a new
//! link `<prefix>-updated.pem` renamed over it).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use x509_parser::prelude::{FromDer, X509Certificate};

use super::{Error, Result};

/// The client certificate's prefix (`kubelet-client-current.pem`).
pub const CLIENT_PREFIX: &str = "kubelet-client";
/// The serving certificate's prefix (`kubelet-server-current.pem`).
pub const SERVER_PREFIX: &str = "kubelet-server";

/// A certificate (with its chain) and its private key, as PEM. `Debug` leaves the key out.
#[derive(Clone)]
pub struct Pair {
    /// The file it was read from or written to.
    pub path: PathBuf,
    /// The certificate and its chain, PEM.
    pub cert_pem: String,
    key_pem: String,
    /// The leaf's `NotBefore`.
    pub not_before: SystemTime,
    /// The leaf's `NotAfter`.
    pub not_after: SystemTime,
    /// The leaf's DER `SubjectPublicKeyInfo`.
    pub public_key_der: Vec<u8>,
}

impl fmt::Debug for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pair")
            .field("path", &self.path)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl Pair {
    /// Reads the certificates of `text` (the file `path`) and, when `key` is true, its
    /// private key.
    pub fn parse(path: &Path, text: &str, key: bool) -> Result<Self> {
        let bad = |message: String| Error::Pem {
            path: path.to_owned(),
            message,
        };
        let blocks = pem_blocks(text);
        let certs: Vec<&str> = blocks
            .iter()
            .filter(|(label, _)| *label == "CERTIFICATE")
            .map(|(_, block)| *block)
            .collect();
        let Some(leaf) = certs.first() else {
            return Err(bad("no certificate".into()));
        };
        let key_pem = blocks
            .iter()
            .find(|(label, _)| label.ends_with("PRIVATE KEY"))
            .map(|(_, block)| (*block).to_owned());
        let key_pem = match (key, key_pem) {
            (true, None) => return Err(bad("no private key".into())),
            (_, k) => k.unwrap_or_default(),
        };
        let validity = cert_info(leaf).map_err(|e| bad(format!("certificate: {e}")))?;
        Ok(Self {
            path: path.to_owned(),
            cert_pem: certs.concat(),
            key_pem,
            not_before: validity.0,
            not_after: validity.1,
            public_key_der: validity.2,
        })
    }

    /// Reads `path` (see [`parse`](Self::parse)).
    pub fn read(path: &Path, key: bool) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text, key)
    }

    /// The private key, PEM.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// Whether the certificate is valid at `now` (not before `NotBefore`, not after
    /// `NotAfter`).
    pub fn is_valid_at(&self, now: SystemTime) -> bool {
        self.not_before <= now && now <= self.not_after
    }
}

/// The PEM blocks of `text`: (label, the block's text with its BEGIN and END lines and a
/// final newline).
fn pem_blocks(text: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let from = &rest[start..];
        let label_end = from["-----BEGIN ".len()..].find("-----");
        let Some(label_end) = label_end else { break };
        let label = &from["-----BEGIN ".len()..][..label_end];
        let end_marker = format!("-----END {label}-----");
        let Some(end) = from.find(&end_marker) else {
            break;
        };
        let mut stop = end + end_marker.len();
        if from[stop..].starts_with('\n') {
            stop += 1;
        }
        out.push((label, &from[..stop]));
        rest = &from[stop..];
    }
    out
}

/// NotBefore, NotAfter and the SubjectPublicKeyInfo of one PEM certificate block.
fn cert_info(block: &str) -> std::result::Result<(SystemTime, SystemTime, Vec<u8>), String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(block.as_bytes()).map_err(|e| e.to_string())?;
    let (_, cert) = X509Certificate::from_der(&pem.contents).map_err(|e| e.to_string())?;
    let time = |t: x509_parser::time::ASN1Time| {
        let secs = t.timestamp();
        match u64::try_from(secs) {
            Ok(s) => SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s),
            Err(_) => SystemTime::UNIX_EPOCH - std::time::Duration::from_secs(secs.unsigned_abs()),
        }
    };
    let validity = cert.validity();
    Ok((
        time(validity.not_before),
        time(validity.not_after),
        cert.public_key().raw.to_vec(),
    ))
}

/// `t` as a UTC date and time (`time`'s conversion from `SystemTime` needs its `std` feature).
pub(crate) fn offset_date_time(t: SystemTime) -> time::OffsetDateTime {
    let secs = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_secs()).map_or(i64::MIN, |s| -s),
    };
    time::OffsetDateTime::UNIX_EPOCH.saturating_add(time::Duration::seconds(secs))
}

/// The certificate files of one kind in one directory.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
    prefix: String,
}

impl Store {
    /// The files `<dir>/<prefix>-*.pem`.
    pub fn new(dir: impl Into<PathBuf>, prefix: impl Into<String>) -> Self {
        Self {
            dir: dir.into(),
            prefix: prefix.into(),
        }
    }

    /// The client certificates of the kubelet in `dir` (`kubelet-client-*.pem`).
    pub fn client(dir: impl Into<PathBuf>) -> Self {
        Self::new(dir, CLIENT_PREFIX)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The link to the pair in use: `<dir>/<prefix>-current.pem`.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// The pair in use; `None` when there is no link yet.
    pub fn current(&self) -> Result<Option<Pair>> {
        let path = self.current_path();
        match std::fs::read_to_string(&path) {
            Ok(text) => Pair::parse(&path, &text, true).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::Io { path, source }),
        }
    }

    /// Writes `cert_pem` and `key_pem` to a new `<prefix>-<stamp>.pem` (0600) and points the
    /// link at it; returns the pair as read back through the link.
    pub fn update(&self, cert_pem: &str, key_pem: &str) -> Result<Pair> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;

        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| Error::Io { path, source }
        };
        // Checked before anything is written.
        Pair::parse(&self.dir, &format!("{cert_pem}{key_pem}"), true)?;
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let stamp = offset_date_time(SystemTime::now());
        let name = format!(
            "{}-{:04}-{:02}-{:02}-{:02}-{:02}-{:02}.pem",
            self.prefix,
            stamp.year(),
            u8::from(stamp.month()),
            stamp.day(),
            stamp.hour(),
            stamp.minute(),
            stamp.second()
        );
        let file = self.dir.join(&name);
        let mut text = cert_pem.to_owned();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(key_pem);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&file)
            .map_err(io(&file))?;
        f.write_all(text.as_bytes()).map_err(io(&file))?;
        f.sync_all().map_err(io(&file))?;
        let updated = self.dir.join(format!("{}-updated.pem", self.prefix));
        match std::fs::remove_file(&updated) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(Error::Io {
                    path: updated,
                    source,
                });
            }
        }
        std::os::unix::fs::symlink(&file, &updated).map_err(io(&updated))?;
        let current = self.current_path();
        std::fs::rename(&updated, &current).map_err(io(&current))?;
        self.current()?.ok_or_else(|| Error::Pem {
            path: current,
            message: "missing right after it was written".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::certificate::test_ca::TestCa;
    use std::os::unix::fs::PermissionsExt as _;
    use std::time::Duration;

    #[test]
    fn update_writes_a_0600_file_and_moves_the_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::client(dir.path());
        assert!(store.current().expect("no link").is_none());
        let ca = TestCa::new();
        let (cert, key) = ca.client_pair("system:node:n", Duration::from_secs(3600));
        let first = store.update(&cert, &key).expect("stored");
        let target = std::fs::read_link(store.current_path()).expect("a link");
        let name = target.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(name.starts_with("kubelet-client-20"), "{name}");
        assert_eq!(
            name.len(),
            "kubelet-client-2026-12-02-02-19-28.pem".len(),
            "{name}"
        );
        let mode = std::fs::metadata(&target)
            .expect("file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(&target).expect("read");
        assert!(text.contains("BEGIN CERTIFICATE") && text.contains("PRIVATE KEY"));
        assert!(first.is_valid_at(SystemTime::now()));
        assert_eq!(first.key_pem(), key);

        // A newer pair: the link follows (the name may be the same second: still one link).
        let (cert2, key2) = ca.client_pair("system:node:n", Duration::from_secs(7200));
        let second = store.update(&cert2, &key2).expect("stored");
        let current = store.current().expect("read").expect("a pair");
        assert_eq!(current.not_after, second.not_after);
        assert_ne!(current.not_after, first.not_after);
        assert!(
            !format!("{current:?}").contains("PRIVATE"),
            "the key is not in Debug"
        );
    }

    #[test]
    fn bad_pem_names_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::client(dir.path());
        std::fs::write(store.current_path(), "not pem").expect("write");
        let err = store.current().expect_err("bad");
        assert!(
            err.to_string().contains("kubelet-client-current.pem"),
            "{err}"
        );
        assert!(err.to_string().contains("no certificate"), "{err}");
        let ca = TestCa::new();
        let (cert, _) = ca.client_pair("system:node:n", Duration::from_secs(60));
        let err = store.update(&cert, "").expect_err("no key");
        assert!(err.to_string().contains("no private key"), "{err}");
    }
}
