//! Docker config files: `.dockercfg` (a map of registry → entry) and `config.json`
//! (`{"auths": {registry → entry}}`), as upstream `pkg/credentialprovider/config.go`
//! (`DockerConfig`, `DockerConfigJSON`, `DockerConfigEntry.UnmarshalJSON`,
//! `decodeDockerConfigFieldAuth`).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde::Deserialize;

use super::{Error, Result};

/// Registry (a host, optionally with port, path and scheme, e.g. `https://index.docker.io/v1/`)
/// → its credentials.
pub type DockerConfig = BTreeMap<String, DockerConfigEntry>;

/// One registry's credentials. `auth` (base64 `username:password`) is decoded into
/// [`username`](Self::username) and [`password`](Self::password), as upstream.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DockerConfigEntry {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
    /// E-mail (docker's legacy field; not sent to the runtime).
    pub email: String,
    /// Identity token (`identitytoken`; upstream's entry drops it, the CRI carries it).
    pub identity_token: String,
    /// Registry bearer token (`registrytoken`; likewise).
    pub registry_token: String,
}

impl std::fmt::Debug for DockerConfigEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerConfigEntry")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The JSON of one entry; Go's decoder also matches capitalised keys.
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawEntry {
    #[serde(alias = "Username")]
    username: Option<String>,
    #[serde(alias = "Password")]
    password: Option<String>,
    #[serde(alias = "Email")]
    email: Option<String>,
    #[serde(alias = "Auth")]
    auth: Option<String>,
    #[serde(alias = "IdentityToken", alias = "identityToken")]
    identitytoken: Option<String>,
    #[serde(alias = "RegistryToken", alias = "registryToken")]
    registrytoken: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawConfigJson {
    #[serde(alias = "Auths")]
    auths: Option<BTreeMap<String, RawEntry>>,
}

/// Parses a legacy `.dockercfg` (`kubernetes.io/dockercfg` secrets' `.dockercfg` key).
pub fn parse_dockercfg(data: &[u8]) -> Result<DockerConfig> {
    let raw: BTreeMap<String, RawEntry> = serde_json::from_slice(data)?;
    entries(raw)
}

/// Parses a `config.json` (`kubernetes.io/dockerconfigjson` secrets' `.dockerconfigjson` key):
/// its `auths`.
pub fn parse_dockerconfigjson(data: &[u8]) -> Result<DockerConfig> {
    let raw: RawConfigJson = serde_json::from_slice(data)?;
    entries(raw.auths.unwrap_or_default())
}

fn entries(raw: BTreeMap<String, RawEntry>) -> Result<DockerConfig> {
    raw.into_iter()
        .map(|(registry, e)| {
            let mut entry = DockerConfigEntry {
                username: e.username.unwrap_or_default(),
                password: e.password.unwrap_or_default(),
                email: e.email.unwrap_or_default(),
                identity_token: e.identitytoken.unwrap_or_default(),
                registry_token: e.registrytoken.unwrap_or_default(),
            };
            if let Some(auth) = e.auth.filter(|a| !a.is_empty()) {
                (entry.username, entry.password) =
                    decode_auth(&auth).map_err(|reason| Error::Auth {
                        registry: registry.clone(),
                        reason,
                    })?;
            }
            Ok((registry, entry))
        })
        .collect()
}

/// `base64(username:password)`, padded or not (upstream `decodeDockerConfigFieldAuth`).
fn decode_auth(field: &str) -> std::result::Result<(String, String), String> {
    let config = GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true);
    let engine = if field.trim().ends_with('=') {
        GeneralPurpose::new(
            &base64::alphabet::STANDARD,
            config.with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
        )
    } else {
        GeneralPurpose::new(
            &base64::alphabet::STANDARD,
            config.with_decode_padding_mode(DecodePaddingMode::RequireNone),
        )
    };
    let decoded = engine.decode(field).map_err(|e| e.to_string())?;
    let decoded = String::from_utf8_lossy(&decoded);
    match decoded.split_once(':') {
        Some((user, password)) => Ok((user.to_owned(), password.to_owned())),
        None => Err("no ':' in the decoded value".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn dockercfg_entries_decode_auth() {
        let cfg = parse_dockercfg(
            format!(
                r#"{{"https://index.docker.io/v1/": {{"email": "foo@bar.baz", "auth": "{}"}},
                    "registry.example": {{"username": "u", "password": "p"}}}}"#,
                b64("foo:bar:baz")
            )
            .as_bytes(),
        )
        .expect("valid");
        let hub = &cfg["https://index.docker.io/v1/"];
        assert_eq!(
            (hub.username.as_str(), hub.password.as_str()),
            ("foo", "bar:baz")
        );
        assert_eq!(hub.email, "foo@bar.baz");
        assert_eq!(cfg["registry.example"].password, "p");
    }

    #[test]
    fn config_json_reads_auths_and_tokens() {
        let cfg = parse_dockerconfigjson(
            br#"{"auths": {"r.example": {"identitytoken": "id", "registrytoken": "rt"}},
                 "HttpHeaders": {"X": "y"}}"#,
        )
        .expect("valid");
        assert_eq!(cfg["r.example"].identity_token, "id");
        assert_eq!(cfg["r.example"].registry_token, "rt");
        assert!(parse_dockerconfigjson(b"{}").expect("no auths").is_empty());
    }

    #[test]
    fn auth_padded_and_unpadded() {
        // "u:pw" is 4 bytes: padded "dTpwdw==", unpadded "dTpwdw".
        assert_eq!(decode_auth("dTpwdw=="), Ok(("u".into(), "pw".into())));
        assert_eq!(decode_auth("dTpwdw"), Ok(("u".into(), "pw".into())));
        assert!(decode_auth("dTpwdw=").is_err(), "bad padding");
        assert!(decode_auth(&b64("nocolon")).is_err());
        assert!(decode_auth("!!!").is_err());
    }

    #[test]
    fn malformed_configs_name_the_registry() {
        let err = parse_dockercfg(br#"{"r.example": {"auth": "!!!"}}"#).expect_err("bad auth");
        assert!(err.to_string().contains("\"r.example\""), "{err}");
        assert!(matches!(
            parse_dockerconfigjson(b"{not json"),
            Err(Error::Json(_))
        ));
        assert!(matches!(
            parse_dockercfg(br#"{"r": {"username": 5}}"#),
            Err(Error::Json(_))
        ));
    }
}
