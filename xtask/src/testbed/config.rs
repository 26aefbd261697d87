//! The private containerd's `config.toml` and the CNI conflist.

use std::{fs, path::Path};

use anyhow::{Context, Result};
use serde_json::json;

use super::{Layout, net::Slot};
use crate::images::PAUSE_REF;

/// Plugins that only log errors or slow the start here.
const DISABLED_PLUGINS: &[&str] = &[
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.internal.v1.tracing",
];

/// The CNI network's name (in the conflist, and in libcni's cache file names).
pub(crate) const CNI_NETWORK: &str = "testbed";

/// Writes `containerd.toml` and the CNI conflist (before containerd starts, so that CRI reports
/// NetworkReady from the first Status call).
pub(crate) fn write(layout: &Layout, slot: &Slot, systemd_cgroup: bool) -> Result<()> {
    fs::create_dir_all(&layout.cni_conf)?;
    fs::write(&layout.config, containerd_toml(layout, systemd_cgroup))
        .with_context(|| format!("cannot write {}", layout.config.display()))?;
    let conflist = json!({
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": slot.bridge,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": slot.subnet }]],
                    "routes": [{ "dst": "0.0.0.0/0" }],
                    "dataDir": layout.ipam,
                },
            },
            // hostPort → the host's port (CRI port mappings), as kubeadm-style CNI configs do.
            { "type": "portmap", "capabilities": { "portMappings": true } },
            { "type": "loopback" },
        ],
    });
    let path = layout.cni_conf.join("10-testbed.conflist");
    fs::write(&path, serde_json::to_vec_pretty(&conflist)?)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// `systemd_cgroup`: runc's systemd cgroup driver (`SystemdCgroup = true`), for kubelets with
/// `--cgroup-driver=systemd`.
fn containerd_toml(l: &Layout, systemd_cgroup: bool) -> String {
    let disabled: Vec<String> = DISABLED_PLUGINS.iter().map(|p| quote(p)).collect();
    format!(
        r#"# Written by xtask's testbed; regenerated on every start.
version = 2
root = {root}
state = {state}
disabled_plugins = [{disabled}]

[grpc]
  address = {socket}

[plugins."io.containerd.internal.v1.opt"]
  path = {opt}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = {pause}
  # Required without CAP_SYS_RESOURCE: runc cannot lower oom_score_adj.
  restrict_oom_score_adj = true
  # Network namespaces under the state directory, so cleanup finds them.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = {cni_conf}
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = {systemd_cgroup}
        Root = {runc_root}
"#,
        root = quote_path(&l.root),
        state = quote_path(&l.state),
        disabled = disabled.join(", "),
        socket = quote_path(&l.socket),
        opt = quote_path(&l.dir.join("opt")),
        pause = quote(PAUSE_REF),
        cni_conf = quote_path(&l.cni_conf),
        runc_root = quote_path(&l.runc_root),
    )
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn quote_path(p: &Path) -> String {
    quote(&p.to_string_lossy())
}
