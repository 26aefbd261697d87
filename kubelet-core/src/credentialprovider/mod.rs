//! Registry credentials for image pulls: docker config files carried by
//! `kubernetes.io/dockerconfigjson` and `kubernetes.io/dockercfg` secrets, and the keyring
//! that picks the credentials for an image.
//!
//! Mirrors upstream `pkg/credentialprovider` (`config.go`: `DockerConfigJSON`,
//! `DockerConfigEntry`; `keyring.go`: `BasicDockerKeyring`, `URLsMatch`,
//! `ParseSchemelessURL`, `isDefaultRegistryMatch`), `pkg/credentialprovider/secrets`
//! (`MakeDockerKeyring`), `pkg/credentialprovider/plugin` ([`plugin`]: exec plugins) and
//! `pkg/util/parsers` (`ParseImageName`). The kubelet turns each
//! matching credential into a CRI `AuthConfig` and tries them in order
//! (see [`crate::kuberuntime`]'s image manager).
//!
//! ```
//! use k8s_openapi::ByteString;
//! use k8s_openapi::api::core::v1::Secret;
//! use kubelet_core::credentialprovider::{make_docker_keyring, repo_to_pull};
//!
//! let mut secret = Secret::default();
//! secret.metadata.name = Some("regcred".into());
//! secret.type_ = Some("kubernetes.io/dockerconfigjson".into());
//! secret.data = Some([(
//!     ".dockerconfigjson".to_owned(),
//!     ByteString(br#"{"auths":{"registry.example:5000":{"username":"u","password":"p"}}}"#.to_vec()),
//! )].into());
//! let keyring = make_docker_keyring(&[secret]).expect("valid secret");
//! let repo = repo_to_pull("registry.example:5000/team/app:1.0").expect("valid reference");
//! let creds = keyring.lookup(&repo);
//! assert_eq!(creds[0].username, "u");
//! ```

mod config;
mod glob;
mod keyring;
mod parsers;
pub mod plugin;
mod secrets;

pub use config::{DockerConfig, DockerConfigEntry, parse_dockercfg, parse_dockerconfigjson};
pub use keyring::{BasicDockerKeyring, is_default_registry_match, urls_match};
pub use parsers::repo_to_pull;
pub use plugin::CredentialProviders;
pub use secrets::{DOCKER_CONFIG_JSON_KEY, DOCKER_CONFIG_KEY, make_docker_keyring};

/// Errors reading registry credentials.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A keyring key or an image is not a URL, or a key's host glob is malformed
    /// ([`urls_match`]).
    #[error("cannot match {glob:?} against {target:?}: {reason}")]
    UrlMatch {
        /// The keyring key (a URL whose host labels may be globs).
        glob: String,
        /// The image or URL matched against it.
        target: String,
        /// What is wrong.
        reason: String,
    },
    /// The docker config is not JSON of the expected shape.
    #[error("invalid docker config: {0}")]
    Json(#[from] serde_json::Error),
    /// An entry's `auth` field is not `base64(username:password)`.
    #[error(
        "registry {registry:?}: unable to parse auth field, must be formatted as base64(username:password): {reason}"
    )]
    Auth {
        /// The entry's registry key.
        registry: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A pull secret holds a malformed docker config.
    #[error("image pull secret {secret:?}, key {key:?}: {source}")]
    Secret {
        /// `namespace/name` of the secret.
        secret: String,
        /// The data key read (`.dockerconfigjson` or `.dockercfg`).
        key: &'static str,
        /// What is wrong with it.
        #[source]
        source: Box<Error>,
    },
    /// A credential provider config file (`--image-credential-provider-config`) cannot be
    /// read or is invalid.
    #[error("credential provider config {}: {message}", path.display())]
    PluginConfig {
        /// The file (or directory).
        path: std::path::PathBuf,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A plugin's directory (`--image-credential-provider-bin-dir`) or executable is missing.
    #[error("{message}: {}", path.display())]
    PluginBinary {
        /// The directory or executable.
        path: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An image reference cannot be parsed.
    #[error("couldn't parse image name {image:?}: {reason}")]
    ImageName {
        /// The reference.
        image: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
