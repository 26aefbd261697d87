//! File modes and owners of secret and token files, and the host directories that guard them
//! (upstream `pkg/volume/secret`, `pkg/volume/projected`, `makePodDataDirs`). Needs root for
//! tmpfs mounts and chown.

// Test code, on the test's own runtime: blocking file calls are fine here.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    Pod, PodSecurityContext, ProjectedVolumeSource, Secret, SecretProjection, SecretVolumeSource,
    ServiceAccountTokenProjection, Volume, VolumeProjection,
};
use kubelet_core::PodExt;
use kubelet_core::objects::InMemoryObjectSource;
use kubelet_core::testing::pod;
use kubelet_core::volume::VolumeManager;
use kubelet_volumes::DefaultVolumeManager;
use kubelet_volumes::mount;

fn root() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        eprintln!("skipped: needs root for tmpfs mounts and chown");
    }
    root
}

/// Unmounts what a test mounted under its root.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = mount::unmount_all_under(&self.0);
    }
}

fn meta(p: &Path) -> std::fs::Metadata {
    std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn perm(p: &Path) -> u32 {
    meta(p).mode() & 0o7777
}

/// A pod with a secret volume and a kube-api-access style projected volume (token + secret).
fn token_pod(name: &str, security: Option<PodSecurityContext>) -> Pod {
    let mut p = pod(name);
    if let Some(spec) = p.spec.as_mut() {
        spec.security_context = security;
        spec.volumes = Some(vec![
            Volume {
                name: "creds".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some("creds".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Volume {
                name: "kube-api-access".into(),
                projected: Some(ProjectedVolumeSource {
                    default_mode: Some(0o644),
                    sources: Some(vec![
                        VolumeProjection {
                            service_account_token: Some(ServiceAccountTokenProjection {
                                path: "token".into(),
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
                    ]),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ]);
    }
    p
}

async fn mounted(security: Option<PodSecurityContext>) -> (tempfile::TempDir, Unmount, Pod) {
    let dir = tempfile::tempdir().expect("tempdir");
    let guard = Unmount(dir.path().to_path_buf());
    let objects = InMemoryObjectSource::new();
    objects.set_token("default", "default", "token-abc");
    objects.set_secret(
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
    let vm =
        DefaultVolumeManager::new(dir.path().to_path_buf()).with_object_source(Arc::new(objects));
    let p = token_pod("tok", security);
    vm.wait_for_attach_and_mount(&p).await.expect("mount");
    (dir, guard, p)
}

#[tokio::test]
async fn without_user_or_group_files_get_the_default_mode_and_host_dirs_are_0750() {
    if !root() {
        return;
    }
    let (dir, _g, p) = mounted(None).await;
    let pods = dir.path().join("pods");
    let pod_dir = pods.join(p.uid().as_str());
    for d in [&pods, &pod_dir, &pod_dir.join("volumes")] {
        assert_eq!(
            perm(d),
            0o750,
            "{}: no access for other host users",
            d.display()
        );
    }
    let secret = pod_dir.join("volumes/kubernetes.io~secret/creds");
    assert_eq!(mount::fs_type(&secret).as_deref(), Some("tmpfs"));
    assert_eq!(perm(&secret), 0o1777, "upstream's tmpfs root");
    assert_eq!(
        perm(&secret.join("password")),
        0o644,
        "upstream default mode"
    );
    let proj = pod_dir.join("volumes/kubernetes.io~projected/kube-api-access");
    assert_eq!(perm(&proj.join("token")), 0o644, "the volume's defaultMode");
    assert_eq!(meta(&proj.join("token")).uid(), 0);
    assert_eq!(perm(&proj.join("password")), 0o644);
}

#[tokio::test]
async fn run_as_user_makes_the_token_0600_and_owned_by_that_user() {
    if !root() {
        return;
    }
    let (dir, _g, p) = mounted(Some(PodSecurityContext {
        run_as_user: Some(1234),
        ..Default::default()
    }))
    .await;
    let proj = dir.path().join(format!(
        "pods/{}/volumes/kubernetes.io~projected/kube-api-access",
        p.uid()
    ));
    let token = meta(&proj.join("token"));
    assert_eq!(token.mode() & 0o777, 0o600);
    assert_eq!(token.uid(), 1234);
    assert_eq!(
        perm(&proj.join("password")),
        0o644,
        "only the token changes"
    );
    assert_eq!(meta(&proj.join("password")).uid(), 0);
}

#[tokio::test]
async fn fs_group_makes_the_token_0640_for_that_group() {
    if !root() {
        return;
    }
    let (dir, _g, p) = mounted(Some(PodSecurityContext {
        fs_group: Some(4321),
        ..Default::default()
    }))
    .await;
    let proj = dir.path().join(format!(
        "pods/{}/volumes/kubernetes.io~projected/kube-api-access",
        p.uid()
    ));
    let token = meta(&proj.join("token"));
    assert_eq!(token.mode() & 0o777, 0o640, "0600 widened by fsGroup");
    assert_eq!((token.uid(), token.gid()), (0, 4321));
    assert_eq!(token.mode() & 0o007, 0, "never readable by others");
}

#[tokio::test]
async fn existing_pod_dirs_lose_access_for_others() {
    use std::os::unix::fs::PermissionsExt;
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let _g = Unmount(dir.path().to_path_buf());
    let p = pod("old");
    let pod_dir = dir.path().join("pods").join(p.uid().as_str());
    std::fs::create_dir_all(pod_dir.join("volumes")).expect("mkdir");
    for d in [
        dir.path().join("pods"),
        pod_dir.clone(),
        pod_dir.join("volumes"),
    ] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let vm = DefaultVolumeManager::new(dir.path().to_path_buf());
    vm.wait_for_attach_and_mount(&p).await.expect("mount");
    assert_eq!(perm(&pod_dir), 0o750);
    assert_eq!(perm(&pod_dir.join("volumes")), 0o750);
}
