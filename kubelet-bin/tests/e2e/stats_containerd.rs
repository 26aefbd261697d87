//! `/stats/summary` on a real containerd (issue 14, acceptance 4): a container burning CPU
//! under a 200m limit and holding 48 MiB in a tmpfs; its CPU time in the summary lies between
//! its own cgroup's right before and right after the request (a cumulative counter the
//! kubelet reads live while serving it), its memory working set within 10 % of the cgroup's,
//! the pod's with the pod cgroup; `usageNanoCores` appears from the second summary and stays
//! within the limit;
//! the pod has network counters, its emptyDir volume and ephemeral storage; the node has
//! CPU, memory, fs and the image filesystem, and the `kubelet` and `runtime` system
//! containers agree with the kubelet's and containerd's cgroups. `/metrics/resource` and `/metrics/cadvisor`
//! parse as Prometheus text and carry the same readings.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
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

/// One cgroup reading taken right before and right after a request.
#[derive(Clone, Copy, Debug)]
struct Window {
    before: u64,
    after: u64,
}

impl Window {
    /// A cumulative counter (CPU time) that the kubelet read while serving the request (live:
    /// `ListContainerStats` of the runtime, or the cgroup file): it only grows, so the
    /// reported value lies in the window, however long the request took under load. `slack`
    /// absorbs a float's rounding (a Prometheus value in seconds). A stale reading or another
    /// cgroup's counter falls outside.
    fn assert_counter(&self, what: &str, reported: u64, slack: u64) {
        assert!(
            self.before.saturating_sub(slack) <= reported
                && reported <= self.after.saturating_add(slack),
            "{what}: reported {reported}, the cgroup's {} right before and {} right after the \
             request (a stale reading or the wrong cgroup)",
            self.before,
            self.after
        );
    }

    /// A gauge (a working set): within 10 % of the range the cgroup's value moved in during
    /// the request.
    fn assert_gauge(&self, what: &str, reported: u64) {
        let lo = self.before.min(self.after) as f64 * 0.9;
        let hi = self.before.max(self.after) as f64 * 1.1;
        assert!(
            (lo..=hi).contains(&(reported as f64)),
            "{what}: reported {reported}, the cgroup's {} right before and {} right after the \
             request",
            self.before,
            self.after
        );
    }
}

/// A reading the checks compare with: its label, the cgroup and the reader
/// ([`cpu_nanos`] or [`working_set`]).
type Reading<'a> = (&'a str, &'a str, fn(&str) -> u64);

/// `request`, with every one of `readings` taken right before and right after it, by label.
fn around<T>(
    readings: &[Reading<'_>],
    request: impl FnOnce() -> T,
) -> (T, HashMap<String, Window>) {
    let read = || -> Vec<u64> {
        readings
            .iter()
            .map(|(_, cgroup, reader)| reader(cgroup))
            .collect()
    };
    let before = read();
    let value = request();
    let windows = readings
        .iter()
        .zip(before.into_iter().zip(read()))
        .map(|((label, _, _), (before, after))| ((*label).to_owned(), Window { before, after }))
        .collect();
    (value, windows)
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

    // The system containers (upstream `summary_sys_containers.go`): the kubelet's own cgroup,
    // containerd's (the CRI socket's server) and the pods' cgroup root.
    let kubelet_pid = node.kubelet_pid().expect("the kubelet runs");
    let containerd_pid = node.testbed.pid().expect("containerd runs");
    let kubelet_cgroups = [
        process_cgroup(kubelet_pid, "cpuacct"),
        process_cgroup(kubelet_pid, "memory"),
    ];
    let runtime_cgroups = [
        process_cgroup(containerd_pid, "cpuacct"),
        process_cgroup(containerd_pid, "memory"),
    ];
    let start = Timestamp::now();
    let (s, cg) = around(
        &[
            ("container cpu", &container_cgroup, cpu_nanos),
            ("container working set", &container_cgroup, working_set),
            ("pod cpu", &pod_cgroup, cpu_nanos),
            ("pod working set", &pod_cgroup, working_set),
            ("kubelet cpu", &kubelet_cgroups[0], cpu_nanos),
            ("kubelet working set", &kubelet_cgroups[1], working_set),
            ("runtime cpu", &runtime_cgroups[0], cpu_nanos),
            ("runtime working set", &runtime_cgroups[1], working_set),
        ],
        || summary(&node),
    );
    let end = Timestamp::now();
    let p = pod_stats(&s, &burner()).expect("burner in the summary");
    let c = container(p, "burn").expect("burn container");
    eprintln!(
        "container: {c}\npod cpu {} memory {}\ncgroups: {cg:?}",
        p["cpu"], p["memory"]
    );

    // The runtime read the container's counter during the request, not before it.
    let read_at: Timestamp = c["cpu"]["time"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("a cpu time in {c}"));
    assert!(
        (start.as_second()..=end.as_second()).contains(&read_at.as_second()),
        "the container's CPU was read at {read_at}, the request ran from {start} to {end}"
    );
    cg["container cpu"].assert_counter("container cpu", u64_at(c, "/cpu/usageCoreNanoSeconds"), 0);
    cg["container working set"].assert_gauge(
        "container working set",
        u64_at(c, "/memory/workingSetBytes"),
    );
    cg["pod cpu"].assert_counter("pod cpu", u64_at(p, "/cpu/usageCoreNanoSeconds"), 0);
    cg["pod working set"].assert_gauge("pod working set", u64_at(p, "/memory/workingSetBytes"));
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

    let system = |name: &str| {
        n["systemContainers"]
            .as_array()
            .and_then(|all| all.iter().find(|c| c["name"] == name))
            .unwrap_or_else(|| panic!("{name} in {}", n["systemContainers"]))
            .clone()
    };
    for name in ["kubelet", "runtime"] {
        let stats = system(name);
        cg[&format!("{name} cpu")].assert_counter(
            &format!("{name} cpu"),
            u64_at(&stats, "/cpu/usageCoreNanoSeconds"),
            0,
        );
        cg[&format!("{name} working set")].assert_gauge(
            &format!("{name} working set"),
            u64_at(&stats, "/memory/workingSetBytes"),
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
    let (text, cg) = around(
        &[
            ("container cpu", &container_cgroup, cpu_nanos),
            ("container working set", &container_cgroup, working_set),
        ],
        || get(&node, "/metrics/resource"),
    );
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
    cg["container working set"].assert_gauge(
        "container_memory_working_set_bytes",
        value("container_memory_working_set_bytes", Some("burn")) as u64,
    );
    // Seconds as a float: a microsecond's slack for its rounding.
    cg["container cpu"].assert_counter(
        "container_cpu_usage_seconds_total",
        (value("container_cpu_usage_seconds_total", Some("burn")) * 1e9) as u64,
        1_000,
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
