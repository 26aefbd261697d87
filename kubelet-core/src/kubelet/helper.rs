//! The kubelet's [`RuntimeHelper`]: per-container environment and mounts
//! (upstream `GenerateRunContainerOptions` and `makeMounts` in `pkg/kubelet/kubelet_pods.go`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod, VolumeMount};

use super::env::EnvSource;
use super::propagation::translate_mount_propagation;
use crate::cm::PodContainerManager;
use crate::expansion::expand;
use crate::kubelet::hosts;
use crate::objects::InMemoryObjectSource;
use crate::pod::PodExt;
use crate::resources::NodeAllocatable;
use crate::runtime::{
    Mount, PullSecrets, RunContainerOptions, RunContainerOptionsError, RuntimeHelper,
};
use crate::volume::VolumeManager;

/// Builds container options from the pod spec, the volume manager and the node.
#[derive(Clone)]
pub struct KubeletRuntimeHelper {
    volumes: Arc<dyn VolumeManager>,
    env: EnvSource,
    cgroups: Arc<dyn PodContainerManager>,
    hosts: Option<HostsConfig>,
}

/// Where the managed `/etc/hosts` files live and what goes in them.
#[derive(Clone, Debug)]
struct HostsConfig {
    root_dir: PathBuf,
    cluster_domain: String,
    node_hosts: PathBuf,
}

impl std::fmt::Debug for KubeletRuntimeHelper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletRuntimeHelper")
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

impl KubeletRuntimeHelper {
    /// A helper reading mounts from `volumes`, for a node with no name, no IPs, no
    /// configMaps or secrets and this machine's allocatable; see
    /// [`KubeletRuntimeHelper::with_env_source`].
    pub fn new(volumes: Arc<dyn VolumeManager>) -> Self {
        Self {
            volumes,
            env: EnvSource {
                node_name: String::new(),
                host_ips: Vec::new(),
                allocatable: NodeAllocatable::detect(),
                objects: Arc::new(InMemoryObjectSource::new()),
                services: None,
            },
            cgroups: Arc::new(crate::cm::Noop::default()),
            hosts: None,
        }
    }

    /// Resolves env vars (`fieldRef`, `resourceFieldRef`, configMaps, secrets) from `env`.
    #[must_use]
    pub fn with_env_source(mut self, env: EnvSource) -> Self {
        self.env = env;
        self
    }

    /// Mounts a kubelet-managed `/etc/hosts` (`<root_dir>/pods/<uid>/etc-hosts`) into the
    /// containers, with pod domains under `cluster_domain` (default: no managed hosts file).
    #[must_use]
    pub fn with_hosts_file(
        mut self,
        root_dir: impl Into<PathBuf>,
        cluster_domain: impl Into<String>,
    ) -> Self {
        self.hosts = Some(HostsConfig {
            root_dir: root_dir.into(),
            cluster_domain: cluster_domain.into(),
            node_hosts: PathBuf::from(hosts::ETC_HOSTS_PATH),
        });
        self
    }

    /// Takes pod cgroup parents from `cgroups` (default: none, the runtime chooses).
    #[must_use]
    pub fn with_cgroups(mut self, cgroups: Arc<dyn PodContainerManager>) -> Self {
        self.cgroups = cgroups;
        self
    }
}

#[async_trait]
impl RuntimeHelper for KubeletRuntimeHelper {
    async fn generate_run_container_options(
        &self,
        pod: &Pod,
        container: &Container,
        pod_ips: &[String],
    ) -> Result<RunContainerOptions, RunContainerOptionsError> {
        let envs = self
            .env
            .make_environment_variables(pod, container, pod_ips)
            .await
            .map_err(RunContainerOptionsError::Env)?;
        let volumes = self.volumes.mounted_volumes(&pod.uid());
        let mut mounts = Vec::new();
        for (index, vm) in container.volume_mounts.iter().flatten().enumerate() {
            let Some(volume) = volumes.get(&vm.name) else {
                return Err(RunContainerOptionsError::VolumeNotMounted {
                    volume: vm.name.clone(),
                    container: container.name.clone(),
                });
            };
            // Before any subPath bind mount is made for a container that cannot start.
            let mount_error = |reason: String| RunContainerOptionsError::VolumeMount {
                volume: vm.name.clone(),
                container: container.name.clone(),
                reason,
            };
            let propagation = translate_mount_propagation(container, vm)
                .map_err(|e| mount_error(e.to_string()))?;
            let sub_path = sub_path(vm, &envs).map_err(mount_error)?;
            let host_path = match sub_path {
                None => volume.host_path.clone(),
                Some(sub) => self
                    .volumes
                    .prepare_sub_path(pod, &container.name, index, &vm.name, &sub)
                    .await
                    .map_err(|e| mount_error(e.to_string()))?,
            };
            mounts.push(Mount {
                host_path,
                container_path: vm.mount_path.clone(),
                read_only: vm.read_only.unwrap_or(false) || volume.read_only,
                propagation,
            });
        }
        let cluster_domain = self
            .hosts
            .as_ref()
            .map_or("", |h| h.cluster_domain.as_str());
        let (hostname, domain) = hosts::pod_hostname_and_domain(pod, cluster_domain)
            .map_err(RunContainerOptionsError::Hostname)?;
        if let Some(h) = &self.hosts
            && hosts::should_mount_hosts_file(pod, container, pod_ips)
        {
            let pod_dir = h.root_dir.join("pods").join(pod.uid().as_str());
            let file = hosts::HostsFile {
                pod_dir: &pod_dir,
                node_hosts: &h.node_hosts,
                pod_ips,
                hostname: &hostname,
                domain: &domain,
            };
            let mount = hosts::ensure_hosts_mount(pod, &file)
                .await
                .map_err(|source| RunContainerOptionsError::HostsFile {
                    dir: pod_dir.clone(),
                    source,
                })?;
            mounts.push(mount);
        }
        let set_fqdn = pod
            .spec
            .as_ref()
            .and_then(|s| s.set_hostname_as_fqdn)
            .unwrap_or(false);
        let hostname = hosts::kernel_hostname(&hostname, &domain, set_fqdn)
            .map_err(RunContainerOptionsError::Hostname)?;
        Ok(RunContainerOptions {
            envs,
            mounts,
            hostname,
        })
    }

    fn get_pod_cgroup_parent(&self, pod: &Pod) -> String {
        self.cgroups.pod_cgroup_parent(pod)
    }

    async fn pull_secrets(&self, pod: &Pod) -> PullSecrets {
        super::pull_secrets::get_pull_secrets_for_pod(self.env.objects.as_ref(), pod).await
    }
}

/// The mount's `subPath`, or its `subPathExpr` with `$(VAR)` expanded from the container's
/// environment (upstream `ExpandContainerVolumeMounts`: a reference to a missing or empty
/// variable is an error). `None` without either.
fn sub_path(vm: &VolumeMount, envs: &[(String, String)]) -> Result<Option<String>, String> {
    if let Some(p) = vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
        return Ok(Some(p.to_owned()));
    }
    let Some(expr) = vm.sub_path_expr.as_deref().filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let env: HashMap<&str, &str> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut missing = Vec::new();
    let expanded = expand(expr, |name| match env.get(name) {
        Some(v) if !v.is_empty() => Some((*v).to_owned()),
        _ => {
            missing.push(name.to_owned());
            None
        }
    });
    if !missing.is_empty() {
        missing.sort();
        missing.dedup();
        return Err(format!(
            "subPathExpr: missing value for {}",
            missing.join(", ")
        ));
    }
    Ok(Some(expanded))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(sub_path: Option<&str>, expr: Option<&str>) -> VolumeMount {
        VolumeMount {
            name: "v".into(),
            mount_path: "/m".into(),
            sub_path: sub_path.map(Into::into),
            sub_path_expr: expr.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn sub_path_expr_expands_env() {
        let envs = vec![
            ("POD".to_owned(), "web-0".to_owned()),
            ("E".to_owned(), String::new()),
        ];
        assert_eq!(sub_path(&mount(None, None), &envs), Ok(None));
        assert_eq!(
            sub_path(&mount(Some("a/b"), None), &envs),
            Ok(Some("a/b".into()))
        );
        assert_eq!(
            sub_path(&mount(None, Some("logs/$(POD)/$$x")), &envs),
            Ok(Some("logs/web-0/$x".into()))
        );
        let err = sub_path(&mount(None, Some("$(NOPE)/$(E)")), &envs).expect_err("missing");
        assert!(err.contains("E, NOPE"), "{err}");
    }

    /// Upstream's common `subPathExpr: $(POD_NAME)`: a `fieldRef` value takes part in the
    /// expansion like a literal one.
    #[tokio::test]
    async fn sub_path_expr_sees_value_from_env() {
        use crate::objects::InMemoryObjectSource;
        use crate::volume::{MockVolumeManager, MountedVolume};
        use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};

        let mut vm = MockVolumeManager::new();
        vm.expect_mounted_volumes().returning(|_| {
            HashMap::from([(
                "v".to_owned(),
                MountedVolume {
                    host_path: "/vol".into(),
                    read_only: false,
                    size_limit_bytes: None,
                },
            )])
        });
        vm.expect_prepare_sub_path()
            .withf(|_, container, index, volume, sub| {
                (container, *index, volume, sub) == ("app", 0, "v", "logs/web")
            })
            .times(1)
            .returning(|_, _, _, _, _| Ok("/vol/logs/web".into()));
        let helper = KubeletRuntimeHelper::new(Arc::new(vm)).with_env_source(EnvSource {
            node_name: "node-a".into(),
            host_ips: vec!["192.0.2.1".into()],
            allocatable: NodeAllocatable::detect(),
            objects: Arc::new(InMemoryObjectSource::new()),
            services: None,
        });
        let mut pod = crate::testing::pod("web");
        let c = {
            let c = &mut pod.spec.as_mut().expect("spec").containers[0];
            c.env = Some(vec![EnvVar {
                name: "POD_NAME".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        api_version: None,
                        field_path: "metadata.name".into(),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]);
            c.volume_mounts = Some(vec![mount(None, Some("logs/$(POD_NAME)"))]);
            c.clone()
        };
        let opts = helper
            .generate_run_container_options(&pod, &c, &["10.0.0.2".into()])
            .await
            .expect("options");
        assert_eq!(opts.envs, [("POD_NAME".to_owned(), "web".to_owned())]);
        assert_eq!(
            opts.mounts[0].host_path,
            std::path::Path::new("/vol/logs/web")
        );
        assert_eq!(opts.mounts[0].container_path, "/m");
    }

    #[test]
    fn expansion_keeps_malformed_references() {
        assert_eq!(expand("$(A", |_| Some("x".into())), "$(A");
        assert_eq!(expand("a$b", |_| None), "a$b");
        assert_eq!(expand("$(A)$(A)", |_| Some("x".into())), "xx");
    }
}
