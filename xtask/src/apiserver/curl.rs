//! API requests through the `curl` CLI (xtask has no HTTP client): readiness polls and the
//! objects a [`Cluster`](super::Cluster) creates.

use std::{
    io::Write,
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// One request: the HTTP status and the body. `ca_file` verifies the server; a `PATCH` body is
/// sent as a JSON merge patch, others as JSON.
pub(crate) fn curl(
    url: &str,
    ca_file: &Path,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, String)> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "30", "-X", method])
        .arg("--cacert")
        .arg(ca_file)
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .args(["-H", "Accept: application/json", "-w", "\n%{http_code}"]);
    let input = match body {
        Some(body) => {
            let content_type = if method == "PATCH" {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            cmd.arg("-H")
                .arg(format!("Content-Type: {content_type}"))
                .args(["--data-binary", "@-"]);
            serde_json::to_vec(body)?
        }
        None => Vec::new(),
    };
    cmd.arg(format!("{url}{path}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().context("cannot run curl")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(&input)
            .context("cannot write curl's input")?;
    }
    let out = child.wait_with_output().context("curl failed")?;
    if !out.status.success() {
        bail!(
            "curl {method} {url}{path} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let code = code
        .trim()
        .parse()
        .with_context(|| format!("curl printed no status code: {text}"))?;
    Ok((code, body.to_owned()))
}
