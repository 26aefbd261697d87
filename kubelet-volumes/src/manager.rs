//! The default [`VolumeManager`] (upstream `pkg/kubelet/volumemanager/volume_manager.go`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, Volume};
use kubelet_core::PodExt;
use kubelet_core::pod::PodUid;
use kubelet_core::volume::{Error, MountedVolume, Result, VolumeManager};
use tracing::{info, warn};

use crate::host_path::check_host_path;

/// Plugin directory name of emptyDir volumes.
pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";

/// Sets up emptyDir and hostPath volumes under `<root>/pods/<uid>/volumes`.
#[derive(Debug)]
pub struct DefaultVolumeManager {
    root_dir: PathBuf,
    mounted: Mutex<HashMap<PodUid, HashMap<String, MountedVolume>>>,
}

impl DefaultVolumeManager {
    /// A manager for the kubelet root directory `root_dir` (upstream `--root-dir`).
    pub fn new(root_dir: PathBuf) -> Self {
        Self {
            root_dir,
            mounted: Mutex::new(HashMap::new()),
        }
    }

    fn pods_dir(&self) -> PathBuf {
        self.root_dir.join("pods")
    }

    fn volumes_dir(&self, uid: &PodUid) -> PathBuf {
        self.pods_dir().join(uid.as_str()).join("volumes")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PodUid, HashMap<String, MountedVolume>>> {
        self.mounted.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_up(&self, uid: &PodUid, volume: &Volume) -> Result<MountedVolume> {
        let mount_err = |reason: String| Error::Mount {
            volume: volume.name.clone(),
            reason,
        };
        if let Some(empty_dir) = &volume.empty_dir {
            if empty_dir.medium.as_deref().is_some_and(|m| !m.is_empty()) {
                return Err(mount_err(
                    "emptyDir medium other than the node's disk is not supported yet".into(),
                ));
            }
            let path = self
                .volumes_dir(uid)
                .join(EMPTY_DIR_PLUGIN)
                .join(&volume.name);
            create_dir(&path, 0o777)?;
            return Ok(MountedVolume {
                host_path: path,
                read_only: false,
            });
        }
        if let Some(host_path) = &volume.host_path {
            let path = PathBuf::from(&host_path.path);
            if !path.is_absolute() {
                return Err(mount_err(format!(
                    "hostPath path {:?} must be absolute",
                    host_path.path
                )));
            }
            check_host_path(&path, host_path.type_.as_deref().unwrap_or("")).map_err(mount_err)?;
            return Ok(MountedVolume {
                host_path: path,
                read_only: false,
            });
        }
        Err(mount_err(
            "this volume type is not supported by this kubelet yet".into(),
        ))
    }
}

fn create_dir(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(io)?;
    // emptyDir is world-writable as upstream (0777), regardless of the umask.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)
}

#[async_trait]
impl VolumeManager for DefaultVolumeManager {
    async fn wait_for_attach_and_mount(&self, pod: &Pod) -> Result<()> {
        let uid = pod.uid();
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_deref())
            .unwrap_or(&[]);
        let mut set_up = HashMap::new();
        for volume in volumes {
            set_up.insert(volume.name.clone(), self.set_up(&uid, volume)?);
        }
        self.lock().insert(uid, set_up);
        Ok(())
    }

    fn mounted_volumes(&self, uid: &PodUid) -> HashMap<String, MountedVolume> {
        self.lock().get(uid).cloned().unwrap_or_default()
    }

    async fn unmount_pod(&self, uid: &PodUid) -> Result<()> {
        self.lock().remove(uid);
        let dir = self.volumes_dir(uid);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::Io { path: dir, source }),
        }
    }

    async fn cleanup_orphaned(&self, active: &HashSet<PodUid>) -> Result<()> {
        self.lock().retain(|uid, _| active.contains(uid));
        let entries = match std::fs::read_dir(self.pods_dir()) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(Error::Io {
                    path: self.pods_dir(),
                    source,
                });
            }
        };
        for entry in entries.flatten() {
            let uid = PodUid(entry.file_name().to_string_lossy().into_owned());
            if active.contains(&uid) {
                continue;
            }
            let path = entry.path();
            // Only directories we created; never follow a symlink out of the pods dir.
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            info!(pod = %uid, "removing orphaned pod directory");
            if let Err(e) = std::fs::remove_dir_all(&path) {
                warn!(path = %path.display(), error = %e, "removing orphaned pod directory");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, HostPathVolumeSource};
    use kubelet_core::testing::pod;

    fn with_volumes(volumes: Vec<Volume>) -> Pod {
        let mut p = pod("v");
        if let Some(spec) = p.spec.as_mut() {
            spec.volumes = Some(volumes);
        }
        p
    }

    #[tokio::test]
    async fn empty_dir_and_host_path_are_set_up_and_torn_down() {
        let root = tempfile::tempdir().expect("tempdir");
        let host = tempfile::tempdir().expect("tempdir");
        let vm = DefaultVolumeManager::new(root.path().to_path_buf());
        let p = with_volumes(vec![
            Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            },
            Volume {
                name: "host".into(),
                host_path: Some(HostPathVolumeSource {
                    path: host.path().display().to_string(),
                    type_: Some("Directory".into()),
                }),
                ..Default::default()
            },
        ]);
        vm.wait_for_attach_and_mount(&p).await.expect("mount");
        let mounted = vm.mounted_volumes(&p.uid());
        let scratch = &mounted["scratch"].host_path;
        assert_eq!(
            *scratch,
            root.path()
                .join("pods/uid-v/volumes/kubernetes.io~empty-dir/scratch")
        );
        assert!(scratch.is_dir());
        assert_eq!(mounted["host"].host_path, host.path());
        vm.unmount_pod(&p.uid()).await.expect("unmount");
        assert!(!scratch.exists());
        assert!(host.path().exists(), "a hostPath is never removed");
        assert!(vm.mounted_volumes(&p.uid()).is_empty());
    }

    #[tokio::test]
    async fn bad_volumes_fail_with_the_volume_name() {
        let root = tempfile::tempdir().expect("tempdir");
        let vm = DefaultVolumeManager::new(root.path().to_path_buf());
        let p = with_volumes(vec![Volume {
            name: "missing".into(),
            host_path: Some(HostPathVolumeSource {
                path: "/does/not/exist".into(),
                type_: Some("Directory".into()),
            }),
            ..Default::default()
        }]);
        let err = vm
            .wait_for_attach_and_mount(&p)
            .await
            .expect_err("must fail");
        assert!(err.to_string().contains("\"missing\""), "{err}");
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[tokio::test]
    async fn orphaned_pod_dirs_are_removed_and_active_ones_kept() {
        let root = tempfile::tempdir().expect("tempdir");
        let vm = DefaultVolumeManager::new(root.path().to_path_buf());
        for uid in ["keep", "orphan"] {
            std::fs::create_dir_all(root.path().join("pods").join(uid).join("volumes"))
                .expect("mkdir");
        }
        let active: HashSet<PodUid> = [PodUid::from("keep")].into();
        vm.cleanup_orphaned(&active).await.expect("cleanup");
        assert!(root.path().join("pods/keep").exists());
        assert!(!root.path().join("pods/orphan").exists());
    }
}
