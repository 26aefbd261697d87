//! Test images built locally as OCI image layout tarballs: no registry is reachable here.
//!
//! Two images, each one uncompressed layer:
//! - busybox: Debian's static `/bin/busybox` with a symlink per applet, a minimal `/etc/passwd`
//!   and `/etc/group`, and `/tmp`; tagged under every reference in [`BUSYBOX_REFS`];
//! - pause: a static C binary built from `xtask/pause/pause.c` as `/pause`, tagged [`PAUSE_REF`]
//!   (the testbed's containerd uses it as `sandbox_image`).
//!
//! Tarballs are cached by content (`<name>-<hash of inputs>.tar`), so repeated calls only hash the
//! busybox binary. Load one with `ctr -a SOCK -n k8s.io images import FILE` (the testbed does).

use std::{
    fs,
    path::{Path, PathBuf},
    process::{self, Command},
    sync::atomic::{AtomicU64, Ordering},
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::util;

/// Every reference the busybox image is tagged with; pods in tests and examples may use any of
/// them with `imagePullPolicy: IfNotPresent` or `Never`. Add a reference here when a test needs one.
pub const BUSYBOX_REFS: &[&str] = &[
    "docker.io/library/busybox:latest",
    "docker.io/library/busybox:1.36",
];

/// The pause image's reference, also the testbed containerd's `sandbox_image`.
pub const PAUSE_REF: &str = "registry.k8s.io/pause:3.9";

/// Applets the busybox image must provide (it links every applet the binary has; these are checked).
pub const BUSYBOX_APPLETS: &[&str] = &[
    "sh", "sleep", "echo", "cat", "ls", "wget", "httpd", "nc", "env", "true", "false", "mkdir",
    "rm", "touch", "date", "id", "hostname", "ps", "kill", "grep", "seq", "printf", "test", "[",
    "mount", "df",
];

/// Where busybox-static installs the binary the image is built from.
const BUSYBOX_BIN: &str = "/bin/busybox";
const PAUSE_C: &str = include_str!("../pause/pause.c");
/// Part of every cache key: bump it when the layout written here changes.
const FORMAT: &str = "xtask-oci-1";
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";

/// Paths of the image tarballs made by [`ensure_images`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageTarballs {
    /// The busybox image, tagged with every reference in [`BUSYBOX_REFS`].
    pub busybox: PathBuf,
    /// The pause image, tagged [`PAUSE_REF`].
    pub pause: PathBuf,
}

impl ImageTarballs {
    /// Both tarballs, in import order.
    pub fn all(&self) -> [&Path; 2] {
        [&self.pause, &self.busybox]
    }
}

/// The default cache directory: `<target>/testbed/images`.
pub fn default_dir() -> PathBuf {
    util::target_dir().join("testbed").join("images")
}

/// Builds the busybox and pause image tarballs under `dir`, or reuses cached ones.
///
/// Needs `busybox-static`, `gcc` and `libc6-dev`: call
/// [`testbed::ensure_packages`](crate::testbed::ensure_packages) first on a fresh machine.
/// Safe to call from several threads or processes at once (files are renamed into place).
pub fn ensure_images(dir: &Path) -> Result<ImageTarballs> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(ImageTarballs {
        busybox: busybox(dir)?,
        pause: pause(dir)?,
    })
}

fn busybox(dir: &Path) -> Result<PathBuf> {
    let bin = fs::read(BUSYBOX_BIN)
        .with_context(|| format!("cannot read {BUSYBOX_BIN} (is busybox-static installed?)"))?;
    let key = cache_key(&[&bin, BUSYBOX_REFS.join(" ").as_bytes()]);
    let path = dir.join(format!("busybox-{key}.tar"));
    if path.exists() {
        return Ok(path);
    }
    let mut layer = Layer::new();
    busybox_files(&mut layer, &bin)?;
    let config = json!({ "Cmd": ["sh"], "Env": [PATH_ENV] });
    write_layout(&path, BUSYBOX_REFS, layer.finish()?, config)?;
    Ok(path)
}

/// Adds the busybox image's files to `layer`: `bin` (the static busybox) at `/bin/busybox`, a
/// symlink per applet, `/etc/passwd`, `/etc/group` and the usual directories.
fn busybox_files(layer: &mut Layer, bin: &[u8]) -> Result<()> {
    let list = util::output(Command::new(BUSYBOX_BIN).arg("--list"))?;
    let applets: Vec<&str> = list.lines().filter(|a| *a != "busybox").collect();
    if let Some(missing) = BUSYBOX_APPLETS.iter().find(|a| !applets.contains(a)) {
        bail!("{BUSYBOX_BIN} lacks the applet `{missing}`");
    }
    for (dir, mode) in [
        ("bin", 0o755),
        ("dev", 0o755),
        ("etc", 0o755),
        ("home", 0o755),
        ("proc", 0o555),
        ("root", 0o700),
        ("sys", 0o555),
        ("tmp", 0o1777),
        ("var", 0o755),
    ] {
        layer.dir(dir, mode)?;
    }
    layer.file("bin/busybox", bin, 0o755)?;
    for applet in applets {
        layer.symlink(&format!("bin/{applet}"), "busybox")?;
    }
    layer.file(
        "etc/passwd",
        b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n",
        0o644,
    )?;
    layer.file("etc/group", b"root:x:0:\nnobody:x:65534:\n", 0o644)?;
    Ok(())
}

/// A file an image adds on top of busybox: path inside the image (no leading `/`), content, mode.
pub type ExtraFile = (String, Vec<u8>, u32);

/// An image of busybox plus `extra` files (their parent directories made as needed), tagged
/// `reference`, with the image config `config` (`Entrypoint`, `Cmd`, `User`, …; `Env` defaults
/// to the usual `PATH`): stand-ins for the images a test suite names, such as the conformance
/// suite's agnhost, nginx or nonroot. Cached by content in `dir`.
pub fn busybox_derived(
    dir: &Path,
    reference: &str,
    extra: &[ExtraFile],
    mut config: Value,
) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let bin = fs::read(BUSYBOX_BIN)
        .with_context(|| format!("cannot read {BUSYBOX_BIN} (is busybox-static installed?)"))?;
    if config.get("Env").is_none()
        && let Some(object) = config.as_object_mut()
    {
        object.insert("Env".into(), json!([PATH_ENV]));
    }
    let config_text = config.to_string();
    let mut parts: Vec<&[u8]> = vec![&bin, reference.as_bytes(), config_text.as_bytes()];
    let modes: Vec<[u8; 4]> = extra
        .iter()
        .map(|(_, _, mode)| mode.to_le_bytes())
        .collect();
    for ((path, data, _), mode) in extra.iter().zip(&modes) {
        parts.extend([path.as_bytes(), data.as_slice(), mode.as_slice()]);
    }
    let path = dir.join(format!("derived-{}.tar", cache_key(&parts)));
    if path.exists() {
        return Ok(path);
    }
    let mut layer = Layer::new();
    busybox_files(&mut layer, &bin)?;
    let mut dirs: Vec<String> = [
        "bin", "dev", "etc", "home", "proc", "root", "sys", "tmp", "var",
    ]
    .map(String::from)
    .to_vec();
    for (inside, data, mode) in extra {
        layer.parents(inside, &mut dirs)?;
        layer.file(inside, data, *mode)?;
    }
    write_layout(&path, &[reference], layer.finish()?, config)?;
    Ok(path)
}

fn pause(dir: &Path) -> Result<PathBuf> {
    let key = cache_key(&[PAUSE_C.as_bytes(), PAUSE_REF.as_bytes()]);
    let path = dir.join(format!("pause-{key}.tar"));
    if path.exists() {
        return Ok(path);
    }
    let build = dir.join(format!(".pause-build-{}", unique()));
    fs::create_dir_all(&build)?;
    let result = (|| {
        let (src, bin) = (build.join("pause.c"), build.join("pause"));
        fs::write(&src, PAUSE_C)?;
        util::run(
            Command::new("gcc")
                .args(["-static", "-Os", "-s", "-o"])
                .args([&bin, &src]),
        )
        .context("cannot compile the pause binary (are gcc and libc6-dev installed?)")?;
        fs::read(&bin).context("cannot read the compiled pause binary")
    })();
    let _ = fs::remove_dir_all(&build);
    let mut layer = Layer::new();
    layer.file("pause", &result?, 0o755)?;
    let config = json!({ "Entrypoint": ["/pause"], "Env": [PATH_ENV] });
    write_layout(&path, &[PAUSE_REF], layer.finish()?, config)?;
    Ok(path)
}

/// An image of its own tagged `reference`, in `dir`: one layer holding `/filler`, `size`
/// bytes derived from the reference, so each reference is a distinct image (its own ID) of a
/// known size, e.g. for image garbage collection tests. Import it with `ctr images import`.
pub fn filler_image(dir: &Path, reference: &str, size: usize) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let key = cache_key(&[reference.as_bytes(), &size.to_le_bytes()]);
    let path = dir.join(format!("filler-{key}.tar"));
    if path.exists() {
        return Ok(path);
    }
    // Hash-chained bytes: incompressible, and different for every reference.
    let mut data = Vec::with_capacity(size + 32);
    let mut block = Sha256::digest(reference.as_bytes());
    while data.len() < size {
        data.extend_from_slice(&block);
        block = Sha256::digest(block);
    }
    data.truncate(size);
    let mut layer = Layer::new();
    layer.file("filler", &data, 0o644)?;
    let config = json!({ "Cmd": ["/filler"], "Env": [PATH_ENV] });
    write_layout(&path, &[reference], layer.finish()?, config)?;
    Ok(path)
}

/// An image of `programs` tagged `reference`, in `dir`: each program at `/usr/local/bin/<name>`
/// with the shared libraries `ldd` lists for it at their host paths, and `/tmp`. For the
/// control-plane images of `cargo xtask kubeadm` (static Go binaries, and Debian's etcd, which
/// links glibc); a pod's `command` names the program, as kubeadm's static pods do.
pub fn program_image(dir: &Path, reference: &str, programs: &[&Path]) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for program in programs {
        let name = program
            .file_name()
            .with_context(|| format!("{} names no file", program.display()))?;
        let data =
            fs::read(program).with_context(|| format!("cannot read {}", program.display()))?;
        files.push((format!("usr/local/bin/{}", name.to_string_lossy()), data));
        for library in shared_libraries(program)? {
            let data =
                fs::read(&library).with_context(|| format!("cannot read {}", library.display()))?;
            let inside = library.to_string_lossy().trim_start_matches('/').to_owned();
            if !files.iter().any(|(path, _)| *path == inside) {
                files.push((inside, data));
            }
        }
    }
    let mut parts: Vec<&[u8]> = vec![reference.as_bytes()];
    for (path, data) in &files {
        parts.push(path.as_bytes());
        parts.push(data);
    }
    let key = cache_key(&parts);
    let path = dir.join(format!("program-{key}.tar"));
    if path.exists() {
        return Ok(path);
    }
    let mut layer = Layer::new();
    layer.dir("tmp", 0o1777)?;
    let mut dirs: Vec<String> = vec!["tmp".into()];
    for (inside, data) in &files {
        layer.parents(inside, &mut dirs)?;
        layer.file(inside, data, 0o755)?;
    }
    let config = json!({ "Env": [PATH_ENV] });
    write_layout(&path, &[reference], layer.finish()?, config)?;
    Ok(path)
}

/// The libraries a dynamically linked program loads (`ldd`'s absolute paths, symlinks resolved
/// to the path the loader asks for); none for a static one.
fn shared_libraries(program: &Path) -> Result<Vec<PathBuf>> {
    let output = Command::new("ldd")
        .arg(program)
        .output()
        .context("cannot run ldd")?;
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text
        .lines()
        .filter_map(|line| {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
            let path = line.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// An uncompressed, reproducible layer tar (owner root, mtime 0).
struct Layer(tar::Builder<Vec<u8>>);

impl Layer {
    fn new() -> Layer {
        Layer(tar::Builder::new(Vec::new()))
    }

    fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h
    }

    fn dir(&mut self, path: &str, mode: u32) -> Result<()> {
        let mut h = Self::header(tar::EntryType::Directory, mode, 0);
        Ok(self.0.append_data(&mut h, format!("{path}/"), &[][..])?)
    }

    fn file(&mut self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        let mut h = Self::header(tar::EntryType::Regular, mode, data.len() as u64);
        Ok(self.0.append_data(&mut h, path, data)?)
    }

    fn symlink(&mut self, path: &str, target: &str) -> Result<()> {
        let mut h = Self::header(tar::EntryType::Symlink, 0o777, 0);
        Ok(self.0.append_link(&mut h, path, target)?)
    }

    /// Adds the directories above `path` (mode 0755) that `made` does not list yet.
    fn parents(&mut self, path: &str, made: &mut Vec<String>) -> Result<()> {
        let mut parent = String::new();
        let components: Vec<&str> = path.split('/').collect();
        for component in components.split_last().map_or(&[][..], |(_, dirs)| dirs) {
            parent = if parent.is_empty() {
                (*component).to_owned()
            } else {
                format!("{parent}/{component}")
            };
            if !made.contains(&parent) {
                self.dir(&parent, 0o755)?;
                made.push(parent.clone());
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<Vec<u8>> {
        Ok(self.0.into_inner()?)
    }
}

/// Writes an OCI image layout tarball for one single-layer image, atomically.
fn write_layout(path: &Path, refs: &[&str], layer: Vec<u8>, exec: Value) -> Result<()> {
    let arch = oci_arch();
    let layer_digest = sha256(&layer);
    let config = serde_json::to_vec(&json!({
        "architecture": arch,
        "os": "linux",
        "config": exec,
        "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
        "history": [{ "created_by": "cargo xtask images" }],
    }))?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": { "mediaType": CONFIG_TYPE, "digest": sha256(&config), "size": config.len() },
        "layers": [{ "mediaType": LAYER_TYPE, "digest": layer_digest, "size": layer.len() }],
    }))?;
    let manifests: Vec<Value> = refs
        .iter()
        .map(|name| {
            json!({
                "mediaType": MANIFEST_TYPE,
                "digest": sha256(&manifest),
                "size": manifest.len(),
                "platform": { "architecture": arch, "os": "linux" },
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit_once(':').map_or(*name, |(_, tag)| tag),
                },
            })
        })
        .collect();
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        "manifests": manifests,
    }))?;

    let mut out = Layer::new();
    out.file("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#, 0o644)?;
    out.file("index.json", &index, 0o644)?;
    out.dir("blobs", 0o755)?;
    out.dir("blobs/sha256", 0o755)?;
    for blob in [&layer, &config, &manifest] {
        let digest = sha256(blob);
        let hex = digest.trim_start_matches("sha256:");
        out.file(&format!("blobs/sha256/{hex}"), blob, 0o644)?;
    }
    let tmp = path.with_extension(format!("tmp-{}", unique()));
    fs::write(&tmp, out.finish()?).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot create {}", path.display()))
}

/// The machine's architecture as OCI spells it.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    }
}

fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(data)))
}

/// A short hash of the inputs plus the format version and architecture.
fn cache_key(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for part in [FORMAT.as_bytes(), oci_arch().as_bytes()]
        .iter()
        .chain(parts)
    {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    hex(&h.finalize()[..8])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A name suffix unique to this process and call, for temporary files.
fn unique() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}
