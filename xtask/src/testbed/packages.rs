//! Installs the Debian packages the testbed and the build need, when missing.

use anyhow::Result;

use crate::util::apt::{self, Probe};

/// The packages and their probes. `gcc` and `libc6-dev` build the static pause binary.
const PACKAGES: &[(&str, Probe)] = &[
    ("containerd", Probe::Program("containerd")),
    ("containerd", Probe::Program("ctr")),
    ("runc", Probe::Program("runc")),
    (
        "containernetworking-plugins",
        Probe::File("/usr/lib/cni/bridge"),
    ),
    (
        "containernetworking-plugins",
        Probe::File("/usr/lib/cni/host-local"),
    ),
    (
        "containernetworking-plugins",
        Probe::File("/usr/lib/cni/portmap"),
    ),
    ("busybox-static", Probe::Dpkg),
    ("protobuf-compiler", Probe::Program("protoc")),
    ("iptables", Probe::Program("iptables")),
    ("iproute2", Probe::Program("ip")),
    ("gcc", Probe::Program("gcc")),
    ("libc6-dev", Probe::File("/usr/include/stdio.h")),
    // The registry on loopback (`crate::registry`): the server, bcrypt htpasswd, the pusher.
    ("docker-registry", Probe::Program("docker-registry")),
    ("apache2-utils", Probe::Program("htpasswd")),
    ("skopeo", Probe::Program("skopeo")),
    // The systemd cgroup driver's tests (`crate::systemd`): systemd and its system bus.
    ("systemd", Probe::File("/lib/systemd/systemd")),
    ("dbus", Probe::Program("dbus-daemon")),
];

/// Installs the Debian packages the testbed and the build need, if any is missing.
///
/// The packages are containerd, runc, containernetworking-plugins, busybox-static,
/// protobuf-compiler, iptables, iproute2, gcc, libc6-dev, docker-registry, apache2-utils and
/// skopeo for the registry, and systemd and dbus for the namespaced systemd. A package counts as
/// present when its program or file is found, so a containerd installed another way is left
/// alone. When one is missing this runs `apt-get update`
/// once and `apt-get install -y --no-install-recommends` for the missing ones; that needs root,
/// and the error says so. When nothing is missing it only checks files, so it is cheap to call
/// before every testbed.
pub fn ensure_packages() -> Result<()> {
    apt::ensure(PACKAGES)
}
