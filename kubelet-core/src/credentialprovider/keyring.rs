//! The keyring: registry keys → credentials, and the lookup that picks every credential whose
//! key matches an image (upstream `keyring.go`: `BasicDockerKeyring.Add`/`Lookup`,
//! `URLsMatch`, `ParseSchemelessURL`, `isDefaultRegistryMatch`).

use std::collections::HashMap;

use super::config::DockerConfig;
use super::glob;
use crate::kuberuntime::api::AuthConfig;

/// Docker Hub's key once `https://index.docker.io/v1/` is normalised (upstream
/// `defaultRegistryHost`).
const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

/// Credentials indexed by registry key (`host[:port][/path]`, globs allowed in the host).
///
/// Keys are kept sorted in reverse so that more specific paths come first: for
/// `quay.io/coreos/etcd`, credentials for `quay.io/coreos` are tried before `quay.io`'s.
#[derive(Clone, Debug, Default)]
pub struct BasicDockerKeyring {
    index: Vec<String>,
    creds: HashMap<String, Vec<AuthConfig>>,
}

impl BasicDockerKeyring {
    /// An empty keyring.
    pub fn new() -> Self {
        Self::default()
    }

    /// `true` when it holds no credentials.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Adds every entry of `cfg`. A scheme (`https://`) is dropped and a `/v1/` or `/v2/` path
    /// counts as the bare host; an entry whose key is not a valid URL is skipped with a warning.
    pub fn add(&mut self, cfg: &DockerConfig) {
        for (loc, ident) in cfg {
            let value = if loc.starts_with("https://") || loc.starts_with("http://") {
                loc.clone()
            } else {
                format!("https://{loc}")
            };
            let parsed = match Url::parse(&value) {
                Ok(u) => u,
                Err(e) => {
                    tracing::warn!(entry = %loc, error = %e, "entry in dockercfg invalid, ignoring");
                    continue;
                }
            };
            let mut path = parsed.path.as_str();
            if path.starts_with("/v2/") || path.starts_with("/v1/") {
                path = &path[3..];
            }
            let key = if path.is_empty() || path == "/" {
                parsed.host
            } else {
                format!("{}{path}", parsed.host)
            };
            let auth = AuthConfig {
                username: ident.username.clone(),
                password: ident.password.clone(),
                identity_token: ident.identity_token.clone(),
                registry_token: ident.registry_token.clone(),
                ..AuthConfig::default()
            };
            self.creds.entry(key.clone()).or_default().push(auth);
            self.index.push(key);
        }
        self.index.sort_unstable_by(|a, b| b.cmp(a));
        self.index.dedup();
    }

    /// Every credential whose key matches `image` (a repository without tag, e.g.
    /// `docker.io/library/busybox`), most specific key first; Docker Hub's credentials for an
    /// image on Docker Hub when no key matches. Empty: pull without credentials.
    pub fn lookup(&self, image: &str) -> Vec<AuthConfig> {
        let found: Vec<AuthConfig> = self
            .index
            .iter()
            .filter(|k| urls_match(k, image).unwrap_or(false))
            .flat_map(|k| self.creds.get(k).into_iter().flatten().cloned())
            .collect();
        if !found.is_empty() {
            return found;
        }
        if is_default_registry_match(image)
            && let Some(hub) = self.creds.get(DEFAULT_REGISTRY_HOST)
        {
            return hub.clone();
        }
        Vec::new()
    }
}

/// `true` when `image` is pulled from Docker Hub: no registry host in its first component
/// (no `.` or `:`), or `docker.io` / `index.docker.io`.
pub fn is_default_registry_match(image: &str) -> bool {
    let (first, rest) = match image.split_once('/') {
        Some((f, r)) => (f, Some(r)),
        None => (image, None),
    };
    if first.is_empty() {
        return false;
    }
    if rest.is_none() || first == "docker.io" || first == DEFAULT_REGISTRY_HOST {
        return true;
    }
    !first.contains(['.', ':'])
}

/// Whether the scheme-less URL `target` matches `glob`: same port, same number of host
/// labels each matching its glob label (`*.example.com`), and `glob`'s path a prefix of
/// `target`'s. `Err` when either is not a URL or a glob is malformed.
pub fn urls_match(glob: &str, target: &str) -> Result<bool, super::Error> {
    let error = |reason: String| super::Error::UrlMatch {
        glob: glob.to_owned(),
        target: target.to_owned(),
        reason,
    };
    let glob_url = Url::parse_schemeless(glob).map_err(error)?;
    let target_url = Url::parse_schemeless(target).map_err(error)?;
    let (glob_labels, glob_port) = split_host_port(&glob_url.host);
    let (target_labels, target_port) = split_host_port(&target_url.host);
    if glob_port != target_port || glob_labels.len() != target_labels.len() {
        return Ok(false);
    }
    if !target_url.path.starts_with(&glob_url.path) {
        return Ok(false);
    }
    for (g, t) in glob_labels.iter().zip(&target_labels) {
        match glob::matches(g, t) {
            Some(true) => {}
            Some(false) => return Ok(false),
            None => return Err(error(format!("malformed glob {g:?}"))),
        }
    }
    Ok(true)
}

/// The host labels and the port (empty without one), as Go's `net.SplitHostPort`.
fn split_host_port(host: &str) -> (Vec<&str>, &str) {
    let (name, port) = if let Some(inner) = host.strip_prefix('[') {
        match inner.split_once(']') {
            Some((addr, rest)) => match rest.strip_prefix(':') {
                Some(port) => (addr, port),
                None => (host, ""),
            },
            None => (host, ""),
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) if !port.contains(':') => (name, port),
            _ => (host, ""),
        }
    };
    (name.split('.').collect(), port)
}

/// The parts of a URL the keyring uses, parsed as Go's `net/url` does for `scheme://rest`.
#[derive(Debug, PartialEq, Eq)]
struct Url {
    host: String,
    path: String,
}

impl Url {
    /// Upstream `ParseSchemelessURL`: parses `https://` + `s`.
    fn parse_schemeless(s: &str) -> Result<Url, String> {
        Self::parse(&format!("https://{s}"))
    }

    fn parse(s: &str) -> Result<Url, String> {
        let Some((_, rest)) = s.split_once("://") else {
            return Err(format!("{s:?}: missing scheme"));
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let rest = rest.split('?').next().unwrap_or_default();
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let host = authority.rsplit('@').next().unwrap_or_default();
        if let Some(bad) = host
            .chars()
            .find(|&c| c.is_whitespace() || c.is_control() || "<>\"{}|\\^`".contains(c))
        {
            return Err(format!("invalid character {bad:?} in host name {host:?}"));
        }
        let port = match host.strip_prefix('[') {
            Some(inner) => match inner.split_once(']') {
                Some((_, "")) => None,
                Some((_, after)) => match after.strip_prefix(':') {
                    Some(p) => Some(p),
                    None => return Err(format!("invalid port {after:?} after host")),
                },
                None => return Err(format!("missing ']' in host {host:?}")),
            },
            None => host.rsplit_once(':').map(|(_, p)| p),
        };
        if let Some(port) = port
            && !port.chars().all(|c| c.is_ascii_digit())
        {
            return Err(format!("invalid port {:?} after host", format!(":{port}")));
        }
        if path.chars().any(|c| c.is_control()) {
            return Err(format!("invalid control character in URL {s:?}"));
        }
        Ok(Url {
            host: host.to_owned(),
            path: path.to_owned(),
        })
    }
}

#[cfg(test)]
#[path = "keyring_tests.rs"]
mod tests;
