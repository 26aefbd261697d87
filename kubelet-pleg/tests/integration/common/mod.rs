//! A tiny scripted runtime for PLEG tests.
#![allow(dead_code, missing_docs)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kubelet_core::PodUid;
use kubelet_core::backoff::Backoff;
use kubelet_core::pleg::{Event, EventType};
use kubelet_core::runtime::{
    ContainerState, ContainerStatus, ContainerSummary, Error, PodStatus, PodSyncResult, Result,
    RunningPod, Runtime, RuntimeHelper, RuntimeStatus, SandboxState, SandboxStatus, SandboxSummary,
    Version,
};
use tokio::sync::mpsc;

pub const IP: &str = "10.0.0.1";

/// What the runtime shows and how it misbehaves; tests edit it between relists.
#[derive(Default)]
pub struct Script {
    pub pods: Vec<RunningPod>,
    pub fail_get_pods: bool,
    pub fail_status: HashSet<PodUid>,
    /// How long `get_pod_status` takes (tokio time).
    pub status_delay: Duration,
    pub get_pods_calls: usize,
    pub status_calls: Vec<PodUid>,
}

#[derive(Default)]
pub struct ScriptedRuntime(Mutex<Script>);

impl ScriptedRuntime {
    pub fn new(pods: Vec<RunningPod>) -> Arc<Self> {
        Arc::new(Self(Mutex::new(Script {
            pods,
            ..Default::default()
        })))
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut Script) -> R) -> R {
        f(&mut self.0.lock().expect("script lock"))
    }

    /// Replaces (or adds) the pod with the same UID.
    pub fn set_pod(&self, pod: RunningPod) {
        self.with(|s| {
            s.pods.retain(|p| p.uid != pod.uid);
            s.pods.push(pod);
        });
    }

    pub fn remove_pod(&self, uid: &str) {
        self.with(|s| s.pods.retain(|p| p.uid.as_str() != uid));
    }

    pub fn get_pods_calls(&self) -> usize {
        self.with(|s| s.get_pods_calls)
    }

    pub fn status_calls(&self) -> usize {
        self.with(|s| s.status_calls.len())
    }
}

fn not_scripted(op: &'static str) -> Error {
    Error::Runtime {
        op,
        message: "not scripted".into(),
    }
}

#[async_trait]
impl Runtime for ScriptedRuntime {
    async fn version(&self) -> Result<Version> {
        Err(not_scripted("Version"))
    }

    async fn status(&self) -> Result<RuntimeStatus> {
        Err(not_scripted("Status"))
    }

    async fn get_pods(&self, all: bool) -> Result<Vec<RunningPod>> {
        assert!(all, "the PLEG lists all pods");
        self.with(|s| {
            s.get_pods_calls += 1;
            if s.fail_get_pods {
                Err(Error::Unavailable("scripted".into()))
            } else {
                Ok(s.pods.clone())
            }
        })
    }

    async fn get_pod_status(&self, uid: &PodUid, name: &str, namespace: &str) -> Result<PodStatus> {
        let (delay, result) = self.with(|s| {
            s.status_calls.push(uid.clone());
            let result = if s.fail_status.contains(uid) {
                Err(Error::Unavailable("scripted inspection failure".into()))
            } else {
                Ok(status_of(
                    uid,
                    name,
                    namespace,
                    s.pods.iter().find(|p| &p.uid == uid),
                ))
            };
            (s.status_delay, result)
        });
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        result
    }

    async fn sync_pod(
        &self,
        _pod: &Pod,
        _status: &PodStatus,
        _helper: Arc<dyn RuntimeHelper>,
        _backoff: &Backoff,
    ) -> Result<PodSyncResult> {
        Err(not_scripted("SyncPod"))
    }

    async fn kill_pod<'a>(
        &self,
        _pod: Option<&'a Pod>,
        _running: &RunningPod,
        _grace: Option<i64>,
    ) -> Result<()> {
        Err(not_scripted("KillPod"))
    }

    async fn delete_container(&self, _id: &str) -> Result<()> {
        Err(not_scripted("RemoveContainer"))
    }

    async fn remove_pod(&self, _running: &RunningPod) -> Result<()> {
        Err(not_scripted("RemovePod"))
    }
}

/// The full status of a listed pod: ready sandboxes have [`IP`].
fn status_of(uid: &PodUid, name: &str, namespace: &str, pod: Option<&RunningPod>) -> PodStatus {
    let Some(pod) = pod else {
        return PodStatus {
            uid: uid.clone(),
            name: name.into(),
            namespace: namespace.into(),
            ..Default::default()
        };
    };
    let ready = pod.sandboxes.iter().any(|s| s.state == SandboxState::Ready);
    PodStatus {
        uid: uid.clone(),
        name: name.into(),
        namespace: namespace.into(),
        ips: if ready { vec![IP.into()] } else { vec![] },
        sandboxes: pod
            .sandboxes
            .iter()
            .map(|s| SandboxStatus {
                id: s.id.clone(),
                state: s.state,
                ips: if s.state == SandboxState::Ready {
                    vec![IP.into()]
                } else {
                    vec![]
                },
                ..Default::default()
            })
            .collect(),
        containers: pod
            .containers
            .iter()
            .map(|c| ContainerStatus {
                id: c.id.clone(),
                name: c.name.clone(),
                state: c.state,
                ..Default::default()
            })
            .collect(),
    }
}

/// A runtime pod `uid` (name `name-<uid>`) with one sandbox `sb-<uid>` and the given
/// containers, named after their IDs.
pub fn pod(uid: &str, sandbox: SandboxState, containers: &[(&str, ContainerState)]) -> RunningPod {
    RunningPod {
        uid: PodUid::from(uid),
        name: format!("name-{uid}"),
        namespace: "default".into(),
        sandboxes: vec![SandboxSummary {
            id: format!("sb-{uid}"),
            state: sandbox,
            ..Default::default()
        }],
        containers: containers
            .iter()
            .map(|(id, state)| ContainerSummary {
                id: (*id).into(),
                name: (*id).into(),
                state: *state,
                ..Default::default()
            })
            .collect(),
    }
}

/// Every event received so far, as `(kind, pod, container id)`.
pub fn drain(rx: &mut mpsc::Receiver<Event>) -> Vec<(EventType, String, String)> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push((e.kind, e.id.to_string(), e.container_id.unwrap_or_default()));
    }
    out
}

pub fn ev(kind: EventType, pod: &str, id: &str) -> (EventType, String, String) {
    (kind, pod.to_owned(), id.to_owned())
}

/// Lets spawned tasks run until they block again.
pub async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}
