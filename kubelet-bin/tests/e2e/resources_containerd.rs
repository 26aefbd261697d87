//! Resources, QoS, DNS and `/etc/hosts` acceptance against a real containerd (issue 3,
//! acceptance 6): Guaranteed, Burstable and BestEffort pods land in their `kubepods` cgroup
//! with upstream's cpu/memory settings and `oom_score_adj`; pod cgroups go with the pod; the
//! managed `/etc/hosts` and the DNS policies are what containers see.
//!
//! containerd runs with `restrict_oom_score_adj = true` here (no CAP_SYS_RESOURCE), so it
//! raises a Guaranteed container's −997 to its own score: the test checks what the kubelet
//! sent (its log and the OCI spec containerd wrote) and what the container process has.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use support::{CgroupCleanup, NODE, Node, cg_read, container_status, phase, uid, v1_cgroups};

const IMAGE: &str = "docker.io/library/busybox:1.36";

fn container_id(pod: &Value, name: &str) -> Option<String> {
    container_status(pod, name)?["containerID"]
        .as_str()?
        .split_once("://")
        .map(|(_, id)| id.to_owned())
}

fn task_pid(node: &Node, id: &str) -> u32 {
    let tasks = node.testbed.ctr(&["tasks", "ls"]).expect("ctr tasks ls");
    tasks
        .lines()
        .find(|l| l.starts_with(id))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no task for {id}: {tasks}"))
}

/// The cgroup path of `pid` in the v1 hierarchy of `controller`.
fn proc_cgroup(pid: u32, controller: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("proc cgroup");
    text.lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _ = parts.next();
            let controllers = parts.next()?;
            let path = parts.next()?;
            controllers
                .split(',')
                .any(|c| c == controller)
                .then(|| path.to_owned())
        })
        .unwrap_or_else(|| panic!("no {controller} line in {text}"))
}

fn cg_dir(controller: &str, path: &str) -> PathBuf {
    Path::new("/sys/fs/cgroup")
        .join(controller)
        .join(path.trim_start_matches('/'))
}

/// `process.oomScoreAdj` of the OCI spec containerd generated for the container.
fn spec_oom_score_adj(node: &Node, id: &str) -> i64 {
    let info = node
        .testbed
        .ctr(&["containers", "info", id])
        .expect("ctr containers info");
    let v: Value = serde_json::from_str(&info).expect("container info json");
    v["Spec"]["process"]["oomScoreAdj"].as_i64().unwrap_or(0)
}

fn mem_total() -> i64 {
    let text = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    let kib: i64 = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("MemTotal");
    kib * 1024
}

fn pod_manifest(name: &str, resources: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    resources: {resources}
"#
    )
}

#[test]
fn qos_classes_land_in_their_cgroups_with_upstream_limits() {
    if !v1_cgroups() {
        eprintln!("skipping: this test reads cgroup v1 files");
        return;
    }
    let mut cleanup = CgroupCleanup(String::new());
    let node = Node::start("res-qos");
    let root = node.cgroup_root.clone();
    cleanup.0 = root.clone();
    node.write_manifest(
        "g.yaml",
        &pod_manifest("guaranteed", "{limits: {cpu: 250m, memory: 64Mi}}"),
    );
    node.write_manifest(
        "b.yaml",
        &pod_manifest(
            "burstable",
            "{requests: {cpu: 100m, memory: 512Mi}, limits: {memory: 1Gi}}",
        ),
    );
    node.write_manifest("be.yaml", &pod_manifest("besteffort", "{}"));

    let running = |n: &Node, name: &str| {
        n.pod(name)
            .filter(|p| phase(p) == "Running")
            .and_then(|p| container_id(&p, "app").map(|id| (p, id)))
    };
    let (g, g_id) = node.wait_for(Duration::from_secs(30), "guaranteed running", |n| {
        running(n, "guaranteed")
    });
    let (b, b_id) = node.wait_for(Duration::from_secs(30), "burstable running", |n| {
        running(n, "burstable")
    });
    let (be, be_id) = node.wait_for(Duration::from_secs(30), "besteffort running", |n| {
        running(n, "besteffort")
    });
    assert_eq!(g["status"]["qosClass"], "Guaranteed");
    assert_eq!(b["status"]["qosClass"], "Burstable");
    assert_eq!(be["status"]["qosClass"], "BestEffort");

    // Pod cgroups: where upstream puts them, with ResourceConfigForPod's limits.
    let g_pod = format!("{root}/kubepods/pod{}", uid(&g));
    let b_pod = format!("{root}/kubepods/burstable/pod{}", uid(&b));
    let be_pod = format!("{root}/kubepods/besteffort/pod{}", uid(&be));
    assert_eq!(cg_read("cpu", &g_pod, "cpu.shares"), "256");
    assert_eq!(cg_read("cpu", &g_pod, "cpu.cfs_quota_us"), "25000");
    assert_eq!(cg_read("cpu", &g_pod, "cpu.cfs_period_us"), "100000");
    assert_eq!(
        cg_read("memory", &g_pod, "memory.limit_in_bytes"),
        (64u64 << 20).to_string()
    );
    assert_eq!(cg_read("cpu", &b_pod, "cpu.shares"), "102");
    assert_eq!(cg_read("cpu", &b_pod, "cpu.cfs_quota_us"), "-1");
    assert_eq!(
        cg_read("memory", &b_pod, "memory.limit_in_bytes"),
        (1u64 << 30).to_string()
    );
    assert_eq!(cg_read("cpu", &be_pod, "cpu.shares"), "2");
    assert_eq!(
        cg_read("cpu", &format!("{root}/kubepods/besteffort"), "cpu.shares"),
        "2"
    );
    // The burstable QoS cgroup has the shares of the Burstable pods' requests.
    let burstable_qos = format!("{root}/kubepods/burstable");
    assert_eq!(cg_read("cpu", &burstable_qos, "cpu.shares"), "102");

    // Container processes: inside their pod cgroup, with the container-level settings.
    let g_pid = task_pid(&node, &g_id);
    let b_pid = task_pid(&node, &b_id);
    let be_pid = task_pid(&node, &be_id);
    for (pid, pod_cg) in [(g_pid, &g_pod), (b_pid, &b_pod), (be_pid, &be_pod)] {
        for ctrl in ["cpu", "memory"] {
            let path = proc_cgroup(pid, ctrl);
            assert!(
                path.starts_with(pod_cg.as_str()),
                "{ctrl} cgroup of {pid}: {path}"
            );
        }
    }
    let g_cg = proc_cgroup(g_pid, "cpu");
    assert_eq!(cg_read("cpu", &g_cg, "cpu.shares"), "256");
    assert_eq!(cg_read("cpu", &g_cg, "cpu.cfs_quota_us"), "25000");
    let g_mem = proc_cgroup(g_pid, "memory");
    assert_eq!(
        cg_read("memory", &g_mem, "memory.limit_in_bytes"),
        (64u64 << 20).to_string()
    );
    let b_cg = proc_cgroup(b_pid, "cpu");
    assert_eq!(cg_read("cpu", &b_cg, "cpu.shares"), "102");
    assert_eq!(cg_read("cpu", &b_cg, "cpu.cfs_quota_us"), "-1");
    assert_eq!(
        cg_read("cpu", &proc_cgroup(be_pid, "cpu"), "cpu.shares"),
        "2"
    );

    // oom_score_adj: what the kubelet sent, what containerd wrote, what the process has.
    let burstable_adj = 1000 - (1000 * (512i64 << 20)) / mem_total();
    let log = node.log();
    let sent = |pod: &str| {
        log.lines()
            .find(|l| l.contains("creating container") && l.contains(&format!("{pod}-{NODE}")))
            .and_then(|l| l.split("oom_score_adj=").nth(1))
            .and_then(|r| r.split_whitespace().next())
            .map(|v| {
                v.trim_matches('"')
                    .trim_start_matches("Some(")
                    .trim_end_matches(')')
                    .to_owned()
            })
            .unwrap_or_else(|| panic!("no creating container line for {pod} in\n{log}"))
    };
    assert_eq!(sent("guaranteed"), "-997");
    assert_eq!(sent("burstable"), burstable_adj.to_string());
    assert_eq!(sent("besteffort"), "1000");
    let containerd_adj: i64 = std::fs::read_to_string(format!(
        "/proc/{}/oom_score_adj",
        node.testbed.pid().expect("containerd pid")
    ))
    .expect("containerd oom_score_adj")
    .trim()
    .parse()
    .expect("number");
    let proc_adj = |pid: u32| -> i64 {
        std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
            .expect("oom_score_adj")
            .trim()
            .parse()
            .expect("number")
    };
    // restrict_oom_score_adj: never below containerd's own score.
    assert_eq!(spec_oom_score_adj(&node, &g_id), (-997).max(containerd_adj));
    assert_eq!(proc_adj(g_pid), (-997).max(containerd_adj));
    assert_eq!(
        spec_oom_score_adj(&node, &b_id),
        burstable_adj.max(containerd_adj)
    );
    assert_eq!(proc_adj(b_pid), burstable_adj.max(containerd_adj));
    assert_eq!(spec_oom_score_adj(&node, &be_id), 1000);
    assert_eq!(proc_adj(be_pid), 1000);

    // Removing a pod removes its cgroup once its containers are gone.
    node.remove_manifest("b.yaml");
    node.wait_for(
        Duration::from_secs(30),
        "burstable pod cgroup removed",
        |_| (!cg_dir("cpu", &b_pod).exists() && !cg_dir("memory", &b_pod).exists()).then_some(()),
    );
    assert!(cg_dir("cpu", &g_pod).exists());
    node.wait_for(
        Duration::from_secs(10),
        "burstable QoS shares back to 2",
        |_| (cg_read("cpu", &burstable_qos, "cpu.shares") == "2").then_some(()),
    );
}

#[test]
fn managed_etc_hosts_and_dns_policies() {
    let mut cleanup = CgroupCleanup(String::new());
    let mut node = Node::new("res-dns");
    cleanup.0 = node.cgroup_root.clone();
    node.extra_args = [
        "--cluster-dns",
        "10.96.0.10",
        "--cluster-domain",
        "cluster.local",
    ]
    .map(String::from)
    .to_vec();
    node.start_kubelet();
    let out = node.dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("out dir");
    let script = |name: &str| {
        format!(
            "cat /etc/hosts > /out/{name}.hosts; cat /etc/resolv.conf > /out/{name}.resolv; hostname > /out/{name}.hostname; cat /proc/1/cmdline > /out/{name}.pid1; echo done > /out/{name}.done; sleep 3600"
        )
    };
    let manifest = |name: &str, spec: &str| {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
{spec}
  containers:
  - name: app
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "{script}"]
    volumeMounts: [{{name: out, mountPath: /out}}]
  volumes:
  - {{name: out, hostPath: {{path: {out}}}}}
"#,
            script = script(name),
            out = out.display()
        )
    };
    node.write_manifest(
        "cf.yaml",
        &manifest(
            "cf",
            "  hostname: web\n  subdomain: sub\n  setHostnameAsFQDN: true\n  hostAliases:\n  - {ip: 10.1.2.3, hostnames: [db, db.local]}\n  dnsConfig:\n    options: [{name: ndots, value: \"2\"}, {name: edns0}]",
        ),
    );
    node.write_manifest(
        "none.yaml",
        &manifest(
            "none",
            "  dnsPolicy: None\n  dnsConfig:\n    nameservers: [192.0.2.53]\n    searches: [a.example, b.example]",
        ),
    );
    node.write_manifest("hostnet.yaml", &manifest("hostnet", "  hostNetwork: true"));
    node.write_manifest(
        "sharepid.yaml",
        &manifest("sharepid", "  shareProcessNamespace: true"),
    );

    for name in ["cf", "none", "hostnet", "sharepid"] {
        node.wait_for(
            Duration::from_secs(30),
            &format!("{name} wrote its files"),
            |_| out.join(format!("{name}.done")).exists().then_some(()),
        );
    }
    let read = |f: &str| std::fs::read_to_string(out.join(f)).expect("output file");

    // ClusterFirst with cluster DNS: only the cluster server, cluster search paths first,
    // ndots from dnsConfig over the default 5.
    let resolv = read("cf.resolv");
    assert!(resolv.contains("nameserver 10.96.0.10"), "{resolv}");
    assert_eq!(resolv.matches("nameserver").count(), 1, "{resolv}");
    assert!(
        resolv.contains("search default.svc.cluster.local svc.cluster.local cluster.local"),
        "{resolv}"
    );
    assert!(
        resolv.contains("ndots:2") && resolv.contains("edns0"),
        "{resolv}"
    );
    assert!(!resolv.contains("ndots:5"), "{resolv}");
    // Managed /etc/hosts: pod IP with FQDN and hostname, then the host aliases.
    let ip = node.wait_for(Duration::from_secs(10), "cf pod IP in the status", |n| {
        n.pod("cf")
            .and_then(|p| p["status"]["podIP"].as_str().map(str::to_owned))
    });
    let hosts = read("cf.hosts");
    assert!(
        hosts.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"),
        "{hosts}"
    );
    assert!(
        hosts.contains(&format!("{ip}\tweb.sub.default.svc.cluster.local\tweb\n")),
        "{hosts}"
    );
    assert!(
        hosts.ends_with("\n# Entries added by HostAliases.\n10.1.2.3\tdb\tdb.local\n"),
        "{hosts}"
    );
    assert_eq!(
        read("cf.hostname").trim(),
        "web.sub.default.svc.cluster.local"
    );

    // None: exactly dnsConfig.
    let resolv = read("none.resolv");
    assert!(resolv.contains("nameserver 192.0.2.53"), "{resolv}");
    assert!(!resolv.contains("10.96.0.10"), "{resolv}");
    assert!(resolv.contains("search a.example b.example"), "{resolv}");
    assert_eq!(read("none.hostname").trim(), format!("none-{NODE}"));

    // Host network: ClusterFirst falls back to the node's resolver; the node's hosts file
    // with the host-network header.
    // shareProcessNamespace: the sandbox's pause process is PID 1 of the container.
    let pid1 = std::fs::read_to_string(out.join("sharepid.pid1")).expect("pid1");
    assert!(pid1.starts_with("/pause"), "{pid1:?}");
    let own = std::fs::read_to_string(out.join("cf.pid1")).expect("pid1");
    assert!(own.starts_with("sh"), "{own:?}");

    let resolv = read("hostnet.resolv");
    assert!(!resolv.contains("10.96.0.10"), "{resolv}");
    let hosts = read("hostnet.hosts");
    let node_hosts = std::fs::read_to_string("/etc/hosts").expect("node hosts");
    assert_eq!(
        hosts,
        format!("# Kubernetes-managed hosts file (host network).\n{node_hosts}")
    );
}
