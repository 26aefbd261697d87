//! Volume acceptance against a real containerd: emptyDir (disk and Memory), hostPath types,
//! downwardAPI files, subPath safety and kubelet restarts. Containers report what they see by
//! writing into a hostPath directory the test reads.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use support::{Node, container_status, phase, read, start_with_volumes as start, uid, waiting};

const IMAGE: &str = "docker.io/library/busybox:1.36";

fn pod_dir(node: &Node, pod: &Value) -> PathBuf {
    node.dir.join("kubelet/root/pods").join(uid(pod))
}

#[test]
fn empty_dirs_memory_tmpfs_and_downward_api_files_inside_containers() {
    let (node, out, _g) = start("vol-basic");
    node.write_manifest(
        "p.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: vols
  labels: {{app: web, tier: "front"}}
  annotations: {{note: 'say "hi"'}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  initContainers:
  - name: init
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo init > /scratch/order"]
    volumeMounts: [{{name: scratch, mountPath: /scratch}}]
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo main >> /scratch/order; cp /scratch/order /out/order; grep ' /mem ' /proc/mounts > /out/mem-mount; grep ' /podinfo ' /proc/mounts > /out/podinfo-mount; cp /podinfo/labels /podinfo/annotations /podinfo/name /out/; if touch /podinfo/x 2>/dev/null; then echo rw; else echo ro; fi > /out/podinfo-ro; echo done > /out/done"]
    volumeMounts:
    - {{name: scratch, mountPath: /scratch}}
    - {{name: mem, mountPath: /mem}}
    - {{name: podinfo, mountPath: /podinfo}}
    - {{name: out, mountPath: /out}}
  volumes:
  - {{name: scratch, emptyDir: {{}}}}
  - {{name: mem, emptyDir: {{medium: Memory, sizeLimit: 2Mi}}}}
  - name: podinfo
    downwardAPI:
      items:
      - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}
      - {{path: annotations, fieldRef: {{fieldPath: metadata.annotations}}}}
      - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
  - {{name: out, hostPath: {{path: {out}, type: Directory}}}}
"#,
            out = out.display()
        ),
    );
    node.wait_for(
        Duration::from_secs(20),
        "the main container's report",
        |_| read(&out.join("done")),
    );
    assert_eq!(read(&out.join("order")).as_deref(), Some("init\nmain\n"));
    let mem = read(&out.join("mem-mount")).unwrap_or_default();
    assert!(
        mem.starts_with("tmpfs /mem tmpfs ") && mem.contains("size=2048k"),
        "{mem:?}"
    );
    assert_eq!(
        read(&out.join("labels")).as_deref(),
        Some("app=\"web\"\ntier=\"front\"")
    );
    let annotations = read(&out.join("annotations")).unwrap_or_default();
    assert!(
        annotations.contains("note=\"say \\\"hi\\\"\""),
        "{annotations:?}"
    );
    assert_eq!(read(&out.join("name")).as_deref(), Some("vols-it-node"));
    assert_eq!(read(&out.join("podinfo-ro")).as_deref(), Some("ro\n"));
    let podinfo = read(&out.join("podinfo-mount")).unwrap_or_default();
    assert!(
        podinfo.starts_with("tmpfs /podinfo tmpfs ro,"),
        "downwardAPI files are on a read-only tmpfs: {podinfo:?}"
    );
    // The pod succeeds and, once the manifest is gone, nothing is left under its directory.
    let pod = node.wait_for(Duration::from_secs(10), "vols Succeeded", |n| {
        n.pod("vols").filter(|p| phase(p) == "Succeeded")
    });
    let dir = pod_dir(&node, &pod);
    node.remove_manifest("p.yaml");
    node.wait_for(Duration::from_secs(15), "the pod directory removed", |_| {
        (!dir.exists()).then_some(())
    });
    assert!(kubelet_volumes::mount::mounts_under(&dir).is_empty());
    assert!(out.join("order").exists(), "a hostPath is never removed");
}

fn host_path_pod(name: &str, path: &Path, kind: &str) -> String {
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
    command: ["sh", "-c", "while true; do sleep 1; done"]
    volumeMounts: [{{name: h, mountPath: /h}}]
  volumes:
  - {{name: h, hostPath: {{path: {path}, type: {kind}}}}}
"#,
        path = path.display()
    )
}

#[test]
fn host_path_type_mismatches_fail_with_a_reason_and_or_create_types_create() {
    use std::os::unix::fs::PermissionsExt;
    let (node, out, _g) = start("vol-hostpath");
    let file = out.join("file");
    std::fs::write(&file, b"x").expect("file");
    let cases = [
        (
            "dir-on-file",
            file.clone(),
            "Directory",
            "is not a directory",
        ),
        ("file-on-dir", out.clone(), "File", "is not a file"),
        ("socket", file.clone(), "Socket", "is not a socket file"),
        (
            "chardev",
            file.clone(),
            "CharDevice",
            "is not a character device",
        ),
        (
            "blockdev",
            file.clone(),
            "BlockDevice",
            "is not a block device",
        ),
        (
            "dirorcreate-on-file",
            file.clone(),
            "DirectoryOrCreate",
            "is not a directory",
        ),
        (
            "missing-dir",
            out.join("nope"),
            "Directory",
            "does not exist",
        ),
    ];
    for (i, (name, path, kind, _)) in cases.iter().enumerate() {
        node.write_manifest(&format!("{i}.yaml"), &host_path_pod(name, path, kind));
    }
    node.write_manifest(
        "ok1.yaml",
        &host_path_pod("mkdir", &out.join("made/dir"), "DirectoryOrCreate"),
    );
    node.write_manifest(
        "ok2.yaml",
        &host_path_pod("mkfile", &out.join("madef/file"), "FileOrCreate"),
    );
    for (name, _, kind, want) in cases {
        let (reason, message) = node.wait_for(
            Duration::from_secs(15),
            &format!("{name} in ContainerCreating with a FailedMount message"),
            |n| {
                n.pod(name)
                    .and_then(|p| waiting(&p, "main"))
                    .filter(|(_, m)| m.starts_with("FailedMount: "))
            },
        );
        assert_eq!(reason, "ContainerCreating", "{name}: upstream's reason");
        assert!(
            message.contains(want) && message.contains("\"h\""),
            "{name} ({kind}): {message}"
        );
        assert!(node.pod(name).is_some_and(|p| phase(&p) == "Pending"));
    }
    for name in ["mkdir", "mkfile"] {
        node.wait_for(Duration::from_secs(15), &format!("{name} running"), |n| {
            n.pod(name).filter(|p| {
                container_status(p, "main").is_some_and(|c| c["state"]["running"].is_object())
            })
        });
    }
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert!(out.join("made/dir").is_dir());
    assert_eq!(mode(&out.join("made/dir")), 0o755);
    assert!(out.join("madef/file").is_file());
    assert_eq!(mode(&out.join("madef/file")), 0o644);
}

#[test]
fn sub_path_symlinks_out_of_the_volume_are_refused() {
    let (node, out, _g) = start("vol-subpath");
    let host = out.join("vol");
    std::fs::create_dir_all(host.join("data")).expect("mkdir");
    std::fs::write(host.join("data/f"), b"inside").expect("write");
    std::os::unix::fs::symlink("/", host.join("to-root")).expect("symlink");
    std::os::unix::fs::symlink("../../", host.join("up")).expect("symlink");
    let pod = |name: &str, sub: &str| {
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
    env: [{{name: DIR, value: data}}]
    command: ["sh", "-c", "cat /s/f > /out/{name}; while true; do sleep 1; done"]
    volumeMounts:
    - {{name: h, mountPath: /s, subPathExpr: "{sub}"}}
    - {{name: out, mountPath: /out}}
  volumes:
  - {{name: h, hostPath: {{path: {host}, type: Directory}}}}
  - {{name: out, hostPath: {{path: {out}, type: Directory}}}}
"#,
            host = host.display(),
            out = out.display()
        )
    };
    node.write_manifest("good.yaml", &pod("good", "$(DIR)"));
    node.write_manifest("root.yaml", &pod("root", "to-root"));
    node.write_manifest("up.yaml", &pod("up", "up/etc"));
    assert_eq!(
        // The shell creates the file before `cat` fills it: wait for content.
        node.wait_for(Duration::from_secs(20), "good reads its subPath", |_| read(
            &out.join("good")
        )
        .filter(|s| !s.is_empty())),
        "inside"
    );
    for name in ["root", "up"] {
        let (reason, message) =
            node.wait_for(Duration::from_secs(15), &format!("{name} refused"), |n| {
                n.pod(name)
                    .and_then(|p| waiting(&p, "main"))
                    .filter(|(r, _)| r == "CreateContainerConfigError")
            });
        assert_eq!(reason, "CreateContainerConfigError");
        assert!(message.contains("outside the volume"), "{name}: {message}");
        assert!(!out.join(name).exists(), "{name}'s container never ran");
    }
    // Deleting the pods unmounts the subPath bind mount and leaves the hostPath intact.
    let good = node.listed_pod("good");
    let dir = pod_dir(&node, &good);
    for f in ["good.yaml", "root.yaml", "up.yaml"] {
        node.remove_manifest(f);
    }
    node.wait_for(Duration::from_secs(15), "pod directories removed", |_| {
        (!dir.exists()).then_some(())
    });
    assert_eq!(read(&host.join("data/f")).as_deref(), Some("inside"));
}

#[test]
fn kubelet_restart_keeps_volumes_and_cleans_up_pods_removed_meanwhile() {
    let (mut node, out, _g) = start("vol-restart");
    let pod = |name: &str| {
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
    command: ["sh", "-c", "[ -f /mem/boot ] || date +%s%N > /mem/boot; echo data > /disk/f; cp /mem/boot /out/{name}; while true; do cp /mem/boot /out/{name}.now; sleep 0.2; done"]
    volumeMounts:
    - {{name: mem, mountPath: /mem}}
    - {{name: disk, mountPath: /disk}}
    - {{name: out, mountPath: /out}}
  volumes:
  - {{name: mem, emptyDir: {{medium: Memory, sizeLimit: 1Mi}}}}
  - {{name: disk, emptyDir: {{}}}}
  - {{name: out, hostPath: {{path: {out}, type: Directory}}}}
"#,
            out = out.display()
        )
    };
    node.write_manifest("keep.yaml", &pod("keep"));
    node.write_manifest("gone.yaml", &pod("gone"));
    // keep.now too: the test removes it below and waits for the loop to write it again.
    let boot = node.wait_for(Duration::from_secs(20), "both pods wrote", |_| {
        read(&out.join("gone"))?;
        read(&out.join("keep.now"))?;
        read(&out.join("keep"))
    });
    let keep = node.listed_pod("keep");
    let gone = node.listed_pod("gone");
    let keep_dir = pod_dir(&node, &keep);
    let gone_dir = pod_dir(&node, &gone);
    let mounts_before = kubelet_volumes::mount::mounts_under(&keep_dir);
    assert_eq!(mounts_before.len(), 1, "{mounts_before:?}");

    node.kill9_kubelet();
    node.remove_manifest("gone.yaml");
    std::fs::remove_file(out.join("keep.now")).expect("rm");
    node.start_kubelet();

    node.wait_for(Duration::from_secs(20), "gone's volumes cleaned up", |_| {
        (!gone_dir.exists()).then_some(())
    });
    // keep's container was never restarted and its tmpfs was not replaced.
    let pod = node.wait_for(Duration::from_secs(10), "keep still running", |n| {
        n.pod("keep").filter(|p| {
            container_status(p, "main")
                .is_some_and(|c| c["state"]["running"].is_object() && c["restartCount"] == 0)
        })
    });
    assert_eq!(uid(&pod), uid(&keep));
    // Non-empty: `cp` truncates the file before it writes it.
    let now = node.wait_for(Duration::from_secs(5), "keep still sees its tmpfs", |_| {
        read(&out.join("keep.now")).filter(|now| !now.is_empty())
    });
    assert_eq!(now, boot, "the Memory emptyDir kept its data");
    assert_eq!(
        kubelet_volumes::mount::mounts_under(&keep_dir),
        mounts_before
    );
    assert_eq!(
        read(&keep_dir.join("volumes/kubernetes.io~empty-dir/disk/f")).as_deref(),
        Some("data\n")
    );
}
