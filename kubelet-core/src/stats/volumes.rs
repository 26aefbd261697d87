//! Usage of a pod's volumes from their directories (upstream
//! `pkg/kubelet/server/stats/volume_stat_calculator.go` over the plugins' `MetricsDu`,
//! `pkg/volume/metrics_du.go`; which volumes count as local ephemeral storage as
//! `pkg/volume/util.IsLocalEphemeralVolume`).
//!
//! Volumes live in `<root-dir>/pods/<uid>/volumes/<plugin>/<name>`; every plugin there
//! (emptyDir, configMap, secret, projected, downwardAPI) reports `du` usage and the
//! filesystem's capacity. Local ephemeral storage counts emptyDirs on disk and configMaps,
//! as upstream; a `medium: Memory` emptyDir (a tmpfs) does not.

// Reviewed (issue 16): blocking readers by contract (`du` walks of the pods' volume
// directories); the stats providers call them on the blocking pool (CriStatsProvider,
// Summarizer).
#![allow(clippy::disallowed_methods)]

use std::path::Path;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::host;
use super::v1alpha1::{FsStats, VolumeStats};

/// The emptyDir plugin's directory name.
const EMPTY_DIR: &str = "kubernetes.io~empty-dir";
/// The configMap plugin's directory name.
const CONFIG_MAP: &str = "kubernetes.io~configmap";

/// One volume's usage and whether it is local ephemeral storage.
#[derive(Clone, Debug, PartialEq)]
pub struct PodVolume {
    /// The Summary API entry.
    pub stats: VolumeStats,
    /// Counts toward the pod's `ephemeral-storage`.
    pub ephemeral: bool,
}

/// The volumes of pod `uid` under `root_dir`, sorted by name; none when the pod has no
/// volume directory.
pub fn pod_volumes(root_dir: &Path, uid: &str, time: &Time) -> Vec<PodVolume> {
    let volumes = root_dir.join("pods").join(uid).join("volumes");
    let Ok(plugins) = std::fs::read_dir(&volumes) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for plugin in plugins.flatten() {
        let plugin_name = plugin.file_name().to_string_lossy().into_owned();
        let Ok(entries) = std::fs::read_dir(plugin.path()) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Some((used, inodes_used)) = host::disk_usage(&path) else {
                continue;
            };
            let info = host::fs_info(&path).unwrap_or_default();
            let ephemeral = match plugin_name.as_str() {
                EMPTY_DIR => !host::is_tmpfs(&path),
                CONFIG_MAP => true,
                _ => false,
            };
            out.push(PodVolume {
                stats: VolumeStats {
                    name: entry.file_name().to_string_lossy().into_owned(),
                    fs: FsStats {
                        time: Some(time.clone()),
                        available_bytes: Some(info.available_bytes),
                        capacity_bytes: Some(info.capacity_bytes),
                        used_bytes: Some(used),
                        inodes_free: Some(info.inodes_free),
                        inodes: Some(info.inodes),
                        inodes_used: Some(inodes_used),
                    },
                },
                ephemeral,
            });
        }
    }
    out.sort_by(|a, b| a.stats.name.cmp(&b.stats.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volumes_of_every_plugin_with_ephemeral_ones_marked() {
        let Ok(tmp) = tempfile::tempdir() else {
            return;
        };
        let vols = tmp.path().join("pods/u1/volumes");
        for (plugin, name) in [
            (EMPTY_DIR, "scratch"),
            (CONFIG_MAP, "config"),
            ("kubernetes.io~secret", "token"),
        ] {
            let dir = vols.join(plugin).join(name);
            std::fs::create_dir_all(&dir).ok();
            std::fs::write(dir.join("f"), vec![0u8; 8192]).ok();
        }
        let time = Time(crate::time::now());
        let got = pod_volumes(tmp.path(), "u1", &time);
        let summary: Vec<(&str, bool)> = got
            .iter()
            .map(|v| (v.stats.name.as_str(), v.ephemeral))
            .collect();
        assert_eq!(
            summary,
            vec![("config", true), ("scratch", true), ("token", false)]
        );
        for v in &got {
            assert_eq!(v.stats.fs.inodes_used, Some(2));
            assert!(v.stats.fs.used_bytes.unwrap_or(0) >= 8192);
            assert!(v.stats.fs.capacity_bytes.unwrap_or(0) > 0);
        }
        assert!(pod_volumes(tmp.path(), "other", &time).is_empty());
    }
}
