//! The systemd cgroup driver (`--cgroup-driver=systemd`): pod and QoS cgroups are transient
//! slice units that systemd creates, limits and removes; the kubelet reads the cgroup tree
//! and writes the cgroupfs files systemd does not manage.
//!
//! Mirrors upstream `pkg/kubelet/cm/cgroup_manager_linux.go` with `useSystemd` (`Create`
//! = runc's systemd `Apply(-1)` then `Set`, `Update` = `Set`, `Destroy`, `Exists`) and runc's
//! `libcontainer/cgroups/systemd` (`v1.go`/`v2.go` `Apply`: `StartTransientUnit(name,
//! "replace", …)` with `Description`, `Wants=<parent slice>`, the accounting switches and
//! `DefaultDependencies=false`; `genV1ResourcesProperties`/`genV2ResourcesProperties` and
//! `addCpuQuota`; `Set` = `SetUnitProperties` then the cgroupfs writers; `Destroy` =
//! `StopUnit` then removing what is left). The D-Bus transport is behind [`SystemdUnits`]
//! (the binary implements it over the system bus), so this crate has no D-Bus dependency.
//!
//! Every method blocks (D-Bus round trips, cgroupfs): async code calls them through
//! [`crate::blocking::unblock`], as for [`super::cgroupfs`].

// Reviewed (issue 16): like cgroupfs.rs, the blocking implementation of PodContainerManager.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::cgroup_name::CgroupName;
use super::cgroupfs::{Cgroupfs, Layout};
use super::helpers::{
    MIN_SHARES, QUOTA_PERIOD, ResourceConfig, resource_config_for_pod, shares_to_weight,
};
use super::{KUBEPODS, PodContainerManager, Result, pod_cgroup_suffix, qos_cgroup_segments};
use crate::PodExt;
use crate::pod::PodUid;

/// systemd's `USEC_INFINITY`: no CPU quota.
pub const USEC_INFINITY: u64 = u64::MAX;

/// The first systemd version with `CPUQuotaPeriodUSec` (runc `addCpuQuota`).
pub const CPU_QUOTA_PERIOD_MIN_VERSION: u32 = 242;

/// The value of a unit property, as D-Bus types it (`b`, `t`, `s`, `as`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PropertyValue {
    /// `b`.
    Bool(bool),
    /// `t`.
    U64(u64),
    /// `s`.
    Str(String),
    /// `as`.
    Strings(Vec<String>),
}

/// One `(sv)` property of `StartTransientUnit`/`SetUnitProperties`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitProperty {
    /// The property name, e.g. `CPUShares`.
    pub name: &'static str,
    /// Its value.
    pub value: PropertyValue,
}

impl UnitProperty {
    fn bool(name: &'static str, v: bool) -> Self {
        Self {
            name,
            value: PropertyValue::Bool(v),
        }
    }
    fn u64(name: &'static str, v: u64) -> Self {
        Self {
            name,
            value: PropertyValue::U64(v),
        }
    }
}

/// The calls the driver makes on systemd's `org.freedesktop.systemd1.Manager` (what runc's
/// systemd cgroup manager sends through go-systemd). Implementations block until systemd has
/// finished the job; errors are [`super::Error::Systemd`] and retryable.
pub trait SystemdUnits: Send + Sync {
    /// `StartTransientUnit(name, "replace", properties, [])` and waits for the job; a unit
    /// that already exists (`org.freedesktop.systemd1.UnitExists`) is success, as runc's
    /// `startUnit` with `ignoreExist` (the kubelet making sure a slice exists).
    fn start_transient_unit(&self, name: &str, properties: &[UnitProperty]) -> Result<()>;

    /// `SetUnitProperties(name, true, properties)`: runtime changes of a running unit.
    fn set_unit_properties(&self, name: &str, properties: &[UnitProperty]) -> Result<()>;

    /// `StopUnit(name, "replace")`, waits for the job, then `ResetFailedUnit`; a unit that
    /// is not loaded (`org.freedesktop.systemd1.NoSuchUnit`) is success.
    fn stop_unit(&self, name: &str) -> Result<()>;

    /// The manager's `Version` as a number (`252` for `"252.38-1~deb12u1"`), if known.
    fn version(&self) -> Option<u32>;
}

/// Pod cgroups with the systemd driver.
#[derive(Clone)]
pub struct Systemd {
    fs: Cgroupfs,
    layout: Layout,
    root: CgroupName,
    units: Arc<dyn SystemdUnits>,
    enforce_cpu_limits: bool,
    cpu_period: u64,
}

impl std::fmt::Debug for Systemd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Systemd")
            .field("layout", &self.layout)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// Parses `"252.38-1~deb12u1"`, `"v245.4-1.fc32"` or `"245"` into 252/245 (runc
/// `systemdVersionAtoi`).
pub fn parse_systemd_version(s: &str) -> Option<u32> {
    let s = s.trim_start_matches(['"', 'v']);
    let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl Systemd {
    /// Pods in slices below `root` (`--cgroup-root` in cgroupfs form, `/` by default, as
    /// upstream parses it before converting), through `units`; `layout` is where the
    /// hierarchies systemd manages are mounted (seen from the kubelet).
    pub fn new(layout: Layout, root: &str, units: Arc<dyn SystemdUnits>) -> Self {
        Self {
            fs: Cgroupfs::new(layout.clone(), "/"),
            layout,
            root: CgroupName::parse_cgroupfs(root),
            units,
            enforce_cpu_limits: true,
            cpu_period: QUOTA_PERIOD as u64,
        }
    }

    /// Sets CFS quota enforcement (`--cpu-cfs-quota`) and period (microseconds).
    #[must_use]
    pub fn with_cpu_cfs_quota(mut self, enforce: bool, period_us: u64) -> Self {
        self.enforce_cpu_limits = enforce;
        self.cpu_period = period_us;
        self
    }

    fn qos_names(&self) -> [CgroupName; 3] {
        let kubepods = self.root.child([KUBEPODS]);
        [
            kubepods.clone(),
            kubepods.child(["burstable"]),
            kubepods.child(["besteffort"]),
        ]
    }

    fn pod_name(&self, pod: &Pod) -> CgroupName {
        self.root
            .child(qos_cgroup_segments(pod))
            .child([pod_cgroup_suffix(&pod.uid())])
    }

    /// The slice path's elements below the hierarchy root, for the cgroupfs helpers.
    fn segments(name: &CgroupName) -> Vec<String> {
        name.to_systemd()
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The slice's directory in every mounted hierarchy.
    fn dirs(&self, name: &CgroupName) -> Vec<PathBuf> {
        let path = name.to_systemd();
        self.fs
            .mounts()
            .into_iter()
            .map(|(mount, _)| Cgroupfs::dir(&mount, &path))
            .collect()
    }

    fn exists(&self, name: &CgroupName) -> bool {
        self.dirs(name).iter().all(|d| d.is_dir())
    }

    /// The resource properties of `config` (runc `genV1ResourcesProperties` or, on cgroup
    /// v2, `genV2ResourcesProperties`, with `addCpuQuota`).
    pub fn resource_properties(&self, config: &ResourceConfig) -> Vec<UnitProperty> {
        let v2 = self.layout.version() == 2;
        let mut props = Vec::new();
        if let Some(memory) = config.memory.and_then(|m| u64::try_from(m).ok())
            && memory > 0
        {
            props.push(UnitProperty::u64(
                if v2 { "MemoryMax" } else { "MemoryLimit" },
                memory,
            ));
        }
        if let Some(shares) = config.cpu_shares.filter(|s| *s != 0) {
            props.push(if v2 {
                UnitProperty::u64("CPUWeight", shares_to_weight(shares))
            } else {
                UnitProperty::u64("CPUShares", shares)
            });
        }
        let quota = config.cpu_quota.unwrap_or(0);
        let mut period = config.cpu_period.unwrap_or(0);
        if period != 0
            && self
                .units
                .version()
                .is_some_and(|v| v >= CPU_QUOTA_PERIOD_MIN_VERSION)
        {
            props.push(UnitProperty::u64("CPUQuotaPeriodUSec", period));
        }
        if quota != 0 || period != 0 {
            let mut per_sec = USEC_INFINITY;
            if let Ok(quota) = u64::try_from(quota)
                && quota > 0
            {
                if period == 0 {
                    period = QUOTA_PERIOD as u64;
                }
                // systemd keeps whole percents of a CPU: round up to 10 ms per second so
                // that children can still set the quota they expect.
                per_sec = quota.saturating_mul(1_000_000) / period;
                if !per_sec.is_multiple_of(10_000) {
                    per_sec = (per_sec / 10_000 + 1) * 10_000;
                }
            }
            props.push(UnitProperty::u64("CPUQuotaPerSecUSec", per_sec));
        }
        props
    }

    /// The properties of a new slice (runc `Apply`): description, `Wants=` its parent,
    /// accounting on, no default dependencies, and the resources.
    pub fn start_properties(
        &self,
        name: &CgroupName,
        config: &ResourceConfig,
    ) -> Vec<UnitProperty> {
        let unit = name.systemd_unit();
        let parent = name.parent().systemd_unit();
        let v2 = self.layout.version() == 2;
        let mut props = vec![
            UnitProperty {
                name: "Description",
                value: PropertyValue::Str(format!("libcontainer container {unit}")),
            },
            UnitProperty {
                name: "Wants",
                value: PropertyValue::Strings(vec![parent]),
            },
            UnitProperty::bool("MemoryAccounting", true),
            UnitProperty::bool("CPUAccounting", true),
            UnitProperty::bool(
                if v2 {
                    "IOAccounting"
                } else {
                    "BlockIOAccounting"
                },
                true,
            ),
            UnitProperty::bool("TasksAccounting", true),
            UnitProperty::bool("DefaultDependencies", false),
        ];
        props.extend(self.resource_properties(config));
        props
    }

    /// Creates the slice `name` with `config` (upstream `Create`): the transient unit, then
    /// on cgroup v1 the directories of the hierarchies systemd does not manage (cpuset,
    /// hugetlb, …, as runc's `joinCgroups`) and the cgroupfs limits.
    fn create(&self, name: &CgroupName, config: &ResourceConfig) -> Result<()> {
        let unit = name.systemd_unit();
        self.units
            .start_transient_unit(&unit, &self.start_properties(name, config))?;
        self.write_cgroupfs(name, config)
    }

    /// The cgroupfs half of runc's `Set`: the limits written to the slice's directories.
    fn write_cgroupfs(&self, name: &CgroupName, config: &ResourceConfig) -> Result<()> {
        let segments = Self::segments(name);
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let leaves = if self.layout.version() == 1 {
            self.fs.create(&segments)?
        } else {
            // systemd creates the unified directory and enables its controllers.
            self.fs
                .mounts()
                .into_iter()
                .map(|(mount, cs)| (Cgroupfs::dir(&mount, &name.to_systemd()), cs))
                .filter(|(dir, _)| dir.is_dir())
                .collect()
        };
        self.fs.apply(&leaves, config)
    }

    /// Updates the slice `name` to `config` (upstream `Update`: runc's `Set`).
    fn update(&self, name: &CgroupName, config: &ResourceConfig) -> Result<()> {
        if !self.exists(name) {
            return self.create(name, config);
        }
        let props = self.resource_properties(config);
        if !props.is_empty() {
            self.units
                .set_unit_properties(&name.systemd_unit(), &props)?;
        }
        self.write_cgroupfs(name, config)
    }

    /// Creates `kubepods.slice`, `kubepods-burstable.slice` and `kubepods-besteffort.slice`
    /// (the latter with the minimum cpu shares), as upstream's QoS container manager does at
    /// start.
    pub fn setup_qos(&self) -> Result<()> {
        for name in self.qos_names() {
            let config = if name.last() == Some("besteffort") {
                ResourceConfig {
                    cpu_shares: Some(MIN_SHARES),
                    ..Default::default()
                }
            } else {
                ResourceConfig::default()
            };
            self.create(&name, &config)?;
        }
        Ok(())
    }
}

impl super::node_allocatable::NodeAllocatableCgroups for Systemd {
    /// `kubepods.slice` below the root, updated through systemd (upstream's systemd
    /// `CgroupManager.Update` of the node allocatable cgroup).
    fn enforce_node_allocatable(&self, config: &ResourceConfig) -> Result<()> {
        let [kubepods, ..] = self.qos_names();
        self.update(&kubepods, config)
    }

    fn node_allocatable_cgroup(&self) -> String {
        let [kubepods, ..] = self.qos_names();
        kubepods.to_systemd()
    }

    fn enforce_existing_cgroup(&self, name: &str, config: &ResourceConfig) -> Result<()> {
        self.fs.enforce_existing_cgroup(name, config)
    }
}

impl PodContainerManager for Systemd {
    fn pod_cgroup_parent(&self, pod: &Pod) -> String {
        self.pod_name(pod).to_systemd()
    }

    fn ensure_exists(&self, pod: &Pod) -> Result<()> {
        let name = self.pod_name(pod);
        if self.exists(&name) {
            return Ok(());
        }
        let config = resource_config_for_pod(pod, self.enforce_cpu_limits, self.cpu_period);
        tracing::debug!(pod = %pod.full_name(), slice = %name.systemd_unit(), ?config, "creating pod slice");
        self.create(&name, &config)
    }

    fn destroy(&self, uid: &PodUid) -> Result<()> {
        let suffix = pod_cgroup_suffix(uid);
        for parent in self.qos_names() {
            let name = parent.child([suffix.as_str()]);
            let dirs = self.dirs(&name);
            if !dirs.iter().any(|d| d.exists()) {
                continue;
            }
            self.units.stop_unit(&name.systemd_unit())?;
            // What systemd does not manage (v1 cpuset, hugetlb, …) stays behind.
            for dir in dirs {
                super::cgroupfs::remove_tree(&dir)?;
            }
        }
        Ok(())
    }

    fn pod_cgroups(&self) -> Result<Vec<PodUid>> {
        let Some((mount, _)) = self.fs.mounts().into_iter().next() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for parent in self.qos_names() {
            let dir = Cgroupfs::dir(&mount, &parent.to_systemd());
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let file_name = e.file_name();
                let Some(file_name) = file_name.to_str() else {
                    continue;
                };
                if !file_name.ends_with(super::cgroup_name::SLICE_SUFFIX)
                    || !e.file_type().is_ok_and(|t| t.is_dir())
                {
                    continue;
                }
                let name = CgroupName::parse_systemd(file_name);
                if let Some(uid) = name.last().and_then(|l| l.strip_prefix("pod")) {
                    out.push(PodUid(uid.to_owned()));
                }
            }
        }
        Ok(out)
    }

    fn pod_cgroup_exists(&self, pod: &Pod) -> bool {
        self.exists(&self.pod_name(pod))
    }

    fn update_qos_cgroups(&self, burstable_cpu_shares: u64) -> Result<()> {
        let [_, burstable, besteffort] = self.qos_names();
        for (name, shares) in [(burstable, burstable_cpu_shares), (besteffort, MIN_SHARES)] {
            let config = ResourceConfig {
                cpu_shares: Some(shares),
                ..Default::default()
            };
            self.update(&name, &config)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
