//! Cgroup names and their two spellings: the cgroupfs path (`/kubepods/burstable/pod<uid>`)
//! and the systemd slice path
//! (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`).
//!
//! The one home of the systemd naming rules. Mirrors upstream
//! `pkg/kubelet/cm/cgroup_manager_linux.go` (`CgroupName`, `NewCgroupName`, `ToSystemd`,
//! `ToCgroupfs`, `ParseSystemdToCgroupName`, `ParseCgroupfsToCgroupName`,
//! `escapeSystemdCgroupName`) and runc's `libcontainer/cgroups/systemd` `ExpandSlice`.

use std::fmt;

/// Suffix of a systemd slice unit.
pub const SLICE_SUFFIX: &str = ".slice";

/// The root slice (upstream uses it as the parent of top-level slices).
pub const ROOT_SLICE: &str = "-.slice";

/// A driver-independent cgroup name: its components below the root (upstream `CgroupName`).
/// The root is the empty name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CgroupName(Vec<String>);

/// A slice name systemd does not accept (runc `ExpandSlice`'s errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid slice name: {0}")]
pub struct InvalidSlice(pub String);

impl CgroupName {
    /// The root cgroup (upstream `RootCgroupName`).
    pub fn root() -> Self {
        Self::default()
    }

    /// `base` with `components` appended (upstream `NewCgroupName`).
    #[must_use]
    pub fn child<I, S>(&self, components: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut out = self.0.clone();
        out.extend(components.into_iter().map(Into::into));
        Self(out)
    }

    /// The components.
    pub fn components(&self) -> &[String] {
        &self.0
    }

    /// The last component, if any.
    pub fn last(&self) -> Option<&str> {
        self.0.last().map(String::as_str)
    }

    /// The parent name; the root is its own parent.
    #[must_use]
    pub fn parent(&self) -> Self {
        let mut out = self.0.clone();
        out.pop();
        Self(out)
    }

    /// The cgroupfs path, `/a/b/c` (upstream `ToCgroupfs`).
    #[doc(alias = "ToCgroupfs")]
    pub fn to_cgroupfs(&self) -> String {
        let joined = self
            .0
            .iter()
            .filter(|c| !c.is_empty())
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("/");
        format!("/{joined}")
    }

    /// The systemd slice path in cgroupfs form (upstream `ToSystemd`): each component with
    /// `-` escaped to `_`, joined with `-` into one slice name, then expanded:
    /// `{kubepods, burstable, pod1-2}` →
    /// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice`. The root
    /// is `/`.
    #[doc(alias = "ToSystemd")]
    pub fn to_systemd(&self) -> String {
        if self.0.is_empty() || (self.0.len() == 1 && self.0[0].is_empty()) {
            return "/".into();
        }
        let slice = self
            .0
            .iter()
            .map(|c| escape(c))
            .collect::<Vec<_>>()
            .join("-")
            + SLICE_SUFFIX;
        // Components never contain `/` and are never empty for kubelet names; a name that
        // systemd would refuse keeps its unexpanded form rather than panicking as upstream.
        expand_slice(&slice).unwrap_or(slice)
    }

    /// The slice unit name: the last element of [`to_systemd`](Self::to_systemd)
    /// (`kubepods-burstable-pod1_2.slice`), or [`ROOT_SLICE`] for the root.
    pub fn systemd_unit(&self) -> String {
        let path = self.to_systemd();
        match path.rsplit('/').next() {
            Some(unit) if !unit.is_empty() => unit.to_owned(),
            _ => ROOT_SLICE.to_owned(),
        }
    }

    /// The name of a systemd cgroup path's last element: `kubepods-burstable-pod1_2.slice`
    /// → `{kubepods, burstable, pod1-2}` (upstream `ParseSystemdToCgroupName`).
    #[doc(alias = "ParseSystemdToCgroupName")]
    pub fn parse_systemd(name: &str) -> Self {
        let base = name.rsplit('/').next().unwrap_or_default();
        let base = base.strip_suffix(SLICE_SUFFIX).unwrap_or(base);
        Self(base.split('-').map(unescape).collect())
    }

    /// The name of a cgroupfs path: `/a/b` → `{a, b}` (upstream
    /// `ParseCgroupfsToCgroupName`).
    #[doc(alias = "ParseCgroupfsToCgroupName")]
    pub fn parse_cgroupfs(name: &str) -> Self {
        let trimmed = name.trim_start_matches('/');
        if trimmed.is_empty() {
            return Self::root();
        }
        Self(trimmed.split('/').map(str::to_owned).collect())
    }
}

impl fmt::Display for CgroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_cgroupfs())
    }
}

/// systemd treats `-` as a step in the hierarchy: component dashes become `_` (upstream
/// `escapeSystemdCgroupName`).
fn escape(component: &str) -> String {
    component.replace('-', "_")
}

/// The reverse of [`escape`] (upstream `unescapeSystemdCgroupName`).
fn unescape(component: &str) -> String {
    component.replace('_', "-")
}

/// Expands a slice name into its cgroupfs path: `test-a-b.slice` →
/// `/test.slice/test-a.slice/test-a-b.slice`; `-.slice` is `/` (runc `ExpandSlice`).
#[doc(alias = "ExpandSlice")]
pub fn expand_slice(slice: &str) -> Result<String, InvalidSlice> {
    let invalid = || InvalidSlice(slice.to_owned());
    let name = slice.strip_suffix(SLICE_SUFFIX).ok_or_else(invalid)?;
    if slice.contains('/') {
        return Err(invalid());
    }
    if name == "-" {
        return Ok("/".into());
    }
    let mut path = String::new();
    let mut prefix = String::new();
    for component in name.split('-') {
        if component.is_empty() {
            return Err(invalid());
        }
        path.push('/');
        path.push_str(&prefix);
        path.push_str(component);
        path.push_str(SLICE_SUFFIX);
        prefix.push_str(component);
        prefix.push('-');
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(components: &[&str]) -> CgroupName {
        CgroupName::root().child(components.iter().copied())
    }

    // Upstream TestCgroupNameToSystemdBasename.
    #[test]
    fn systemd_basenames() {
        let cases: &[(&[&str], &str)] = &[
            (&[], "/"),
            (&["system"], "system.slice"),
            (&["system", "Burstable"], "system-Burstable.slice"),
            (&["Burstable", "pod-123"], "Burstable-pod_123.slice"),
            (&["test", "a", "b"], "test-a-b.slice"),
            (&["test", "a", "b", "Burstable"], "test-a-b-Burstable.slice"),
            (&["Burstable"], "Burstable.slice"),
            (
                &["BestEffort", "pod-6c1a4e95-6bb6-11e6-bc26-28d2444e470d"],
                "BestEffort-pod_6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice",
            ),
        ];
        for (input, expected) in cases {
            let systemd = name(input).to_systemd();
            let base = if systemd == "/" {
                "/"
            } else {
                systemd.rsplit('/').next().unwrap_or_default()
            };
            assert_eq!(base, *expected, "{input:?}");
        }
    }

    // Upstream TestCgroupNameToSystemd, plus the kubelet's own pod cgroup.
    #[test]
    fn systemd_paths() {
        let cases: &[(&[&str], &str)] = &[
            (&[], "/"),
            (&["Burstable"], "/Burstable.slice"),
            (
                &["Burstable", "pod-123"],
                "/Burstable.slice/Burstable-pod_123.slice",
            ),
            (
                &["BestEffort", "pod-6c1a4e95-6bb6-11e6-bc26-28d2444e470d"],
                "/BestEffort.slice/BestEffort-pod_6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice",
            ),
            (&["kubepods"], "/kubepods.slice"),
            (
                &["kubepods", "burstable", "pod1234-abcd-5678-efgh"],
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(name(input).to_systemd(), *expected, "{input:?}");
        }
        assert_eq!(
            name(&["kubepods", "burstable", "pod1-2"]).systemd_unit(),
            "kubepods-burstable-pod1_2.slice"
        );
        assert_eq!(CgroupName::root().systemd_unit(), ROOT_SLICE);
    }

    // Upstream TestCgroupNameToCgroupfs and TestNewCgroupName.
    #[test]
    fn cgroupfs_paths() {
        assert_eq!(CgroupName::root().to_cgroupfs(), "/");
        assert_eq!(name(&["Burstable"]).to_cgroupfs(), "/Burstable");
        let a = CgroupName::parse_cgroupfs("/a/");
        let ab = a.child(["b"]);
        assert_eq!(ab.components(), ["a", "", "b"]);
        let abc = ab.child(["c"]);
        let _ = ab.child(["d"]);
        assert_eq!(abc.components(), ["a", "", "b", "c"]);
        assert_eq!(abc.to_cgroupfs(), "/a/b/c");
        assert_eq!(CgroupName::parse_cgroupfs("/"), CgroupName::root());
        assert_eq!(abc.parent(), ab);
    }

    // Upstream TestParseSystemdToCgroupName, and the round trip of a pod cgroup.
    #[test]
    fn parses_systemd_names() {
        assert_eq!(CgroupName::parse_systemd("/test"), name(&["test"]));
        assert_eq!(CgroupName::parse_systemd("/test.slice"), name(&["test"]));
        let pod = name(&["kubepods", "besteffort", "pod6c1a4e95-6bb6-11e6"]);
        assert_eq!(CgroupName::parse_systemd(&pod.to_systemd()), pod);
    }

    // runc TestExpandSlice.
    #[test]
    fn expands_slices() {
        assert_eq!(expand_slice("-.slice").as_deref(), Ok("/"));
        assert_eq!(expand_slice("test.slice").as_deref(), Ok("/test.slice"));
        assert_eq!(
            expand_slice("test-a-b.slice").as_deref(),
            Ok("/test.slice/test-a.slice/test-a-b.slice")
        );
        for bad in [
            "",
            ".slice",
            "test",
            "a/b.slice",
            "test--a.slice",
            "-test.slice",
            "test-.slice",
        ] {
            assert!(expand_slice(bad).is_err(), "{bad:?}");
        }
    }
}
