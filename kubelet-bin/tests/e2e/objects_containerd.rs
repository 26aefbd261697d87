//! Issue 13, acceptances 1 and 2 with every component real: the `kubelet` binary as
//! `system:node:it-node` (so the Node authorizer lets it read only what its pods reference)
//! on a private containerd, against a real kube-apiserver + etcd; the admin creates and edits
//! the ConfigMap and Secret with `kubectl`.
//! - a configMap volume and `envFrom` carry the ConfigMap's data; an edit reaches the mounted
//!   file within 90 s (the watch asks for a sync of the pods that use the object; the time is
//!   printed; with only upstream's periodic sync, 1 min plus up to 50 % jitter, it took 87 s)
//!   and never the env of the running container;
//! - a required key that is missing holds the container in `CreateContainerConfigError` until
//!   the key exists, then it starts;
//! - a secret volume is a read-only tmpfs with files of mode 0644, and `secretKeyRef` env
//!   carries the decoded value.
//!
//! Skipped when kube-apiserver is not built, unless `KUBELET_REQUIRE_APISERVER` is set (CI).

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{NODE, Node, Unmount};
use xtask::apiserver::Cluster;

fn get_pod(cluster: &Cluster, name: &str) -> Option<Value> {
    let out = cluster.kubectl(&["get", "pod", name, "-o", "json"]).ok()?;
    serde_json::from_str(&out).ok()
}

/// Writes `yaml` under the node's directory and `kubectl create`s it.
fn create(cluster: &Cluster, node: &Node, file: &str, yaml: &str) {
    let path = node.dir.join(file);
    std::fs::write(&path, yaml).expect("write manifest");
    cluster
        .kubectl(&["create", "-f", &path.display().to_string()])
        .expect("kubectl create");
}

fn kubectl(cluster: &Cluster, args: &[&str]) {
    if let Err(e) = cluster.kubectl(args) {
        panic!(
            "kubectl {args:?}: {e:#}\n--- apiserver:\n{}",
            cluster.log_tail()
        );
    }
}

/// A busybox pod bound to the node, with `out` mounted at `/out`.
fn pod_yaml(name: &str, out: &Path, script: &str, container_extra: &str, volumes: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  \
         nodeName: {NODE}\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    \
         image: docker.io/library/busybox:1.36\n    imagePullPolicy: IfNotPresent\n    \
         command: [\"sh\", \"-c\", {script:?}]\n{container_extra}    volumeMounts:\n    \
         - name: out\n      mountPath: /out\n{mounts}  volumes:\n  - name: out\n    hostPath:\n      \
         path: {out}\n{volumes}",
        out = out.display(),
        mounts = mounts_of(volumes),
    )
}

/// The volumeMounts for the extra volumes: `<name>` at `/mnt/<name>`, read-only.
fn mounts_of(volumes: &str) -> String {
    volumes
        .lines()
        .filter_map(|l| l.strip_prefix("  - name: "))
        .map(|name| {
            format!("    - name: {name}\n      mountPath: /mnt/{name}\n      readOnly: true\n")
        })
        .collect()
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

#[test]
fn config_maps_and_secrets_reach_volumes_and_env() {
    let Some(cluster) = support::node_cluster() else {
        return;
    };
    let mut node = Node::new("objects");
    let _unmount = Unmount(node.dir.join("kubelet"));
    let out = node.dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("out dir");
    let kubeconfig = cluster.node_kubeconfig(NODE).expect("node kubeconfig");
    // Upstream's default sync period: without the watch's resync it bounds the propagation.
    node.extra_args = vec![
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--sync-frequency".into(),
        "1m".into(),
    ];
    node.start_kubelet();
    node.wait_for(Duration::from_secs(60), "the Node", |_| {
        cluster.kubectl(&["get", "node", NODE]).ok()
    });

    kubectl(
        &cluster,
        &[
            "create",
            "configmap",
            "app-config",
            "--from-literal=greeting=hello",
        ],
    );
    kubectl(
        &cluster,
        &[
            "create",
            "secret",
            "generic",
            "creds",
            "--from-literal=password=s3cret",
        ],
    );

    // Acceptance 1: a configMap volume and envFrom.
    let cm_out = out.join("cm");
    std::fs::create_dir_all(&cm_out).expect("dir");
    create(
        &cluster,
        &node,
        "cm.yaml",
        &pod_yaml(
            "cm",
            &cm_out,
            "echo \"$greeting\" > /out/env; while true; do \
             cat /mnt/conf/greeting > /out/file.tmp && mv /out/file.tmp /out/file; sleep 0.2; done",
            "    envFrom:\n    - configMapRef:\n        name: app-config\n",
            "  - name: conf\n    configMap:\n      name: app-config\n",
        ),
    );
    node.wait_for(
        Duration::from_secs(90),
        "pod cm to read the ConfigMap",
        |_| (read(&cm_out.join("file"))? == "hello").then_some(()),
    );
    assert_eq!(
        read(&cm_out.join("env")).as_deref(),
        Some("hello"),
        "envFrom"
    );

    let edited = Instant::now();
    kubectl(
        &cluster,
        &[
            "patch",
            "configmap",
            "app-config",
            "-p",
            r#"{"data":{"greeting":"bonjour"}}"#,
        ],
    );
    node.wait_for(
        Duration::from_secs(90),
        "the edit in the mounted file",
        |_| (read(&cm_out.join("file"))? == "bonjour").then_some(()),
    );
    let propagation = edited.elapsed();
    println!("ConfigMap edit reached the mounted file in {propagation:?}");
    assert!(propagation < Duration::from_secs(90));
    assert_eq!(
        read(&cm_out.join("env")).as_deref(),
        Some("hello"),
        "the running container's env is never changed"
    );
    let cm = get_pod(&cluster, "cm").expect("pod cm");
    assert_eq!(
        cm["status"]["containerStatuses"][0]["restartCount"], 0,
        "the container was not restarted: {cm}"
    );

    // A missing required key: CreateContainerConfigError until the key exists.
    let key_out = out.join("key");
    std::fs::create_dir_all(&key_out).expect("dir");
    create(
        &cluster,
        &node,
        "key.yaml",
        &pod_yaml(
            "needs-key",
            &key_out,
            "echo \"$LATER\" > /out/env; sleep 3600",
            "    env:\n    - name: LATER\n      valueFrom:\n        configMapKeyRef:\n          \
             name: app-config\n          key: later\n",
            "",
        ),
    );
    let message = node.wait_for(
        Duration::from_secs(60),
        "CreateContainerConfigError",
        |_| {
            let pod = get_pod(&cluster, "needs-key")?;
            let (reason, message) = support::waiting(&pod, "app")?;
            (reason == "CreateContainerConfigError").then_some(message)
        },
    );
    assert_eq!(
        message,
        "couldn't find key later in ConfigMap default/app-config"
    );
    let added = Instant::now();
    kubectl(
        &cluster,
        &[
            "patch",
            "configmap",
            "app-config",
            "-p",
            r#"{"data":{"later":"now"}}"#,
        ],
    );
    node.wait_for(
        Duration::from_secs(120),
        "the container to start with the key",
        |_| (read(&key_out.join("env"))? == "now").then_some(()),
    );
    println!(
        "the container started {:?} after the key was added",
        added.elapsed()
    );

    // Acceptance 2: a secret volume (tmpfs, read-only, 0644) and secretKeyRef env.
    let s_out = out.join("secret");
    std::fs::create_dir_all(&s_out).expect("dir");
    create(
        &cluster,
        &node,
        "secret.yaml",
        &pod_yaml(
            "secret",
            &s_out,
            "echo \"$PASSWORD\" > /out/env; cat /mnt/creds/password > /out/file; \
             stat -L -c %a /mnt/creds/password > /out/mode; \
             grep ' /mnt/creds ' /proc/mounts > /out/mount; \
             if touch /mnt/creds/x 2>/dev/null; then echo writable; else echo read-only; fi > /out/ro; \
             sleep 3600",
            "    env:\n    - name: PASSWORD\n      valueFrom:\n        secretKeyRef:\n          \
             name: creds\n          key: password\n",
            "  - name: creds\n    secret:\n      secretName: creds\n",
        ),
    );
    // `ro` is written last, and the shell truncates it before echo writes: wait for its text.
    node.wait_for(Duration::from_secs(90), "pod secret to report", |_| {
        read(&s_out.join("ro")).filter(|ro| !ro.is_empty())
    });
    assert_eq!(
        read(&s_out.join("env")).as_deref(),
        Some("s3cret"),
        "decoded env"
    );
    assert_eq!(
        read(&s_out.join("file")).as_deref(),
        Some("s3cret"),
        "decoded file"
    );
    assert_eq!(read(&s_out.join("mode")).as_deref(), Some("644"));
    assert_eq!(read(&s_out.join("ro")).as_deref(), Some("read-only"));
    let mount = read(&s_out.join("mount")).unwrap_or_default();
    assert!(mount.starts_with("tmpfs /mnt/creds tmpfs ro"), "{mount}");

    // The host side: the secret volume is a tmpfs under the pod's directory.
    let secret_pod = get_pod(&cluster, "secret").expect("pod secret");
    let uid = support::uid(&secret_pod);
    let host = node
        .dir
        .join("kubelet/root/pods")
        .join(&uid)
        .join("volumes/kubernetes.io~secret/creds");
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    assert!(
        mounts
            .lines()
            .any(|l| l.contains(&*host.to_string_lossy()) && l.starts_with("tmpfs ")),
        "{} is a tmpfs",
        host.display()
    );

    for pod in ["cm", "needs-key", "secret"] {
        kubectl(
            &cluster,
            &["delete", "pod", pod, "--grace-period=1", "--wait=true"],
        );
    }
}
