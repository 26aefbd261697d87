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
pub fn run(kubelet: Option<PathBuf>) -> Result<()> {
    let built = prepare(&[], kubelet)?;
    let images = control_plane_images(&built)?;
    scenario("run", &built, &images, &[])
}

/// The binaries a scenario runs, built and cached, and its work directory.
pub(crate) struct Built {
    /// `target/kubeadm`: logs, the nodes' overlays and testbeds.
    pub work: PathBuf,
    /// Where image archives are cached.
    pub images: PathBuf,
    /// kubeadm, kube-apiserver, … and the `also` binaries given to [`prepare`], by name.
    binaries: Vec<PathBuf>,
    /// The kubelet the nodes run.
    pub kubelet: PathBuf,
}

impl Built {
    /// The built upstream binary `name` (one of [`COMMANDS`] or those given to [`prepare`]).
    pub fn binary(&self, name: &str) -> Result<&Path> {
        self.binaries
            .iter()
            .find(|b| b.file_name().is_some_and(|f| f == name))
            .map(PathBuf::as_path)
            .with_context(|| format!("{name} was not built"))
    }
}

/// Packages, the upstream binaries (`COMMANDS` plus `also`) and the kubelet: `kubelet`, or this
/// workspace's freshly built.
pub(crate) fn prepare(also: &[&str], kubelet: Option<PathBuf>) -> Result<Built> {
    if !is_root() {
        bail!("the kubeadm scenarios need root (namespaces, mounts, containerd)");
    }
    testbed::ensure_packages()?;
    let names: Vec<&str> = COMMANDS.iter().chain(also).copied().collect();
    let binaries = apiserver::ensure_commands(&names)?;
    let work = target_dir().join("kubeadm");
    Ok(Built {
        images: work.join("images"),
        work,
        binaries,
        kubelet: match kubelet {
            Some(kubelet) => kubelet,
            None => demo::build_kubelet()?,
        },
    })
}

/// Runs `xtask/kubeadm/scenario.sh <mode>` with the environment it reads, plus `env`.
pub(crate) fn scenario(
    mode: &str,
    built: &Built,
    images: &[ImageLine],
    env: &[(&str, &std::ffi::OsStr)],
) -> Result<()> {
    let root = project_root();
    let script = root.join("xtask/kubeadm/scenario.sh");
    println!("==> {} {mode}", script.display());
    let lines: Vec<String> = images.iter().map(ImageLine::to_string).collect();
    let status = Command::new("bash")
        .arg(&script)
        .arg(mode)
        .env("WORK", &built.work)
        .env("KUBELET", &built.kubelet)
        .env(
            "XTASK",
            env::current_exe().context("cannot find xtask's own binary")?,
        )
        .env("KUBEADM", built.binary("kubeadm")?)
        .env("DROPIN", root.join("deploy/10-kubeadm.conf"))
        .env("IMAGES", lines.join("\n"))
        .envs(env.iter().copied())
        .status()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !status.success() {
        bail!(
            "the kubeadm scenario failed ({status}); logs under {}",
            built.work.display()
        );
    }
    Ok(())
}

/// An image for the scenario's registry: an OCI archive, the tag inside it, and the reference
/// to push it as.
pub(crate) struct ImageLine {
    pub archive: PathBuf,
    pub tag: String,
    pub destination: String,
}

impl std::fmt::Display for ImageLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}",
            self.archive.display(),
            self.tag,
            self.destination
        )
    }
}

/// The images `kubeadm config images list` names that the scenario needs (control plane and
/// pause; coredns and kube-proxy are not built, their addon phases are skipped).
pub(crate) fn control_plane_images(built: &Built) -> Result<Vec<ImageLine>> {
    let list = output(
        Command::new(built.binary("kubeadm")?)
            .args(["config", "images", "list", "--kubernetes-version"])
            .arg(apiserver::VERSION)
            .args(["--image-repository", IMAGE_REPOSITORY]),
    )?;
    let pause = images::ensure_images(&built.images)?.pause;
    let pause_tag = images::PAUSE_REF
        .rsplit_once(':')
        .map_or("latest", |(_, tag)| tag);
    let mut lines = Vec::new();
    for reference in list.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (repository, tag) = reference
            .rsplit_once(':')
            .with_context(|| format!("kubeadm listed {reference} without a tag"))?;
        let name = repository.rsplit('/').next().unwrap_or(repository);
        let (archive, tag) = match name {
            "coredns" | "kube-proxy" => continue, // their addon phases are skipped
            "pause" => (pause.clone(), pause_tag),
            "etcd" => (
                images::program_image(&built.images, reference, &[Path::new(ETCD)])?,
                tag,
            ),
            _ => (
                images::program_image(&built.images, reference, &[built.binary(name)?])?,
                tag,
            ),
        };
        lines.push(ImageLine {
            archive,
            tag: tag.to_owned(),
            destination: reference.to_owned(),
        });
    }
    Ok(lines)
}
