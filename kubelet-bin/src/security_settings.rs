//! Flags and `KubeletConfiguration` fields for pod security (upstream `--seccomp-default`,
//! `seccompDefault`; `--allowed-unsafe-sysctls`, `allowedUnsafeSysctls`), merged as the other
//! settings: defaults < file < flags; and the image credential provider plugins
//! (`--image-credential-provider-config`, `--image-credential-provider-bin-dir`, flags only
//! as upstream).

use kubelet_core::sysctl::Allowlist;

use crate::cli::config::KubeletConfiguration;
use crate::settings::UsageError;

/// The flags of this module.
#[derive(Debug, Default, clap::Args)]
#[group(id = "security")]
pub struct Flags {
    /// Give every container without a seccomp profile the runtime's default profile
    /// instead of running it unconfined (default false).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub seccomp_default: Option<bool>,
    /// Comma-separated unsafe sysctls or patterns (`kernel.msg*`) pods may set beyond the
    /// safe ones; only namespaced sysctls (`kernel.shm*`, `kernel.msg*`, `kernel.sem`,
    /// `fs.mqueue.*`, `net.*`) can be allowed.
    #[arg(long, value_delimiter = ',')]
    pub allowed_unsafe_sysctls: Vec<String>,
    /// A `CredentialProviderConfig` file (or a directory of them) naming the credential
    /// provider plugins asked for registry credentials.
    #[arg(long)]
    pub image_credential_provider_config: Option<std::path::PathBuf>,
    /// The directory of the credential provider plugins' executables.
    #[arg(long)]
    pub image_credential_provider_bin_dir: Option<std::path::PathBuf>,
}

/// Merged pod security settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `--seccomp-default`.
    pub seccomp_default: bool,
    /// The safe sysctls plus `--allowed-unsafe-sysctls`.
    pub sysctls: Allowlist,
    /// `--image-credential-provider-config` and `--image-credential-provider-bin-dir`, both
    /// given (or neither).
    pub credential_providers: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl Settings {
    /// Merges `flags` over `file`; errors name the flag or field.
    pub fn merge(flags: Flags, file: &KubeletConfiguration) -> Result<Self, UsageError> {
        let unsafe_sysctls = if flags.allowed_unsafe_sysctls.is_empty() {
            file.allowed_unsafe_sysctls.clone().unwrap_or_default()
        } else {
            flags.allowed_unsafe_sysctls
        };
        let sysctls = Allowlist::new(&unsafe_sysctls)
            .map_err(|e| UsageError(format!("--allowed-unsafe-sysctls/{e}")))?;
        let credential_providers = match (
            flags.image_credential_provider_config,
            flags.image_credential_provider_bin_dir,
        ) {
            (Some(config), Some(bin_dir)) => Some((config, bin_dir)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(UsageError(
                    "--image-credential-provider-config needs --image-credential-provider-bin-dir"
                        .into(),
                ));
            }
            (None, Some(_)) => {
                return Err(UsageError(
                    "--image-credential-provider-bin-dir needs --image-credential-provider-config"
                        .into(),
                ));
            }
        };
        Ok(Self {
            credential_providers,
            seccomp_default: flags
                .seccomp_default
                .or(file.seccomp_default)
                .unwrap_or(false),
            sysctls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: Flags,
    }

    fn parse(args: &[&str], file: &str) -> Result<Settings, UsageError> {
        let cli = Cli::try_parse_from(std::iter::once("kubelet").chain(args.iter().copied()))
            .map_err(|e| UsageError(e.to_string()))?;
        let file: KubeletConfiguration = serde_json::from_str(file).expect("config");
        Settings::merge(cli.flags, &file)
    }

    #[test]
    fn flags_over_file_over_defaults() {
        let s = parse(&[], "{}").expect("defaults");
        assert!(!s.seccomp_default);
        assert_eq!(s.sysctls, Allowlist::default());
        let s = parse(
            &[],
            r#"{"seccompDefault": true, "allowedUnsafeSysctls": ["kernel.msg*"]}"#,
        )
        .expect("file");
        assert!(s.seccomp_default);
        assert!(s.sysctls.is_allowed("kernel.msgmax"));
        let s = parse(
            &[
                "--seccomp-default=false",
                "--allowed-unsafe-sysctls",
                "net.core.somaxconn,kernel.sem",
            ],
            r#"{"seccompDefault": true, "allowedUnsafeSysctls": ["kernel.msg*"]}"#,
        )
        .expect("flags");
        assert!(!s.seccomp_default);
        assert!(s.sysctls.is_allowed("kernel.sem"));
        assert!(!s.sysctls.is_allowed("kernel.msgmax"));
        assert!(
            parse(&["--seccomp-default"], "{}")
                .expect("bare")
                .seccomp_default
        );
        let s = parse(
            &[
                "--image-credential-provider-config=/etc/kubernetes/cp.yaml",
                "--image-credential-provider-bin-dir=/usr/libexec/cp",
            ],
            "{}",
        )
        .expect("plugins");
        assert_eq!(
            s.credential_providers,
            Some(("/etc/kubernetes/cp.yaml".into(), "/usr/libexec/cp".into()))
        );
        let e = parse(&["--image-credential-provider-config=/x"], "{}").expect_err("half");
        assert!(
            e.0.contains("needs --image-credential-provider-bin-dir"),
            "{}",
            e.0
        );
    }

    #[test]
    fn a_sysctl_that_is_not_namespaced_is_a_usage_error() {
        let e = parse(&["--allowed-unsafe-sysctls", "kernel.panic"], "{}").expect_err("bad");
        assert_eq!(
            e.0,
            "--allowed-unsafe-sysctls/allowedUnsafeSysctls: the sysctls \"kernel.panic\" are not known to be namespaced"
        );
    }
}
