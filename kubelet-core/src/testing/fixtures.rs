//! Pod fixtures and a trivial [`RuntimeHelper`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::runtime::{RunContainerOptions, RuntimeHelper};

/// A pod `name` in namespace `default` with UID `uid-<name>` and one busybox container
/// `app` running `sleep 3600`.
pub fn pod(name: &str) -> Pod {
    pod_with(name, "Always", &["app"])
}

/// A pod with the given restart policy and one busybox container per name.
pub fn pod_with(name: &str, restart_policy: &str, containers: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some(restart_policy.into()),
            containers: containers
                .iter()
                .map(|c| Container {
                    name: (*c).into(),
                    image: Some("busybox:1.36".into()),
                    command: Some(vec!["sleep".into(), "3600".into()]),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A resource list (`requests`, `limits`, `overhead`) from `(resource, quantity)` pairs;
/// `None` when there are none, as the API leaves an unset list.
pub fn resource_list(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    (!pairs.is_empty()).then(|| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    })
}

/// A container `name` with the given requests and limits and nothing else.
pub fn container_with_resources(
    name: &str,
    requests: &[(&str, &str)],
    limits: &[(&str, &str)],
) -> Container {
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            requests: resource_list(requests),
            limits: resource_list(limits),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A pod spec'd with these app and init containers only (no metadata).
pub fn pod_of(containers: Vec<Container>, init: Vec<Container>) -> Pod {
    Pod {
        spec: Some(PodSpec {
            containers,
            init_containers: (!init.is_empty()).then_some(init),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A [`RuntimeHelper`] that passes literal env values and no mounts.
#[derive(Clone, Debug, Default)]
pub struct FakeRuntimeHelper;

#[async_trait::async_trait]
impl RuntimeHelper for FakeRuntimeHelper {
    async fn generate_run_container_options(
        &self,
        pod: &Pod,
        container: &Container,
        _pod_ips: &[String],
    ) -> Result<RunContainerOptions, crate::runtime::RunContainerOptionsError> {
        Ok(RunContainerOptions {
            envs: container
                .env
                .iter()
                .flatten()
                .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
                .collect(),
            mounts: vec![],
            hostname: pod.metadata.name.clone().unwrap_or_default(),
        })
    }

    fn get_pod_cgroup_parent(&self, pod: &Pod) -> String {
        crate::cm::pod_cgroupfs_name("/", pod)
    }
}
