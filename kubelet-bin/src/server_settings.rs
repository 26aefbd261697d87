//! Flags and `KubeletConfiguration` fields of the secure port (upstream
//! `cmd/kubelet/app/options` and `pkg/kubelet/apis/config/v1beta1/defaults.go`): TLS
//! (`--tls-cert-file`/`tlsCertFile`, `--tls-private-key-file`/`tlsPrivateKeyFile`,
//! `--cert-dir`, `--tls-min-version`/`tlsMinVersion`,
//! `--tls-cipher-suites`/`tlsCipherSuites`), authentication (`--client-ca-file`/
//! `authentication.x509.clientCAFile`, `--authentication-token-webhook`/
//! `authentication.webhook.enabled`, `--authentication-token-webhook-cache-ttl`/
//! `authentication.webhook.cacheTTL`, `--anonymous-auth`/`authentication.anonymous.enabled`)
//! and authorization (`--authorization-mode`/`authorization.mode`,
//! `--authorization-webhook-cache-authorized-ttl`/`authorization.webhook.cacheAuthorizedTTL`,
//! `--authorization-webhook-cache-unauthorized-ttl`/
//! `authorization.webhook.cacheUnauthorizedTTL`). `--port` and `--address` are read with the
//! other endpoints.
//!
//! Defaults differ as upstream's do: without `--config` the flags' defaults apply (no token
//! webhook, `AlwaysAllow`); with a config file its defaults apply (token webhook on,
//! `Webhook`), and flags win over both. Anonymous requests are off in both: upstream's legacy
//! flag default `--anonymous-auth=true` served `/run`, `/exec` and the logs to anyone
//! reaching port 10250, so here a kubelet started without a config file or auth flags answers
//! every request on the secure port with 401 until `--client-ca-file`, the token webhook or
//! an explicit `--anonymous-auth=true` lets someone in.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kubelet::server::authn::{self, AuthnOptions};
use kubelet::server::authz::{self, AuthzOptions, Mode};
use kubelet::server::tls::{self, MinVersion, ServingCert, TlsOptions};

use crate::cli::config::KubeletConfiguration;
use crate::duration;
use crate::settings::UsageError;

/// The flags of this module.
#[derive(Debug, Default, clap::Args)]
#[group(id = "server")]
pub struct Flags {
    /// The secure port's serving certificate (PEM, with its chain); default: a self-signed
    /// pair in --cert-dir.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// The key of --tls-cert-file.
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// Directory of the kubelet's certificates (default <root-dir>/pki): the self-signed
    /// serving pair kubelet.crt/kubelet.key, and the client and serving certificates of the
    /// TLS bootstrap and rotation (kubelet-client-current.pem, kubelet-server-current.pem).
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// Minimum TLS version (VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13).
    #[arg(long)]
    pub tls_min_version: Option<String>,
    /// TLS 1.2 cipher suites, comma-separated upstream (Go) names; default: rustls's.
    #[arg(long, value_delimiter = ',')]
    pub tls_cipher_suites: Option<Vec<String>>,
    /// Client certificates signed by this CA authenticate as their CommonName, in the
    /// groups of their Organizations.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Serve requests that nothing authenticated as system:anonymous (default false, also
    /// without --config: upstream's legacy flag default is true).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub anonymous_auth: Option<bool>,
    /// Check bearer tokens with TokenReviews (default false; true with --config).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub authentication_token_webhook: Option<bool>,
    /// How long token review answers are cached (default 2m).
    #[arg(long, value_parser = duration::parse)]
    pub authentication_token_webhook_cache_ttl: Option<Duration>,
    /// AlwaysAllow or Webhook (default AlwaysAllow; Webhook with --config).
    #[arg(long)]
    pub authorization_mode: Option<String>,
    /// How long allowed access reviews are cached (default 5m).
    #[arg(long, value_parser = duration::parse)]
    pub authorization_webhook_cache_authorized_ttl: Option<Duration>,
    /// How long denied access reviews are cached (default 30s).
    #[arg(long, value_parser = duration::parse)]
    pub authorization_webhook_cache_unauthorized_ttl: Option<Duration>,
}

/// Merged secure port settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// TLS.
    pub tls: TlsOptions,
    /// Authentication.
    pub authn: AuthnOptions,
    /// Authorization.
    pub authz: AuthzOptions,
}

fn ttl(
    flag: Option<Duration>,
    field: &str,
    value: Option<&str>,
    default: Duration,
) -> Result<Duration, UsageError> {
    match (flag, value) {
        (Some(d), _) => Ok(d),
        (None, Some(v)) => duration::parse(v).map_err(|e| UsageError(format!("{field}: {e}"))),
        (None, None) => Ok(default),
    }
}

impl Settings {
    /// Merges `flags` over `file` over the defaults (the config file's when `from_config`,
    /// else the flags'); the self-signed pair goes to `<root_dir>/pki` unless `--cert-dir`.
    pub fn merge(
        flags: Flags,
        file: &KubeletConfiguration,
        from_config: bool,
        root_dir: &Path,
    ) -> Result<Self, UsageError> {
        let authn_file = file.authentication.clone().unwrap_or_default();
        let authz_file = file.authorization.clone().unwrap_or_default();
        let webhook_file = authn_file.webhook.unwrap_or_default();
        let authz_webhook_file = authz_file.webhook.unwrap_or_default();

        let cert = match (
            flags.tls_cert_file.or(file.tls_cert_file.clone()),
            flags
                .tls_private_key_file
                .or(file.tls_private_key_file.clone()),
        ) {
            (Some(cert), Some(key)) => ServingCert::Files { cert, key },
            (None, None) => ServingCert::SelfSigned {
                cert_dir: flags.cert_dir.unwrap_or_else(|| root_dir.join("pki")),
            },
            _ => {
                return Err(UsageError(
                    "--tls-cert-file and --tls-private-key-file go together".into(),
                ));
            }
        };
        let min_version = MinVersion::parse(
            flags
                .tls_min_version
                .or(file.tls_min_version.clone())
                .as_deref()
                .unwrap_or(""),
        )
        .map_err(|e| UsageError(format!("--tls-min-version/tlsMinVersion: {e}")))?;
        let cipher_suites = flags
            .tls_cipher_suites
            .or(file.tls_cipher_suites.clone())
            .unwrap_or_default();
        tls::check_cipher_suites(&cipher_suites)
            .map_err(|e| UsageError(format!("--tls-cipher-suites: {e}")))?;
        let client_ca_file = flags
            .client_ca_file
            .or(authn_file.x509.and_then(|x| x.client_ca_file))
            .filter(|p| !p.as_os_str().is_empty());

        let authn = AuthnOptions {
            client_ca_file: client_ca_file.clone(),
            webhook: flags
                .authentication_token_webhook
                .or(webhook_file.enabled)
                .unwrap_or(from_config),
            webhook_cache_ttl: ttl(
                flags.authentication_token_webhook_cache_ttl,
                "authentication.webhook.cacheTTL",
                webhook_file.cache_ttl.as_deref(),
                authn::DEFAULT_CACHE_TTL,
            )?,
            // Secure by default (upstream's flags default to true; see the module docs).
            anonymous: flags
                .anonymous_auth
                .or(authn_file.anonymous.and_then(|a| a.enabled))
                .unwrap_or(false),
        };
        let mode = match flags.authorization_mode.or(authz_file.mode) {
            Some(name) => Mode::parse(&name)
                .map_err(|e| UsageError(format!("--authorization-mode/authorization.mode: {e}")))?,
            None if from_config => Mode::Webhook,
            None => Mode::AlwaysAllow,
        };
        let authz = AuthzOptions {
            mode,
            cache_authorized_ttl: ttl(
                flags.authorization_webhook_cache_authorized_ttl,
                "authorization.webhook.cacheAuthorizedTTL",
                authz_webhook_file.cache_authorized_ttl.as_deref(),
                authz::DEFAULT_CACHE_AUTHORIZED_TTL,
            )?,
            cache_unauthorized_ttl: ttl(
                flags.authorization_webhook_cache_unauthorized_ttl,
                "authorization.webhook.cacheUnauthorizedTTL",
                authz_webhook_file.cache_unauthorized_ttl.as_deref(),
                authz::DEFAULT_CACHE_UNAUTHORIZED_TTL,
            )?,
        };
        Ok(Self {
            tls: TlsOptions {
                cert,
                min_version,
                cipher_suites,
                client_ca_file,
            },
            authn,
            authz,
        })
    }

    /// The `KubeletConfiguration` fields of these settings, as `/configz` shows them.
    pub fn configz(&self) -> serde_json::Value {
        let (cert, key) = match &self.tls.cert {
            ServingCert::Files { cert, key } => (cert.clone(), key.clone()),
            ServingCert::SelfSigned { cert_dir } => (
                cert_dir.join(kubelet::server::cert::CERT_FILE),
                cert_dir.join(kubelet::server::cert::KEY_FILE),
            ),
        };
        let min_version = match self.tls.min_version {
            MinVersion::Tls10 => "VersionTLS10",
            MinVersion::Tls11 => "VersionTLS11",
            MinVersion::Tls12 => "",
            MinVersion::Tls13 => "VersionTLS13",
        };
        serde_json::json!({
            "tlsCertFile": cert,
            "tlsPrivateKeyFile": key,
            "tlsCipherSuites": self.tls.cipher_suites,
            "tlsMinVersion": min_version,
            "authentication": {
                "x509": {"clientCAFile": self.authn.client_ca_file.clone().unwrap_or_default()},
                "webhook": {
                    "enabled": self.authn.webhook,
                    "cacheTTL": duration::format(self.authn.webhook_cache_ttl),
                },
                "anonymous": {"enabled": self.authn.anonymous},
            },
            "authorization": {
                "mode": self.authz.mode.as_str(),
                "webhook": {
                    "cacheAuthorizedTTL": duration::format(self.authz.cache_authorized_ttl),
                    "cacheUnauthorizedTTL": duration::format(self.authz.cache_unauthorized_ttl),
                },
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(yaml: &str) -> KubeletConfiguration {
        serde_saphyr::from_str(yaml).expect("valid yaml")
    }

    fn merge(
        flags: Flags,
        file: &KubeletConfiguration,
        from_config: bool,
    ) -> Result<Settings, UsageError> {
        Settings::merge(flags, file, from_config, Path::new("/var/lib/kubelet"))
    }

    #[test]
    fn flag_defaults_are_upstreams_legacy_ones_but_anonymous_off() {
        let s = merge(Flags::default(), &KubeletConfiguration::default(), false).expect("valid");
        // secure by default: upstream's legacy --anonymous-auth defaults to true
        assert!(!s.authn.anonymous);
        assert!(!s.authn.webhook);
        assert_eq!(s.authn.webhook_cache_ttl, Duration::from_secs(120));
        assert_eq!(s.authz.mode, Mode::AlwaysAllow);
        assert_eq!(
            s.tls.cert,
            ServingCert::SelfSigned {
                cert_dir: "/var/lib/kubelet/pki".into()
            }
        );
        assert_eq!(s.tls.min_version, MinVersion::Tls12);
    }

    #[test]
    fn config_file_defaults_are_secure() {
        let s = merge(Flags::default(), &KubeletConfiguration::default(), true).expect("valid");
        assert!(!s.authn.anonymous);
        assert!(s.authn.webhook);
        assert_eq!(s.authz.mode, Mode::Webhook);
        assert_eq!(s.authz.cache_authorized_ttl, Duration::from_secs(300));
        assert_eq!(s.authz.cache_unauthorized_ttl, Duration::from_secs(30));
    }

    #[test]
    fn config_fields_with_flags_on_top() {
        let cfg = file(
            "tlsCertFile: /c.crt\ntlsPrivateKeyFile: /c.key\ntlsMinVersion: VersionTLS13\n\
             tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n\
             authentication:\n  x509:\n    clientCAFile: /ca.crt\n  webhook:\n    enabled: false\n    cacheTTL: 1m\n  anonymous:\n    enabled: true\n\
             authorization:\n  mode: AlwaysAllow\n  webhook:\n    cacheAuthorizedTTL: 10m\n    cacheUnauthorizedTTL: 1s\n",
        );
        let flags = Flags {
            anonymous_auth: Some(false),
            authorization_mode: Some("Webhook".into()),
            ..Flags::default()
        };
        let s = merge(flags, &cfg, true).expect("valid");
        assert_eq!(
            s.tls.cert,
            ServingCert::Files {
                cert: "/c.crt".into(),
                key: "/c.key".into()
            }
        );
        assert_eq!(s.tls.min_version, MinVersion::Tls13);
        assert_eq!(s.tls.cipher_suites.len(), 1);
        assert_eq!(s.authn.client_ca_file, Some("/ca.crt".into()));
        assert_eq!(s.tls.client_ca_file, Some("/ca.crt".into()));
        assert!(!s.authn.webhook);
        assert_eq!(s.authn.webhook_cache_ttl, Duration::from_secs(60));
        assert!(!s.authn.anonymous);
        assert_eq!(s.authz.mode, Mode::Webhook);
        assert_eq!(s.authz.cache_authorized_ttl, Duration::from_secs(600));
        assert_eq!(s.authz.cache_unauthorized_ttl, Duration::from_secs(1));
        let z = s.configz();
        assert_eq!(z["authorization"]["webhook"]["cacheAuthorizedTTL"], "10m0s");
        assert_eq!(z["authentication"]["x509"]["clientCAFile"], "/ca.crt");
        assert_eq!(z["tlsMinVersion"], "VersionTLS13");
    }

    #[test]
    fn bad_values_name_the_flag_or_field() {
        let flags = Flags {
            tls_cipher_suites: Some(vec!["TLS_RSA_WITH_RC4_128_SHA".into()]),
            ..Flags::default()
        };
        let err = merge(flags, &KubeletConfiguration::default(), false).expect_err("rc4");
        assert!(err.0.contains("TLS_RSA_WITH_RC4_128_SHA"), "{}", err.0);
        let err = merge(Flags::default(), &file("tlsMinVersion: SSLv3\n"), true).expect_err("bad");
        assert!(err.0.contains("SSLv3"), "{}", err.0);
        let err = merge(
            Flags::default(),
            &file("authorization:\n  mode: RBAC\n"),
            true,
        )
        .expect_err("bad");
        assert!(err.0.contains("RBAC"), "{}", err.0);
        let err = merge(
            Flags::default(),
            &file("authentication:\n  webhook:\n    cacheTTL: soon\n"),
            true,
        )
        .expect_err("bad");
        assert!(
            err.0.contains("authentication.webhook.cacheTTL"),
            "{}",
            err.0
        );
        let flags = Flags {
            tls_cert_file: Some("/c.crt".into()),
            ..Flags::default()
        };
        assert!(merge(flags, &KubeletConfiguration::default(), false).is_err());
    }
}
