//! `/stats/summary` on a real containerd (issue 14, acceptance 4): a container burning CPU
//! under a 200m limit and holding 48 MiB in a tmpfs; its CPU time and memory working set in
//! the summary agree within 10 % with its own cgroup (read right after), the pod's with the
//! pod cgroup; `usageNanoCores` appears from the second summary and stays within the limit;
//! the pod has network counters, its emptyDir volume and ephemeral storage; the node has
//! CPU, memory, fs and the image filesystem, and the `kubelet` and `runtime` system
//! containers agree with the kubelet's and containerd's cgroups. `/metrics/resource` and `/metrics/cadvisor`
//! parse as Prometheus text and carry the same readings.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::{CgroupCleanup, Node, cg_read, container_status, phase, uid, v1_cgroups};

/// The static pod's name: the manifest's, suffixed with the node's.
fn burner() -> String {
    format!("burner-{}", support::NODE)
}

const POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: burner
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: burn
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "dd if=/dev/zero of=/dev/shm/fill bs=1M count=48 && dd if=/dev/zero of=/scratch/f bs=1M count=4 && touch /scratch/done && yes > /dev/null"]
    resources:
      limits: {cpu: 200m, memory: 256Mi}
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
  volumes:
  - name: scratch
    emptyDir: {}
"#;

/// `GET https://127.0.0.1:<port><path>` (anonymous under AlwaysAllow: the harness's --anonymous-auth=true).
fn get(node: &Node, path: &str) -> String {
    let out = std::process::Command::new("curl")
        .args(["-sSfk"])
        .arg(format!("https://127.0.0.1:{}{path}", node.port))
        .output()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "{path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn summary(node: &Node) -> Value {
    serde_json::from_str(&get(node, "/stats/summary")).expect("summary json")
}

fn pod_stats<'a>(summary: &'a Value, name: &str) -> Option<&'a Value> {
    summary["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["name"] == name)
}

fn container<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

fn u64_at(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{pointer} in {v}"))
}

/// cgroup v1 working set: usage − total_inactive_file.
fn working_set(cgroup: &str) -> u64 {
    let usage: u64 = cg_read("memory", cgroup, "memory.usage_in_bytes")
        .parse()
        .expect("usage");
    let stat = cg_read("memory", cgroup, "memory.stat");
    let inactive: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("total_inactive_file "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    usage.saturating_sub(inactive)
}

fn cpu_nanos(cgroup: &str) -> u64 {
    cg_read("cpuacct", cgroup, "cpuacct.usage")
        .parse()
        .expect("cpuacct.usage")
}

/// The cgroup of process `pid` in the v1 hierarchy of `controller`.
fn process_cgroup(pid: u32, controller: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("proc cgroup");
    text.lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == controller)
                .then(|| path.to_owned())
        })
        .unwrap_or_else(|| panic!("{controller} in {text}"))
}

fn within_10_percent(what: &str, reported: u64, actual: u64) {
    let (lo, hi) = (actual as f64 * 0.9, actual as f64 * 1.1);
    assert!(
        (lo..=hi).contains(&(reported as f64)),
        "{what}: summary {reported}, cgroup {actual}"
    );
}

#[test]
fn summary_agrees_with_the_cgroups() {
    if !v1_cgroups() {
        eprintln!("skipping: this test reads cgroup v1 files");
        return;
    }
    let mut cleanup = CgroupCleanup(String::new());
    let node = Node::start("stats");
    cleanup.0 = node.cgroup_root.clone();
    node.write_manifest("burner.yaml", POD);
    let pod = node.wait_for(Duration::from_secs(60), "burner running", |n| {
        n.pod("burner").filter(|p| phase(p) == "Running")
    });
    let id = container_status(&pod, "burn")
        .and_then(|c| c["containerID"].as_str())
        .and_then(|s| s.split_once("://"))
        .map(|(_, id)| id.to_owned())
        .expect("container id");
    let pod_cgroup = format!("{}/kubepods/pod{}", node.cgroup_root, uid(&pod));
    let container_cgroup = format!("{pod_cgroup}/{id}");
    // The container has filled its tmpfs and its emptyDir. The first summary starts the
    // pod's volume calculator, which walks at once and then only every minute or two: it
    // must not walk before the emptyDir is written.
    let done = node
        .dir
        .join("kubelet/root/pods")
        .join(uid(&pod))
        .join("volumes/kubernetes.io~empty-dir/scratch/done");
    node.wait_for(Duration::from_secs(30), "the memory held", |_| {
        (working_set(&container_cgroup) > 48 << 20 && done.exists()).then_some(())
    });
    // containerd reports the image filesystem once its snapshot stats ran (up to 10 s).
    node.wait_for(
        Duration::from_secs(30),
        "the pod and imageFs in the summary",
        |n| {
            let s = summary(n);
            (pod_stats(&s, &burner()).is_some()
                && s["node"]["runtime"]["imageFs"]["usedBytes"].as_u64() > Some(0))
            .then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(2));

    let s = summary(&node);
    let (cg_cpu, cg_ws) = (cpu_nanos(&container_cgroup), working_set(&container_cgroup));
    let (pod_cg_cpu, pod_cg_ws) = (cpu_nanos(&pod_cgroup), working_set(&pod_cgroup));
    let p = pod_stats(&s, &burner()).expect("burner in the summary");
    let c = container(p, "burn").expect("burn container");
    eprintln!(
        "container: {c}\npod cpu {} memory {}",
        p["cpu"], p["memory"]
    );

    within_10_percent(
        "container cpu",
        u64_at(c, "/cpu/usageCoreNanoSeconds"),
        cg_cpu,
    );
    within_10_percent(
        "container working set",
        u64_at(c, "/memory/workingSetBytes"),
        cg_ws,
    );
    within_10_percent(
        "pod cpu",
        u64_at(p, "/cpu/usageCoreNanoSeconds"),
        pod_cg_cpu,
    );
    within_10_percent(
        "pod working set",
        u64_at(p, "/memory/workingSetBytes"),
        pod_cg_ws,
    );
    // Two samples: a rate, which the 200m CFS limit caps.
    let cores = u64_at(c, "/cpu/usageNanoCores");
    assert!(cores > 0 && cores <= 300_000_000, "usageNanoCores {cores}");
    let pod_cores = u64_at(p, "/cpu/usageNanoCores");
    assert!(pod_cores <= 300_000_000, "pod usageNanoCores {pod_cores}");

    // The writable layer, the pod's network, the emptyDir and ephemeral storage.
    assert!(c["rootfs"]["usedBytes"].is_u64(), "{c}");
    assert!(
        c["rootfs"]["capacityBytes"].as_u64().unwrap_or(0) > 0,
        "{c}"
    );
    assert_eq!(p["network"]["name"], "eth0", "{}", p["network"]);
    assert!(p["network"]["rxBytes"].is_u64(), "{}", p["network"]);
    let scratch = p["volume"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "scratch"))
        .unwrap_or_else(|| panic!("scratch volume in {}", p["volume"]));
    assert!(u64_at(scratch, "/usedBytes") >= 4 << 20, "{scratch}");
    assert!(u64_at(p, "/ephemeral-storage/usedBytes") >= 4 << 20, "{p}");

    // The node.
    let n = &s["node"];
    assert_eq!(n["nodeName"], support::NODE);
    assert!(u64_at(n, "/cpu/usageCoreNanoSeconds") > 0);
    assert!(u64_at(n, "/memory/workingSetBytes") > 0);
    assert!(u64_at(n, "/memory/availableBytes") > 0);
    assert!(u64_at(n, "/fs/capacityBytes") > 0);
    assert!(u64_at(n, "/runtime/imageFs/usedBytes") > 0, "{n}");
    assert!(n["startTime"].is_string());

    // The system containers (upstream `summary_sys_containers.go`): the kubelet's own cgroup,
    // containerd's (the CRI socket's server) and the pods' cgroup root.
    let system = |name: &str| {
        n["systemContainers"]
            .as_array()
            .and_then(|all| all.iter().find(|c| c["name"] == name))
            .unwrap_or_else(|| panic!("{name} in {}", n["systemContainers"]))
            .clone()
    };
    let kubelet_pid = node.kubelet_pid().expect("the kubelet runs");
    let containerd_pid = node.testbed.pid().expect("containerd runs");
    let (kubelet, runtime) = (system("kubelet"), system("runtime"));
    let system_readings = [
        ("kubelet", &kubelet, kubelet_pid),
        ("runtime", &runtime, containerd_pid),
    ]
    .map(|(name, stats, pid)| {
        (
            name,
            stats.clone(),
            cpu_nanos(&process_cgroup(pid, "cpuacct")),
            working_set(&process_cgroup(pid, "memory")),
        )
    });
    for (name, stats, cg_cpu, cg_ws) in &system_readings {
        within_10_percent(
            &format!("{name} cpu"),
            u64_at(stats, "/cpu/usageCoreNanoSeconds"),
            *cg_cpu,
        );
        within_10_percent(
            &format!("{name} working set"),
            u64_at(stats, "/memory/workingSetBytes"),
            *cg_ws,
        );
        assert!(stats["startTime"].is_string(), "{stats}");
    }
    let pods = system("pods");
    assert!(
        u64_at(&pods, "/memory/workingSetBytes") >= 48 << 20,
        "{pods}"
    );

    // CPU and memory only: nothing else, and the rate of the last full summary.
    let only: Value =
        serde_json::from_str(&get(&node, "/stats/summary?only_cpu_and_memory=true")).expect("json");
    let p = pod_stats(&only, &burner()).expect("burner");
    assert!(
        p.get("network").is_none() && p.get("volume").is_none(),
        "{p}"
    );
    let c = container(p, "burn").expect("burn");
    assert!(c.get("rootfs").is_none(), "{c}");
    assert!(c["memory"]["workingSetBytes"].as_u64().unwrap_or(0) > 48 << 20);
    assert!(only["node"].get("fs").is_none());

    // /metrics/resource, parsed as a scraper does: the same readings, with timestamps.
    let text = get(&node, "/metrics/resource");
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("/metrics/resource parses");
    let value = |name: &str, container: Option<&str>| -> f64 {
        let sample = scrape
            .samples
            .iter()
            .find(|s| {
                s.metric == name
                    && s.labels.get("pod") == Some(burner().as_str())
                    && s.labels.get("namespace") == Some("default")
                    && s.labels.get("container") == container
            })
            .unwrap_or_else(|| panic!("{name} {container:?} in\n{text}"));
        match sample.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
            ref other => panic!("{name}: {other:?}"),
        }
    };
    let cg_ws = working_set(&container_cgroup);
    let cg_cpu = cpu_nanos(&container_cgroup);
    within_10_percent(
        "container_memory_working_set_bytes",
        value("container_memory_working_set_bytes", Some("burn")) as u64,
        cg_ws,
    );
    within_10_percent(
        "container_cpu_usage_seconds_total",
        (value("container_cpu_usage_seconds_total", Some("burn")) * 1e9) as u64,
        cg_cpu,
    );
    assert!(value("pod_cpu_usage_seconds_total", None) > 0.0);
    assert!(value("pod_memory_working_set_bytes", None) > f64::from(48u32 << 20));
    assert!(value("container_start_time_seconds", Some("burn")) > 1.6e9);
    for name in [
        "node_cpu_usage_seconds_total",
        "node_memory_working_set_bytes",
    ] {
        assert!(
            scrape.samples.iter().any(|s| s.metric == name),
            "{name} in\n{text}"
        );
    }
    assert!(text.contains("\nscrape_error 0\n"), "{text}");
    assert!(text.contains("# TYPE container_cpu_usage_seconds_total counter\n"));

    // /metrics/cadvisor: the container by its cgroup, image and ID; the sandbox's network.
    let text = get(&node, "/metrics/cadvisor");
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("/metrics/cadvisor parses");
    let burn = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "container_memory_working_set_bytes"
                && s.labels.get("container") == Some("burn")
        })
        .unwrap_or_else(|| panic!("burn in\n{text}"));
    assert_eq!(burn.labels.get("id"), Some(container_cgroup.as_str()));
    assert_eq!(burn.labels.get("name"), Some(id.as_str()));
    assert_eq!(burn.labels.get("pod"), Some(burner().as_str()));
    assert!(
        burn.labels.get("image").is_some_and(|i| !i.is_empty()),
        "{:?}",
        burn.labels
    );
    let rx = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "container_network_receive_bytes_total"
                && s.labels.get("pod") == Some(burner().as_str())
        })
        .unwrap_or_else(|| panic!("network in\n{text}"));
    assert_eq!(rx.labels.get("interface"), Some("eth0"));
    for name in [
        "container_cpu_usage_seconds_total",
        "container_memory_usage_bytes",
        "container_fs_usage_bytes",
        "container_network_transmit_bytes_total",
    ] {
        assert!(
            scrape
                .samples
                .iter()
                .any(|s| s.metric == name && s.labels.get("container") == Some("burn"))
                || name.starts_with("container_network"),
            "{name} in\n{text}"
        );
    }
    assert!(
        scrape
            .samples
            .iter()
            .any(|s| s.metric == "container_cpu_usage_seconds_total"
                && s.labels.get("id") == Some("/")),
        "the root cgroup in\n{text}"
    );
}
