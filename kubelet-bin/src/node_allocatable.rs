//! Node allocatable enforcement: the flags `--enforce-node-allocatable` (default `pods`),
//! `--kube-reserved-cgroup` and `--system-reserved-cgroup` and their `KubeletConfiguration`
//! fields, validated as upstream `pkg/kubelet/apis/config/validation/validation.go`, and
//! their enforcement at start as upstream `pkg/kubelet/cm/node_container_manager_linux.go`
//! `enforceNodeAllocatableCgroups`: the `kubepods` cgroup gets the cpu shares and memory
//! limit of capacity − `--kube-reserved` − `--system-reserved` (with `pods`; else of
//! capacity), and the reserved cgroups get their reservations (with `kube-reserved` /
//! `system-reserved`). The hard eviction thresholds stay with the eviction manager: the
//! Node status' allocatable subtracts them, the cgroup does not.

use std::collections::BTreeMap;

use anyhow::Context;
use kubelet::cluster::node_status::allocatable::enforced_allocatable;
use kubelet::cluster::node_status::machine::MachineInfo;
use kubelet_core::cm::helpers::ResourceConfig;
use kubelet_core::cm::node_allocatable::NodeAllocatableCgroups;
use kubelet_core::cm::node_allocatable::cgroup_config;
use kubelet_core::pod_resources::{milli_value, value};
use tracing::{info, warn};

use crate::cli::config::KubeletConfiguration;
use crate::settings::{Settings as All, UsageError};

/// `pods`: enforce allocatable on the `kubepods` cgroup (upstream
/// `NodeAllocatableEnforcementKey`).
pub const PODS: &str = "pods";
/// `system-reserved`: enforce `--system-reserved` on `--system-reserved-cgroup`.
pub const SYSTEM_RESERVED: &str = "system-reserved";
/// `kube-reserved`: enforce `--kube-reserved` on `--kube-reserved-cgroup`.
pub const KUBE_RESERVED: &str = "kube-reserved";
/// `none`: enforce nothing (alone).
pub const NONE: &str = "none";

/// How often a failed update of the `kubepods` cgroup is retried (upstream: a minute).
const RETRY_PERIOD: std::time::Duration = std::time::Duration::from_secs(60);

/// The flags of this module.
#[derive(Debug, Default, clap::Args)]
#[group(id = "node-allocatable")]
pub struct Flags {
    /// Where node allocatable is enforced: `pods` (the default), `system-reserved`,
    /// `kube-reserved`, or `none`; empty (`--enforce-node-allocatable=`) for nothing.
    #[arg(long, value_delimiter = ',')]
    pub enforce_node_allocatable: Option<Vec<String>>,
    /// The cgroup `--kube-reserved` is enforced on (with `kube-reserved`).
    #[arg(long)]
    pub kube_reserved_cgroup: Option<String>,
    /// The cgroup `--system-reserved` is enforced on (with `system-reserved`).
    #[arg(long)]
    pub system_reserved_cgroup: Option<String>,
}

/// Merged node allocatable enforcement settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `enforceNodeAllocatable`, as given (upstream default `[pods]`).
    pub enforce: Vec<String>,
    /// `kubeReservedCgroup` (empty: none).
    pub kube_reserved_cgroup: String,
    /// `systemReservedCgroup` (empty: none).
    pub system_reserved_cgroup: String,
}

impl Settings {
    /// Merges `flags` over `file`; `cgroups_per_qos` is `--cgroups-per-qos`. Errors are
    /// upstream's validation messages.
    pub fn merge(
        flags: Flags,
        file: &KubeletConfiguration,
        cgroups_per_qos: bool,
    ) -> Result<Self, UsageError> {
        let enforce: Vec<String> = flags
            .enforce_node_allocatable
            .or(file.enforce_node_allocatable.clone())
            .unwrap_or_else(|| vec![PODS.to_owned()])
            .into_iter()
            .filter(|k| !k.is_empty())
            .collect();
        let s = Self {
            enforce,
            kube_reserved_cgroup: flags
                .kube_reserved_cgroup
                .or(file.kube_reserved_cgroup.clone())
                .unwrap_or_default(),
            system_reserved_cgroup: flags
                .system_reserved_cgroup
                .or(file.system_reserved_cgroup.clone())
                .unwrap_or_default(),
        };
        let mut errors = Vec::new();
        if !cgroups_per_qos && !s.enforce.is_empty() {
            errors.push("invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) is not supported unless cgroupsPerQOS (--cgroups-per-qos) is set to true".to_owned());
        }
        for key in &s.enforce {
            match key.as_str() {
                PODS => {}
                SYSTEM_RESERVED if s.system_reserved_cgroup.is_empty() => errors.push(format!("invalid configuration: systemReservedCgroup (--system-reserved-cgroup) must be specified when {SYSTEM_RESERVED:?} contained in enforceNodeAllocatable (--enforce-node-allocatable)")),
                KUBE_RESERVED if s.kube_reserved_cgroup.is_empty() => errors.push(format!("invalid configuration: kubeReservedCgroup (--kube-reserved-cgroup) must be specified when {KUBE_RESERVED:?} contained in enforceNodeAllocatable (--enforce-node-allocatable)")),
                SYSTEM_RESERVED | KUBE_RESERVED => {}
                NONE if s.enforce.len() > 1 => errors.push(format!("invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements when {NONE:?} is specified")),
                NONE => {}
                other => errors.push(format!("invalid configuration: option {other:?} specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are {PODS:?}, {SYSTEM_RESERVED:?}, {KUBE_RESERVED:?}, or {NONE:?}")),
            }
        }
        if errors.is_empty() {
            Ok(s)
        } else {
            Err(UsageError(errors.join(", ")))
        }
    }

    /// Whether `key` (e.g. [`PODS`]) is enforced.
    pub fn enforces(&self, key: &str) -> bool {
        self.enforce.iter().any(|k| k == key)
    }

    /// The `KubeletConfiguration` fields of these settings, as `/configz` shows them.
    pub fn configz(&self) -> serde_json::Value {
        serde_json::json!({
            "enforceNodeAllocatable": self.enforce,
            "kubeReservedCgroup": self.kube_reserved_cgroup,
            "systemReservedCgroup": self.system_reserved_cgroup,
        })
    }
}

/// The cgroup limits of a resource list in nano-units (upstream `getCgroupConfig`).
fn config_of(resources: &BTreeMap<String, i128>) -> ResourceConfig {
    cgroup_config(
        resources.get("cpu").map(|n| milli_value(*n)),
        resources.get("memory").map(|n| value(*n)),
    )
}

/// The limits of the `kubepods` cgroup: allocatable without the eviction thresholds with
/// `pods`, else capacity (upstream: the default shares of a new cgroup would starve pods).
pub fn kubepods_config(all: &All) -> ResourceConfig {
    let capacity = MachineInfo::read(&all.root_dir).capacity();
    let ns = &all.node_status;
    let limits = if all.node_allocatable.enforces(PODS) {
        enforced_allocatable(&capacity, &ns.kube_reserved, &ns.system_reserved)
    } else {
        capacity
    };
    config_of(&limits.into_iter().map(|(k, a)| (k, a.nanos)).collect())
}

/// Enforces node allocatable on `cgroups` at start (upstream
/// `enforceNodeAllocatableCgroups`). A failed update of `kubepods` (the pods use more memory
/// than the new limit) is logged and retried every minute on the blocking pool until it
/// succeeds, as upstream; a reserved cgroup that is absent or refuses its limits is an error
/// (upstream fails the container manager's start).
pub fn enforce<C>(all: &All, cgroups: &C) -> anyhow::Result<()>
where
    C: NodeAllocatableCgroups + Clone + Send + Sync + 'static,
{
    let config = kubepods_config(all);
    let cgroup = cgroups.node_allocatable_cgroup();
    match cgroups.enforce_node_allocatable(&config) {
        Ok(()) => info!(%cgroup, ?config, "Updated Node Allocatable limit across pods"),
        Err(e) => {
            warn!(%cgroup, error = %e, "Failed to update Node Allocatable Limits");
            tokio::spawn(retry(cgroups.clone(), config));
        }
    }
    let na = &all.node_allocatable;
    let ns = &all.node_status;
    for (key, name, reserved) in [
        (
            SYSTEM_RESERVED,
            &na.system_reserved_cgroup,
            &ns.system_reserved,
        ),
        (KUBE_RESERVED, &na.kube_reserved_cgroup, &ns.kube_reserved),
    ] {
        if !na.enforces(key) {
            continue;
        }
        cgroups
            .enforce_existing_cgroup(name, &config_of(&reserved.0))
            .with_context(|| format!("Failed to enforce {key} cgroup limits on {name:?}"))?;
        info!(cgroup = %name, "Updated limits on {key} cgroup");
    }
    Ok(())
}

/// Retries the update of `kubepods` every [`RETRY_PERIOD`] until it succeeds.
async fn retry<C>(cgroups: C, config: ResourceConfig)
where
    C: NodeAllocatableCgroups + Clone + Send + Sync + 'static,
{
    loop {
        tokio::time::sleep(RETRY_PERIOD).await;
        let (c, cfg) = (cgroups.clone(), config.clone());
        match kubelet_core::blocking::unblock(move || c.enforce_node_allocatable(&cfg)).await {
            Ok(Ok(())) => {
                info!(?config, "Updated Node Allocatable limit across pods");
                return;
            }
            Ok(Err(e)) => warn!(error = %e, "Failed to update Node Allocatable Limits"),
            Err(e) => warn!(error = %e, "Failed to update Node Allocatable Limits"),
        }
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

    fn parse(args: &[&str], file: &str, per_qos: bool) -> Result<Settings, UsageError> {
        let mut argv = vec!["kubelet"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| UsageError(e.to_string()))?;
        let file: KubeletConfiguration =
            serde_saphyr::from_str(if file.is_empty() { "{}" } else { file })
                .map_err(|e| UsageError(e.to_string()))?;
        Settings::merge(cli.flags, &file, per_qos)
    }

    #[test]
    fn pods_by_default_and_flags_over_the_file() {
        let s = parse(&[], "", true).expect("valid");
        assert_eq!(s.enforce, [PODS]);
        assert!(s.enforces(PODS) && !s.enforces(NONE));
        let file =
            "enforceNodeAllocatable: [pods, kube-reserved]\nkubeReservedCgroup: /kube.slice\n";
        let s = parse(&[], file, true).expect("valid");
        assert!(s.enforces(KUBE_RESERVED));
        assert_eq!(s.kube_reserved_cgroup, "/kube.slice");
        let s = parse(&["--enforce-node-allocatable", "none"], file, true).expect("valid");
        assert_eq!(s.enforce, [NONE]);
        let s = parse(&["--enforce-node-allocatable="], "", false).expect("empty");
        assert!(s.enforce.is_empty());
        assert_eq!(
            s.configz(),
            serde_json::json!({
                "enforceNodeAllocatable": [],
                "kubeReservedCgroup": "",
                "systemReservedCgroup": "",
            })
        );
    }

    // Messages of upstream TestValidateKubeletConfiguration.
    #[test]
    fn upstreams_validation() {
        let err = |args: &[&str], per_qos| parse(args, "", per_qos).expect_err("invalid").0;
        assert_eq!(
            err(&[], false),
            "invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) is not supported unless cgroupsPerQOS (--cgroups-per-qos) is set to true"
        );
        assert_eq!(
            err(
                &["--enforce-node-allocatable", "pods,system-reserved"],
                true
            ),
            "invalid configuration: systemReservedCgroup (--system-reserved-cgroup) must be specified when \"system-reserved\" contained in enforceNodeAllocatable (--enforce-node-allocatable)"
        );
        assert_eq!(
            err(&["--enforce-node-allocatable", "kube-reserved"], true),
            "invalid configuration: kubeReservedCgroup (--kube-reserved-cgroup) must be specified when \"kube-reserved\" contained in enforceNodeAllocatable (--enforce-node-allocatable)"
        );
        assert_eq!(
            err(
                &[
                    "--enforce-node-allocatable",
                    "none,kube-reserved",
                    "--kube-reserved-cgroup",
                    "/k"
                ],
                true
            ),
            "invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements when \"none\" is specified"
        );
        assert_eq!(
            err(
                &[
                    "--enforce-node-allocatable",
                    "invalid-enforce-node-allocatable"
                ],
                true
            ),
            "invalid configuration: option \"invalid-enforce-node-allocatable\" specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are \"pods\", \"system-reserved\", \"kube-reserved\", or \"none\""
        );
    }

    #[test]
    fn reservations_become_shares_and_memory() {
        let reserved: kubelet::cluster::node_status::Reserved =
            "cpu=500m,memory=256Mi,pid=100".parse().expect("valid");
        assert_eq!(
            config_of(&reserved.0),
            ResourceConfig {
                cpu_shares: Some(512),
                memory: Some(256 << 20),
                ..ResourceConfig::default()
            }
        );
    }
}
