//! `cargo xtask kubeadm`: the real kubeadm v1.20.2 brings up a two-node cluster whose nodes run
//! this workspace's kubelet (issue 30's acceptance, on demand: it takes ~15 minutes, most of it
//! waiting for a client certificate to be renewed and the first one to expire).
//!
//! This side builds what the scenario needs: kube-apiserver, kube-controller-manager,
//! kube-scheduler and kubeadm from Debian's `kubernetes` source package (the recipe of
//! [`apiserver::build`], cached beside kube-apiserver), the control-plane images kubeadm asks for
//! (`kubeadm config images list`: the source-built binaries, Debian's etcd, the testbed's pause
//! image; coredns and kube-proxy are not built, their addon phases are skipped) and the kubelet.
//! `xtask/kubeadm/scenario.sh` then runs the cluster in namespaces of its own (two nodes, each a
//! network, UTS and mount namespace with overlays over `/etc`, `/usr`, `/var/lib` and `/var/log`
//! and its own containerd) and checks every step; it writes nothing to the machine's
//! `/etc/kubernetes` or `/var/lib/kubelet`.

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use xtask::{apiserver, images, is_root, output, project_root, target_dir, testbed};

use crate::demo;

/// The upstream commands the scenario runs, built from the same source tree as kube-apiserver.
const COMMANDS: [&str; 4] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubeadm",
];
/// Where the control-plane node serves the images (its own loopback; kubeadm's
/// `imageRepository`). The scenario script uses the same value.
const IMAGE_REPOSITORY: &str = "127.0.0.1:5000/k8s";
/// Debian's etcd (package etcd-server), the etcd of the control-plane image.
const ETCD: &str = "/usr/bin/etcd";

/// Builds what the scenario needs and runs it.
pub fn run() -> Result<()> {
    if !is_root() {
        bail!("the kubeadm scenario needs root (namespaces, mounts, containerd)");
    }
    testbed::ensure_packages()?;
    let binaries = apiserver::ensure_commands(&COMMANDS)?;
    let kubeadm = binaries[3].clone();
    let work = target_dir().join("kubeadm");
    let images = control_plane_images(&work.join("images"), &kubeadm, &binaries)?;
    let kubelet = demo::build_kubelet()?;
    let root = project_root();
    let script = root.join("xtask/kubeadm/scenario.sh");
    println!("==> {} run", script.display());
    let status = Command::new("bash")
        .arg(&script)
        .arg("run")
        .env("WORK", &work)
        .env("KUBELET", &kubelet)
        .env(
            "XTASK",
            env::current_exe().context("cannot find xtask's own binary")?,
        )
        .env("KUBEADM", &kubeadm)
        .env("DROPIN", root.join("deploy/10-kubeadm.conf"))
        .env("IMAGES", images)
        .status()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !status.success() {
        bail!(
            "the kubeadm scenario failed ({status}); logs under {}",
            work.display()
        );
    }
    Ok(())
}

/// The images `kubeadm config images list` names that the scenario needs, as lines of
/// `<OCI archive> <tag in the archive> <repository:tag under IMAGE_REPOSITORY>`.
fn control_plane_images(dir: &Path, kubeadm: &Path, binaries: &[PathBuf]) -> Result<String> {
    let list = output(
        Command::new(kubeadm)
            .args(["config", "images", "list", "--kubernetes-version"])
            .arg(apiserver::VERSION)
            .args(["--image-repository", IMAGE_REPOSITORY]),
    )?;
    let pause = images::ensure_images(dir)?.pause;
    let pause_tag = images::PAUSE_REF
        .rsplit_once(':')
        .map_or("latest", |(_, tag)| tag);
    let mut lines = Vec::new();
    for reference in list.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let repository_tag = reference
            .strip_prefix(IMAGE_REPOSITORY)
            .map(|rest| rest.trim_start_matches('/'))
            .with_context(|| format!("kubeadm listed {reference}, outside {IMAGE_REPOSITORY}"))?;
        let (name, tag) = repository_tag
            .rsplit_once(':')
            .with_context(|| format!("kubeadm listed {reference} without a tag"))?;
        let program = match name {
            "etcd" => Some(PathBuf::from(ETCD)),
            "pause" => None,
            "coredns" | "kube-proxy" => continue, // their addon phases are skipped
            _ => Some(
                binaries
                    .iter()
                    .find(|b| b.file_name().is_some_and(|f| f == name))
                    .with_context(|| format!("no binary for the image {reference}"))?
                    .clone(),
            ),
        };
        let (archive, archive_tag) = match program {
            Some(program) => (images::program_image(dir, reference, &[&program])?, tag),
            None => (pause.clone(), pause_tag),
        };
        lines.push(format!(
            "{} {archive_tag} {repository_tag}",
            archive.display()
        ));
    }
    Ok(lines.join("\n"))
}
