//! The kubelet's [`RuntimeHelper`]: per-container environment and mounts
//! (upstream `GenerateRunContainerOptions` and `makeMounts` in `pkg/kubelet/kubelet_pods.go`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::pod::PodExt;
use crate::runtime::{Mount, RunContainerOptions, RuntimeHelper};
use crate::volume::VolumeManager;

/// Builds container options from the pod spec and the volume manager.
#[derive(Clone)]
pub struct KubeletRuntimeHelper {
    volumes: Arc<dyn VolumeManager>,
}

impl std::fmt::Debug for KubeletRuntimeHelper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletRuntimeHelper")
            .finish_non_exhaustive()
    }
}

impl KubeletRuntimeHelper {
    /// A helper reading mounts from `volumes`.
    pub fn new(volumes: Arc<dyn VolumeManager>) -> Self {
        Self { volumes }
    }
}

impl RuntimeHelper for KubeletRuntimeHelper {
    fn generate_run_container_options(
        &self,
        pod: &Pod,
        container: &Container,
        _pod_ips: &[String],
    ) -> Result<RunContainerOptions, String> {
        let mut envs = Vec::new();
        for (i, env) in container.env.iter().flatten().enumerate() {
            if env.value_from.is_some() {
                return Err(format!(
                    "spec.containers[{}].env[{i}] ({}): valueFrom is not supported by this kubelet yet",
                    container.name, env.name
                ));
            }
            envs.push((env.name.clone(), env.value.clone().unwrap_or_default()));
        }
        let volumes = self.volumes.mounted_volumes(&pod.uid());
        let mut mounts = Vec::new();
        for vm in container.volume_mounts.iter().flatten() {
            let Some(volume) = volumes.get(&vm.name) else {
                return Err(format!(
                    "cannot find volume {:?} to mount into container {:?}",
                    vm.name, container.name
                ));
            };
            if vm.sub_path.as_deref().is_some_and(|s| !s.is_empty())
                || vm.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty())
            {
                return Err(format!(
                    "volume mount {:?} of container {:?}: subPath is not supported by this kubelet yet",
                    vm.name, container.name
                ));
            }
            mounts.push(Mount {
                host_path: volume.host_path.clone(),
                container_path: vm.mount_path.clone(),
                read_only: vm.read_only.unwrap_or(false) || volume.read_only,
            });
        }
        let hostname = pod
            .spec
            .as_ref()
            .and_then(|s| s.hostname.clone())
            .unwrap_or_else(|| pod.name_or_empty().to_owned());
        Ok(RunContainerOptions {
            envs,
            mounts,
            hostname,
        })
    }
}
