//! `cargo xtask apiserver`: builds kube-apiserver v1.20.2 from Debian 12's `kubernetes` source
//! package, offline with Debian's Go, and caches it outside the repo (the recipe of
//! `shared/APISERVER.md`).
//!
//! Steps, each skipped when its result is there: packages (only the missing ones); a `deb-src`
//! entry copied from the machine's Debian archive stanza (removed afterwards) and
//! `apt-get source --download-only kubernetes`; unpack; replace the vendored
//! `github.com/modern-go/reflect2` 1.0.1, which crashes the server under Go 1.19, with Debian's
//! copy; `make generated_files` (the tarball lacks the generated OpenAPI code); a GOPATH-mode
//! `go build` with the version ldflags (of kube-apiserver, and on demand of other commands). The work directory is `<cache>/work`, removed after a
//! successful build; a lock file keeps two builds from racing.

use std::{
    fs::{self, File},
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context, Result, bail};

use super::{VERSION, cache_dir};
use crate::util::{
    self,
    apt::{self, Probe},
};

/// What the build and the fixture need. Debian's `kubernetes-client` conflicts with a kubectl
/// installed another way, so it is installed only when no `kubectl` is on `PATH`.
const PACKAGES: &[(&str, Probe)] = &[
    ("etcd-server", Probe::Program("etcd")),
    ("golang-go", Probe::Program("go")),
    ("rsync", Probe::Program("rsync")),
    ("make", Probe::Program("make")),
    ("jq", Probe::Program("jq")),
    ("openssl", Probe::Program("openssl")),
    ("curl", Probe::Program("curl")),
    (
        "golang-github-modern-go-reflect2-dev",
        Probe::File(REFLECT2),
    ),
    ("kubernetes-client", Probe::Program("kubectl")),
];

/// Debian's reflect2 (1.0.2), which replaces the vendored copy.
const REFLECT2: &str = "/usr/share/gocode/src/github.com/modern-go/reflect2";
/// The deb-src entry this adds while downloading.
const SOURCES_FILE: &str = "/etc/apt/sources.list.d/rust-kubelet-src.sources";
/// The machine's Debian sources (deb822), where the archive's stanza is copied from.
const DEBIAN_SOURCES: &str = "/etc/apt/sources.list.d/debian.sources";
/// The Debian suite the source package comes from.
const SUITE: &str = "bookworm";
/// Where ldflags set the version (`kubectl version`, `/version`).
const VERSION_PKG: &str = "k8s.io/kubernetes/vendor/k8s.io";

/// Installs the packages the fixture needs and builds kube-apiserver unless it is cached; returns
/// its path. Needs root for apt; 10–15 minutes of one core when cold (~1.2 GB of Go build cache).
pub fn ensure_built() -> Result<PathBuf> {
    let mut built = ensure_commands(&["kube-apiserver"])?;
    built.pop().context("no binary built")
}

/// Builds each binary of `names` that is not cached yet (`k8s.io/kubernetes/cmd/<name>`, or
/// `agnhost`, `nonewprivs`, `ginkgo`, `e2e.test`) (one source tree
/// for all of them) and returns their paths in the same order. kube-controller-manager,
/// kube-scheduler and kubeadm take a minute or two each once kube-apiserver's build cache is warm.
pub fn ensure_commands(names: &[&str]) -> Result<Vec<PathBuf>> {
    apt::ensure(PACKAGES)?;
    let cache = cache_dir();
    let paths: Vec<PathBuf> = names.iter().map(|name| cache.join(name)).collect();
    if paths.iter().all(|p| p.is_file()) {
        return Ok(paths);
    }
    fs::create_dir_all(&cache).with_context(|| format!("cannot create {}", cache.display()))?;
    let lock_path = cache.join("build.lock");
    let lock =
        File::create(&lock_path).with_context(|| format!("cannot open {}", lock_path.display()))?;
    if lock.try_lock().is_err() {
        eprintln!(
            "xtask apiserver: another build holds {}; waiting",
            lock_path.display()
        );
        lock.lock()
            .with_context(|| format!("cannot lock {}", lock_path.display()))?;
    }
    let missing: Vec<(&str, &PathBuf)> = names
        .iter()
        .copied()
        .zip(&paths)
        .filter(|(_, path)| !path.is_file()) // another build may have finished some
        .collect();
    if missing.is_empty() {
        return Ok(paths);
    }
    let started = Instant::now();
    let work = cache.join("work");
    fs::create_dir_all(&work)?;
    let tree = unpacked_source(&work)?;
    replace_reflect2(&tree)?;
    generate(&tree)?;
    for (name, path) in missing {
        let built = work.join(name);
        go_build(&work, &tree, name, &built)?;
        fs::rename(&built, path)
            .with_context(|| format!("cannot move the binary to {}", path.display()))?;
        eprintln!(
            "xtask apiserver: built {} ({:.0?} so far)",
            path.display(),
            started.elapsed()
        );
    }
    let _ = fs::remove_dir_all(&work);
    Ok(paths)
}

/// Downloads (if needed) and unpacks the source; returns the tree's directory.
fn unpacked_source(work: &Path) -> Result<PathBuf> {
    let tree = work.join("kubernetes");
    if tree.join(".unpacked").exists() {
        return Ok(tree);
    }
    let tarball = match orig_tarball(work)? {
        Some(tarball) => tarball,
        None => {
            download_source(work)?;
            orig_tarball(work)?.context("apt-get source left no kubernetes_*.orig.tar.gz")?
        }
    };
    let _ = fs::remove_dir_all(&tree);
    let unpack = work.join("unpack");
    let _ = fs::remove_dir_all(&unpack);
    fs::create_dir_all(&unpack)?;
    eprintln!("xtask apiserver: unpacking {}", tarball.display());
    util::run(
        Command::new("tar")
            .arg("xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(&unpack),
    )?;
    let top = single_dir(&unpack)?;
    fs::rename(&top, &tree)?;
    fs::remove_dir_all(&unpack)?;
    fs::write(tree.join(".unpacked"), "")?;
    Ok(tree)
}

fn orig_tarball(work: &Path) -> Result<Option<PathBuf>> {
    Ok(fs::read_dir(work)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with("kubernetes_") && n.ends_with(".orig.tar.gz")
            })
        }))
}

fn single_dir(dir: &Path) -> Result<PathBuf> {
    let mut dirs = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir());
    match (dirs.next(), dirs.next()) {
        (Some(top), None) => Ok(top),
        _ => bail!("expected one directory in {}", dir.display()),
    }
}

/// `apt-get source --download-only kubernetes` with a temporary deb-src entry.
fn download_source(work: &Path) -> Result<()> {
    if !util::is_root() {
        bail!("downloading the kubernetes source package needs root (a deb-src entry for apt)");
    }
    let debian = fs::read_to_string(DEBIAN_SOURCES)
        .with_context(|| format!("cannot read {DEBIAN_SOURCES}"))?;
    let entry = deb_src_stanza(&debian).with_context(|| {
        format!("no `Types: deb` stanza for the Debian archive in {DEBIAN_SOURCES}")
    })?;
    let _entry = SourcesEntry::add(&entry)?;
    apt::update()?;
    util::run(
        Command::new("apt-get")
            .args(["-q", "source", "--download-only", "kubernetes"])
            .current_dir(work),
    )
    // `_entry` drops here: the file is removed and apt's lists refreshed.
}

/// The deb-src copy of the machine's Debian archive stanza (URIs ending in `/debian`), with
/// `Suites: bookworm`.
fn deb_src_stanza(sources: &str) -> Option<String> {
    let stanza = sources.split("\n\n").find(|stanza| {
        let lines: Vec<&str> = stanza.lines().map(str::trim).collect();
        lines.contains(&"Types: deb")
            && lines.iter().any(|l| {
                l.strip_prefix("URIs:").is_some_and(|uris| {
                    uris.split_whitespace()
                        .any(|u| u.trim_end_matches('/').ends_with("/debian"))
                })
            })
    })?;
    let lines: Vec<String> = stanza
        .lines()
        .map(|line| match line.trim() {
            "Types: deb" => "Types: deb-src".to_owned(),
            l if l.starts_with("Suites:") => format!("Suites: {SUITE}"),
            _ => line.to_owned(),
        })
        .collect();
    Some(lines.join("\n") + "\n")
}

/// The temporary deb-src file; dropping it removes the file and runs `apt-get update`.
struct SourcesEntry;

impl SourcesEntry {
    fn add(stanza: &str) -> Result<SourcesEntry> {
        fs::write(SOURCES_FILE, stanza).with_context(|| format!("cannot write {SOURCES_FILE}"))?;
        Ok(SourcesEntry)
    }
}

impl Drop for SourcesEntry {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_file(SOURCES_FILE) {
            eprintln!("xtask apiserver: cannot remove {SOURCES_FILE}: {e}");
        }
        if let Err(e) = apt::update() {
            eprintln!("xtask apiserver: {e:#}");
        }
    }
}

/// Replaces the vendored reflect2 with Debian's.
fn replace_reflect2(tree: &Path) -> Result<()> {
    let marker = tree.join(".reflect2");
    if marker.exists() {
        return Ok(());
    }
    let vendored = tree.join("vendor/github.com/modern-go/reflect2");
    if vendored.exists() {
        fs::remove_dir_all(&vendored)?;
    }
    util::run(Command::new("cp").arg("-r").arg(REFLECT2).arg(&vendored))?;
    fs::write(marker, "")?;
    Ok(())
}

/// `make generated_files` (~2 minutes).
fn generate(tree: &Path) -> Result<()> {
    let marker = tree.join(".generated");
    if marker.exists() {
        return Ok(());
    }
    eprintln!("xtask apiserver: make generated_files (a few minutes)");
    util::run(
        Command::new("make")
            .arg("generated_files")
            .current_dir(tree),
    )?;
    fs::write(marker, "")?;
    Ok(())
}

/// The `go` verb and the package that make the binary `name`: a command under `cmd/`, the test
/// images' `agnhost`, the vendored `ginkgo`, or the conformance suite `e2e.test` (`go test -c`).
fn go_package(name: &str) -> (&'static [&'static str], String) {
    match name {
        "e2e.test" => (&["test", "-c"], "k8s.io/kubernetes/test/e2e".into()),
        "ginkgo" => (
            &["build"],
            "k8s.io/kubernetes/vendor/github.com/onsi/ginkgo/ginkgo".into(),
        ),
        "agnhost" => (&["build"], "k8s.io/kubernetes/test/images/agnhost".into()),
        "nonewprivs" => (
            &["build"],
            "k8s.io/kubernetes/test/images/nonewprivs".into(),
        ),
        command => (&["build"], format!("k8s.io/kubernetes/cmd/{command}")),
    }
}

/// The GOPATH-mode build (module mode with `-mod=vendor` fails on this tree).
fn go_build(work: &Path, tree: &Path, name: &str, out: &Path) -> Result<()> {
    let gopath = work.join("gopath");
    let link = gopath.join("src/k8s.io/kubernetes");
    fs::create_dir_all(gopath.join("src/k8s.io"))?;
    if fs::symlink_metadata(&link).is_err() {
        symlink(tree, &link)?;
    }
    let ldflags = format!(
        "-s -w -X {VERSION_PKG}/component-base/version.gitVersion={VERSION} \
         -X {VERSION_PKG}/component-base/version.gitMajor=1 \
         -X {VERSION_PKG}/component-base/version.gitMinor=20 \
         -X {VERSION_PKG}/client-go/pkg/version.gitVersion={VERSION}"
    );
    let (verb, package) = go_package(name);
    eprintln!(
        "xtask apiserver: go {} {package} (10-15 min cold)",
        verb.join(" ")
    );
    util::run(
        Command::new("go")
            .args(verb)
            .arg("-o")
            .arg(out)
            .args(["-ldflags", &ldflags, &package])
            .current_dir(&link)
            .env("GOPATH", &gopath)
            .env("GO111MODULE", "off")
            .env("CGO_ENABLED", "0")
            .env("GOPROXY", "off")
            .env_remove("GOFLAGS"),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deb_src_copies_the_archive_stanza_only() {
        let sources = "Types: deb\n# snapshot\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n";
        let entry = deb_src_stanza(sources).unwrap_or_default();
        assert_eq!(
            entry,
            "Types: deb-src\n# snapshot\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        );
    }

    #[test]
    fn no_archive_stanza_no_entry() {
        assert_eq!(
            deb_src_stanza("Types: deb\nURIs: http://deb.debian.org/debian-security\n"),
            None
        );
    }
}
