//! Issue 15, acceptance 5: the `kubepods` cgroup's limits equal allocatable. With
//! `--enforce-node-allocatable=pods` (the default) the `kubelet` binary sizes
//! `<cgroup-root>/kubepods` to capacity − `--kube-reserved` − `--system-reserved` (upstream
//! `getNodeAllocatableAbsolute`: `memory.limit_in_bytes` and `cpu.shares` =
//! `MilliCPUToShares`; the hard eviction thresholds stay with eviction), a pod still runs
//! below it, and a restart with other reservations resizes it. In cluster mode (when the real
//! kube-apiserver is built) the Node's status.allocatable is upstream's formula: capacity −
//! kube-reserved − system-reserved − the hard eviction threshold of `memory.available`
//! (the testbed's 100Mi) − the hugepage pools.
//!
//! Reads cgroup v1 files: skipped without the v1 cpu and memory hierarchies.

use crate::support;

use std::time::{Duration, Instant};

use kubelet_core::quantity::Amount;
use serde_json::Value;
use support::{CgroupCleanup, NODE, Node, cg_read, phase, v1_cgroups};
use xtask::apiserver::Cluster;

const MI: i64 = 1 << 20;

/// Online CPUs (`/sys/devices/system/cpu/online`, e.g. `0-3,6`).
fn online_cpus() -> i64 {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online cpus");
    list.trim()
        .split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => b.parse::<i64>().expect("cpu") - a.parse::<i64>().expect("cpu") + 1,
            None => 1,
        })
        .sum()
}

fn mem_total_bytes() -> i64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    let kib: i64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemTotal");
    kib * 1024
}

/// Bytes in the hugepage pools (`/sys/kernel/mm/hugepages/hugepages-<size>kB/nr_hugepages`).
fn hugepage_bytes() -> i64 {
    let Ok(entries) = std::fs::read_dir("/sys/kernel/mm/hugepages") else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let kib: i64 = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let pages: i64 = std::fs::read_to_string(e.path().join("nr_hugepages"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some(kib * 1024 * pages)
        })
        .sum()
}

/// Upstream `MilliCPUToShares`.
fn shares(milli: i64) -> i64 {
    (milli * 1024 / 1000).clamp(2, 262_144)
}

/// The value of a Node status quantity in milli-units.
fn milli(list: &Value, resource: &str) -> i64 {
    let q = list[resource]
        .as_str()
        .unwrap_or_else(|| panic!("{resource} in {list}"));
    let amount = Amount::parse(q).unwrap_or_else(|| panic!("quantity {q}"));
    i64::try_from(amount.nanos / 1_000_000).expect("fits")
}

/// One round: the kubelet restarted with `kube_reserved` and `system_reserved` (cpu in
/// milli-CPUs, memory in MiB); the cgroup and, in cluster mode, the Node follow.
fn round(
    node: &mut Node,
    base: &[String],
    cluster: Option<&Cluster>,
    kube: (i64, i64),
    system: (i64, i64),
) {
    node.extra_args = base.to_vec();
    node.extra_args.extend([
        "--kube-reserved".to_owned(),
        format!("cpu={}m,memory={}Mi", kube.0, kube.1),
        "--system-reserved".to_owned(),
        format!("cpu={}m,memory={}Mi", system.0, system.1),
    ]);
    node.start_kubelet();
    node.wait_for(Duration::from_secs(90), "web running", |n| {
        n.pod("web").filter(|p| phase(p) == "Running")
    });
    let reserved_cpu = kube.0 + system.0;
    let reserved_memory = (kube.1 + system.1) * MI;
    let kubepods = format!("{}/kubepods", node.cgroup_root);
    let memory = mem_total_bytes() - reserved_memory - hugepage_bytes();
    let cpu = online_cpus() * 1000 - reserved_cpu;
    assert_eq!(
        cg_read("memory", &kubepods, "memory.limit_in_bytes"),
        // The kernel keeps whole pages.
        (memory / 4096 * 4096).to_string(),
        "{}",
        node.log()
    );
    assert_eq!(
        cg_read("cpu", &kubepods, "cpu.shares"),
        shares(cpu).to_string()
    );
    assert!(
        node.log()
            .contains("Updated Node Allocatable limit across pods"),
        "{}",
        node.log()
    );
    let Some(cluster) = cluster else {
        return;
    };
    // The Node follows (a restarted kubelet patches its status at once).
    let deadline = Instant::now() + Duration::from_secs(60);
    let (capacity, allocatable) = loop {
        // Not registered yet on the first round: `kubectl get` fails.
        let status = cluster
            .kubectl(&["get", "node", NODE, "-o", "json"])
            .ok()
            .and_then(|out| serde_json::from_str::<Value>(&out).ok())
            .map(|n| n["status"].clone())
            .unwrap_or_default();
        let capacity = status["capacity"].clone();
        let allocatable = status["allocatable"].clone();
        if allocatable.get("cpu").is_some()
            && milli(&capacity, "cpu") - milli(&allocatable, "cpu") == reserved_cpu
        {
            break (capacity, allocatable);
        }
        assert!(
            Instant::now() < deadline,
            "Node never followed: {status}\n{}",
            cluster.log_tail()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(milli(&capacity, "cpu"), online_cpus() * 1000);
    assert_eq!(milli(&capacity, "memory"), mem_total_bytes() * 1000);
    assert_eq!(
        milli(&allocatable, "memory"),
        // Upstream's formula: the hard eviction threshold (the testbed's
        // memory.available<100Mi) is held back too.
        (mem_total_bytes() - reserved_memory - 100 * MI - hugepage_bytes()) * 1000,
        "{allocatable}"
    );
    // No nodefs threshold in the testbed's --eviction-hard: storage is all allocatable.
    assert_eq!(
        allocatable["ephemeral-storage"], capacity["ephemeral-storage"],
        "{allocatable}"
    );
    assert_eq!(allocatable["pods"], "110");
}

#[test]
fn the_kubepods_cgroup_is_sized_to_allocatable() {
    if !v1_cgroups() {
        eprintln!("skipping: this test reads cgroup v1 files");
        return;
    }
    let cluster = support::node_cluster();
    let mut cleanup = CgroupCleanup(String::new());
    let mut node = Node::new("alloc");
    cleanup.0 = node.cgroup_root.clone();
    let base = match &cluster {
        Some(c) => {
            let kubeconfig = c.node_kubeconfig(NODE).expect("node kubeconfig");
            vec!["--kubeconfig".to_owned(), kubeconfig.display().to_string()]
        }
        None => {
            eprintln!("no kube-apiserver: checking the cgroup only");
            Vec::new()
        }
    };
    node.write_manifest(
        "web.yaml",
        &support::pod_yaml("web", "Always", &[("app", "exec sleep 3600")]),
    );
    round(&mut node, &base, cluster.as_ref(), (500, 256), (250, 128));
    node.stop_kubelet();
    round(&mut node, &base, cluster.as_ref(), (1000, 1024), (0, 0));
    node.stop_kubelet();
}
