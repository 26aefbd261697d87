//! The default [`VolumeManager`] (upstream `pkg/kubelet/volumemanager/volume_manager.go`).
//!
//! The desired state of world is the pod's `spec.volumes`; the actual state is what is set up
//! under `<root>/pods/<uid>/volumes` (plus hostPaths), kept per pod in memory. Every sync of a
//! pod reconciles the two: set-up is idempotent (an existing tmpfs is kept, an unchanged
//! payload is not rewritten), so the periodic sync refreshes configMap, secret, downwardAPI
//! and projected files, and a restarted kubelet adopts what is on disk without remounting
//! (upstream's reconstruction).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, Volume};
use kubelet_core::PodExt;
use kubelet_core::objects::{InMemoryObjectSource, ObjectSource};
use kubelet_core::pod::PodUid;
use kubelet_core::resources::{NodeAllocatable, quantity_value};
use kubelet_core::volume::{Error, MountedVolume, Result, VolumeManager};
use tracing::info;

use crate::atomic_writer::{AtomicWriter, Payload};
use crate::host_path::check_host_path;
use crate::ownership::fs_group;
use crate::projection::{self, ObjectRef};
use crate::subpath;
use crate::token::TokenCache;
use crate::volume_dirs::{
    Backing, make_dir, private_dir, reconstruct, remove_orphaned_pod_dirs, set_dir_group,
    set_tree_group, tear_down,
};

/// Plugin directory name of emptyDir volumes.
pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";
/// Plugin directory name of configMap volumes.
pub const CONFIG_MAP_PLUGIN: &str = "kubernetes.io~configmap";
/// Plugin directory name of secret volumes.
pub const SECRET_PLUGIN: &str = "kubernetes.io~secret";
/// Plugin directory name of downwardAPI volumes.
pub const DOWNWARD_API_PLUGIN: &str = "kubernetes.io~downward-api";
/// Plugin directory name of projected volumes.
pub const PROJECTED_PLUGIN: &str = "kubernetes.io~projected";

/// Upstream's `WaitForAttachAndMount` timeout (2m3s).
pub const WAIT_FOR_ATTACH_AND_MOUNT_TIMEOUT: Duration = Duration::from_secs(123);

/// Sets up pod volumes under `<root>/pods/<uid>/volumes`.
pub struct DefaultVolumeManager {
    root_dir: PathBuf,
    objects: Arc<dyn ObjectSource>,
    /// For Memory emptyDirs without sizeLimit and for `resourceFieldRef` limits a container
    /// does not set.
    node_allocatable: NodeAllocatable,
    mounted: Mutex<HashMap<PodUid, HashMap<String, MountedVolume>>>,
    tokens: TokenCache,
}

impl std::fmt::Debug for DefaultVolumeManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefaultVolumeManager")
            .field("root_dir", &self.root_dir)
            .field("node_allocatable", &self.node_allocatable)
            .finish_non_exhaustive()
    }
}

impl DefaultVolumeManager {
    /// A manager for the kubelet root directory `root_dir` (upstream `--root-dir`), with no
    /// configMaps, secrets or tokens (a standalone node).
    pub fn new(root_dir: PathBuf) -> Self {
        let mounted = reconstruct(&root_dir.join("pods"));
        Self {
            root_dir,
            objects: Arc::new(InMemoryObjectSource::new()),
            node_allocatable: NodeAllocatable::detect(),
            mounted: Mutex::new(mounted),
            tokens: TokenCache::default(),
        }
    }

    /// Reads configMaps, secrets and tokens from `objects`.
    #[must_use]
    pub fn with_object_source(mut self, objects: Arc<dyn ObjectSource>) -> Self {
        self.objects = objects;
        self
    }

    /// Overrides node allocatable (detected from this machine by default).
    #[must_use]
    pub fn with_node_allocatable(mut self, allocatable: NodeAllocatable) -> Self {
        self.node_allocatable = allocatable;
        self
    }

    fn pods_dir(&self) -> PathBuf {
        self.root_dir.join("pods")
    }

    fn pod_dir(&self, uid: &PodUid) -> PathBuf {
        self.pods_dir().join(uid.as_str())
    }

    fn volumes_dir(&self, uid: &PodUid) -> PathBuf {
        self.pod_dir(uid).join("volumes")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PodUid, HashMap<String, MountedVolume>>> {
        self.mounted.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn set_up(&self, pod: &Pod, volume: &Volume) -> Result<MountedVolume> {
        let uid = pod.uid();
        let mount_err = |reason: String| Error::Mount {
            volume: volume.name.clone(),
            reason,
        };
        let dir = |plugin: &str| self.volumes_dir(&uid).join(plugin).join(&volume.name);
        let namespace = pod.namespace_or_default();
        if let Some(empty_dir) = &volume.empty_dir {
            let path = dir(EMPTY_DIR_PLUGIN);
            let size_limit = empty_dir
                .size_limit
                .as_ref()
                .map(|q| {
                    quantity_value(&q.0)
                        .and_then(|v| u64::try_from(v).ok())
                        .ok_or_else(|| mount_err(format!("invalid sizeLimit {:?}", q.0)))
                })
                .transpose()?;
            let backing = match empty_dir.medium.as_deref().unwrap_or("") {
                "" => Backing::Disk,
                "Memory" => {
                    // Upstream (SizeMemoryBackedVolumes): sizeLimit, else node allocatable.
                    let size = size_limit.filter(|s| *s > 0).or_else(|| {
                        u64::try_from(self.node_allocatable.memory_bytes)
                            .ok()
                            .filter(|m| *m > 0)
                    });
                    Backing::Tmpfs { size, mode: "1777" }
                }
                other => {
                    return Err(mount_err(format!(
                        "emptyDir medium {other:?} is not supported by this kubelet"
                    )));
                }
            };
            let (dir, group) = (path.clone(), fs_group(pod));
            unblock(&path, move || {
                make_dir(&dir, &backing)?;
                match group {
                    Some(gid) => set_dir_group(&dir, gid, 0o770),
                    None => Ok(()),
                }
            })
            .await?;
            return Ok(MountedVolume {
                host_path: path,
                read_only: false,
                size_limit_bytes: size_limit,
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
            let (checked, kind) = (path.clone(), host_path.type_.clone().unwrap_or_default());
            let volume_name = volume.name.clone();
            unblock(&path, move || {
                check_host_path(&checked, &kind).map_err(|e| Error::Mount {
                    volume: volume_name,
                    reason: e.to_string(),
                })
            })
            .await?;
            return Ok(MountedVolume {
                host_path: path,
                read_only: false,
                size_limit_bytes: None,
            });
        }
        // Upstream wraps these in a Memory emptyDir: a tmpfs with the kernel's default root
        // mode (1777), mounted read-only into containers; the 0750 pod directory keeps other
        // host users out.
        let secret_tmpfs = Backing::Tmpfs {
            size: None,
            mode: "1777",
        };
        let (path, backing, payload) = if let Some(cm) = &volume.config_map {
            let mut payload = Payload::new();
            projection::config_map(
                self.objects.as_ref(),
                namespace,
                ObjectRef {
                    name: &cm.name,
                    items: cm.items.as_deref(),
                    optional: cm.optional.unwrap_or(false),
                },
                cm.default_mode,
                &mut payload,
            )
            .await
            .map_err(|e| mount_err(e.to_string()))?;
            (dir(CONFIG_MAP_PLUGIN), Backing::Disk, payload)
        } else if let Some(s) = &volume.secret {
            let mut payload = Payload::new();
            let name = s.secret_name.as_deref().unwrap_or("");
            projection::secret(
                self.objects.as_ref(),
                namespace,
                ObjectRef {
                    name,
                    items: s.items.as_deref(),
                    optional: s.optional.unwrap_or(false),
                },
                s.default_mode,
                &mut payload,
            )
            .await
            .map_err(|e| mount_err(e.to_string()))?;
            (dir(SECRET_PLUGIN), secret_tmpfs, payload)
        } else if let Some(d) = &volume.downward_api {
            let mut payload = Payload::new();
            projection::downward_api(
                pod,
                d.items.as_deref().unwrap_or(&[]),
                d.default_mode,
                &self.node_allocatable,
                &mut payload,
            )
            .map_err(|e| mount_err(e.to_string()))?;
            (dir(DOWNWARD_API_PLUGIN), secret_tmpfs, payload)
        } else if let Some(p) = &volume.projected {
            let payload = self
                .projected_payload(pod, p)
                .await
                .map_err(|e| mount_err(e.to_string()))?;
            (dir(PROJECTED_PLUGIN), secret_tmpfs, payload)
        } else {
            return Err(mount_err(
                "this volume type is not supported by this kubelet yet".into(),
            ));
        };
        // Validate before anything is created on disk.
        for key in payload.keys() {
            crate::atomic_writer::validate_path(key).map_err(|e| mount_err(e.to_string()))?;
        }
        let group = fs_group(pod);
        let mut payload = payload;
        if group.is_some() {
            // Upstream `SetVolumeOwnership` for read-only volumes: files also readable by the
            // group.
            for file in payload.values_mut() {
                file.mode |= 0o440;
            }
        }
        let files = payload.len();
        let (dir, volume_name) = (path.clone(), volume.name.clone());
        let changed = unblock(&path, move || {
            make_dir(&dir, &backing)?;
            let changed = AtomicWriter::new(dir.clone())
                .write(&payload)
                .map_err(|e| Error::Mount {
                    volume: volume_name,
                    reason: e.to_string(),
                })?;
            if let Some(gid) = group
                && changed
            {
                set_tree_group(&dir, gid)?;
            }
            Ok(changed)
        })
        .await?;
        if changed {
            info!(pod = %pod.full_name(), volume = %volume.name, files, "volume contents updated");
        }
        Ok(MountedVolume {
            host_path: path,
            read_only: true,
            size_limit_bytes: None,
        })
    }

    async fn projected_payload(
        &self,
        pod: &Pod,
        p: &k8s_openapi::api::core::v1::ProjectedVolumeSource,
    ) -> crate::Result<Payload> {
        let namespace = pod.namespace_or_default();
        let mut payload = Payload::new();
        for source in p.sources.iter().flatten() {
            if let Some(cm) = &source.config_map {
                projection::config_map(
                    self.objects.as_ref(),
                    namespace,
                    ObjectRef {
                        name: &cm.name,
                        items: cm.items.as_deref(),
                        optional: cm.optional.unwrap_or(false),
                    },
                    p.default_mode,
                    &mut payload,
                )
                .await?;
            } else if let Some(s) = &source.secret {
                projection::secret(
                    self.objects.as_ref(),
                    namespace,
                    ObjectRef {
                        name: &s.name,
                        items: s.items.as_deref(),
                        optional: s.optional.unwrap_or(false),
                    },
                    p.default_mode,
                    &mut payload,
                )
                .await?;
            } else if let Some(d) = &source.downward_api {
                projection::downward_api(
                    pod,
                    d.items.as_deref().unwrap_or(&[]),
                    p.default_mode,
                    &self.node_allocatable,
                    &mut payload,
                )?;
            } else if let Some(t) = &source.service_account_token {
                projection::service_account_token(
                    self.objects.as_ref(),
                    &self.tokens,
                    pod,
                    t.audience.as_deref(),
                    t.expiration_seconds,
                    &t.path,
                    p.default_mode,
                    &mut payload,
                )
                .await?;
            } else {
                return Err(crate::Error::UnsupportedProjectedSource);
            }
        }
        Ok(payload)
    }

    /// `<root>/pods`, `<root>/pods/<uid>` and its `volumes` directory, each `0750` as
    /// upstream's `makePodDataDirs`, so no other host user can reach a pod's secrets.
    async fn make_pod_dirs(&self, uid: &PodUid) -> Result<()> {
        let dirs = [self.pods_dir(), self.pod_dir(uid), self.volumes_dir(uid)];
        unblock(&self.pod_dir(uid), move || {
            dirs.iter().try_for_each(|d| private_dir(d))
        })
        .await
    }

    async fn set_up_all(&self, pod: &Pod) -> Result<()> {
        self.make_pod_dirs(&pod.uid()).await?;
        let volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_deref())
            .unwrap_or(&[]);
        let mut set_up = HashMap::new();
        for volume in volumes {
            set_up.insert(volume.name.clone(), self.set_up(pod, volume).await?);
        }
        self.lock().insert(pod.uid(), set_up);
        Ok(())
    }
}

/// Runs `f` (mounts, directory and file writes) on the blocking pool, off the async workers
/// (issue 16); `path` names what it works on should the runtime be shutting down.
async fn unblock<T, F>(path: &Path, f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    kubelet_core::blocking::unblock(f)
        .await
        .map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?
}

#[async_trait]
impl VolumeManager for DefaultVolumeManager {
    async fn wait_for_attach_and_mount(&self, pod: &Pod) -> Result<()> {
        match tokio::time::timeout(WAIT_FOR_ATTACH_AND_MOUNT_TIMEOUT, self.set_up_all(pod)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout(
                pod.spec
                    .iter()
                    .flat_map(|s| s.volumes.iter().flatten())
                    .map(|v| v.name.clone())
                    .collect(),
            )),
        }
    }

    fn mounted_volumes(&self, uid: &PodUid) -> HashMap<String, MountedVolume> {
        self.lock().get(uid).cloned().unwrap_or_default()
    }

    async fn prepare_sub_path(
        &self,
        pod: &Pod,
        container: &str,
        index: usize,
        volume: &str,
        sub_path: &str,
    ) -> Result<PathBuf> {
        let uid = pod.uid();
        let mount_err = |reason: String| Error::Mount {
            volume: volume.to_owned(),
            reason,
        };
        let mounted = self
            .lock()
            .get(&uid)
            .and_then(|v| v.get(volume).cloned())
            .ok_or_else(|| mount_err("volume is not set up".into()))?;
        let target = self
            .pod_dir(&uid)
            .join("volume-subpaths")
            .join(volume)
            .join(container)
            .join(index.to_string());
        let (volume_root, sub, volume_name) =
            (mounted.host_path, sub_path.to_owned(), volume.to_owned());
        unblock(&target.clone(), move || {
            subpath::prepare(&volume_root, &sub, &target).map_err(|e| Error::Mount {
                volume: volume_name,
                reason: format!("subPath {sub:?}: {e}"),
            })
        })
        .await
    }

    async fn unmount_pod(&self, uid: &PodUid) -> Result<()> {
        self.lock().remove(uid);
        self.tokens.forget_pod(uid.as_str());
        let pod_dir = self.pod_dir(uid);
        unblock(&pod_dir.clone(), move || tear_down(&pod_dir)).await
    }

    async fn cleanup_orphaned(&self, active: &HashSet<PodUid>) -> Result<()> {
        self.lock().retain(|uid, _| active.contains(uid));
        let mut gone = Vec::new();
        {
            let tokens = self.tokens.pod_uids();
            gone.extend(
                tokens
                    .into_iter()
                    .filter(|u| !active.contains(&PodUid(u.clone()))),
            );
        }
        for uid in gone {
            self.tokens.forget_pod(&uid);
        }
        let (pods_dir, active) = (self.pods_dir(), active.clone());
        unblock(&pods_dir.clone(), move || {
            remove_orphaned_pod_dirs(&pods_dir, &active)
        })
        .await
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
