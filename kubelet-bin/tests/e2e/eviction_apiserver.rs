//! Issue 15, acceptances 3 and 4, with every component real: the `kubelet` binary in cluster
//! mode on a private containerd against a real kube-apiserver (static pods are critical and
//! never evicted, so the pods come from the API).
//!
//! 3. `--eviction-hard=memory.available<X` with X 2 GiB below what the node has available
//!    when the kubelet starts; a BestEffort pod fills a 4 GiB memory-backed emptyDir, so
//!    memory.available falls below X: that pod is evicted (`Failed` / `Evicted`, upstream's
//!    message, a `DisruptionTarget` condition), the Guaranteed pod is kept (once the hog's
//!    tmpfs is gone, memory is back above X), the Node reports `MemoryPressure` True, and a
//!    new BestEffort pod is refused while the condition lasts (the 5 min transition period).
//! 4. A pod writing 4 MiB into an emptyDir with `sizeLimit: 1Mi` is evicted with upstream's
//!    message; so is a pod whose container writes 4 MiB into its writable layer past its
//!    `ephemeral-storage` limit of 1 MiB.
//!
//! An evicted pod keeps its record in the API (`Failed` / `Evicted`) while container GC
//! (every 5 s here) removes its containers and sandbox from containerd (upstream `IsEvicted`),
//! and `/metrics` counts each eviction under its signal (`kubelet_evictions`).
//!
//! The memory part reads the root memory cgroup (v1) the way the kubelet's summary does, and
//! is skipped without it. The memory of a shared machine moves: the 2 GiB margins on both
//! sides of X are what keeps it from deciding the outcome.
//!
//! Skipped when kube-apiserver is not built, unless `KUBELET_REQUIRE_APISERVER` is set (CI).

use crate::support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{NODE, Node, cg_read, get_json, kubectl_create, kubectl_wait, v1_cgroups};
use xtask::apiserver::Cluster;

const MI: u64 = 1 << 20;

/// What the kubelet's summary calls the node's available memory: `MemTotal` − the root
/// cgroup's working set (usage − `total_inactive_file`).
fn node_memory_available() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").expect("/proc/meminfo");
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemTotal");
    let usage: u64 = cg_read("memory", "", "memory.usage_in_bytes")
        .parse()
        .expect("usage");
    let inactive: u64 = cg_read("memory", "", "memory.stat")
        .lines()
        .find_map(|l| l.strip_prefix("total_inactive_file "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (total_kib * 1024).saturating_sub(usage.saturating_sub(inactive))
}

fn pod_yaml(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  \
         nodeName: {NODE}\n  terminationGracePeriodSeconds: 1\n{spec}"
    )
}

fn container(name: &str, command: &str, extra: &str) -> String {
    format!(
        "  - name: {name}\n    image: docker.io/library/busybox:1.36\n    \
         imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", \"{command}\"]\n{extra}"
    )
}

fn pod(cluster: &Cluster, name: &str) -> Value {
    get_json(cluster, &["get", "pod", name])
}

fn wait_evicted(cluster: &Cluster, node: &Node, name: &str) -> Value {
    kubectl_wait(
        cluster,
        node,
        &[
            "--for=jsonpath={.status.reason}=Evicted",
            &format!("pod/{name}"),
        ],
        120,
    );
    let p = pod(cluster, name);
    assert_eq!(p["status"]["phase"], "Failed", "{p}");
    println!("{name}: {}", p["status"]["message"]);
    p
}

fn message(p: &Value) -> &str {
    p["status"]["message"].as_str().unwrap_or_default()
}

#[test]
fn pods_are_evicted_under_memory_pressure_and_past_their_local_storage_limits() {
    let Some(cluster) = support::node_cluster() else {
        return;
    };
    let mut node = Node::new("evict");
    let kubeconfig = cluster.node_kubeconfig(NODE).expect("node kubeconfig");
    let memory = v1_cgroups();
    let threshold_mi = memory.then(|| node_memory_available() / MI - 2048);
    node.extra_args = vec![
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--experimental-container-gc-period=5s".into(),
    ];
    if let Some(x) = threshold_mi {
        node.extra_args
            .push(format!("--eviction-hard=memory.available<{x}Mi"));
    } else {
        eprintln!("no cgroup v1 memory hierarchy: skipping the memory part");
    }
    node.start_kubelet();
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", &format!("node/{NODE}")],
        60,
    );

    if threshold_mi.is_some() {
        memory_pressure(&cluster, &node);
    }
    local_storage(&cluster, &node);

    let metrics = secure_get(&node, "/metrics");
    let evictions = |signal: &str| -> u64 {
        let prefix = format!("kubelet_evictions{{eviction_signal=\"{signal}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    assert!(
        metrics.contains("# TYPE kubelet_evictions counter\n"),
        "{metrics}"
    );
    assert_eq!(evictions("emptydirfs.limit"), 1, "{metrics}");
    assert_eq!(evictions("ephemeralcontainerfs.limit"), 1, "{metrics}");
    if threshold_mi.is_some() {
        // The hog, and whatever else a moving shared machine made go.
        assert!(evictions("memory.available") >= 1, "{metrics}");
    }
}

/// `curl -k` of `path` on the node's secure port (anonymous under AlwaysAllow: the harness's --anonymous-auth=true).
fn secure_get(node: &Node, path: &str) -> String {
    let out = std::process::Command::new("curl")
        .args(["-sS", "-k", "--fail"])
        .arg(format!("https://127.0.0.1:{}{path}", node.port))
        .output()
        .expect("curl runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Upstream `IsEvicted`: the evicted pod's containers and sandbox leave containerd while its
/// record stays in the API.
fn wait_content_removed(cluster: &Cluster, node: &Node, evicted: &Value) {
    let name = evicted["metadata"]["name"].as_str().unwrap_or_default();
    let uid = evicted["metadata"]["uid"].as_str().unwrap_or_default();
    assert!(!uid.is_empty(), "{evicted}");
    node.wait_for(
        Duration::from_secs(120),
        &format!("{name}'s containers removed from containerd"),
        |n| n.runtime_containers(uid).is_empty().then_some(()),
    );
    let p = pod(cluster, name);
    assert_eq!(p["status"]["phase"], "Failed", "the record stays: {p}");
    assert_eq!(p["status"]["reason"], "Evicted", "{p}");
}

/// Acceptance 3.
fn memory_pressure(cluster: &Cluster, node: &Node) {
    let guaranteed = pod_yaml(
        "guaranteed",
        &format!(
            "  containers:\n{}",
            container(
                "app",
                "sleep 3600",
                "    resources:\n      limits: {cpu: 100m, memory: 64Mi}\n"
            )
        ),
    );
    kubectl_create(cluster, node, "guaranteed.yaml", &guaranteed);
    kubectl_wait(
        cluster,
        node,
        &["--for=condition=Ready", "pod/guaranteed"],
        60,
    );
    let hog = pod_yaml(
        "hog",
        &format!(
            "  containers:\n{}  volumes:\n  - name: ram\n    emptyDir: {{medium: Memory}}\n",
            container(
                "hog",
                "dd if=/dev/zero of=/ram/fill bs=1M count=4096 && sleep 3600",
                "    volumeMounts:\n    - {name: ram, mountPath: /ram}\n"
            )
        ),
    );
    kubectl_create(cluster, node, "hog.yaml", &hog);
    let hog = wait_evicted(cluster, node, "hog");
    let m = message(&hog);
    assert!(
        m.starts_with("The node was low on resource: memory. Threshold quantity: ")
            && m.contains(", available: ")
            && m.contains(". Container hog was using ")
            && m.ends_with(", request is 0, has larger consumption of memory. "),
        "upstream's message: {m}"
    );
    let conditions = hog["status"]["conditions"].to_string();
    assert!(
        conditions.contains("DisruptionTarget") && conditions.contains("TerminationByKubelet"),
        "{conditions}"
    );
    kubectl_wait(
        cluster,
        node,
        &["--for=condition=MemoryPressure", &format!("node/{NODE}")],
        60,
    );

    // A new BestEffort pod is refused while the condition lasts.
    let late = pod_yaml(
        "late",
        &format!("  containers:\n{}", container("app", "sleep 3600", "")),
    );
    kubectl_create(cluster, node, "late.yaml", &late);
    let late = wait_evicted(cluster, node, "late");
    assert_eq!(
        message(&late),
        "Pod was rejected: The node had condition: [MemoryPressure]. "
    );

    // The Guaranteed pod stays through the next rounds (every 10 s): nothing tells that
    // nothing happened, so it is watched for three rounds.
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        let g = pod(cluster, "guaranteed");
        assert_eq!(
            g["status"]["phase"], "Running",
            "the Guaranteed pod is kept: {g}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Acceptance 4.
fn local_storage(cluster: &Cluster, node: &Node) {
    // Burstable, so that a memory pressure left from the first part does not refuse them.
    let requests = "    resources:\n      requests: {cpu: 10m}\n";
    let writer = pod_yaml(
        "emptydir-writer",
        &format!(
            "  containers:\n{}  volumes:\n  - name: scratch\n    emptyDir: {{sizeLimit: 1Mi}}\n",
            container(
                "writer",
                "dd if=/dev/zero of=/scratch/f bs=1M count=4 && sleep 3600",
                &format!(
                    "{requests}    volumeMounts:\n    - {{name: scratch, mountPath: /scratch}}\n"
                )
            )
        ),
    );
    kubectl_create(cluster, node, "emptydir-writer.yaml", &writer);
    // Two containers: the pod's limit (the sum, 11Mi) holds, the writer's own does not.
    let layer = pod_yaml(
        "layer-writer",
        &format!(
            "  containers:\n{}{}",
            container(
                "writer",
                "dd if=/dev/zero of=/f bs=1M count=4 && sleep 3600",
                "    resources:\n      requests: {cpu: 10m}\n      limits: {ephemeral-storage: 1Mi}\n"
            ),
            container(
                "idle",
                "sleep 3600",
                "    resources:\n      limits: {ephemeral-storage: 10Mi}\n"
            )
        ),
    );
    kubectl_create(cluster, node, "layer-writer.yaml", &layer);
    let p = wait_evicted(cluster, node, "emptydir-writer");
    assert_eq!(
        message(&p),
        "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". "
    );
    wait_content_removed(cluster, node, &p);
    let p = wait_evicted(cluster, node, "layer-writer");
    assert_eq!(
        message(&p),
        "Container writer exceeded its local ephemeral storage limit \"1Mi\". "
    );
    wait_content_removed(cluster, node, &p);
}
