//! The files a [`Cluster`](super::Cluster) is started with and hands out: the static token file,
//! the service-account key pair, kubeconfigs, and client certificates.

use std::{
    fmt::Write as _,
    fs::{self, File},
    io::Read,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};
use serde_json::json;

use crate::util;

/// The admin's user name; it is in group `system:masters`.
pub(crate) const ADMIN_USER: &str = "admin";

/// A random bearer token: 32 hex digits from `/dev/urandom`.
pub(crate) fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom")?;
    Ok(bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    }))
}

/// One line of `--token-auth-file`: `token,user,uid,"group1,group2"`.
pub(crate) struct TokenEntry<'a> {
    pub(crate) token: &'a str,
    pub(crate) user: &'a str,
    pub(crate) uid: &'a str,
    pub(crate) groups: &'a [&'a str],
}

/// Writes the static token file.
pub(crate) fn write_token_file(path: &Path, entries: &[TokenEntry<'_>]) -> Result<()> {
    let text: String = entries
        .iter()
        .map(|e| {
            format!(
                "{},{},{},\"{}\"\n",
                e.token,
                e.user,
                e.uid,
                e.groups.join(",")
            )
        })
        .collect();
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Generates the service-account signing key (`key`, ECDSA P-256: instant, where RSA takes half
/// a second) and its public half (`public`) with the `openssl` CLI.
pub(crate) fn write_service_account_keys(key: &Path, public: &Path) -> Result<()> {
    util::output(
        Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
            ])
            .arg(key),
    )?;
    util::output(
        Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(key)
            .arg("-out")
            .arg(public),
    )?;
    Ok(())
}

/// A CA and a client certificate it signed (files written by [`write_client_pki`]).
#[derive(Clone, Debug)]
pub struct ClientPki {
    /// The CA certificate (`ca.crt`), what a server is given as its client CA.
    pub ca: PathBuf,
    /// The client certificate (`client.crt`).
    pub cert: PathBuf,
    /// The client certificate's key (`client.key`).
    pub key: PathBuf,
}

/// Writes, with the `openssl` CLI, in `dir`: a CA with the subject `ca_subject` and a client
/// certificate it signed for `client_subject` (e.g. `/O=system:masters/CN=admin`; several `O`
/// are several groups), ECDSA P-256, client auth, valid for two days.
pub fn write_client_pki(dir: &Path, ca_subject: &str, client_subject: &str) -> Result<ClientPki> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let openssl = |args: &[&str]| util::output(Command::new("openssl").current_dir(dir).args(args));
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", ca_subject,
    ]);
    openssl(&ca)?;
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
        "-subj",
        client_subject,
    ]);
    openssl(&csr)?;
    fs::write(dir.join("ext"), "extendedKeyUsage=clientAuth\n")
        .with_context(|| format!("cannot write {}", dir.display()))?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext",
        "-out",
        "client.crt",
    ])?;
    Ok(ClientPki {
        ca: dir.join("ca.crt"),
        cert: dir.join("client.crt"),
        key: dir.join("client.key"),
    })
}

/// Writes a kubeconfig (JSON, which kubectl and kube-rs read as YAML) for `user` with a bearer
/// token, trusting `ca_file`.
pub(crate) fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca_file: &Path,
    user: &str,
    token: &str,
) -> Result<()> {
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "e2e",
            "cluster": { "server": server, "certificate-authority": ca_file },
        }],
        "users": [{ "name": user, "user": { "token": token } }],
        "contexts": [{ "name": "e2e", "context": { "cluster": "e2e", "user": user } }],
        "current-context": "e2e",
    });
    let text = serde_json::to_string_pretty(&config)?;
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
