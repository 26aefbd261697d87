//! Conversions between CRI v1 messages and the core types of the pod engine's backend API
//! ([`kubelet_core::kuberuntime::api`]), so that CRI types never leave this crate.
//!
//! Mirrors upstream `pkg/kubelet/kuberuntime/helpers.go` (`toKubeContainerState`,
//! `toKubeRuntimeStatus`) and `convert.go`. Both sides are foreign to this crate, so these
//! are functions rather than `From` impls (orphan rule). Listings are taken by value and
//! their strings moved, not copied: they run on every PLEG relist.

use k8s_cri::v1 as cri;
use kubelet_core::kuberuntime::api;
use kubelet_core::runtime::{
    ContainerState, Mount, MountPropagation, RuntimeHandler, RuntimeStatus, SandboxState, Version,
};
use kubelet_core::time::from_cri_nanos;

/// CRI condition type: the runtime is up and ready to accept basic containers.
pub const RUNTIME_READY: &str = "RuntimeReady";
/// CRI condition type: the runtime network is up and ready to accept containers that need it.
pub const NETWORK_READY: &str = "NetworkReady";

/// `VersionResponse` → [`Version`].
pub fn version(v: &cri::VersionResponse) -> Version {
    Version {
        runtime_name: v.runtime_name.clone(),
        runtime_version: v.runtime_version.clone(),
        runtime_api_version: v.runtime_api_version.clone(),
    }
}

/// `RuntimeStatus` conditions → [`RuntimeStatus`] (upstream `toKubeRuntimeStatus`): a missing
/// condition counts as not ready; the message lists conditions that are not met.
pub fn runtime_status(s: Option<&cri::RuntimeStatus>) -> RuntimeStatus {
    runtime_status_with_handlers(s, &[])
}

/// CRI `StatusResponse` parts → [`RuntimeStatus`] with the runtime's handlers (upstream
/// `toKubeRuntimeStatus`).
pub fn runtime_status_with_handlers(
    s: Option<&cri::RuntimeStatus>,
    handlers: &[cri::RuntimeHandler],
) -> RuntimeStatus {
    let conditions = s.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let ready = |ty: &str| conditions.iter().any(|c| c.r#type == ty && c.status);
    let message = conditions
        .iter()
        .filter(|c| !c.status)
        .map(|c| {
            format!(
                "{}=false reason:{} message:{}",
                c.r#type, c.reason, c.message
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    RuntimeStatus {
        runtime_ready: ready(RUNTIME_READY),
        network_ready: ready(NETWORK_READY),
        message,
        handlers: handlers
            .iter()
            .map(|h| {
                let features = h.features.unwrap_or_default();
                RuntimeHandler {
                    name: h.name.clone(),
                    supports_recursive_read_only_mounts: features.recursive_read_only_mounts,
                    supports_user_namespaces: features.user_namespaces,
                }
            })
            .collect(),
    }
}

/// CRI container state → [`ContainerState`] (upstream `toKubeContainerState`).
pub fn container_state(state: i32) -> ContainerState {
    match cri::ContainerState::try_from(state) {
        Ok(cri::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(cri::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(cri::ContainerState::ContainerExited) => ContainerState::Exited,
        Ok(cri::ContainerState::ContainerUnknown) | Err(_) => ContainerState::Unknown,
    }
}

/// CRI sandbox state → [`SandboxState`].
pub fn sandbox_state(state: i32) -> SandboxState {
    match cri::PodSandboxState::try_from(state) {
        Ok(cri::PodSandboxState::SandboxReady) => SandboxState::Ready,
        _ => SandboxState::NotReady,
    }
}

/// Image as the user specified it, else the resolved one.
fn image_name(spec: Option<cri::ImageSpec>) -> String {
    spec.map(|i| {
        if i.user_specified_image.is_empty() {
            i.image
        } else {
            i.user_specified_image
        }
    })
    .unwrap_or_default()
}

/// A listed sandbox → [`api::PodSandbox`].
pub fn pod_sandbox(s: cri::PodSandbox) -> api::PodSandbox {
    api::PodSandbox {
        state: sandbox_state(s.state),
        attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
        created_at: from_cri_nanos(s.created_at),
        id: s.id,
        labels: s.labels,
        annotations: s.annotations,
    }
}

/// A listed container → [`api::Container`].
pub fn container(c: cri::Container) -> api::Container {
    api::Container {
        state: container_state(c.state),
        created_at: from_cri_nanos(c.created_at),
        name: c.metadata.map(|m| m.name).unwrap_or_default(),
        image: image_name(c.image),
        id: c.id,
        sandbox_id: c.pod_sandbox_id,
        labels: c.labels,
        annotations: c.annotations,
    }
}

/// Pod IPs of a sandbox: the primary IP first, then the additional ones (upstream
/// `determinePodSandboxIPs`, without its IP validation).
pub fn sandbox_ips(s: &cri::PodSandboxStatus) -> Vec<String> {
    let Some(net) = s.network.as_ref() else {
        return Vec::new();
    };
    std::iter::once(net.ip.as_str())
        .chain(net.additional_ips.iter().map(|ip| ip.ip.as_str()))
        .filter(|ip| !ip.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `true` when the sandbox runs in the node's network namespace.
pub fn sandbox_host_network(s: &cri::PodSandboxStatus) -> bool {
    s.linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .and_then(|n| n.options.as_ref())
        .is_some_and(|o| o.network == cri::NamespaceMode::Node as i32)
}

/// `PodSandboxStatus` → [`api::PodSandboxStatus`].
pub fn pod_sandbox_status(s: cri::PodSandboxStatus) -> api::PodSandboxStatus {
    api::PodSandboxStatus {
        state: sandbox_state(s.state),
        attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
        created_at: from_cri_nanos(s.created_at),
        ips: sandbox_ips(&s),
        host_network: sandbox_host_network(&s),
        id: s.id,
        labels: s.labels,
        annotations: s.annotations,
    }
}

/// `ContainerStatus` → [`api::ContainerStatus`]: the resolved image reference is
/// `image_ref`, else the image ID.
pub fn container_status(s: cri::ContainerStatus) -> api::ContainerStatus {
    api::ContainerStatus {
        state: container_state(s.state),
        created_at: from_cri_nanos(s.created_at),
        started_at: from_cri_nanos(s.started_at),
        finished_at: from_cri_nanos(s.finished_at),
        exit_code: s.exit_code,
        reason: s.reason,
        message: s.message,
        name: s.metadata.map(|m| m.name).unwrap_or_default(),
        image: image_name(s.image),
        image_ref: if s.image_ref.is_empty() {
            s.image_id
        } else {
            s.image_ref
        },
        mounts: s.mounts.iter().map(core_mount).collect(),
        id: s.id,
        labels: s.labels,
        annotations: s.annotations,
        log_path: s.log_path,
    }
}

/// A CRI `Image` → [`api::Image`].
pub fn image(i: cri::Image) -> api::Image {
    api::Image {
        id: i.id,
        repo_tags: i.repo_tags,
        repo_digests: i.repo_digests,
        size: i.size,
        user: api::ImageUser {
            uid: i.uid.map(|u| u.value),
            username: i.username,
        },
        pinned: i.pinned,
    }
}

/// A CRI `Mount` → core [`Mount`].
pub fn core_mount(m: &cri::Mount) -> Mount {
    Mount {
        host_path: m.host_path.clone().into(),
        container_path: m.container_path.clone(),
        read_only: m.readonly,
        propagation: match cri::MountPropagation::try_from(m.propagation) {
            Ok(cri::MountPropagation::PropagationBidirectional) => MountPropagation::Bidirectional,
            Ok(cri::MountPropagation::PropagationHostToContainer) => {
                MountPropagation::HostToContainer
            }
            _ => MountPropagation::Private,
        },
    }
}

/// A core [`Mount`] → CRI `Mount`.
pub fn mount(m: &Mount) -> cri::Mount {
    cri::Mount {
        container_path: m.container_path.clone(),
        host_path: m.host_path.to_string_lossy().into_owned(),
        readonly: m.read_only,
        propagation: mount_propagation(m.propagation) as i32,
        ..Default::default()
    }
}

/// A core mount propagation → CRI `MountPropagation`.
pub fn mount_propagation(p: MountPropagation) -> cri::MountPropagation {
    match p {
        MountPropagation::Private => cri::MountPropagation::PropagationPrivate,
        MountPropagation::HostToContainer => cri::MountPropagation::PropagationHostToContainer,
        MountPropagation::Bidirectional => cri::MountPropagation::PropagationBidirectional,
    }
}

/// A core environment variable → CRI `KeyValue`.
pub fn key_value((key, value): &(String, String)) -> cri::KeyValue {
    cri::KeyValue {
        key: key.clone(),
        value: value.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_status_conditions() {
        let s = cri::RuntimeStatus {
            conditions: vec![
                cri::RuntimeCondition {
                    r#type: RUNTIME_READY.into(),
                    status: true,
                    ..Default::default()
                },
                cri::RuntimeCondition {
                    r#type: NETWORK_READY.into(),
                    status: false,
                    reason: "NetworkPluginNotReady".into(),
                    message: "cni config uninitialized".into(),
                },
            ],
        };
        let st = runtime_status(Some(&s));
        assert!(st.runtime_ready);
        assert!(!st.network_ready);
        assert!(st.message.contains("NetworkPluginNotReady"));
        assert_eq!(runtime_status(None), RuntimeStatus::default());
    }

    #[test]
    fn sandbox_status_ips_and_host_network() {
        let s = cri::PodSandboxStatus {
            id: "s".into(),
            network: Some(cri::PodSandboxNetworkStatus {
                ip: "10.0.0.2".into(),
                additional_ips: vec![cri::PodIp {
                    ip: "fd00::2".into(),
                }],
            }),
            linux: Some(cri::LinuxPodSandboxStatus {
                namespaces: Some(cri::Namespace {
                    options: Some(cri::NamespaceOption {
                        network: cri::NamespaceMode::Node as i32,
                        ..Default::default()
                    }),
                }),
            }),
            metadata: Some(cri::PodSandboxMetadata {
                attempt: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        let st = pod_sandbox_status(s);
        assert_eq!(st.ips, ["10.0.0.2", "fd00::2"]);
        assert!(st.host_network);
        assert_eq!(st.attempt, 2);
        assert_eq!(st.state, SandboxState::Ready);
    }

    #[test]
    fn container_status_keeps_labels_mounts_and_log_path() {
        let s = cri::ContainerStatus {
            id: "c".into(),
            labels: [("k".to_owned(), "v".to_owned())].into(),
            state: cri::ContainerState::ContainerExited as i32,
            created_at: 1_000_000_000,
            finished_at: 3_000_000_000,
            exit_code: 3,
            reason: "Error".into(),
            image: Some(cri::ImageSpec {
                image: "sha256:abc".into(),
                user_specified_image: "busybox:1.36".into(),
                ..Default::default()
            }),
            image_id: "sha256:abc".into(),
            mounts: vec![cri::Mount {
                container_path: "/dev/termination-log".into(),
                host_path: "/var/lib/kubelet/pods/u/containers/app/x".into(),
                propagation: cri::MountPropagation::PropagationHostToContainer as i32,
                ..Default::default()
            }],
            log_path: "/var/log/pods/ns_p_u/app/0.log".into(),
            ..Default::default()
        };
        let st = container_status(s);
        assert_eq!(st.state, ContainerState::Exited);
        assert_eq!((st.exit_code, st.reason.as_str()), (3, "Error"));
        assert_eq!(st.image, "busybox:1.36");
        assert_eq!(
            st.image_ref, "sha256:abc",
            "the image ID without an image_ref"
        );
        assert_eq!(st.finished_at, from_cri_nanos(3_000_000_000));
        assert_eq!(st.labels["k"], "v");
        assert_eq!(st.mounts[0].container_path, "/dev/termination-log");
        assert_eq!(st.mounts[0].propagation, MountPropagation::HostToContainer);
        assert_eq!(st.log_path, "/var/log/pods/ns_p_u/app/0.log");
        assert_eq!(container_state(42), ContainerState::Unknown);
    }
}
