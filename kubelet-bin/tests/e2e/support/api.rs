//! Helpers of the tests against the real kube-apiserver ([`xtask::apiserver::Cluster`]): a
//! cluster started off the async runtime, clients from its kubeconfigs, a pod bound to a
//! node.

use std::path::Path;

use anyhow::Result;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use xtask::apiserver::Cluster;

/// Starts etcd and kube-apiserver with an identity for each of `nodes` (the fixture blocks,
/// so it runs on the blocking pool); `None` when the server is not built and not required.
pub async fn start_cluster(nodes: &[&str]) -> Result<Option<Cluster>> {
    let nodes: Vec<String> = nodes.iter().map(|n| (*n).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        nodes
            .iter()
            .fold(Cluster::builder(), |builder, node| {
                builder.node(node.as_str())
            })
            .start_or_skip()
    })
    .await?
}

/// The client config of a kubeconfig file (its current context), read as the kubelet reads
/// `--kubeconfig`.
pub async fn config(kubeconfig: &Path) -> Result<kube::Config> {
    Ok(kubelet::cluster::client::load_kubeconfig(kubeconfig).await?)
}

/// A client of a kubeconfig file.
pub async fn client(kubeconfig: &Path) -> Result<kube::Client> {
    Ok(kube::Client::try_from(config(kubeconfig).await?)?)
}

/// Pod `name` in `default` with one busybox container `app`, bound to `node`.
pub fn bound_pod(name: &str, node: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("busybox".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// Each pod's resourceVersion once `count` pods of `pods` are Running (polled every 200 ms
/// for up to 90 s).
pub async fn wait_running(
    pods: &kube::Api<Pod>,
    count: usize,
) -> Result<std::collections::BTreeMap<String, String>> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let list = pods.list(&kube::api::ListParams::default()).await?;
        let running: Vec<&Pod> = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect();
        if running.len() >= count {
            return Ok(running
                .into_iter()
                .map(|p| {
                    (
                        p.metadata.name.clone().unwrap_or_default(),
                        p.metadata.resource_version.clone().unwrap_or_default(),
                    )
                })
                .collect());
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("{} of {count} pods Running", running.len());
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The runtime calls that start, restart or kill something.
pub fn disruptive(calls: &[kubelet_core::testing::Call]) -> Vec<&kubelet_core::testing::Call> {
    use kubelet_core::testing::Call;
    calls
        .iter()
        .filter(|c| {
            matches!(
                c,
                Call::RunSandbox(_)
                    | Call::StartContainer(..)
                    | Call::StopContainer(..)
                    | Call::StopSandbox(_)
                    | Call::RemovePod(_)
            )
        })
        .collect()
}
