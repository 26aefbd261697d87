//! Project automation for the Rust kubelet, as a library so that integration tests in other
//! crates can start a real containerd: add `xtask = { path = "../xtask" }` to their
//! `[dev-dependencies]` and see [`testbed`].
//!
//! - [`testbed`]: a private containerd (CRI, CNI bridge, local images) per directory, cleaned up
//!   on drop, and [`testbed::ensure_packages`] for the Debian packages it needs;
//! - [`apiserver`]: a real kube-apiserver + etcd per test ([`apiserver::Cluster`]), built once
//!   from Debian's source package by `cargo xtask apiserver`;
//! - [`images`]: busybox and pause images built as OCI layout tarballs, no registry needed;
//! - [`ports`]: free ports below the ephemeral range, for processes started on a known port;
//! - [`registry`]: a password-protected image registry on loopback holding the busybox image;
//! - [`systemd`]: a systemd as PID 1 of its own namespaces, with a D-Bus system bus, for the
//!   systemd cgroup driver's tests on machines that do not boot systemd.
//!
//! The `cargo xtask` binary (`testbed up`, `images`, `apiserver`, `demo`, `ci`, `bench`) is built on these.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! let dir = std::path::Path::new("target/testbed/example");
//! let testbed = xtask::testbed::Testbed::start(dir)?;
//! println!("CRI endpoint: {}", testbed.endpoint());
//! # Ok(())
//! # }
//! ```

pub mod apiserver;
pub mod images;
pub mod ports;
pub mod registry;
pub mod systemd;
pub mod testbed;
mod util;

pub use util::{is_root, output, project_root, target_dir};
