//! Issue 12 end to end with every component real: the `kubelet` binary with `--kubeconfig`,
//! authenticated as `system:node:it-node` (so the Node authorizer and NodeRestriction judge
//! every write), on a private containerd, against a real kube-apiserver + etcd, with the real
//! `kubectl` as the client. Acceptances 1–5: the Node goes Ready and its Lease is renewed; an
//! API pod runs as `kubectl get pods -w` sees it; `kubectl delete --grace-period=5` sends
//! SIGTERM and the object goes only after the containers; a static pod gets a mirror pod; a
//! pod asking for more cpu than the node has fails with `OutOfcpu` and never starts.
//!
//! Skipped when kube-apiserver is not built, unless `KUBELET_REQUIRE_APISERVER` is set (CI).

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{NODE, Node, get_json, kubectl_create, kubectl_wait};
use xtask::apiserver::Cluster;

/// A `kubectl get pods --watch` in the background, collecting its lines.
struct PodWatch {
    child: std::process::Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl PodWatch {
    fn start(cluster: &Cluster) -> PodWatch {
        let columns = "NAME:.metadata.name,PHASE:.status.phase,IP:.status.podIP,\
                       HOST:.status.hostIP,START:.status.startTime,\
                       STATE:.status.containerStatuses[0].state";
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(cluster.admin_kubeconfig())
            .args(["get", "pods", "--watch", "--no-headers", "-o"])
            .arg(format!("custom-columns={columns}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl get pods --watch");
        let stdout = child.stdout.take().expect("stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        });
        PodWatch { child, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_real_cluster_sees_the_node_its_pods_and_their_deletion() {
    let Some(cluster) = support::node_cluster() else {
        return;
    };
    let mut node = Node::new("cluster");
    let kubeconfig = cluster.node_kubeconfig(NODE).expect("node kubeconfig");
    node.extra_args = vec!["--kubeconfig".into(), kubeconfig.display().to_string()];
    let started = Instant::now();
    node.start_kubelet();

    // 1. The Node is Ready, with capacity, allocatable, addresses and nodeInfo.
    kubectl_wait(
        &cluster,
        &node,
        &["--for=condition=Ready", &format!("node/{NODE}")],
        60,
    );
    println!(
        "Node Ready after {:?} from the kubelet's start",
        started.elapsed()
    );
    let n = get_json(&cluster, &["get", "node", NODE]);
    for key in ["cpu", "memory", "pods", "ephemeral-storage"] {
        assert!(
            n["status"]["capacity"][key].is_string(),
            "capacity {key}: {n}"
        );
        assert!(
            n["status"]["allocatable"][key].is_string(),
            "allocatable {key}: {n}"
        );
    }
    let addresses = n["status"]["addresses"].to_string();
    assert!(addresses.contains("192.0.2.10"), "InternalIP: {addresses}");
    let info = &n["status"]["nodeInfo"];
    assert!(
        info["containerRuntimeVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("containerd://")),
        "nodeInfo: {info}"
    );
    assert!(info["kubeletVersion"].is_string() && info["bootID"].is_string());
    assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], NODE);
    let images = n["status"]["images"].to_string();
    assert!(
        images.contains("docker.io/library/busybox:1.36"),
        "the Node lists containerd's images: {images}"
    );

    // The Lease is owned by the Node and renewed.
    // The Lease comes once the Node can be read (upstream's lease controller), so it may
    // trail Ready by up to a renew interval.
    let lease_args = ["get", "lease", "-n", "kube-node-lease", NODE, "-o", "json"];
    let lease: Value = node.wait_for(Duration::from_secs(30), "the node Lease", |_| {
        let out = cluster.kubectl(&lease_args).ok()?;
        serde_json::from_str(&out).ok()
    });
    assert_eq!(lease["spec"]["holderIdentity"], NODE);
    assert_eq!(
        lease["metadata"]["ownerReferences"][0]["uid"],
        n["metadata"]["uid"]
    );
    let first_renewal = lease["spec"]["renewTime"].clone();
    node.wait_for(Duration::from_secs(30), "a Lease renewal", |_| {
        let out = cluster.kubectl(&lease_args).ok()?;
        let lease: Value = serde_json::from_str(&out).ok()?;
        (lease["spec"]["renewTime"] != first_renewal).then_some(())
    });

    // 2. An API pod runs, as a watching kubectl sees it.
    let watch = PodWatch::start(&cluster);
    let term_dir = node.dir.join("term");
    std::fs::create_dir_all(&term_dir).expect("term dir");
    let _ = std::fs::remove_file(term_dir.join("signal"));
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: default\nspec:\n  \
         nodeName: {NODE}\n  terminationGracePeriodSeconds: 30\n  containers:\n  - name: app\n    \
         image: docker.io/library/busybox:1.36\n    imagePullPolicy: IfNotPresent\n    \
         command: [\"sh\", \"-c\", \"trap 'echo TERM > /term/signal; exit 0' TERM; \
         while true; do sleep 0.2; done\"]\n    volumeMounts:\n    - name: term\n      \
         mountPath: /term\n  volumes:\n  - name: term\n    hostPath:\n      path: {}\n",
        term_dir.display()
    );
    kubectl_create(&cluster, &node, "web.yaml", &pod);
    let running = kubectl_wait(&cluster, &node, &["--for=condition=Ready", "pod/web"], 60);
    println!("pod web Ready {running:?} after kubectl create returned");
    let web = get_json(&cluster, &["get", "pod", "web"]);
    assert_eq!(web["status"]["phase"], "Running", "{web}");
    assert!(web["status"]["podIP"].is_string(), "podIP: {web}");
    assert_eq!(web["status"]["hostIP"], "192.0.2.10");
    assert!(web["status"]["startTime"].is_string());
    assert!(
        web["status"]["containerStatuses"][0]["state"]["running"].is_object(),
        "{web}"
    );
    node.wait_for(
        Duration::from_secs(10),
        "kubectl's watch to show web Running",
        |_| {
            watch
                .lines()
                .iter()
                .any(|l| l.starts_with("web ") && l.contains("Running") && l.contains("running"))
                .then_some(())
        },
    );

    // 3. A graceful delete: SIGTERM, and the object goes only after the containers.
    let uid = web["metadata"]["uid"].as_str().expect("uid").to_owned();
    cluster
        .kubectl(&["delete", "pod", "web", "--grace-period=5", "--wait=true"])
        .expect("kubectl delete");
    assert_eq!(
        std::fs::read_to_string(term_dir.join("signal"))
            .expect("the container got SIGTERM")
            .trim(),
        "TERM"
    );
    let running_left: Vec<String> = node
        .runtime_containers(&uid)
        .into_iter()
        .filter(|id| {
            node.testbed.ctr(&["tasks", "ls"]).is_ok_and(|out| {
                out.lines()
                    .any(|l| l.starts_with(id.as_str()) && l.contains("RUNNING"))
            })
        })
        .collect();
    assert_eq!(
        running_left,
        Vec::<String>::new(),
        "no container of the pod runs once the API object is gone"
    );

    // 4. A static pod has a mirror pod.
    node.write_manifest(
        "static.yaml",
        &support::pod_yaml("static", "Always", &[("app", "sleep 3600")]),
    );
    let mirror = format!("pod/static-{NODE}");
    kubectl_wait(&cluster, &node, &["--for=condition=Ready", &mirror], 60);
    let m = get_json(&cluster, &["get", &mirror]);
    assert!(
        m["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string(),
        "{m}"
    );
    assert_eq!(m["metadata"]["ownerReferences"][0]["kind"], "Node");

    // 5. More cpu than the node has: Failed with OutOfcpu, never started.
    let huge = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: huge\n  namespace: default\nspec:\n  \
         nodeName: {NODE}\n  containers:\n  - name: app\n    image: docker.io/library/busybox:1.36\n    \
         imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n    resources:\n      \
         requests:\n        cpu: \"1000\"\n"
    );
    kubectl_create(&cluster, &node, "huge.yaml", &huge);
    kubectl_wait(
        &cluster,
        &node,
        &["--for=jsonpath={.status.phase}=Failed", "pod/huge"],
        60,
    );
    let h = get_json(&cluster, &["get", "pod", "huge"]);
    assert_eq!(h["status"]["reason"], "OutOfcpu", "{h}");
    let huge_uid = h["metadata"]["uid"].as_str().expect("uid");
    assert_eq!(
        node.runtime_containers(huge_uid),
        Vec::<String>::new(),
        "the rejected pod never reached containerd"
    );
    drop(watch);
}
