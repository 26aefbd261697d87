//! Credential provider plugins: executables the kubelet runs to get registry credentials for
//! an image (upstream `pkg/credentialprovider/plugin`: `config.go` reads and validates the
//! `CredentialProviderConfig` of `--image-credential-provider-config`, `plugin.go` runs
//! `<--image-credential-provider-bin-dir>/<name>` with a `CredentialProviderRequest` on stdin
//! and caches the `CredentialProviderResponse` it prints).
//!
//! A plugin is asked only for images its `matchImages` globs match; its answer is cached per
//! image, per registry or globally (`cacheKeyType`) for `cacheDuration`, else the provider's
//! `defaultCacheDuration` (0: not cached). Concurrent pulls of one plugin wait for a single
//! run. A failing plugin gives no credentials (the pull goes on without them), as upstream.
//! The credentials are tried after the pod's pull secrets' ([`CredentialProviders::lookup`]).
//! Not supported: the service account token mode (`tokenAttributes`), refused at load.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use super::config::{DockerConfig, DockerConfigEntry};
use super::keyring::{BasicDockerKeyring, urls_match};
use super::{Error, Result};
use crate::kuberuntime::api::AuthConfig;

/// The `apiVersion`s of a `CredentialProviderConfig` file.
pub const CONFIG_API_VERSIONS: [&str; 3] = [
    "kubelet.config.k8s.io/v1",
    "kubelet.config.k8s.io/v1beta1",
    "kubelet.config.k8s.io/v1alpha1",
];

/// The plugin protocol's `apiVersion`s (a provider's `apiVersion`).
pub const PLUGIN_API_VERSIONS: [&str; 3] = [
    "credentialprovider.kubelet.k8s.io/v1",
    "credentialprovider.kubelet.k8s.io/v1alpha1",
    "credentialprovider.kubelet.k8s.io/v1beta1",
];

/// How long a plugin may run (upstream's catch-all timeout).
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(60);

const GLOBAL_CACHE_KEY: &str = "global";

/// One provider of the config file (upstream `CredentialProvider`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderConfig {
    /// The executable's name in the plugin directory.
    pub name: String,
    /// Globs of the images the plugin is asked about (e.g. `*.dkr.ecr.*.amazonaws.com`,
    /// `registry.example:5000`).
    pub match_images: Vec<String>,
    /// How long an answer without `cacheDuration` is cached (0: not cached).
    pub default_cache_duration: Duration,
    /// The protocol version the plugin speaks ([`PLUGIN_API_VERSIONS`]).
    pub api_version: String,
    /// Arguments of the executable.
    pub args: Vec<String>,
    /// Environment added to the kubelet's for the executable.
    pub env: Vec<(String, String)>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConfig {
    kind: Option<String>,
    api_version: Option<String>,
    #[serde(default)]
    providers: Vec<RawProvider>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawProvider {
    #[serde(default)]
    name: String,
    #[serde(default)]
    match_images: Vec<String>,
    default_cache_duration: Option<String>,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<RawEnv>,
    token_attributes: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawEnv {
    name: String,
    #[serde(default)]
    value: String,
}

/// Upstream `readCredentialProviderConfig`: a file, or a directory whose `*.json`, `*.yaml`
/// and `*.yml` files are read in name order and merged (a provider name given twice is an
/// error); then validated as upstream `validateCredentialProviderConfig`. Errors name the
/// file and the field.
// Reviewed: read once at kubelet start, before any pod work.
#[allow(clippy::disallowed_methods)]
pub fn read_config(path: &Path) -> Result<Vec<ProviderConfig>> {
    let err = |file: &Path, message: String| Error::PluginConfig {
        path: file.to_owned(),
        message,
    };
    let meta =
        std::fs::metadata(path).map_err(|e| err(path, format!("unable to access path: {e}")))?;
    let files: Vec<PathBuf> = if meta.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| err(path, format!("unable to read directory: {e}")))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.is_file()
                    && p.extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|e| ["json", "yaml", "yml"].contains(&e))
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(err(
                path,
                "no configuration files found in directory".into(),
            ));
        }
        files
    } else {
        vec![path.to_owned()]
    };
    let mut providers = Vec::new();
    for file in &files {
        let data = std::fs::read(file).map_err(|e| err(file, format!("unable to read: {e}")))?;
        for p in decode(&data).map_err(|m| err(file, m))? {
            if providers.iter().any(|q: &ProviderConfig| q.name == p.name) {
                return Err(err(
                    file,
                    format!(
                        "duplicate provider name {:?} found in configuration file(s)",
                        p.name
                    ),
                ));
            }
            providers.push(p);
        }
    }
    if providers.is_empty() {
        return Err(err(
            path,
            "providers: Required value: at least 1 item in plugins is required".into(),
        ));
    }
    Ok(providers)
}

/// One file's providers, validated.
fn decode(data: &[u8]) -> std::result::Result<Vec<ProviderConfig>, String> {
    let raw: RawConfig = serde_saphyr::from_slice(data)
        .map_err(|e| format!("invalid CredentialProviderConfig: {e}"))?;
    if raw.kind.as_deref() != Some("CredentialProviderConfig") {
        return Err(format!(
            "kind: must be \"CredentialProviderConfig\", not {:?}",
            raw.kind.unwrap_or_default()
        ));
    }
    let api_version = raw.api_version.unwrap_or_default();
    if !CONFIG_API_VERSIONS.contains(&api_version.as_str()) {
        return Err(format!(
            "apiVersion: Unsupported value: {api_version:?}: supported values: {}",
            quoted(&CONFIG_API_VERSIONS)
        ));
    }
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for p in raw.providers {
        let name = p.name.clone();
        for (bad, why) in [
            (name.contains('/'), "provider name cannot contain '/'"),
            (name.contains(' '), "provider name cannot contain spaces"),
            (name == ".", "provider name cannot be '.'"),
            (name == "..", "provider name cannot be '..'"),
        ] {
            if bad {
                errors.push(format!("providers.name: Invalid value: {name:?}: {why}"));
            }
        }
        if name.is_empty() {
            errors.push("providers.name: Required value".into());
        }
        if out.iter().any(|q: &ProviderConfig| q.name == name) {
            errors.push(format!("providers.name: Duplicate value: {name:?}"));
        }
        if p.api_version.is_empty() {
            errors.push("providers.apiVersion: Required value".into());
        } else if !PLUGIN_API_VERSIONS.contains(&p.api_version.as_str()) {
            errors.push(format!(
                "providers.apiVersion: Unsupported value: {:?}: supported values: {}",
                p.api_version,
                quoted(&PLUGIN_API_VERSIONS)
            ));
        }
        if p.match_images.is_empty() {
            errors.push(
                "providers.matchImages: Required value: at least 1 item in matchImages is required"
                    .into(),
            );
        }
        for m in &p.match_images {
            if let Err(e) = urls_match(m, m) {
                errors.push(format!(
                    "providers.matchImages: Invalid value: {m:?}: match image is invalid: {e}"
                ));
            }
        }
        let default_cache_duration = match p.default_cache_duration.as_deref() {
            None => {
                errors.push("providers.defaultCacheDuration: Required value".into());
                Duration::ZERO
            }
            Some(d) => crate::duration::parse(d).unwrap_or_else(|e| {
                errors.push(format!(
                    "providers.defaultCacheDuration: Invalid value: {d:?}: {e}"
                ));
                Duration::ZERO
            }),
        };
        if p.token_attributes.is_some() {
            errors.push(
                "providers.tokenAttributes: Forbidden: the service account token mode is not supported by this kubelet"
                    .into(),
            );
        }
        out.push(ProviderConfig {
            name,
            match_images: p.match_images,
            default_cache_duration,
            api_version: p.api_version,
            args: p.args,
            env: p.env.into_iter().map(|e| (e.name, e.value)).collect(),
        });
    }
    match errors.as_slice() {
        [] => Ok(out),
        [one] => Err(format!(
            "failed to validate credential provider config: {one}"
        )),
        many => Err(format!(
            "failed to validate credential provider config: [{}]",
            many.join(", ")
        )),
    }
}

fn quoted(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("{v:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a plugin's answer is cached by (upstream `PluginCacheKeyType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheKeyType {
    /// The image asked about.
    Image,
    /// The image's registry host (with port).
    Registry,
    /// Every image the plugin matches.
    Global,
}

/// A plugin's answer (upstream `CredentialProviderResponse`).
#[derive(Clone, PartialEq, Eq)]
pub struct Response {
    /// What the answer is cached by.
    pub cache_key_type: CacheKeyType,
    /// How long to cache it; `None`: the provider's default.
    pub cache_duration: Option<Duration>,
    /// Match pattern (as a docker config key, e.g. `registry.example:5000`) → user name and
    /// password.
    pub auth: BTreeMap<String, (String, String)>,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("cache_key_type", &self.cache_key_type)
            .field("cache_duration", &self.cache_duration)
            .field("auth", &self.auth.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Runs a plugin for one image (upstream `Plugin`; tests substitute their own).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait Plugin: Send + Sync + 'static {
    /// The plugin's answer for `image`, or why there is none.
    async fn exec(&self, image: &str) -> std::result::Result<Response, String>;
}

/// The executable of a provider (upstream `execPlugin`).
#[derive(Debug)]
pub struct ExecPlugin {
    config: ProviderConfig,
    bin: PathBuf,
}

impl ExecPlugin {
    /// The plugin `<bin_dir>/<config.name>`.
    pub fn new(config: ProviderConfig, bin_dir: &Path) -> Self {
        let bin = bin_dir.join(&config.name);
        Self { config, bin }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawResponse {
    kind: Option<String>,
    api_version: Option<String>,
    cache_key_type: Option<String>,
    cache_duration: Option<String>,
    #[serde(default)]
    auth: BTreeMap<String, RawAuth>,
}

#[derive(Deserialize)]
struct RawAuth {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

/// Decodes a plugin's stdout for a provider speaking `api_version` (upstream
/// `ExecPlugin`'s checks and `decodeResponse`). Messages never quote the credentials.
pub fn decode_response(data: &[u8], api_version: &str) -> std::result::Result<Response, String> {
    let raw: RawResponse = serde_json::from_slice(data)
        .map_err(|_| "error decoding credential provider plugin response from stdout".to_owned())?;
    let actual = raw.api_version.unwrap_or_default();
    if actual != api_version {
        return Err(format!(
            "apiVersion from credential plugin response did not match expected apiVersion:{api_version}, actual apiVersion:{actual}"
        ));
    }
    if raw.kind.as_deref() != Some("CredentialProviderResponse") {
        return Err(format!(
            "failed to decode CredentialProviderResponse, unexpected Kind: {:?}",
            raw.kind.unwrap_or_default()
        ));
    }
    let cache_key_type = match raw.cache_key_type.as_deref().unwrap_or("") {
        "Image" => CacheKeyType::Image,
        "Registry" => CacheKeyType::Registry,
        "Global" => CacheKeyType::Global,
        other => {
            return Err(format!(
                "credential provider plugin did not return a valid cacheKeyType: {other:?}"
            ));
        }
    };
    let cache_duration = raw
        .cache_duration
        .as_deref()
        .map(crate::duration::parse)
        .transpose()
        .map_err(|e| format!("invalid cacheDuration in the plugin's response: {e}"))?;
    Ok(Response {
        cache_key_type,
        cache_duration,
        auth: raw
            .auth
            .into_iter()
            .map(|(k, a)| (k, (a.username, a.password)))
            .collect(),
    })
}

#[async_trait]
impl Plugin for ExecPlugin {
    async fn exec(&self, image: &str) -> std::result::Result<Response, String> {
        let name = &self.config.name;
        let failed = |e: &dyn std::fmt::Display| {
            format!("error execing credential provider plugin {name} for image {image}: {e}")
        };
        let request = serde_json::json!({
            "kind": "CredentialProviderRequest",
            "apiVersion": self.config.api_version,
            "image": image,
        });
        let mut child = tokio::process::Command::new(&self.bin)
            .args(&self.config.args)
            .envs(self.config.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| failed(&e))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A plugin that exits without reading its request is judged by its output.
            let _ = stdin.write_all(request.to_string().as_bytes()).await;
        }
        let output = match tokio::time::timeout(EXEC_TIMEOUT, child.wait_with_output()).await {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => return Err(failed(&e)),
            Err(_) => return Err(failed(&"context deadline exceeded")),
        };
        if !output.status.success() {
            return Err(format!(
                "{}: {}",
                failed(&output.status),
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        decode_response(&output.stdout, &self.config.api_version)
    }
}

/// One provider with its cache (upstream `pluginProvider`).
struct PluginProvider {
    name: String,
    match_images: Vec<String>,
    default_cache_duration: Duration,
    plugin: Box<dyn Plugin>,
    /// Cache key → (credentials, expiry). The lock is held over a run, so concurrent pulls
    /// wait for one answer (upstream's singleflight).
    cache: tokio::sync::Mutex<HashMap<String, (DockerConfig, Instant)>>,
}

impl PluginProvider {
    fn is_image_allowed(&self, image: &str) -> bool {
        self.match_images
            .iter()
            .any(|m| urls_match(m, image).unwrap_or(false))
    }

    /// Upstream `provide`: the cached answer for the image, its registry or every image,
    /// else the plugin's, cached as it says.
    async fn provide(&self, image: &str) -> DockerConfig {
        if !self.is_image_allowed(image) {
            return DockerConfig::new();
        }
        let registry = image.split('/').next().unwrap_or(image);
        let mut cache = self.cache.lock().await;
        let now = Instant::now();
        cache.retain(|_, (_, expires)| *expires >= now);
        for key in [image, registry, GLOBAL_CACHE_KEY] {
            if let Some((config, _)) = cache.get(key) {
                return config.clone();
            }
        }
        let response = match self.plugin.exec(image).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(plugin = %self.name, "Failed getting credential from external registry credential provider: {e}");
                return DockerConfig::new();
            }
        };
        let config: DockerConfig = response
            .auth
            .iter()
            .map(|(k, (username, password))| {
                (
                    k.clone(),
                    DockerConfigEntry {
                        username: username.clone(),
                        password: password.clone(),
                        ..Default::default()
                    },
                )
            })
            .collect();
        let duration = response
            .cache_duration
            .unwrap_or(self.default_cache_duration);
        if !duration.is_zero() {
            let key = match response.cache_key_type {
                CacheKeyType::Image => image,
                CacheKeyType::Registry => registry,
                CacheKeyType::Global => GLOBAL_CACHE_KEY,
            };
            cache.insert(key.to_owned(), (config.clone(), Instant::now() + duration));
        }
        config
    }
}

/// The node's credential provider plugins: the keyring tried after the pod's pull secrets
/// (upstream's default keyring of registered plugin providers). Cheap to share in an `Arc`.
pub struct CredentialProviders {
    providers: Vec<PluginProvider>,
}

impl std::fmt::Debug for CredentialProviders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.providers.iter().map(|p| &p.name))
            .finish()
    }
}

impl CredentialProviders {
    /// Upstream `RegisterCredentialProviderPlugins`: the providers of the config file at
    /// `config` ([`read_config`]), each run from `bin_dir`, which must hold their executables.
    // Reviewed: a few stats at kubelet start.
    #[allow(clippy::disallowed_methods)]
    pub fn load(config: &Path, bin_dir: &Path) -> Result<Self> {
        if !bin_dir.exists() {
            return Err(Error::PluginBinary {
                path: bin_dir.to_owned(),
                message: "plugin binary directory did not exist".into(),
            });
        }
        let configs = read_config(config)?;
        let mut plugins: Vec<(ProviderConfig, Box<dyn Plugin>)> = Vec::new();
        for c in configs {
            let bin = bin_dir.join(&c.name);
            if !bin.is_file() {
                return Err(Error::PluginBinary {
                    path: bin,
                    message: "plugin binary executable did not exist".into(),
                });
            }
            let plugin = Box::new(ExecPlugin::new(c.clone(), bin_dir));
            plugins.push((c, plugin));
        }
        Ok(Self::with_plugins(plugins))
    }

    /// Providers running `plugins` (their configs give the names, globs and default cache
    /// durations).
    pub fn with_plugins(plugins: Vec<(ProviderConfig, Box<dyn Plugin>)>) -> Self {
        Self {
            providers: plugins
                .into_iter()
                .map(|(c, plugin)| PluginProvider {
                    name: c.name,
                    match_images: c.match_images,
                    default_cache_duration: c.default_cache_duration,
                    plugin,
                    cache: tokio::sync::Mutex::new(HashMap::new()),
                })
                .collect(),
        }
    }

    /// The credentials the plugins give for `repo` (a repository without tag, as
    /// [`super::repo_to_pull`] makes it), most specific match first (upstream
    /// `externalCredentialProviderKeyring.Lookup`).
    pub async fn lookup(&self, repo: &str) -> Vec<AuthConfig> {
        let mut keyring = BasicDockerKeyring::new();
        for p in &self.providers {
            keyring.add(&p.provide(repo).await);
        }
        keyring.lookup(repo)
    }
}

#[cfg(test)]
#[path = "plugin_tests.rs"]
mod tests;
