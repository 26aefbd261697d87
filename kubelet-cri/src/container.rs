//! The CRI container configuration sent in `CreateContainer`, from the engine's
//! [`api::ContainerConfig`].
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/kuberuntime_container.go`
//! (`generateContainerConfig`) and `kuberuntime_container_linux.go`
//! (`generateLinuxContainerConfig`): command, args, env, mounts, labels and log path as the
//! engine resolved them; resources ([`crate::resources`]), security context
//! ([`crate::security`]) and namespaces ([`crate::sandbox`]) from the pod.

use k8s_cri::v1 as cri;
use kubelet_core::kuberuntime::api;

use crate::convert;
use crate::error::ConfigError;
use crate::resources::container_resources;
use crate::sandbox::namespace_options;
use crate::security::container_security_context;
use crate::service::CriOptions;

/// The `ContainerConfig` of one container instance (upstream `generateContainerConfig`).
pub(crate) fn generate_container_config(
    config: &api::ContainerConfig<'_>,
    opts: &CriOptions,
) -> Result<cri::ContainerConfig, ConfigError> {
    let (pod, container) = (config.pod, config.container);
    let image_user = config.image_user.cloned().unwrap_or_default();
    let security_context = container_security_context(
        pod,
        container,
        &image_user,
        &opts.seccomp_profile_root,
        opts.seccomp_default,
    )?;
    Ok(cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: container.name.clone(),
            attempt: config.attempt,
        }),
        image: Some(cri::ImageSpec {
            image: config.image_ref.to_owned(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: config.command.clone(),
        args: config.args.clone(),
        working_dir: config.working_dir.clone(),
        envs: config.envs.iter().map(convert::key_value).collect(),
        mounts: config.mounts.iter().map(convert::mount).collect(),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        log_path: config.log_path.to_string_lossy().into_owned(),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(container_resources(
                pod,
                container,
                opts.memory_capacity,
                opts.cfs_quota,
            )),
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(container_namespace_options(
                    pod,
                    config.target_container_id,
                )),
                ..security_context
            }),
        }),
        ..Default::default()
    })
}

/// The namespaces of one container: the pod's, except that an ephemeral container with a
/// target joins the target's PID namespace (`TARGET`, `target_id`) when the pod's containers
/// each have their own (upstream `determineEffectiveSecurityContext`).
fn container_namespace_options(
    pod: &k8s_openapi::api::core::v1::Pod,
    target: Option<&str>,
) -> cri::NamespaceOption {
    let mut ns = namespace_options(pod);
    if let Some(target) = target
        && ns.pid == cri::NamespaceMode::Container as i32
    {
        ns.pid = cri::NamespaceMode::Target as i32;
        ns.target_id = target.to_owned();
    }
    ns
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_core::kuberuntime::api::{ContainerType, ImageUser};
    use kubelet_core::runtime::{Mount, MountPropagation};
    use kubelet_core::testing::pod;

    #[test]
    fn an_ephemeral_target_joins_its_pid_namespace_unless_shared() {
        let mut p = pod("web");
        let ns = container_namespace_options(&p, Some("abc"));
        assert_eq!(ns.pid, cri::NamespaceMode::Target as i32);
        assert_eq!(ns.target_id, "abc");
        assert_eq!(
            container_namespace_options(&p, None).pid,
            cri::NamespaceMode::Container as i32
        );
        p.spec.as_mut().expect("spec").share_process_namespace = Some(true);
        let ns = container_namespace_options(&p, Some("abc"));
        assert_eq!(ns.pid, cri::NamespaceMode::Pod as i32);
        assert_eq!(ns.target_id, "");
    }

    #[test]
    fn container_config() {
        let mut p = pod("web");
        let c = {
            let spec = p.spec.as_mut().expect("spec");
            let c = &mut spec.containers[0];
            c.working_dir = Some("/work".into());
            c.tty = Some(true);
            c.clone()
        };
        let sandbox = api::PodSandboxConfig {
            pod: &p,
            attempt: 0,
            hostname: "web".into(),
            dns: api::DnsConfig::default(),
            log_directory: "/logs/default_web_uid-web".into(),
            cgroup_parent: String::new(),
            labels: Default::default(),
            annotations: Default::default(),
            runtime_handler: String::new(),
        };
        let user = ImageUser {
            uid: Some(1000),
            username: String::new(),
        };
        let config = api::ContainerConfig {
            pod: &p,
            container: &c,
            container_type: ContainerType::Regular,
            attempt: 2,
            image_ref: "sha256:123",
            image_user: Some(&user),
            command: vec!["sleep".into(), "3600".into()],
            args: Vec::new(),
            working_dir: "/work".into(),
            log_path: "app/2.log".into(),
            labels: Default::default(),
            annotations: Default::default(),
            sandbox: &sandbox,
            target_container_id: None,
            envs: vec![("X".into(), "1".into())],
            mounts: vec![
                Mount {
                    host_path: "/var/lib/kubelet/pods/uid-web/volumes/data".into(),
                    container_path: "/data".into(),
                    read_only: true,
                    ..Default::default()
                },
                Mount {
                    host_path: "/mnt/shared".into(),
                    container_path: "/shared".into(),
                    read_only: false,
                    propagation: MountPropagation::Bidirectional,
                },
                Mount {
                    host_path: "/mnt/slave".into(),
                    container_path: "/slave".into(),
                    read_only: false,
                    propagation: MountPropagation::HostToContainer,
                },
            ],
        };
        let cfg = generate_container_config(&config, &CriOptions::default()).expect("config");
        assert_eq!(cfg.log_path, "app/2.log");
        assert_eq!(cfg.metadata.as_ref().map(|m| m.attempt), Some(2));
        assert_eq!(cfg.command, ["sleep", "3600"]);
        assert_eq!(cfg.working_dir, "/work");
        assert!(cfg.tty);
        assert_eq!(cfg.mounts[0].container_path, "/data");
        assert!(cfg.mounts[0].readonly);
        let propagation: Vec<_> = cfg.mounts.iter().map(|m| m.propagation()).collect();
        assert_eq!(
            propagation,
            [
                cri::MountPropagation::PropagationPrivate,
                cri::MountPropagation::PropagationBidirectional,
                cri::MountPropagation::PropagationHostToContainer
            ]
        );
        assert_eq!(cfg.envs[0].key, "X");
        let sc = cfg.linux.and_then(|l| l.security_context).expect("sc");
        assert_eq!(sc.run_as_user, Some(cri::Int64Value { value: 1000 }));
        assert!(sc.namespace_options.is_some());
        let img = cfg.image.as_ref().expect("image");
        assert_eq!(
            (img.image.as_str(), img.user_specified_image.as_str()),
            ("sha256:123", "busybox:1.36")
        );
    }
}
