//! The volume manager against real files and mounts (needs root for tmpfs and bind mounts):
//! configMap, secret, projected and downwardAPI volumes from an in-memory object source,
//! Memory emptyDirs, updates, teardown and reconstruction after a restart.

// Test code, on the test's own runtime: blocking file calls are fine here.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapProjection, ConfigMapVolumeSource, DownwardAPIProjection,
    DownwardAPIVolumeFile, DownwardAPIVolumeSource, EmptyDirVolumeSource, HostPathVolumeSource,
    KeyToPath, ObjectFieldSelector, Pod, ProjectedVolumeSource, Secret, SecretProjection,
    SecretVolumeSource, ServiceAccountTokenProjection, Volume, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubelet_core::PodExt;
use kubelet_core::objects::InMemoryObjectSource;
use kubelet_core::pod::PodUid;
use kubelet_core::resources::NodeAllocatable;
use kubelet_core::testing::pod;
use kubelet_core::volume::VolumeManager;
use kubelet_volumes::DefaultVolumeManager;
use kubelet_volumes::mount;

fn root() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        eprintln!("skipped: needs root for tmpfs and bind mounts");
    }
    root
}

fn with_volumes(name: &str, volumes: Vec<Volume>) -> Pod {
    let mut p = pod(name);
    if let Some(spec) = p.spec.as_mut() {
        spec.volumes = Some(volumes);
    }
    p
}

fn cm(data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("meta").permissions().mode() & 0o777
}

struct Setup {
    _root: tempfile::TempDir,
    root: std::path::PathBuf,
    objects: InMemoryObjectSource,
    vm: DefaultVolumeManager,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    let objects = InMemoryObjectSource::new();
    let vm = DefaultVolumeManager::new(root.clone())
        .with_object_source(Arc::new(objects.clone()))
        .with_node_allocatable(NodeAllocatable {
            cpu_millis: 2000,
            memory_bytes: 4 * 1024 * 1024 * 1024,
            ephemeral_storage_bytes: None,
        });
    Setup {
        _root: dir,
        root,
        objects,
        vm,
    }
}

impl Setup {
    fn restart(&self) -> DefaultVolumeManager {
        DefaultVolumeManager::new(self.root.clone())
            .with_object_source(Arc::new(self.objects.clone()))
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = mount::unmount_all_under(&self.root);
    }
}

#[tokio::test]
async fn config_map_items_modes_layout_and_atomic_update() {
    let s = setup();
    s.objects
        .set_config_map("default", "app", cm(&[("a", "1"), ("b", "2"), ("c", "3")]));
    let p = with_volumes(
        "cm",
        vec![Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "app".into(),
                items: Some(vec![
                    KeyToPath {
                        key: "a".into(),
                        path: "dir/a.txt".into(),
                        mode: Some(0o600),
                        ..Default::default()
                    },
                    KeyToPath {
                        key: "b".into(),
                        path: "b.txt".into(),
                        mode: None,
                        ..Default::default()
                    },
                ]),
                default_mode: Some(0o640),
                ..Default::default()
            }),
            ..Default::default()
        }],
    );
    s.vm.wait_for_attach_and_mount(&p).await.expect("mount");
    let mounted = s.vm.mounted_volumes(&p.uid());
    let dir = &mounted["config"].host_path;
    assert_eq!(
        *dir,
        s.root
            .join("pods/uid-cm/volumes/kubernetes.io~configmap/config")
    );
    assert!(mounted["config"].read_only);
    assert_eq!(
        std::fs::read_to_string(dir.join("dir/a.txt")).expect("a"),
        "1"
    );
    assert_eq!(mode(&dir.join("dir/a.txt")), 0o600);
    assert_eq!(mode(&dir.join("b.txt")), 0o640);
    assert!(!dir.join("c").exists(), "only the items are projected");
    assert_eq!(
        std::fs::read_link(dir.join("b.txt")).expect("link"),
        Path::new("..data/b.txt")
    );
    let first = std::fs::read_link(dir.join("..data")).expect("..data");

    // An update is swapped in on the next sync; a reader that resolves `..data` sees one set.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (stop, dir) = (stop.clone(), dir.clone());
        std::thread::spawn(move || {
            let mut seen = HashSet::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(t) = std::fs::read_link(dir.join("..data")) else {
                    continue;
                };
                let a = std::fs::read_to_string(dir.join(&t).join("dir/a.txt"));
                let b = std::fs::read_to_string(dir.join(&t).join("b.txt"));
                if let (Ok(a), Ok(b)) = (a, b) {
                    assert_eq!(a.len(), b.len(), "mixed set: a={a} b={b}");
                    seen.insert(a);
                }
            }
            seen
        })
    };
    for n in 0..50 {
        let v = "x".repeat(n + 2);
        s.objects
            .set_config_map("default", "app", cm(&[("a", &v), ("b", &v)]));
        s.vm.wait_for_attach_and_mount(&p).await.expect("update");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = reader.join().expect("reader");
    assert!(!seen.is_empty());
    assert_ne!(
        std::fs::read_link(dir.join("..data")).expect("..data"),
        first
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("b.txt")).expect("b"),
        "x".repeat(51)
    );
    s.vm.unmount_pod(&p.uid()).await.expect("unmount");
    assert!(!s.root.join("pods/uid-cm/volumes").exists());
}

#[tokio::test]
async fn missing_objects_and_keys_fail_unless_optional() {
    let s = setup();
    let volume = |optional| Volume {
        name: "config".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: "absent".into(),
            optional: Some(optional),
            ..Default::default()
        }),
        ..Default::default()
    };
    let p = with_volumes("missing", vec![volume(false)]);
    let err =
        s.vm.wait_for_attach_and_mount(&p)
            .await
            .expect_err("required configMap missing");
    let msg = err.to_string();
    assert!(
        msg.contains("\"config\"") && msg.contains("configmap \"absent\" not found"),
        "{msg}"
    );
    let p = with_volumes("optional", vec![volume(true)]);
    s.vm.wait_for_attach_and_mount(&p).await.expect("optional");
    let dir = &s.vm.mounted_volumes(&p.uid())["config"].host_path;
    assert!(dir.join("..data").exists());

    s.objects
        .set_config_map("default", "some", cm(&[("a", "1")]));
    let p = with_volumes(
        "badkey",
        vec![Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "some".into(),
                items: Some(vec![KeyToPath {
                    key: "nope".into(),
                    path: "x".into(),
                    mode: None,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }],
    );
    let err = s.vm.wait_for_attach_and_mount(&p).await.expect_err("key");
    assert!(err.to_string().contains("non-existent key"), "{err}");
}

#[tokio::test]
async fn unsafe_keys_and_paths_are_rejected_and_nothing_is_written() {
    let s = setup();
    for (i, bad) in ["../x", "/abs", "..data/x", "a/../../x"].iter().enumerate() {
        s.objects
            .set_config_map("default", "evil", cm(&[(bad, "pwned"), ("ok", "1")]));
        let p = with_volumes(
            &format!("evil{i}"),
            vec![Volume {
                name: "config".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: "evil".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }],
        );
        let err = s.vm.wait_for_attach_and_mount(&p).await.expect_err(bad);
        assert!(err.to_string().contains("invalid path"), "{bad}: {err}");
        assert!(
            !s.root
                .join(format!("pods/uid-evil{i}/volumes/kubernetes.io~configmap"))
                .exists(),
            "{bad}: nothing created"
        );
    }
    // An item path is checked as well.
    s.objects
        .set_config_map("default", "fine", cm(&[("k", "v")]));
    let p = with_volumes(
        "evilitem",
        vec![Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "fine".into(),
                items: Some(vec![KeyToPath {
                    key: "k".into(),
                    path: "../../../../escape".into(),
                    mode: None,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }],
    );
    assert!(s.vm.wait_for_attach_and_mount(&p).await.is_err());
    let found = walk(&s.root)
        .into_iter()
        .any(|p| p.file_name().is_some_and(|n| n == "escape" || n == "x"));
    assert!(!found, "nothing named after a bad key was written");
    assert!(!s.root.parent().expect("parent").join("escape").exists());
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.path());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&e.path()));
        }
    }
    out
}

#[tokio::test]
async fn secrets_and_projected_volumes_are_on_tmpfs_with_upstream_modes() {
    if !root() {
        return;
    }
    let s = setup();
    s.objects.set_secret(
        "default",
        "creds",
        Secret {
            data: Some(BTreeMap::from([(
                "password".to_owned(),
                ByteString(b"hunter2".to_vec()),
            )])),
            ..Default::default()
        },
    );
    s.objects
        .set_config_map("default", "app", cm(&[("setting", "on")]));
    s.objects.set_token("default", "default", "token-abc");
    let mut p = with_volumes(
        "sec",
        vec![
            Volume {
                name: "secret".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some("creds".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Volume {
                name: "strict".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some("creds".into()),
                    default_mode: Some(0o400),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Volume {
                name: "kube-api-access".into(),
                projected: Some(ProjectedVolumeSource {
                    default_mode: Some(0o644),
                    default_user: None,
                    sources: Some(vec![
                        VolumeProjection {
                            service_account_token: Some(ServiceAccountTokenProjection {
                                path: "token".into(),
                                expiration_seconds: Some(3607),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                        VolumeProjection {
                            config_map: Some(ConfigMapProjection {
                                name: "app".into(),
                                items: Some(vec![KeyToPath {
                                    key: "setting".into(),
                                    path: "ca.crt".into(),
                                    mode: None,
                                    ..Default::default()
                                }]),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                        VolumeProjection {
                            secret: Some(SecretProjection {
                                name: "creds".into(),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                        VolumeProjection {
                            downward_api: Some(DownwardAPIProjection {
                                items: Some(vec![DownwardAPIVolumeFile {
                                    path: "namespace".into(),
                                    field_ref: Some(ObjectFieldSelector {
                                        field_path: "metadata.namespace".into(),
                                        ..Default::default()
                                    }),
                                    ..Default::default()
                                }]),
                            }),
                            ..Default::default()
                        },
                    ]),
                }),
                ..Default::default()
            },
        ],
    );
    p.metadata.namespace = Some("default".into());
    s.vm.wait_for_attach_and_mount(&p).await.expect("mount");
    let m = s.vm.mounted_volumes(&p.uid());
    let secret = &m["secret"].host_path;
    assert!(secret.ends_with("volumes/kubernetes.io~secret/secret"));
    assert_eq!(mount::fs_type(secret).as_deref(), Some("tmpfs"));
    assert!(m["secret"].read_only);
    assert_eq!(
        std::fs::read_to_string(secret.join("password")).expect("pw"),
        "hunter2"
    );
    assert_eq!(mode(&secret.join("password")), 0o644, "upstream default");
    let raw_mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o7777;
    assert_eq!(
        raw_mode(secret),
        0o1777,
        "upstream's tmpfs root (mounted read-only into containers)"
    );
    assert_eq!(mode(&m["strict"].host_path.join("password")), 0o400);
    let proj = &m["kube-api-access"].host_path;
    assert!(proj.ends_with("volumes/kubernetes.io~projected/kube-api-access"));
    assert_eq!(mount::fs_type(proj).as_deref(), Some("tmpfs"));
    for (file, want) in [
        ("token", "token-abc"),
        ("ca.crt", "on"),
        ("password", "hunter2"),
        ("namespace", "default"),
    ] {
        assert_eq!(
            std::fs::read_to_string(proj.join(file)).expect(file),
            want,
            "{file}"
        );
    }
    // A kubelet restart adopts the mounts: nothing is remounted or rewritten.
    let before = std::fs::read_link(secret.join("..data")).expect("..data");
    let mounts_before = mount::mounts_under(&s.root.join("pods")).len();
    let vm2 = s.restart();
    vm2.wait_for_attach_and_mount(&p).await.expect("remount");
    assert_eq!(
        std::fs::read_link(secret.join("..data")).expect("..data"),
        before
    );
    assert_eq!(
        mount::mounts_under(&s.root.join("pods")).len(),
        mounts_before
    );
    // A required secret that disappears fails the next sync; the files stay as they were.
    s.objects.remove_secret("default", "creds");
    let err = vm2.wait_for_attach_and_mount(&p).await.expect_err("gone");
    assert!(
        err.to_string().contains("secret \"creds\" not found"),
        "{err}"
    );
    vm2.unmount_pod(&p.uid()).await.expect("unmount");
    assert!(mount::mounts_under(&s.root.join("pods")).is_empty());
    assert!(!s.root.join("pods/uid-sec/volumes").exists());
}

#[tokio::test]
async fn downward_api_files_follow_label_and_annotation_changes() {
    if !root() {
        return;
    }
    let s = setup();
    let mut p = with_volumes(
        "dapi",
        vec![Volume {
            name: "podinfo".into(),
            downward_api: Some(DownwardAPIVolumeSource {
                items: Some(
                    [
                        ("labels", "metadata.labels"),
                        ("annotations", "metadata.annotations"),
                        ("name", "metadata.name"),
                        ("uid", "metadata.uid"),
                        ("tier", "metadata.labels['tier']"),
                    ]
                    .iter()
                    .map(|(path, field)| DownwardAPIVolumeFile {
                        path: (*path).into(),
                        field_ref: Some(ObjectFieldSelector {
                            field_path: (*field).into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }],
    );
    p.metadata.labels = Some(BTreeMap::from([
        ("tier".to_owned(), "web".to_owned()),
        ("app".to_owned(), "x".to_owned()),
    ]));
    p.metadata.annotations = Some(BTreeMap::from([(
        "note".to_owned(),
        "say \"hi\"".to_owned(),
    )]));
    s.vm.wait_for_attach_and_mount(&p).await.expect("mount");
    let dir = s.vm.mounted_volumes(&p.uid())["podinfo"].host_path.clone();
    assert!(dir.ends_with("kubernetes.io~downward-api/podinfo"));
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect(f);
    assert_eq!(read("labels"), "app=\"x\"\ntier=\"web\"");
    assert_eq!(read("annotations"), "note=\"say \\\"hi\\\"\"");
    assert_eq!(read("name"), "dapi");
    assert_eq!(read("uid"), "uid-dapi");
    assert_eq!(read("tier"), "web");
    assert_eq!(mode(&dir.join("labels")), 0o644);
    p.metadata
        .annotations
        .as_mut()
        .expect("annotations")
        .insert("build".into(), "42".into());
    s.vm.wait_for_attach_and_mount(&p).await.expect("resync");
    assert_eq!(read("annotations"), "build=\"42\"\nnote=\"say \\\"hi\\\"\"");
    s.vm.unmount_pod(&p.uid()).await.expect("unmount");
}

#[tokio::test]
async fn memory_empty_dir_is_a_sized_tmpfs_that_survives_a_restart() {
    if !root() {
        return;
    }
    let s = setup();
    let p = with_volumes(
        "mem",
        vec![
            Volume {
                name: "cache".into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    medium: Some("Memory".into()),
                    size_limit: Some(Quantity("1Mi".into())),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Volume {
                name: "big".into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    medium: Some("Memory".into()),
                    size_limit: None,
                    ..Default::default()
                }),
                ..Default::default()
            },
            Volume {
                name: "disk".into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    size_limit: Some(Quantity("10Mi".into())),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ],
    );
    s.vm.wait_for_attach_and_mount(&p).await.expect("mount");
    let m = s.vm.mounted_volumes(&p.uid());
    let cache = &m["cache"].host_path;
    assert_eq!(mount::fs_type(cache).as_deref(), Some("tmpfs"));
    let st = nix::sys::statvfs::statvfs(cache).expect("statvfs");
    assert_eq!(st.blocks() * st.fragment_size(), 1024 * 1024);
    let big = nix::sys::statvfs::statvfs(&m["big"].host_path).expect("statvfs");
    assert_eq!(
        big.blocks() * big.fragment_size(),
        4 * 1024 * 1024 * 1024,
        "node allocatable without sizeLimit"
    );
    assert_eq!(m["disk"].size_limit_bytes, Some(10 * 1024 * 1024));
    assert_ne!(
        mount::fs_type(&m["disk"].host_path).as_deref(),
        Some("tmpfs")
    );
    std::fs::write(cache.join("data"), b"keep me").expect("write");
    let vm2 = s.restart();
    // The actual state is rebuilt from disk before the pod's first sync.
    let rebuilt = vm2.mounted_volumes(&p.uid());
    assert_eq!(rebuilt.len(), 3, "{rebuilt:?}");
    assert_eq!(rebuilt["cache"].host_path, *cache);
    vm2.wait_for_attach_and_mount(&p).await.expect("adopt");
    let adopted = vm2.mounted_volumes(&p.uid());
    assert_eq!(
        (
            adopted["disk"].size_limit_bytes,
            adopted["cache"].size_limit_bytes
        ),
        (Some(10 * 1024 * 1024), Some(1024 * 1024)),
        "sizeLimit is known again after the first sync, for the eviction manager"
    );
    assert_eq!(
        std::fs::read_to_string(cache.join("data")).expect("data"),
        "keep me",
        "not remounted"
    );
    assert_eq!(
        mount::mounts_under(cache).len(),
        1,
        "one tmpfs, not stacked"
    );
    // A pod gone while the kubelet was down: housekeeping unmounts and removes it.
    let vm3 = s.restart();
    vm3.cleanup_orphaned(&HashSet::<PodUid>::new())
        .await
        .expect("cleanup");
    assert!(mount::mounts_under(&s.root.join("pods")).is_empty());
    assert!(!s.root.join("pods/uid-mem").exists());
}

#[tokio::test]
async fn sub_paths_stay_inside_the_volume_and_teardown_spares_host_data() {
    if !root() {
        return;
    }
    let s = setup();
    let host = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret"), b"host").expect("write");
    std::fs::create_dir(host.path().join("data")).expect("mkdir");
    std::fs::write(host.path().join("data/f"), b"ok").expect("write");
    std::os::unix::fs::symlink("/", host.path().join("to-root")).expect("symlink");
    std::os::unix::fs::symlink(outside.path(), host.path().join("to-outside")).expect("symlink");
    let p = with_volumes(
        "sub",
        vec![Volume {
            name: "host".into(),
            host_path: Some(HostPathVolumeSource {
                path: host.path().display().to_string(),
                type_: Some("Directory".into()),
            }),
            ..Default::default()
        }],
    );
    s.vm.wait_for_attach_and_mount(&p).await.expect("mount");
    for bad in ["to-root", "to-outside", "to-outside/secret", "../", "/etc"] {
        let err =
            s.vm.prepare_sub_path(&p, "c", 0, "host", bad)
                .await
                .expect_err(bad);
        assert!(err.to_string().contains("\"host\""), "{bad}: {err}");
    }
    let target =
        s.vm.prepare_sub_path(&p, "c", 1, "host", "data")
            .await
            .expect("ok");
    assert_eq!(target, s.root.join("pods/uid-sub/volume-subpaths/host/c/1"));
    assert_eq!(std::fs::read_to_string(target.join("f")).expect("f"), "ok");
    // Reused on the next container start.
    assert_eq!(
        s.vm.prepare_sub_path(&p, "c", 1, "host", "data")
            .await
            .expect("again"),
        target
    );
    s.vm.unmount_pod(&p.uid()).await.expect("unmount");
    assert!(mount::mounts_under(&s.root.join("pods")).is_empty());
    assert_eq!(
        std::fs::read_to_string(host.path().join("data/f")).expect("host data kept"),
        "ok"
    );
    assert!(outside.path().join("secret").exists());
}

#[tokio::test]
async fn downward_api_updates_are_atomic_for_a_reader_loop() {
    if !root() {
        return;
    }
    let s = setup();
    let item = |path: &str, field: &str| DownwardAPIVolumeFile {
        path: path.into(),
        field_ref: Some(ObjectFieldSelector {
            field_path: field.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut p = with_volumes(
        "dapi-loop",
        vec![Volume {
            name: "podinfo".into(),
            downward_api: Some(DownwardAPIVolumeSource {
                items: Some(vec![
                    item("labels", "metadata.labels['gen']"),
                    item("annotations", "metadata.annotations['gen']"),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        }],
    );
    let set_gen = |p: &mut Pod, n: usize| {
        p.metadata.labels = Some(BTreeMap::from([("gen".to_owned(), n.to_string())]));
        p.metadata.annotations = Some(BTreeMap::from([("gen".to_owned(), n.to_string())]));
    };
    set_gen(&mut p, 0);
    s.vm.wait_for_attach_and_mount(&p).await.expect("mount");
    let dir = s.vm.mounted_volumes(&p.uid())["podinfo"].host_path.clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (stop, dir) = (stop.clone(), dir.clone());
        std::thread::spawn(move || {
            let mut generations = HashSet::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // A reader that opens the directory once (as `..data`) sees one generation.
                let Ok(t) = std::fs::read_link(dir.join("..data")) else {
                    continue;
                };
                let l = std::fs::read_to_string(dir.join(&t).join("labels"));
                let a = std::fs::read_to_string(dir.join(&t).join("annotations"));
                if let (Ok(l), Ok(a)) = (l, a) {
                    assert_eq!(l, a, "mixed generations");
                    generations.insert(l);
                }
            }
            generations
        })
    };
    for n in 1..=100 {
        set_gen(&mut p, n);
        s.vm.wait_for_attach_and_mount(&p).await.expect("resync");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let generations = reader.join().expect("reader");
    assert!(
        generations.len() > 1,
        "the reader saw updates: {generations:?}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("annotations")).expect("read"),
        "100"
    );
    s.vm.unmount_pod(&p.uid()).await.expect("unmount");
}

#[tokio::test]
async fn fs_group_owns_projected_files_and_empty_dirs() {
    use std::os::unix::fs::MetadataExt;
    if !root() {
        return;
    }
    let s = setup();
    s.objects.set_secret(
        "default",
        "creds",
        Secret {
            data: Some(BTreeMap::from([(
                "key".to_owned(),
                ByteString(b"v".to_vec()),
            )])),
            ..Default::default()
        },
    );
    let mut p = with_volumes(
        "fsgroup",
        vec![
            Volume {
                name: "secret".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some("creds".into()),
                    default_mode: Some(0o400),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            },
        ],
    );
    if let Some(spec) = p.spec.as_mut() {
        spec.security_context = Some(k8s_openapi::api::core::v1::PodSecurityContext {
            fs_group: Some(4242),
            ..Default::default()
        });
    }
    s.vm.wait_for_attach_and_mount(&p).await.expect("mount");
    let m = s.vm.mounted_volumes(&p.uid());
    let key = m["secret"].host_path.join("key");
    let meta = std::fs::metadata(&key).expect("meta");
    assert_eq!(meta.gid(), 4242);
    assert_eq!(meta.mode() & 0o777, 0o440, "defaultMode plus group read");
    let scratch = std::fs::metadata(&m["scratch"].host_path).expect("meta");
    assert_eq!(scratch.gid(), 4242);
    assert_eq!(scratch.mode() & 0o7777, 0o2777);
    // The next sync does not rewrite an unchanged payload.
    let data = std::fs::read_link(m["secret"].host_path.join("..data")).expect("..data");
    s.vm.wait_for_attach_and_mount(&p).await.expect("resync");
    assert_eq!(
        std::fs::read_link(m["secret"].host_path.join("..data")).expect("..data"),
        data
    );
    s.vm.unmount_pod(&p.uid()).await.expect("unmount");
}
