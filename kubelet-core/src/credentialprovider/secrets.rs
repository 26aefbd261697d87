//! A keyring from a pod's pull secrets (upstream `pkg/credentialprovider/secrets/secrets.go`,
//! `MakeDockerKeyring`).

use k8s_openapi::api::core::v1::Secret;

use super::config::{parse_dockercfg, parse_dockerconfigjson};
use super::keyring::BasicDockerKeyring;
use super::{Error, Result};

/// The data key of a `kubernetes.io/dockerconfigjson` secret.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
/// The data key of a `kubernetes.io/dockercfg` secret.
pub const DOCKER_CONFIG_KEY: &str = ".dockercfg";

const TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
const TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";

/// A keyring with the credentials of every `kubernetes.io/dockerconfigjson` and
/// `kubernetes.io/dockercfg` secret in `secrets`, in order; other secrets (and those whose
/// key is missing or empty) are ignored.
///
/// As upstream, a secret whose docker config does not parse fails the whole keyring: the
/// error names the secret and the key. An entry with an invalid registry URL is skipped.
pub fn make_docker_keyring(secrets: &[Secret]) -> Result<BasicDockerKeyring> {
    let mut keyring = BasicDockerKeyring::new();
    for secret in secrets {
        let data = |key| {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .filter(|v| !v.0.is_empty())
        };
        let (key, parsed) = match secret.type_.as_deref() {
            Some(TYPE_DOCKER_CONFIG_JSON) => match data(DOCKER_CONFIG_JSON_KEY) {
                Some(v) => (DOCKER_CONFIG_JSON_KEY, parse_dockerconfigjson(&v.0)),
                None => continue,
            },
            Some(TYPE_DOCKERCFG) => match data(DOCKER_CONFIG_KEY) {
                Some(v) => (DOCKER_CONFIG_KEY, parse_dockercfg(&v.0)),
                None => continue,
            },
            _ => continue,
        };
        let cfg = parsed.map_err(|e| Error::Secret {
            secret: format!(
                "{}/{}",
                secret.metadata.namespace.as_deref().unwrap_or_default(),
                secret.metadata.name.as_deref().unwrap_or_default()
            ),
            key,
            source: Box::new(e),
        })?;
        keyring.add(&cfg);
    }
    Ok(keyring)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;

    use super::*;

    fn secret(name: &str, type_: &str, key: &str, value: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("ns".into());
        s.type_ = Some(type_.into());
        s.data = Some([(key.to_owned(), ByteString(value.as_bytes().to_vec()))].into());
        s
    }

    #[test]
    fn both_secret_types_in_order() {
        let keyring = make_docker_keyring(&[
            secret(
                "json",
                TYPE_DOCKER_CONFIG_JSON,
                DOCKER_CONFIG_JSON_KEY,
                r#"{"auths":{"r.example":{"username":"first","password":"p"}}}"#,
            ),
            secret(
                "cfg",
                TYPE_DOCKERCFG,
                DOCKER_CONFIG_KEY,
                r#"{"https://r.example":{"username":"second","password":"p"}}"#,
            ),
        ])
        .expect("valid");
        let users: Vec<String> = keyring
            .lookup("r.example/app")
            .into_iter()
            .map(|a| a.username)
            .collect();
        assert_eq!(users, ["first", "second"]);
    }

    #[test]
    fn other_types_and_keys_are_ignored() {
        let keyring = make_docker_keyring(&[
            secret("opaque", "Opaque", DOCKER_CONFIG_JSON_KEY, "not even json"),
            // The type decides which key is read.
            secret("mixed", TYPE_DOCKERCFG, DOCKER_CONFIG_JSON_KEY, "not json"),
            secret("empty", TYPE_DOCKER_CONFIG_JSON, DOCKER_CONFIG_JSON_KEY, ""),
            Secret::default(),
        ])
        .expect("nothing to parse");
        assert!(keyring.is_empty());
    }

    #[test]
    fn malformed_secret_is_named() {
        let err = make_docker_keyring(&[secret(
            "regcred",
            TYPE_DOCKER_CONFIG_JSON,
            DOCKER_CONFIG_JSON_KEY,
            "{\"auths\": [",
        )])
        .expect_err("invalid json");
        let msg = err.to_string();
        assert!(
            msg.contains("\"ns/regcred\"") && msg.contains(".dockerconfigjson"),
            "{msg}"
        );
        let err = make_docker_keyring(&[secret(
            "bad-auth",
            TYPE_DOCKERCFG,
            DOCKER_CONFIG_KEY,
            r#"{"r.example":{"auth":"bm9jb2xvbg=="}}"#,
        )])
        .expect_err("auth without ':'");
        let msg = format!(
            "{err}: {}",
            std::error::Error::source(&err)
                .map(ToString::to_string)
                .unwrap_or_default()
        );
        assert!(
            msg.contains("ns/bad-auth") && msg.contains("r.example"),
            "{msg}"
        );
    }
}
