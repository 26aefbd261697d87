//! The measurement poller, the same for both arms: `ListContainers(state = RUNNING)` on its own
//! connection in a tight loop, matching containers to pods by the kubelet's
//! `io.kubernetes.pod.name` / `io.kubernetes.pod.namespace` labels.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use kubelet_core::kuberuntime::labels::{POD_NAME_LABEL, POD_NAMESPACE_LABEL};

use crate::cri::{Client, Error};

/// Pause between two `ListContainers` calls while waiting for containers to run.
pub const RUNNING_PERIOD: Duration = Duration::from_millis(2);
/// Pause between two `ListPodSandbox` calls while waiting for pods to go away.
const GONE_PERIOD: Duration = Duration::from_millis(20);

fn pod_key(labels: &HashMap<String, String>) -> Option<(&str, &str)> {
    Some((
        labels.get(POD_NAMESPACE_LABEL)?.as_str(),
        labels.get(POD_NAME_LABEL)?.as_str(),
    ))
}

/// Waits until each pod `(namespace, name)` of `pods` has a running container; returns, in the
/// order of `pods`, the time from `t0` to the first poll that saw it running.
pub async fn wait_running(
    client: &Client,
    pods: &[(String, String)],
    t0: Instant,
    timeout: Duration,
) -> Result<Vec<Duration>, Error> {
    let mut seen: Vec<Option<Duration>> = vec![None; pods.len()];
    let index: HashMap<(&str, &str), usize> = pods
        .iter()
        .enumerate()
        .map(|(i, (ns, name))| ((ns.as_str(), name.as_str()), i))
        .collect();
    loop {
        let running = client
            .list_containers(Some(cri::ContainerState::ContainerRunning))
            .await?;
        let at = t0.elapsed();
        for c in &running {
            if let Some(&i) = pod_key(&c.labels).and_then(|k| index.get(&k)) {
                seen[i].get_or_insert(at);
            }
        }
        if seen.iter().all(Option::is_some) {
            return Ok(seen.into_iter().flatten().collect());
        }
        if at > timeout {
            let missing: Vec<&str> = pods
                .iter()
                .zip(&seen)
                .filter(|(_, s)| s.is_none())
                .map(|((_, name), _)| name.as_str())
                .collect();
            return Err(format!("not running after {timeout:?}: {missing:?}").into());
        }
        tokio::time::sleep(RUNNING_PERIOD).await;
    }
}

/// Waits until the runtime has no sandbox of the pods `(namespace, name)` at all (the kubelet
/// stopped and removed them); returns the pods still there at `timeout` (empty on success).
pub async fn wait_gone(
    client: &Client,
    pods: &[(String, String)],
    timeout: Duration,
) -> Result<Vec<String>, Error> {
    let deadline = Instant::now() + timeout;
    loop {
        let sandboxes = client.list_pod_sandbox().await?;
        let left: Vec<String> = sandboxes
            .iter()
            .filter_map(|s| pod_key(&s.labels))
            .filter(|(ns, name)| pods.iter().any(|(n, p)| n == ns && p == name))
            .map(|(_, name)| name.to_owned())
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return Ok(left);
        }
        tokio::time::sleep(GONE_PERIOD).await;
    }
}
