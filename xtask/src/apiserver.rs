//! A real kube-apiserver for end-to-end tests: [`build`] makes the binary once from Debian 12's
//! `kubernetes` source package (`cargo xtask apiserver`), and [`Cluster`] runs it with etcd on
//! free loopback ports, with the identities a kubelet test needs.
//!
//! There is no controller-manager and no scheduler: set `spec.nodeName` on pods yourself. The
//! server enforces what no fake does: the Node authorizer and the NodeRestriction admission
//! plugin judge every write of a `system:node:<name>` client.
//!
//! # Use from an integration test
//!
//! Add `xtask = { path = "../xtask" }` to the crate's `[dev-dependencies]`. [`ClusterBuilder::start`]
//! blocks (a few seconds; 7–12 s on a loaded machine): from an async test call it through
//! `tokio::task::spawn_blocking`. Dropping the [`Cluster`] kills both processes and deletes its
//! directory; if the test process dies without dropping it (SIGKILL), the next start anywhere
//! on the machine reaps them (the directory names its owner process).
//!
//! ```no_run
//! use xtask::apiserver::Cluster;
//!
//! fn node_registers() -> anyhow::Result<()> {
//!     // None: the binary is not cached and KUBELET_REQUIRE_APISERVER is unset (printed SKIPPED).
//!     let Some(cluster) = Cluster::builder().node("node-a").start_or_skip()? else {
//!         return Ok(());
//!     };
//!     let kubeconfig = cluster.node_kubeconfig("node-a")?; // the kubelet's --kubeconfig
//!     // ... run the kubelet with it, then check as the admin:
//!     let (status, _node) = cluster.admin_request("GET", "/api/v1/nodes/node-a", None)?;
//!     assert_eq!(status, 200, "{}", cluster.log_tail());
//!     Ok(())
//! }
//! ```
//!
//! In a `#[tokio::test]`:
//! `let started = tokio::task::spawn_blocking(|| Cluster::builder().node("node-a").start_or_skip()).await??;`
//! (`kubelet-bin/tests/e2e/apiserver_fixture.rs` does this with a `kube::Client` from the node's
//! kubeconfig).
//!
//! # The binary
//!
//! [`cached_binary`] finds it at
//! `${XDG_CACHE_HOME:-~/.cache}/rust-kubelet/kube-apiserver/v1.20.2/kube-apiserver`.
//! `cargo xtask apiserver` builds it (10–15 min of one core, cold), `cargo xtask ci` does too when
//! it is missing and then sets [`REQUIRE_ENV`], so that tests needing the server fail instead of
//! skipping.

pub mod build;
mod cluster;
mod curl;
mod files;
mod process;
mod reap;

use std::{env, path::PathBuf};

pub use build::{ensure_built, ensure_commands};
pub use cluster::{Cluster, ClusterBuilder};
pub use files::{ClientPki, write_client_pki};

/// The Kubernetes version built and run (Debian 12's `kubernetes` 1.20.5+really1.20.2).
pub const VERSION: &str = "v1.20.2";

/// When this environment variable is set (to anything but empty or `0`), a test that needs the
/// real API server fails when the binary is missing instead of skipping. `cargo xtask ci` sets it.
pub const REQUIRE_ENV: &str = "KUBELET_REQUIRE_APISERVER";

/// The cache directory of this version:
/// `${XDG_CACHE_HOME:-$HOME/.cache}/rust-kubelet/kube-apiserver/v1.20.2`.
pub fn cache_dir() -> PathBuf {
    let base = env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| env::temp_dir().join("cache"));
    base.join("rust-kubelet")
        .join("kube-apiserver")
        .join(VERSION)
}

/// The path the built binary is cached at (see [`cache_dir`]), whether or not it exists.
pub fn binary_path() -> PathBuf {
    cache_dir().join("kube-apiserver")
}

/// The cached kube-apiserver binary, if `cargo xtask apiserver` has built it.
pub fn cached_binary() -> Option<PathBuf> {
    let path = binary_path();
    path.is_file().then_some(path)
}

/// A kubectl of the server's own version (1.20.2), for what newer clients no longer speak
/// (the 1.20 `EphemeralContainers` kind of `pods/ephemeralcontainers`: kubectl 1.32's
/// `debug` fails with `no kind "EphemeralContainers" is registered`). Cached next to
/// kube-apiserver; unpacked from Debian's `kubernetes-client` package (`apt-get download`,
/// nothing installed), or built from the source tree when apt cannot fetch it.
pub fn kubectl_v1_20() -> anyhow::Result<PathBuf> {
    use anyhow::Context;
    let path = cache_dir().join("kubectl");
    if path.is_file() {
        return Ok(path);
    }
    std::fs::create_dir_all(cache_dir())?;
    let work = tempfile::tempdir()?;
    let downloaded = std::process::Command::new("apt-get")
        .args(["download", "kubernetes-client"])
        .current_dir(work.path())
        .status()
        .is_ok_and(|s| s.success());
    let deb = std::fs::read_dir(work.path())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"));
    match deb.filter(|_| downloaded) {
        Some(deb) => {
            let root = work.path().join("root");
            crate::util::run(
                std::process::Command::new("dpkg-deb")
                    .arg("-x")
                    .arg(&deb)
                    .arg(&root),
            )?;
            let unpacked = root.join("usr/bin/kubectl");
            let version = crate::util::output(
                std::process::Command::new(&unpacked).args(["version", "--client", "--short"]),
            )?;
            anyhow::ensure!(
                version.contains(VERSION),
                "Debian's kubectl is {version:?}, not {VERSION}"
            );
            let staged = cache_dir().join("kubectl.tmp");
            std::fs::copy(&unpacked, &staged)
                .with_context(|| format!("cannot copy {}", unpacked.display()))?;
            std::fs::rename(&staged, &path)?;
            Ok(path)
        }
        None => ensure_commands(&["kubectl"])?
            .pop()
            .context("no kubectl built"),
    }
}

/// Whether [`REQUIRE_ENV`] asks for the real API server (set, not empty, not `0`).
pub fn required() -> bool {
    env::var(REQUIRE_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}
