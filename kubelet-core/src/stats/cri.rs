//! The pods' stats from a CRI runtime (upstream `pkg/kubelet/stats/cri_stats_provider.go`).
//!
//! One pass: `ListPodSandbox`, `ListContainers`, `ListContainerStats` and, when the runtime
//! has it, `ListPodSandboxStats`. Per pod (its newest sandbox, a ready one first, as
//! upstream `removeTerminatedPods`) and per container name (the newest instance, a running
//! one first, as `removeTerminatedContainers`):
//!
//! * containers: CPU and memory from `ListContainerStats` (`usageNanoCores` from the previous
//!   sample, [`super::cpu`]), the writable layer as `rootfs` (capacity of the image
//!   filesystem), `du` of the container's log directory as `logs`;
//! * the pod's CPU and memory: the pod cgroup (`<cgroup root>/kubepods[/<qos>]/pod<uid>`,
//!   as upstream reads it through cadvisor), else the sandbox's stats (what upstream uses
//!   with `PodAndContainerStatsFromCRI`), else the sum of its containers (upstream
//!   `addPodCPUMemoryStats`);
//! * network: `/proc/<pid>/net/dev` of the sandbox's first process (as cadvisor reads the
//!   pause container), else the sandbox's stats;
//! * volumes ([`super::volumes`], walked in the background and cached by
//!   [`super::fs_resource_analyzer`]; a pod's first summary may have none yet) and
//!   `ephemeral-storage`: writable layers + logs + local ephemeral volumes (upstream
//!   `calcEphemeralStorage`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::cadvisor::ContainerInfo;
use super::cgroup;
use super::cpu::{CpuSample, UsageNanoCoresCache};
use super::fs_resource_analyzer::{self, FsResourceAnalyzer};
use super::host::{self, FsInfo};
use super::v1alpha1::{
    ContainerStats, CpuStats, FsStats, InterfaceStats, MemoryStats, NetworkStats, PodReference,
    PodStats, ProcessStats,
};
use super::{Error, PodStatsProvider, Result};
use crate::kuberuntime::RuntimeService;
use crate::kuberuntime::api::{
    self, ContainerFilter, InterfaceUsage, NetworkUsage, PodSandboxFilter, PodSandboxStats,
};
use crate::kuberuntime::labels::{
    CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL,
};
use crate::pod::PodUid;
use crate::runtime::{ContainerState, Error as RuntimeError, SandboxState};

/// Where the provider looks besides the runtime.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// The kubelet's root directory (volumes under `pods/<uid>/volumes`).
    pub root_dir: PathBuf,
    /// The pods' log directories (upstream `--pod-logs-dir`, `/var/log/pods`).
    pub pod_logs_dir: PathBuf,
    /// The cgroup root (`--cgroup-root`) the pod cgroups are under.
    pub cgroup_root: String,
    /// The cgroup reader; `None`: no pod cgroups are read.
    pub cgroups: Option<cgroup::Reader>,
    /// How often each pod's volumes are walked (upstream `--volume-stats-agg-period`,
    /// default 1 m; zero: no volume stats). See [`FsResourceAnalyzer`].
    pub volume_stats_period: Duration,
}

impl Options {
    /// Volumes under `root_dir`, logs under `/var/log/pods`, pod cgroups under `/` of this
    /// machine's cgroup filesystem.
    pub fn new(root_dir: impl Into<PathBuf>) -> Self {
        Self {
            root_dir: root_dir.into(),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            cgroup_root: "/".into(),
            cgroups: cgroup::Reader::detect(),
            volume_stats_period: fs_resource_analyzer::DEFAULT_PERIOD,
        }
    }

    /// Sets [`Options::volume_stats_period`].
    #[must_use]
    pub fn with_volume_stats_period(mut self, period: Duration) -> Self {
        self.volume_stats_period = period;
        self
    }

    /// Sets the pods' log directory root.
    #[must_use]
    pub fn with_pod_logs_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.pod_logs_dir = dir.into();
        self
    }

    /// Sets the cgroup root and reader (`None`: pods have no cgroups of their own).
    #[must_use]
    pub fn with_cgroups(mut self, root: impl Into<String>, reader: Option<cgroup::Reader>) -> Self {
        self.cgroup_root = root.into();
        self.cgroups = reader;
        self
    }
}

/// [`PodStatsProvider`] over a CRI runtime (upstream `criStatsProvider`).
#[derive(Debug)]
pub struct CriStatsProvider<S> {
    service: S,
    host: Arc<HostReader>,
}

/// The node-side half of a pass (cgroups, `/proc`, `du` of logs and volumes, statfs): plain
/// blocking code, run on the blocking pool (issue 16).
#[derive(Debug)]
struct HostReader {
    opts: Options,
    cpu: UsageNanoCoresCache,
    volumes: FsResourceAnalyzer,
}

/// The image filesystem: its statfs, its usage by images, and where it is mounted.
struct ImageFs {
    info: FsInfo,
    stats: FsStats,
    mountpoint: String,
}

/// What one pass read from the runtime.
struct Listing {
    sandboxes: Vec<api::PodSandbox>,
    containers: Vec<api::Container>,
    stats: HashMap<String, api::ContainerStats>,
    sandbox_stats: HashMap<String, PodSandboxStats>,
}

impl<S: RuntimeService> CriStatsProvider<S> {
    /// A provider over `service`.
    pub fn new(service: S, opts: Options) -> Self {
        Self {
            service,
            host: Arc::new(HostReader {
                volumes: FsResourceAnalyzer::of_root_dir(
                    opts.volume_stats_period,
                    opts.root_dir.clone(),
                ),
                opts,
                cpu: UsageNanoCoresCache::new(),
            }),
        }
    }

    async fn listing(&self) -> Result<Listing> {
        let sandboxes = self
            .service
            .list_pod_sandbox(&PodSandboxFilter::default())
            .await?;
        let containers = self
            .service
            .list_containers(&ContainerFilter::default())
            .await?;
        let stats = self.service.list_container_stats(&[]).await?;
        let sandbox_stats = match self.service.list_pod_sandbox_stats(&[]).await {
            Ok(s) => s,
            Err(RuntimeError::Unsupported(_)) => Vec::new(),
            Err(e) => {
                tracing::debug!(error = %e, "ListPodSandboxStats failed; reading cgroups");
                Vec::new()
            }
        };
        Ok(Listing {
            sandboxes: newest_sandboxes(sandboxes),
            containers: newest_containers(containers),
            stats: stats.into_iter().map(|s| (s.id.clone(), s)).collect(),
            sandbox_stats: sandbox_stats
                .into_iter()
                .map(|s| (s.id.clone(), s))
                .collect(),
        })
    }

    async fn image_fs(&self) -> Option<ImageFs> {
        let usage = match self.service.image_fs_info().await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(error = %e, "ImageFsInfo");
                return None;
            }
        };
        let first = usage.first()?;
        let mountpoint = PathBuf::from(&first.mountpoint);
        let info = crate::blocking::unblock(move || host::fs_info(&mountpoint))
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        let used: u64 = usage.iter().map(|u| u.used_bytes).sum();
        let inodes_used: u64 = usage.iter().map(|u| u.inodes_used).sum();
        Some(ImageFs {
            info,
            stats: FsStats {
                time: Some(Time(crate::time::now())),
                available_bytes: Some(info.available_bytes),
                capacity_bytes: Some(info.capacity_bytes),
                used_bytes: Some(used),
                inodes_free: Some(info.inodes_free),
                inodes: Some(info.inodes),
                inodes_used: Some(inodes_used),
            },
            mountpoint: first.mountpoint.clone(),
        })
    }

    async fn list(&self, full: bool) -> Result<Vec<PodStats>> {
        let listing = self.listing().await?;
        // The volume calculators follow the pods (upstream `updateCachedPodVolumeStats`).
        let uids: Vec<String> = listing
            .sandboxes
            .iter()
            .map(|s| pod_reference(s).uid)
            .collect();
        self.host.volumes.sync_pods(uids.iter().map(String::as_str));
        let image_fs = if full { self.image_fs().await } else { None };
        let host = Arc::clone(&self.host);
        crate::blocking::unblock(move || host.pod_stats(&listing, image_fs.map(|i| i.info), full))
            .await
            .map_err(|e| Error::Task(e.to_string()))
    }
}

// Reviewed (issue 16): cgroupfs, procfs and `du` reads; CriStatsProvider runs them in
// spawn_blocking.
#[allow(clippy::disallowed_methods)]
impl HostReader {
    fn usage_nano_cores(&self, key: &str, sample: Option<CpuSample>, update: bool) -> Option<u64> {
        if update {
            self.cpu.update(key, sample?)
        } else {
            self.cpu.get(key)
        }
    }

    fn container_stats(
        &self,
        c: &api::Container,
        stats: Option<&api::ContainerStats>,
        update: bool,
        rootfs: Option<&FsInfo>,
        pod_logs: Option<&Path>,
    ) -> ContainerStats {
        let time = stats
            .and_then(|s| s.timestamp)
            .unwrap_or_else(crate::time::now);
        let mut out = ContainerStats {
            name: c
                .labels
                .get(CONTAINER_NAME_LABEL)
                .cloned()
                .unwrap_or_else(|| c.name.clone()),
            start_time: c.created_at.map(Time),
            ..Default::default()
        };
        let Some(s) = stats else {
            return out;
        };
        if let Some(usage) = s.cpu_usage_nanos {
            let sample = CpuSample {
                time,
                usage_core_nano_seconds: usage,
            };
            let nano_cores = s
                .cpu_usage_nano_cores
                .or_else(|| self.usage_nano_cores(&c.id, Some(sample), update));
            out.cpu = Some(CpuStats {
                time: Some(Time(time)),
                usage_nano_cores: nano_cores,
                usage_core_nano_seconds: Some(usage),
            });
        }
        if let Some(ws) = s.memory_working_set_bytes {
            out.memory = Some(MemoryStats {
                time: Some(Time(time)),
                working_set_bytes: Some(ws),
                usage_bytes: s.memory_usage_bytes,
                rss_bytes: s.memory_rss_bytes,
                ..Default::default()
            });
        }
        if let Some(fs) = rootfs {
            out.rootfs = Some(FsStats {
                time: Some(Time(time)),
                available_bytes: Some(fs.available_bytes),
                capacity_bytes: Some(fs.capacity_bytes),
                used_bytes: s.writable_layer_bytes,
                inodes_free: Some(fs.inodes_free),
                inodes: Some(fs.inodes),
                inodes_used: s.writable_layer_inodes,
            });
        }
        if let Some(pod_logs) = pod_logs {
            let logs_dir = pod_logs.join(&out.name);
            if let Some((used, inodes_used)) = host::disk_usage(&logs_dir) {
                let info = host::fs_info(&logs_dir).unwrap_or_default();
                out.logs = Some(FsStats {
                    time: Some(Time(crate::time::now())),
                    available_bytes: Some(info.available_bytes),
                    capacity_bytes: Some(info.capacity_bytes),
                    used_bytes: Some(used),
                    inodes_free: Some(info.inodes_free),
                    inodes: Some(info.inodes),
                    inodes_used: Some(inodes_used),
                });
            }
        }
        out
    }

    /// The pod's CPU and memory: the pod cgroup's, the sandbox's, or the containers' sum.
    fn pod_cpu_memory(
        &self,
        pod: &mut PodStats,
        sandbox: Option<&PodSandboxStats>,
        cgroup: Option<&str>,
        update: bool,
    ) {
        let now = crate::time::now();
        let key = format!("pod/{}", pod.pod_ref.uid);
        let from_sandbox = sandbox.and_then(|s| {
            Some((
                s.timestamp.unwrap_or(now),
                s.cpu_usage_nanos?,
                s.memory_working_set_bytes,
                None,
            ))
        });
        let from_cgroup = || {
            let reader = self.opts.cgroups.as_ref()?;
            let usage = reader.usage(cgroup?);
            Some((now, usage.cpu_usage_nanos?, None, usage.memory))
        };
        if let Some((time, cpu, working_set, memory)) = from_cgroup().or(from_sandbox) {
            let sample = CpuSample {
                time,
                usage_core_nano_seconds: cpu,
            };
            pod.cpu = Some(CpuStats {
                time: Some(Time(time)),
                usage_nano_cores: self.usage_nano_cores(&key, Some(sample), update),
                usage_core_nano_seconds: Some(cpu),
            });
            pod.memory = match (memory, working_set) {
                (Some(m), _) => Some(MemoryStats {
                    time: Some(Time(time)),
                    available_bytes: m.limit_bytes.map(|l| l.saturating_sub(m.working_set_bytes)),
                    usage_bytes: Some(m.usage_bytes),
                    working_set_bytes: Some(m.working_set_bytes),
                    rss_bytes: m.rss_bytes,
                    page_faults: m.page_faults,
                    major_page_faults: m.major_page_faults,
                }),
                (None, Some(ws)) => Some(MemoryStats {
                    time: Some(Time(time)),
                    working_set_bytes: Some(ws),
                    ..Default::default()
                }),
                (None, None) => None,
            };
            return;
        }
        pod.cpu = sum_cpu(&pod.containers);
        pod.memory = sum_memory(&pod.containers);
    }

    /// The pods' stats from `listing`, with the image filesystem's statfs `image_fs`.
    fn pod_stats(&self, listing: &Listing, image_fs: Option<FsInfo>, full: bool) -> Vec<PodStats> {
        let root_fs = if full {
            host::fs_info(&self.opts.root_dir)
        } else {
            None
        };
        let now = crate::time::now();
        let mut pods = Vec::new();
        for sandbox in &listing.sandboxes {
            let pod_ref = pod_reference(sandbox);
            let pod_logs = self.opts.pod_logs_dir.join(format!(
                "{}_{}_{}",
                pod_ref.namespace, pod_ref.name, pod_ref.uid
            ));
            let fs = image_fs.unwrap_or_default();
            let mut pod = PodStats {
                start_time: sandbox.created_at.map(Time),
                containers: listing
                    .containers
                    .iter()
                    .filter(|c| c.sandbox_id == sandbox.id)
                    .map(|c| {
                        self.container_stats(
                            c,
                            listing.stats.get(&c.id),
                            full,
                            full.then_some(&fs),
                            full.then_some(pod_logs.as_path()),
                        )
                    })
                    .collect(),
                pod_ref,
                ..Default::default()
            };
            let pod_cgroup = self.pod_cgroup(&pod.pod_ref.uid);
            let sandbox_stats = listing.sandbox_stats.get(&sandbox.id);
            self.pod_cpu_memory(&mut pod, sandbox_stats, pod_cgroup.as_deref(), full);
            if full {
                pod.process_stats =
                    sandbox_stats
                        .and_then(|s| s.process_count)
                        .map(|n| ProcessStats {
                            process_count: Some(n),
                        });
                pod.network = self
                    .network_from_proc(pod_cgroup.as_deref(), &sandbox.id)
                    .or_else(|| sandbox_stats.and_then(|s| s.network.clone()))
                    .map(network_stats);
                // Upstream reads the fsResourceAnalyzer's cached walk.
                let volumes = self
                    .volumes
                    .pod_volumes(&pod.pod_ref.uid)
                    .unwrap_or_default();
                pod.ephemeral_storage = Some(ephemeral_storage(
                    &pod.containers,
                    volumes.iter().filter(|v| v.ephemeral).map(|v| &v.stats.fs),
                    root_fs.unwrap_or_default(),
                    now,
                ));
                pod.volume = volumes.into_iter().map(|v| v.stats).collect();
            }
            pods.push(pod);
        }
        if full {
            self.cpu.cleanup(now);
        }
        pods
    }

    /// The cgroup of pod `uid`, when pod cgroups are read and it has one.
    fn pod_cgroup(&self, uid: &str) -> Option<String> {
        self.opts
            .cgroups
            .as_ref()?
            .pod_cgroup(&self.opts.cgroup_root, &PodUid::from(uid))
    }

    /// Counters of the sandbox's network namespace through its first process.
    fn network_from_proc(
        &self,
        pod_cgroup: Option<&str>,
        sandbox_id: &str,
    ) -> Option<NetworkUsage> {
        let reader = self.opts.cgroups.as_ref()?;
        let pid = reader.first_pid(&format!("{}/{sandbox_id}", pod_cgroup?))?;
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).ok()?;
        let interfaces = host::net_dev(&text);
        Some(NetworkUsage {
            timestamp: Some(crate::time::now()),
            default_interface: interfaces.iter().find(|i| i.name == "eth0").cloned(),
            interfaces,
        })
    }

    /// Every container's and sandbox's cgroup with its readings (for `/metrics/cadvisor`).
    fn container_infos(&self, listing: &Listing, image_fs: Option<&ImageFs>) -> Vec<ContainerInfo> {
        let fs = image_fs.as_ref().map(|i| i.info).unwrap_or_default();
        let device = image_fs
            .as_ref()
            .and_then(|i| {
                let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
                host::device_of(&mountinfo, Path::new(&i.mountpoint))
            })
            .unwrap_or_default();
        let mut infos = Vec::new();
        for sandbox in &listing.sandboxes {
            let pod = pod_reference(sandbox);
            let pod_cgroup = self.pod_cgroup(&pod.uid);
            let cgroup_of = |id: &str| format!("{}/{id}", pod_cgroup.as_deref().unwrap_or(""));
            for c in listing
                .containers
                .iter()
                .filter(|c| c.sandbox_id == sandbox.id)
            {
                let s = self.container_stats(c, listing.stats.get(&c.id), false, Some(&fs), None);
                infos.push(ContainerInfo {
                    container: s.name,
                    pod: pod.clone(),
                    cgroup: cgroup_of(&c.id),
                    image: c.image.clone(),
                    name: c.id.clone(),
                    device: device.clone(),
                    cpu: s.cpu,
                    memory: s.memory,
                    rootfs: s.rootfs,
                    network: None,
                });
            }
            let network = self
                .network_from_proc(pod_cgroup.as_deref(), &sandbox.id)
                .or_else(|| {
                    listing
                        .sandbox_stats
                        .get(&sandbox.id)
                        .and_then(|s| s.network.clone())
                })
                .map(network_stats);
            infos.push(ContainerInfo {
                cgroup: cgroup_of(&sandbox.id),
                name: sandbox.id.clone(),
                network,
                pod,
                ..Default::default()
            });
        }
        infos
    }
}

#[async_trait]
impl<S: RuntimeService> PodStatsProvider for CriStatsProvider<S> {
    async fn list_pod_stats(&self) -> Result<Vec<PodStats>> {
        self.list(true).await
    }

    async fn list_pod_cpu_and_memory_stats(&self) -> Result<Vec<PodStats>> {
        self.list(false).await
    }

    async fn image_fs_stats(&self) -> Result<Option<FsStats>> {
        Ok(self.image_fs().await.map(|i| i.stats))
    }

    async fn container_infos(&self) -> Result<Vec<ContainerInfo>> {
        let listing = self.listing().await?;
        let image_fs = self.image_fs().await;
        let host = Arc::clone(&self.host);
        crate::blocking::unblock(move || host.container_infos(&listing, image_fs.as_ref()))
            .await
            .map_err(|e| Error::Task(e.to_string()))
    }
}

/// The pod of a sandbox, from the labels the pod engine gave it.
fn pod_reference(sandbox: &api::PodSandbox) -> PodReference {
    let label = |k: &str| sandbox.labels.get(k).cloned().unwrap_or_default();
    PodReference {
        name: label(POD_NAME_LABEL),
        namespace: label(POD_NAMESPACE_LABEL),
        uid: label(POD_UID_LABEL),
    }
}

/// Per pod UID the newest sandbox, a ready one first.
fn newest_sandboxes(sandboxes: Vec<api::PodSandbox>) -> Vec<api::PodSandbox> {
    let mut by_uid: HashMap<String, api::PodSandbox> = HashMap::new();
    for s in sandboxes {
        let uid = s.labels.get(POD_UID_LABEL).cloned().unwrap_or_default();
        let better = |old: &api::PodSandbox| {
            let rank = |x: &api::PodSandbox| (x.state == SandboxState::Ready, x.created_at);
            rank(&s) > rank(old)
        };
        match by_uid.get(&uid) {
            Some(old) if !better(old) => {}
            _ => {
                by_uid.insert(uid, s);
            }
        }
    }
    let mut out: Vec<_> = by_uid.into_values().collect();
    out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    out
}

/// Per (sandbox, container name) the newest container, a running one first.
fn newest_containers(containers: Vec<api::Container>) -> Vec<api::Container> {
    let mut by_name: HashMap<(String, String), api::Container> = HashMap::new();
    for c in containers {
        let key = (c.sandbox_id.clone(), c.name.clone());
        let rank = |x: &api::Container| (x.state == ContainerState::Running, x.created_at);
        match by_name.get(&key) {
            Some(old) if rank(&c) <= rank(old) => {}
            _ => {
                by_name.insert(key, c);
            }
        }
    }
    let mut out: Vec<_> = by_name.into_values().collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn interface(i: &InterfaceUsage) -> InterfaceStats {
    InterfaceStats {
        name: i.name.clone(),
        rx_bytes: i.rx_bytes,
        rx_errors: i.rx_errors,
        tx_bytes: i.tx_bytes,
        tx_errors: i.tx_errors,
    }
}

fn network_stats(n: NetworkUsage) -> NetworkStats {
    NetworkStats {
        time: Some(Time(n.timestamp.unwrap_or_else(crate::time::now))),
        default: n
            .default_interface
            .as_ref()
            .map(interface)
            .unwrap_or_default(),
        interfaces: n.interfaces.iter().map(interface).collect(),
    }
}

fn sum(values: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    values.fold(None, |acc, v| match (acc, v) {
        (None, v) => v,
        (Some(a), v) => Some(a + v.unwrap_or(0)),
    })
}

fn latest<'a>(times: impl Iterator<Item = Option<&'a Time>>) -> Option<Time> {
    times.flatten().max_by_key(|t| t.0).cloned()
}

/// Upstream `addPodCPUMemoryStats`' fallback: the containers' sum.
fn sum_cpu(containers: &[ContainerStats]) -> Option<CpuStats> {
    let cpus: Vec<&CpuStats> = containers.iter().filter_map(|c| c.cpu.as_ref()).collect();
    if cpus.is_empty() {
        return None;
    }
    Some(CpuStats {
        time: latest(cpus.iter().map(|c| c.time.as_ref())),
        usage_nano_cores: sum(cpus.iter().map(|c| c.usage_nano_cores)),
        usage_core_nano_seconds: sum(cpus.iter().map(|c| c.usage_core_nano_seconds)),
    })
}

fn sum_memory(containers: &[ContainerStats]) -> Option<MemoryStats> {
    let mems: Vec<&MemoryStats> = containers
        .iter()
        .filter_map(|c| c.memory.as_ref())
        .collect();
    if mems.is_empty() {
        return None;
    }
    Some(MemoryStats {
        time: latest(mems.iter().map(|m| m.time.as_ref())),
        usage_bytes: sum(mems.iter().map(|m| m.usage_bytes)),
        working_set_bytes: sum(mems.iter().map(|m| m.working_set_bytes)),
        rss_bytes: sum(mems.iter().map(|m| m.rss_bytes)),
        ..Default::default()
    })
}

/// Writable layers + logs + local ephemeral volumes, on the root filesystem (upstream
/// `calcEphemeralStorage`).
fn ephemeral_storage<'a>(
    containers: &'a [ContainerStats],
    volumes: impl Iterator<Item = &'a FsStats>,
    root_fs: FsInfo,
    now: Timestamp,
) -> FsStats {
    let parts: Vec<&FsStats> = containers
        .iter()
        .flat_map(|c| [c.rootfs.as_ref(), c.logs.as_ref()])
        .flatten()
        .chain(volumes)
        .collect();
    FsStats {
        time: Some(Time(now)),
        available_bytes: Some(root_fs.available_bytes),
        capacity_bytes: Some(root_fs.capacity_bytes),
        used_bytes: Some(parts.iter().filter_map(|p| p.used_bytes).sum()),
        inodes_free: Some(root_fs.inodes_free),
        inodes: Some(root_fs.inodes),
        inodes_used: Some(parts.iter().filter_map(|p| p.inodes_used).sum()),
    }
}

#[cfg(test)]
#[path = "cri_tests.rs"]
mod tests;
