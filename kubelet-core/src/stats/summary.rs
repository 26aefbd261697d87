//! The Summary API: the node's stats beside the pods' (upstream
//! `pkg/kubelet/server/stats/summary.go` `summaryProviderImpl` and the node half of
//! `pkg/kubelet/stats/provider.go`, with cadvisor's root-container readings).
//!
//! The node: CPU and memory of the root cgroup (`/proc/stat` and `/proc/meminfo` when no
//! cgroup filesystem is readable), memory `availableBytes` = `MemTotal` − working set,
//! network of the kubelet's namespace (`/proc/net/dev`, `eth0` as the default interface),
//! `fs` = the root directory's filesystem, `runtime.imageFs` from the runtime's
//! `ImageFsInfo`, `rlimit` from `kernel.pid_max` and the running tasks, `startTime` the boot
//! time, and the system containers: `kubelet`, `runtime`, `misc` (see
//! [`super::system_containers`]) and `pods` (`<cgroup root>/kubepods`) when they exist.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::cadvisor::ContainerInfo;
use super::cgroup::{self, Memory};
use super::cpu::{CpuSample, UsageNanoCoresCache};
use super::host;
use super::system_containers::{self, Resolver};
use super::v1alpha1::{
    ContainerStats, CpuStats, FsStats, InterfaceStats, MemoryStats, NetworkStats, NodeStats,
    RlimitStats, RuntimeStats, SYSTEM_CONTAINER_PODS, Summary,
};
use super::{Error, PodStatsProvider, Result, SummaryProvider};
use crate::cm::cgroupfs_name;

/// Linux's `USER_HZ`: the unit of `/proc/stat`.
const USER_HZ: u64 = 100;

/// [`SummaryProvider`] for one node over a [`PodStatsProvider`].
pub struct Summarizer {
    node: NodeReader,
    pods: Arc<dyn PodStatsProvider>,
}

/// The node's half of a summary (root cgroup, `/proc`, statfs): plain blocking code, run on
/// the blocking pool (issue 16); cheap to clone into it.
#[derive(Clone)]
struct NodeReader {
    node_name: String,
    root_dir: PathBuf,
    cgroup_root: String,
    cgroups: Option<cgroup::Reader>,
    cpu: Arc<UsageNanoCoresCache>,
    system: Arc<Resolver>,
}

impl std::fmt::Debug for Summarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Summarizer")
            .field("node_name", &self.node.node_name)
            .field("root_dir", &self.node.root_dir)
            .finish_non_exhaustive()
    }
}

impl Summarizer {
    /// The summary of node `node_name` whose kubelet root directory is `root_dir`, with the
    /// pods of `pods`; cgroups of this machine under `/`.
    pub fn new(
        node_name: impl Into<String>,
        root_dir: impl Into<PathBuf>,
        pods: Arc<dyn PodStatsProvider>,
    ) -> Self {
        Self {
            node: NodeReader {
                node_name: node_name.into(),
                root_dir: root_dir.into(),
                cgroup_root: "/".into(),
                cgroups: cgroup::Reader::detect(),
                cpu: Arc::new(UsageNanoCoresCache::new()),
                system: Arc::new(Resolver::default()),
            },
            pods,
        }
    }

    /// Sets the cgroup root (`--cgroup-root`) and reader (`None`: `/proc` only).
    #[must_use]
    pub fn with_cgroups(mut self, root: impl Into<String>, reader: Option<cgroup::Reader>) -> Self {
        self.node.cgroup_root = root.into();
        self.node.cgroups = reader;
        self
    }

    /// Reports the `kubelet`, `runtime` and `misc` system containers of `config` (default:
    /// none).
    #[must_use]
    pub fn with_system_containers(mut self, config: system_containers::Config) -> Self {
        self.node.system = Arc::new(Resolver::new(config));
        self
    }

    /// The node's stats, read on the blocking pool: CPU and memory (`update`: a new
    /// `usageNanoCores` sample), with `fs`, network and rlimit too when `full`.
    async fn node_stats(&self, update: bool, full: bool) -> Result<NodeStats> {
        let node = self.node.clone();
        crate::blocking::unblock(move || {
            let mut stats = node.node_cpu_memory(update);
            if full {
                node.node_fs_network_rlimit(&mut stats);
            }
            stats
        })
        .await
        .map_err(|e| Error::Task(e.to_string()))
    }
}

// Reviewed (issue 16): procfs and cgroupfs reads; Summarizer::node_stats runs them in
// spawn_blocking.
#[allow(clippy::disallowed_methods)]
impl NodeReader {
    /// The node's CPU and memory (and the system containers').
    fn node_cpu_memory(&self, update: bool) -> NodeStats {
        let now = crate::time::now();
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let (meminfo, stat) = (read("/proc/meminfo"), read("/proc/stat"));
        let capacity = host::meminfo_bytes(&meminfo, "MemTotal");
        let root = self
            .cgroups
            .as_ref()
            .map(|r| r.usage("/"))
            .unwrap_or_default();
        let cpu_nanos = root
            .cpu_usage_nanos
            .or_else(|| host::proc_stat_cpu_nanos(&stat, USER_HZ));
        let memory = root.memory.or_else(|| meminfo_memory(&meminfo));
        let mut node = NodeStats {
            node_name: self.node_name.clone(),
            start_time: host::boot_time(&stat).map(Time),
            cpu: cpu_nanos.map(|n| self.cpu_stats("node", now, n, update)),
            memory: memory.map(|m| memory_stats(now, &m, capacity)),
            ..Default::default()
        };
        if let Some(reader) = &self.cgroups {
            for sys in self.system.resolve(reader) {
                let usage = reader.usage_split(&sys.cgroups.cpu, &sys.cgroups.memory);
                if usage.cpu_usage_nanos.is_none() && usage.memory.is_none() {
                    continue;
                }
                node.system_containers.push(ContainerStats {
                    name: sys.name.into(),
                    start_time: sys.start_time.map(Time).or_else(|| node.start_time.clone()),
                    cpu: usage
                        .cpu_usage_nanos
                        .map(|n| self.cpu_stats(&format!("system/{}", sys.name), now, n, update)),
                    memory: usage.memory.map(|m| {
                        let limit = m.limit_bytes.or(capacity);
                        memory_stats(now, &m, limit)
                    }),
                    ..Default::default()
                });
            }
            let pods = cgroupfs_name(&self.cgroup_root, &["kubepods"]);
            if reader.exists(&pods) {
                let usage = reader.usage(&pods);
                node.system_containers.push(ContainerStats {
                    name: SYSTEM_CONTAINER_PODS.into(),
                    start_time: node.start_time.clone(),
                    cpu: usage
                        .cpu_usage_nanos
                        .map(|n| self.cpu_stats("system/pods", now, n, update)),
                    memory: usage.memory.map(|m| {
                        let limit = m.limit_bytes.or(capacity);
                        memory_stats(now, &m, limit)
                    }),
                    ..Default::default()
                });
            }
        }
        node
    }

    fn cpu_stats(&self, key: &str, now: Timestamp, nanos: u64, update: bool) -> CpuStats {
        let sample = CpuSample {
            time: now,
            usage_core_nano_seconds: nanos,
        };
        CpuStats {
            time: Some(Time(now)),
            usage_nano_cores: if update {
                self.cpu.update(key, sample)
            } else {
                self.cpu.get(key)
            },
            usage_core_nano_seconds: Some(nanos),
        }
    }

    fn node_fs_network_rlimit(&self, node: &mut NodeStats) {
        let now = Time(crate::time::now());
        if let Some(info) = host::fs_info(&self.root_dir) {
            node.fs = Some(FsStats {
                time: Some(now.clone()),
                available_bytes: Some(info.available_bytes),
                capacity_bytes: Some(info.capacity_bytes),
                used_bytes: Some(info.used_bytes),
                inodes_free: Some(info.inodes_free),
                inodes: Some(info.inodes),
                inodes_used: Some(info.inodes.saturating_sub(info.inodes_free)),
            });
        }
        node.network = node_network(&now);
        let read_i64 = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
        };
        node.rlimit = Some(RlimitStats {
            time: Some(now),
            maxpid: read_i64("/proc/sys/kernel/pid_max"),
            curproc: std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|s| host::loadavg_procs(&s)),
        });
    }
}

/// The counters of the kubelet's network namespace (`/proc/net/dev`), `eth0` as the default
/// interface. Blocking.
// Reviewed (issue 16): only called on the blocking pool (NodeReader, container_infos).
#[allow(clippy::disallowed_methods)]
fn node_network(now: &Time) -> Option<NetworkStats> {
    let text = std::fs::read_to_string("/proc/net/dev").ok()?;
    let interfaces: Vec<InterfaceStats> = host::net_dev(&text)
        .into_iter()
        .map(|i| InterfaceStats {
            name: i.name,
            rx_bytes: i.rx_bytes,
            rx_errors: i.rx_errors,
            tx_bytes: i.tx_bytes,
            tx_errors: i.tx_errors,
        })
        .collect();
    Some(NetworkStats {
        time: Some(now.clone()),
        default: interfaces
            .iter()
            .find(|i| i.name == "eth0")
            .cloned()
            .unwrap_or_default(),
        interfaces,
    })
}

/// Memory from `/proc/meminfo` when the root cgroup cannot be read: usage = total − free,
/// working set = usage − `Inactive(file)`.
fn meminfo_memory(meminfo: &str) -> Option<Memory> {
    let total = host::meminfo_bytes(meminfo, "MemTotal")?;
    let free = host::meminfo_bytes(meminfo, "MemFree")?;
    let inactive = host::meminfo_bytes(meminfo, "Inactive(file)").unwrap_or(0);
    let usage = total.saturating_sub(free);
    Some(Memory {
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(inactive),
        ..Default::default()
    })
}

fn memory_stats(now: Timestamp, m: &Memory, capacity: Option<u64>) -> MemoryStats {
    MemoryStats {
        time: Some(Time(now)),
        available_bytes: capacity.map(|c| c.saturating_sub(m.working_set_bytes)),
        usage_bytes: Some(m.usage_bytes),
        working_set_bytes: Some(m.working_set_bytes),
        rss_bytes: m.rss_bytes,
        page_faults: m.page_faults,
        major_page_faults: m.major_page_faults,
    }
}

#[async_trait]
impl SummaryProvider for Summarizer {
    async fn get(&self) -> Result<Summary> {
        let mut node = self.node_stats(true, true).await?;
        let image_fs = self.pods.image_fs_stats().await?;
        node.runtime = image_fs.map(|fs| RuntimeStats {
            image_fs: Some(fs.clone()),
            container_fs: Some(fs),
        });
        let pods = self.pods.list_pod_stats().await?;
        Ok(Summary { node, pods })
    }

    async fn get_cpu_and_memory_stats(&self) -> Result<Summary> {
        let node = self.node_stats(false, false).await?;
        let pods = self.pods.list_pod_cpu_and_memory_stats().await?;
        Ok(Summary { node, pods })
    }

    async fn container_infos(&self) -> Result<Vec<ContainerInfo>> {
        let node = self.node_stats(false, false).await?;
        let network = crate::blocking::unblock(|| node_network(&Time(crate::time::now())))
            .await
            .map_err(|e| Error::Task(e.to_string()))?;
        let root = ContainerInfo {
            cgroup: "/".into(),
            cpu: node.cpu,
            memory: node.memory,
            network,
            ..Default::default()
        };
        let mut infos = vec![root];
        infos.extend(self.pods.container_infos().await?);
        Ok(infos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::MockPodStatsProvider;
    use crate::stats::v1alpha1::{PodReference, PodStats};

    fn pod(name: &str) -> PodStats {
        PodStats {
            pod_ref: PodReference {
                name: name.into(),
                namespace: "default".into(),
                uid: format!("uid-{name}"),
            },
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn full_summary_has_the_node_and_the_pods() {
        let mut pods = MockPodStatsProvider::new();
        pods.expect_list_pod_stats()
            .times(1)
            .returning(|| Ok(vec![pod("a")]));
        pods.expect_image_fs_stats().returning(|| {
            Ok(Some(FsStats {
                used_bytes: Some(42),
                ..Default::default()
            }))
        });
        let s = Summarizer::new("node-1", "/", Arc::new(pods));
        let summary = s.get().await.unwrap_or_default();
        assert_eq!(summary.node.node_name, "node-1");
        assert_eq!(summary.pods, vec![pod("a")]);
        let node = &summary.node;
        assert!(
            node.cpu
                .as_ref()
                .and_then(|c| c.usage_core_nano_seconds)
                .is_some()
        );
        let mem = node.memory.clone().unwrap_or_default();
        assert!(mem.working_set_bytes.unwrap_or(0) > 0);
        assert!(mem.available_bytes.is_some());
        assert!(node.fs.as_ref().and_then(|f| f.capacity_bytes).unwrap_or(0) > 0);
        assert!(node.start_time.is_some());
        assert_eq!(
            node.runtime
                .as_ref()
                .and_then(|r| r.image_fs.as_ref())
                .and_then(|f| f.used_bytes),
            Some(42)
        );
        assert!(node.rlimit.as_ref().and_then(|r| r.maxpid).is_some());
    }

    #[tokio::test]
    async fn cpu_and_memory_only_asks_for_nothing_else() {
        let mut pods = MockPodStatsProvider::new();
        pods.expect_list_pod_cpu_and_memory_stats()
            .times(1)
            .returning(|| Ok(vec![pod("a")]));
        pods.expect_list_pod_stats().never();
        pods.expect_image_fs_stats().never();
        let s = Summarizer::new("node-1", "/", Arc::new(pods));
        let summary = s.get_cpu_and_memory_stats().await.unwrap_or_default();
        assert!(summary.node.fs.is_none() && summary.node.network.is_none());
        assert!(summary.node.runtime.is_none());
        assert!(summary.node.memory.is_some());
        assert_eq!(summary.pods.len(), 1);
    }

    #[tokio::test]
    async fn container_infos_start_with_the_root_cgroup() {
        let mut pods = MockPodStatsProvider::new();
        pods.expect_container_infos().times(1).returning(|| {
            Ok(vec![ContainerInfo {
                container: "app".into(),
                ..Default::default()
            }])
        });
        let s = Summarizer::new("node-1", "/", Arc::new(pods));
        let infos = s.container_infos().await.unwrap_or_default();
        let ids: Vec<(&str, &str)> = infos
            .iter()
            .map(|i| (i.cgroup.as_str(), i.container.as_str()))
            .collect();
        assert_eq!(ids, [("/", ""), ("", "app")]);
        assert!(infos[0].cpu.is_some() && infos[0].memory.is_some());
    }

    /// The `kubelet` system container is this process's cgroup, `runtime` the cgroup of the
    /// process serving the runtime socket (here: this one too), read as the cgroup files say.
    #[tokio::test]
    async fn system_containers_are_read_from_the_processes_cgroups() {
        let reader = cgroup::Reader::detect().expect("a cgroup filesystem on this machine");
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("cri.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let mut pods = MockPodStatsProvider::new();
        pods.expect_list_pod_cpu_and_memory_stats()
            .returning(|| Ok(Vec::new()));
        let s = Summarizer::new("node-1", "/", Arc::new(pods)).with_system_containers(
            system_containers::Config {
                runtime_socket: Some(socket),
                misc: Some("/no-such-cgroup".into()),
                ..Default::default()
            },
        );
        let summary = s.get_cpu_and_memory_stats().await.expect("summary");
        let own = std::fs::read_to_string("/proc/self/cgroup").expect("proc cgroup");
        let cgroups = system_containers::Cgroups::of_process(&own, reader.layout())
            .expect("this process's cgroups");
        let names: Vec<&str> = summary
            .node
            .system_containers
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(&names[..2], ["kubelet", "runtime"], "{names:?}");
        assert!(
            !names.contains(&"misc"),
            "a cgroup that does not exist is left out"
        );
        let after = reader.usage_split(&cgroups.cpu, &cgroups.memory);
        for sys in &summary.node.system_containers[..2] {
            let memory = sys.memory.clone().expect("memory");
            let reported = memory.usage_bytes.expect("usage") as f64;
            let read = after.memory.expect("memory reading").usage_bytes as f64;
            assert!(
                (reported - read).abs() <= read * 0.1,
                "{}: reported {reported}, cgroup {read}",
                sys.name
            );
            let cpu = sys.cpu.clone().and_then(|c| c.usage_core_nano_seconds);
            assert!(
                cpu.is_some_and(|n| n > 0 && n <= after.cpu_usage_nanos.unwrap_or(0)),
                "{}: {cpu:?} vs {:?}",
                sys.name,
                after.cpu_usage_nanos
            );
            assert!(sys.start_time.is_some());
        }
    }

    #[test]
    fn meminfo_fallback_working_set() {
        let text = "MemTotal: 1000 kB\nMemFree: 400 kB\nInactive(file): 100 kB\n";
        let m = meminfo_memory(text).unwrap_or_default();
        assert_eq!(m.usage_bytes, 600 * 1024);
        assert_eq!(m.working_set_bytes, 500 * 1024);
    }
}
