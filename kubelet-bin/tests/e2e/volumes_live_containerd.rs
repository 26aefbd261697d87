//! Volumes of running pods against a real containerd: mountPropagation as the runtime applies
//! it, and a downwardAPI volume that follows annotation edits of a running static pod
//! (atomically, checked by a reader loop in the container).
//!
//! configMap, secret and projected volumes cannot be tested here: static pods may not
//! reference API objects (upstream `HasAPIObjectReference`); `kubelet-volumes/tests` covers
//! them against the in-memory object source.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Node, Unmount, container_status, read, start_with_volumes as start, uid, waiting};

const IMAGE: &str = "docker.io/library/busybox:1.36";

fn running(pod: &Value, container: &str) -> bool {
    container_status(pod, container).is_some_and(|c| c["state"]["running"].is_object())
}

fn container_id(pod: &Value, container: &str) -> String {
    container_status(pod, container)
        .and_then(|c| c["containerID"].as_str())
        .and_then(|s| s.split_once("://"))
        .map(|(_, id)| id.to_owned())
        .expect("containerID")
}

fn sh(args: &[&str]) {
    let status = Command::new(args[0])
        .args(&args[1..])
        .status()
        .expect("spawn");
    assert!(status.success(), "{args:?}");
}

/// The OCI spec mount options containerd gave the container's mount at `destination`.
fn oci_mount_options(node: &Node, id: &str, destination: &str) -> Vec<String> {
    let info = node
        .testbed
        .ctr(&["containers", "info", id])
        .expect("ctr containers info");
    let info: Value = serde_json::from_str(&info).expect("containers info is JSON");
    info["Spec"]["mounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["destination"] == destination)
        .and_then(|m| m["options"].as_array())
        .map(|o| {
            o.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn mount_propagation_reaches_the_runtime_and_propagates() {
    let (node, out, _g) = start("vol-propagation");
    // containerd wants the source of an rslave/rshared mount on a shared mount: make one.
    let shared = node.dir.join("shared");
    let _ = kubelet_volumes::mount::unmount_all_under(&shared);
    std::fs::create_dir_all(&shared).expect("mkdir");
    let shared_guard = Unmount(shared.clone());
    let s = shared.to_str().expect("utf-8 path");
    sh(&["mount", "--bind", s, s]);
    sh(&["mount", "--make-shared", s]);
    for d in ["from-host", "from-container"] {
        std::fs::create_dir_all(shared.join(d)).expect("mkdir");
    }
    let pod = |name: &str, privileged: bool, mode: &str, script: &str| {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    securityContext: {{privileged: {privileged}}}
    command: ["sh", "-c", {script:?}]
    volumeMounts:
    - {{name: shared, mountPath: /shared, mountPropagation: {mode}}}
    - {{name: out, mountPath: /out}}
  volumes:
  - {{name: shared, hostPath: {{path: {shared}, type: Directory}}}}
  - {{name: out, hostPath: {{path: {out}, type: Directory}}}}
"#,
            shared = shared.display(),
            out = out.display()
        )
    };
    node.write_manifest(
        "slave.yaml",
        &pod(
            "slave",
            false,
            "HostToContainer",
            "while true; do cat /shared/from-host/marker > /out/slave-saw 2>/dev/null; sleep 0.2; done",
        ),
    );
    node.write_manifest(
        "bidi.yaml",
        &pod(
            "bidi",
            true,
            "Bidirectional",
            "mount -t tmpfs -o size=1m tmpfs /shared/from-container && echo from-c > /shared/from-container/f && echo ok > /out/bidi-mounted; while true; do sleep 1; done",
        ),
    );
    node.write_manifest(
        "forbidden.yaml",
        &pod(
            "forbidden",
            false,
            "Bidirectional",
            "echo ran > /out/forbidden; while true; do sleep 1; done",
        ),
    );

    let slave = node.wait_for(Duration::from_secs(30), "slave running", |n| {
        n.pod("slave").filter(|p| running(p, "main"))
    });
    let bidi = node.wait_for(Duration::from_secs(30), "bidi running", |n| {
        n.pod("bidi").filter(|p| running(p, "main"))
    });
    // The runtime got the propagation: the OCI spec says rslave / rshared.
    let slave_opts = oci_mount_options(&node, &container_id(&slave, "main"), "/shared");
    assert!(slave_opts.iter().any(|o| o == "rslave"), "{slave_opts:?}");
    let bidi_opts = oci_mount_options(&node, &container_id(&bidi, "main"), "/shared");
    assert!(bidi_opts.iter().any(|o| o == "rshared"), "{bidi_opts:?}");
    let out_opts = oci_mount_options(&node, &container_id(&slave, "main"), "/out");
    assert!(
        !out_opts.iter().any(|o| o == "rslave" || o == "rshared"),
        "unset propagation is private: {out_opts:?}"
    );

    // HostToContainer: a mount made on the host after the container started shows up inside.
    let from_host = shared.join("from-host");
    let fh = from_host.to_str().expect("utf-8 path");
    sh(&["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", fh]);
    std::fs::write(from_host.join("marker"), b"host-mount\n").expect("marker");
    assert_eq!(
        node.wait_for(
            Duration::from_secs(10),
            "the slave sees the host mount",
            |_| { read(&out.join("slave-saw")).filter(|s| !s.is_empty()) }
        ),
        "host-mount\n"
    );

    // Bidirectional: the privileged container's own mount shows up on the host.
    node.wait_for(Duration::from_secs(10), "bidi mounted", |_| {
        read(&out.join("bidi-mounted"))
    });
    let from_container = shared.join("from-container");
    assert!(
        kubelet_volumes::mount::is_mount_point(&from_container),
        "the container's tmpfs propagated to the host"
    );
    assert_eq!(read(&from_container.join("f")).as_deref(), Some("from-c\n"));

    // Bidirectional in an unprivileged container: refused before the container exists.
    let (reason, message) = node.wait_for(Duration::from_secs(15), "forbidden refused", |n| {
        n.pod("forbidden")
            .and_then(|p| waiting(&p, "main"))
            .filter(|(r, _)| r == "CreateContainerConfigError")
    });
    assert_eq!(reason, "CreateContainerConfigError");
    assert!(
        message
            .contains("Bidirectional mount propagation is available only to privileged containers"),
        "{message}"
    );
    assert!(!out.join("forbidden").exists(), "the container never ran");
    drop(shared_guard);
}

#[test]
fn downward_api_follows_annotation_edits_of_a_running_pod_atomically() {
    let (node, out, _g) = start("vol-dapi-live");
    let manifest = |value: &str| {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: dapi
  uid: 7d0c5a52-0d6e-4c4a-9a51-3f1f0a3b2c11
  labels: {{app: web}}
  annotations: {{a: "{value}", b: "{value}"}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", {READER:?}]
    volumeMounts:
    - {{name: podinfo, mountPath: /podinfo}}
    - {{name: out, mountPath: /out}}
  volumes:
  - name: podinfo
    downwardAPI:
      items:
      - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}
      - {{path: annotations, fieldRef: {{fieldPath: metadata.annotations}}}}
      - {{path: a, fieldRef: {{fieldPath: "metadata.annotations['a']"}}}}
      - {{path: b, fieldRef: {{fieldPath: "metadata.annotations['b']"}}}}
  - {{name: out, hostPath: {{path: {out}, type: Directory}}}}
"#,
            out = out.display()
        )
    };
    node.write_manifest("dapi.yaml", &manifest("v1"));
    let before = node.wait_for(Duration::from_secs(30), "dapi running", |n| {
        n.pod("dapi").filter(|p| running(p, "main"))
    });
    assert_eq!(uid(&before), "7d0c5a52-0d6e-4c4a-9a51-3f1f0a3b2c11");
    // No other host user can reach the pod's volumes (upstream 0750 data directories).
    let root = node.dir.join("kubelet/root");
    let pod_dir = root.join("pods").join(uid(&before));
    for d in [
        root.clone(),
        root.join("pods"),
        pod_dir.clone(),
        pod_dir.join("volumes"),
    ] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&d).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o750, "{}", d.display());
    }
    let id = container_id(&before, "main");
    let stats_file = out.join("stats");
    let stats = |want_new: u64| {
        let file = stats_file.clone();
        move |_: &Node| {
            let s = read(&file)?;
            let v: Vec<u64> = s
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            (v.len() == 3 && v[1] >= want_new && v[0] > 0).then_some((v[0], v[1], v[2]))
        }
    };
    node.wait_for(Duration::from_secs(10), "the reader saw v1", stats(0));
    assert_eq!(
        read(&out.join("labels-seen")).as_deref(),
        Some("app=\"web\""),
        "labels in upstream's format"
    );

    // Edit both annotations together; the running container sees the change within a sync
    // period, without a restart. Later edits go v3..v6.
    node.write_manifest("dapi.yaml", &manifest("v2"));
    let edited = Instant::now();
    node.wait_for(Duration::from_secs(12), "the reader saw v2", stats(1));
    let took = edited.elapsed();
    // More edits: every swap is a chance for a reader to catch a mixed set.
    for n in 3..=6 {
        let value = format!("v{n}");
        node.write_manifest("dapi.yaml", &manifest(&value));
        let want = format!("a=\"{value}\"");
        node.wait_for(
            Duration::from_secs(12),
            &format!("the reader saw {value}"),
            |_| read(&out.join("annotations-seen")).filter(|s| s.contains(&want)),
        );
    }
    // Let the reader keep sampling the new set for a while.
    let (old, new, mismatches) = node.wait_for(
        Duration::from_secs(30),
        "200 samples of the new sets",
        stats(200),
    );
    assert_eq!(
        mismatches,
        0,
        "a reader saw a mixed set: {:?}",
        read(&out.join("mismatch"))
    );
    assert!(old > 0 && new > 0, "old={old} new={new}");
    let after = node.listed_pod("dapi");
    assert_eq!(
        uid(&after),
        uid(&before),
        "an edit is an update, not a new pod"
    );
    assert_eq!(container_id(&after, "main"), id, "same container");
    assert_eq!(
        container_status(&after, "main").expect("status")["restartCount"],
        0
    );
    let annotations = read(&out.join("annotations-seen")).unwrap_or_default();
    assert!(
        annotations.contains("a=\"v6\"\nb=\"v6\""),
        "{annotations:?}"
    );
    eprintln!(
        "annotation edit visible in the container after {took:?}; reader samples: {old} old, {new} new, 0 mixed"
    );
}

/// Reads the downwardAPI set through `..data` (one snapshot per iteration, as upstream's
/// atomic writer promises) and counts samples of the old set, the new set, and mixed sets.
const READER: &str = r#"old=0; new=0; bad=0; n=0
while true; do
  if cd /podinfo/..data 2>/dev/null; then
    a=$(cat a 2>/dev/null); b=$(cat b 2>/dev/null); all=$(cat annotations 2>/dev/null); l=$(cat labels 2>/dev/null)
    cd /
    if [ -n "$a" ] && [ -n "$b" ] && [ -n "$all" ]; then
      case "$all" in
        *"a=\"$a\""*"b=\"$b\""*) ok=1 ;;
        *) ok=0 ;;
      esac
      if [ "$a" != "$b" ] || [ $ok = 0 ]; then
        bad=$((bad+1)); echo "$a $b $all" >> /out/mismatch
      elif [ "$a" = v1 ]; then old=$((old+1))
      else new=$((new+1)); echo "$all" > /out/.ann; mv /out/.ann /out/annotations-seen
      fi
      echo -n "$l" > /out/.labels; mv /out/.labels /out/labels-seen
    fi
  fi
  n=$((n+1))
  echo "$old $new $bad" > /out/.stats; mv /out/.stats /out/stats
  usleep 2000
done"#;
