//! Runtime-agnostic container helpers: the spec hash, the restart decision and port
//! resolution.
//!
//! Mirrors upstream `pkg/kubelet/container/helpers.go` (`HashContainer`,
//! `ShouldContainerBeRestarted`).

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::pod::PodExt;
use crate::runtime::{ContainerState, PodStatus};

/// Why a probe or hook port cannot be resolved (upstream's messages).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PortError {
    /// A number outside 1–65535.
    #[error("invalid port number: {0}")]
    InvalidNumber(i32),
    /// A name that none of the container's ports has.
    #[error("couldn't find port: {name:?} in container {container:?}")]
    NotFound {
        /// The port name.
        name: String,
        /// The container's name.
        container: String,
    },
}

/// Resolves a probe or lifecycle-hook port: a number, or the name of one of the container's
/// ports (upstream `ResolvePort`).
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, PortError> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n)
            .ok()
            .filter(|p| *p > 0)
            .ok_or(PortError::InvalidNumber(*n)),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<i32>() {
                return resolve_port(&IntOrString::Int(n), container);
            }
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| PortError::NotFound {
                    name: name.clone(),
                    container: container.name.clone(),
                })
        }
    }
}

/// The hash of the container fields whose change requires a new container.
///
/// As upstream since v1.31 (`pickFieldsToHash`), only `name` and `image` are hashed, so that
/// mutable fields (resources) do not restart containers. The algorithm is FNV-1a 32-bit over
/// the canonical JSON `{"image":…,"name":…}` (keys sorted, as Go's `json.Marshal` of a map):
/// fixed across builds, processes and platforms. Upstream additionally wraps the JSON bytes in
/// `dump.ForHash`, so the values differ from the Go kubelet's; a node must not switch between
/// the two kubelets with running pods (upstream does not support that across versions either).
///
/// Changing this function restarts every container on every node on upgrade: the golden
/// values in the tests freeze it.
pub fn hash_container(container: &Container) -> u64 {
    let canonical = serde_json::json!({
        "image": container.image.as_deref().unwrap_or(""),
        "name": container.name,
    });
    // serde_json's map is a BTreeMap here (no `preserve_order`), so keys are sorted.
    u64::from(fnv1a_32(canonical.to_string().as_bytes()))
}

/// FNV-1a, 32 bits (the `fnv` crate has only the 64-bit variant).
fn fnv1a_32(bytes: &[u8]) -> u32 {
    const OFFSET: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u32::from(*b)).wrapping_mul(PRIME))
}

/// The [`Container`] an ephemeral container runs as (upstream's cast
/// `(*v1.Container)(&ec.EphemeralContainerCommon)`): every common field; the API server
/// already refused ports, probes, lifecycle hooks and resources on it.
#[doc(alias = "EphemeralContainerCommon")]
pub fn ephemeral_container_spec(ec: &EphemeralContainer) -> Container {
    Container {
        name: ec.name.clone(),
        image: ec.image.clone(),
        command: ec.command.clone(),
        args: ec.args.clone(),
        working_dir: ec.working_dir.clone(),
        ports: ec.ports.clone(),
        env_from: ec.env_from.clone(),
        env: ec.env.clone(),
        resources: ec.resources.clone(),
        resize_policy: ec.resize_policy.clone(),
        restart_policy: ec.restart_policy.clone(),
        volume_mounts: ec.volume_mounts.clone(),
        volume_devices: ec.volume_devices.clone(),
        liveness_probe: ec.liveness_probe.clone(),
        readiness_probe: ec.readiness_probe.clone(),
        startup_probe: ec.startup_probe.clone(),
        lifecycle: ec.lifecycle.clone(),
        termination_message_path: ec.termination_message_path.clone(),
        termination_message_policy: ec.termination_message_policy.clone(),
        image_pull_policy: ec.image_pull_policy.clone(),
        security_context: ec.security_context.clone(),
        stdin: ec.stdin,
        stdin_once: ec.stdin_once,
        tty: ec.tty,
        // Fields newer API versions give only app and init containers.
        ..Default::default()
    }
}

/// `true` for an init container with `restartPolicy: Always`, a sidecar (upstream
/// `podutil.IsRestartableInitContainer`).
#[doc(alias = "IsRestartableInitContainer")]
pub fn is_restartable_init_container(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// Whether `container` should be (re)started given the runtime's view of the pod
/// (upstream `ShouldContainerBeRestarted`).
pub fn should_container_be_restarted(container: &Container, pod: &Pod, status: &PodStatus) -> bool {
    if pod.is_being_deleted() {
        return false;
    }
    let Some(cs) = status.container(&container.name) else {
        return true;
    };
    match cs.state {
        ContainerState::Running => false,
        ContainerState::Unknown | ContainerState::Created => true,
        ContainerState::Exited => match pod.restart_policy() {
            "Never" => false,
            "OnFailure" => cs.exit_code != 0,
            _ => true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::ContainerStatus;
    use k8s_openapi::api::core::v1::PodSpec;

    fn container(name: &str, image: &str) -> Container {
        Container {
            name: name.into(),
            image: Some(image.into()),
            ..Default::default()
        }
    }

    /// Golden values, cross-checked with an independent FNV-1a implementation (Python):
    /// these must never change (see `hash_container`).
    #[test]
    fn hash_golden_values() {
        assert_eq!(
            hash_container(&container("app", "busybox:1.36")),
            0x4761_5a6e_u64
        );
        assert_eq!(hash_container(&container("", "")), 0x53b5_b54f_u64);
        assert_eq!(
            hash_container(&container("web", "registry.k8s.io/pause:3.9")),
            0xbd7a_20f5_u64
        );
    }

    #[test]
    fn hash_ignores_mutable_fields() {
        let a = container("app", "busybox");
        let mut b = a.clone();
        b.command = Some(vec!["sleep".into()]);
        assert_eq!(hash_container(&a), hash_container(&b));
        let c = container("app", "busybox:2");
        assert_ne!(hash_container(&a), hash_container(&c));
    }

    fn pod(policy: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn exited(code: i32) -> PodStatus {
        PodStatus {
            containers: vec![ContainerStatus {
                name: "app".into(),
                state: ContainerState::Exited,
                exit_code: code,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn restart_decision_follows_policy() {
        let c = container("app", "busybox");
        assert!(should_container_be_restarted(
            &c,
            &pod("Never"),
            &PodStatus::default()
        ));
        assert!(!should_container_be_restarted(
            &c,
            &pod("Never"),
            &exited(1)
        ));
        assert!(!should_container_be_restarted(
            &c,
            &pod("OnFailure"),
            &exited(0)
        ));
        assert!(should_container_be_restarted(
            &c,
            &pod("OnFailure"),
            &exited(3)
        ));
        assert!(should_container_be_restarted(
            &c,
            &pod("Always"),
            &exited(0)
        ));
    }
}
