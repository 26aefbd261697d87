//! The systemd cgroup driver against a real systemd: `/lib/systemd/systemd` as PID 1 of its
//! own namespaces (`xtask::systemd::NamespacedSystemd`, for machines that do not boot
//! systemd), reached over its D-Bus system bus by `kubelet::systemd::DbusSystemd`. The QoS
//! and pod slices must be active units with the limits upstream's kubelet gives them, in
//! systemd's view (`systemctl show`/`status`) and in the cgroup tree, and go away on destroy.
//!
//! The second test boots a whole node in that systemd: containerd with runc's systemd
//! driver (`SystemdCgroup = true`) and the `kubelet` binary with `--cgroup-driver=systemd`;
//! a pod's containers must run in scopes of its pod slice.
//!
//! Skips, saying why, without root, systemd or dbus-daemon, or when systemd cannot start.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet::systemd::{Address, DbusSystemd};
use kubelet_core::cm::PodContainerManager;
use kubelet_core::cm::cgroupfs::Layout;
use kubelet_core::cm::helpers::burstable_cpu_shares;
use kubelet_core::cm::systemd::Systemd;
use kubelet_core::pod::PodUid;
use kubelet_core::testing::{container_with_resources, pod};
use xtask::systemd::NamespacedSystemd;

const GUARANTEED_UID: &str = "6c1a4e95-6bb6-11e6-bc26-28d2444e470d";
const BURSTABLE_UID: &str = "0b7f9a2c-1d3e-4f5a-8b6c-7d8e9f0a1b2c";

fn pod_with(uid: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Pod {
    let mut p = pod(uid);
    p.metadata.uid = Some(uid.into());
    p.spec.as_mut().expect("spec").containers =
        vec![container_with_resources("c", requests, limits)];
    p
}

/// The layout of this machine with every hierarchy rooted at systemd's cgroup.
fn layout_below(subdir: &str) -> anyhow::Result<Layout> {
    Ok(match Layout::detect()? {
        Layout::V1(list) => {
            Layout::V1(list.into_iter().map(|(c, m)| (c, m.join(subdir))).collect())
        }
        Layout::V2(m) => Layout::V2(m.join(subdir)),
    })
}

/// The slice's directory in `controller`'s hierarchy (the v2 tree for any on v2).
fn dir(layout: &Layout, controller: &str, slice_path: &str) -> PathBuf {
    let mount: &Path = match layout {
        Layout::V2(m) => m,
        Layout::V1(list) => {
            &list
                .iter()
                .find(|(c, _)| c == controller)
                .expect("controller mounted")
                .1
        }
    };
    mount.join(slice_path.trim_start_matches('/'))
}

fn read(p: PathBuf) -> String {
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_owned()
}

/// A namespaced systemd, or why there is none (the test then skips).
fn systemd(dir: &Path) -> Option<NamespacedSystemd> {
    if !xtask::is_root() {
        eprintln!("SKIPPED: a namespaced systemd needs root");
        return None;
    }
    match NamespacedSystemd::start(dir) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("SKIPPED: systemd cannot start in its own namespaces here: {e:#}");
            None
        }
    }
}

#[test]
fn pod_slices_in_a_real_systemd() -> anyhow::Result<()> {
    let dir_ = tempfile::tempdir()?;
    let Some(systemd) = systemd(dir_.path()) else {
        return Ok(());
    };
    let layout = layout_below(systemd.cgroup_subdir())?;
    let v1 = layout.version() == 1;
    let units = DbusSystemd::connect(Address::Bus(systemd.bus_address()))?;
    let cgroups = Systemd::new(layout.clone(), "/", Arc::new(units));

    cgroups.setup_qos()?;
    for unit in [
        "kubepods.slice",
        "kubepods-burstable.slice",
        "kubepods-besteffort.slice",
    ] {
        assert_eq!(systemd.property(unit, "ActiveState")?, "active", "{unit}");
    }
    assert_eq!(
        systemd.property("kubepods-burstable.slice", "Wants")?,
        "kubepods.slice"
    );
    if v1 {
        assert_eq!(
            systemd.property("kubepods-besteffort.slice", "CPUShares")?,
            "2"
        );
    }

    // Guaranteed: 500m CPU, 64 MiB.
    let guaranteed = pod_with(GUARANTEED_UID, &[], &[("cpu", "500m"), ("memory", "64Mi")]);
    cgroups.ensure_exists(&guaranteed)?;
    let unit = "kubepods-pod6c1a4e95_6bb6_11e6_bc26_28d2444e470d.slice";
    let path = format!("/kubepods.slice/{unit}");
    assert_eq!(cgroups.pod_cgroup_parent(&guaranteed), path);
    let status = systemd.systemctl(&["status", unit])?;
    assert!(status.contains(&format!("CGroup: {path}")), "{status}");
    assert_eq!(systemd.property(unit, "ActiveState")?, "active");
    assert_eq!(systemd.property(unit, "CPUQuotaPerSecUSec")?, "500ms");
    assert_eq!(systemd.property(unit, "DefaultDependencies")?, "no");
    if v1 {
        assert_eq!(
            systemd.property(unit, "MemoryLimit")?,
            (64u64 << 20).to_string()
        );
        assert_eq!(systemd.property(unit, "CPUShares")?, "512");
        assert_eq!(
            read(dir(&layout, "memory", &path).join("memory.limit_in_bytes")),
            (64u64 << 20).to_string()
        );
        assert_eq!(read(dir(&layout, "cpu", &path).join("cpu.shares")), "512");
        assert_eq!(
            read(dir(&layout, "cpu", &path).join("cpu.cfs_quota_us")),
            "50000"
        );
        // cpuset is not systemd's on v1: the kubelet made it, with the parent's CPUs.
        assert!(!read(dir(&layout, "cpuset", &path).join("cpuset.cpus")).is_empty());
    } else {
        assert_eq!(
            read(dir(&layout, "memory", &path).join("memory.max")),
            (64u64 << 20).to_string()
        );
        assert_eq!(
            read(dir(&layout, "cpu", &path).join("cpu.max")),
            "50000 100000"
        );
    }

    // Burstable: a request only.
    let burstable = pod_with(BURSTABLE_UID, &[("cpu", "250m")], &[]);
    cgroups.ensure_exists(&burstable)?;
    let b_unit = "kubepods-burstable-pod0b7f9a2c_1d3e_4f5a_8b6c_7d8e9f0a1b2c.slice";
    let b_path = format!("/kubepods.slice/kubepods-burstable.slice/{b_unit}");
    assert_eq!(cgroups.pod_cgroup_parent(&burstable), b_path);
    assert_eq!(systemd.property(b_unit, "ActiveState")?, "active");
    assert_eq!(
        systemd.property(b_unit, "Wants")?,
        "kubepods-burstable.slice"
    );
    assert!(dir(&layout, "memory", &b_path).is_dir());

    let mut found = cgroups.pod_cgroups()?;
    found.sort();
    assert_eq!(
        found,
        [PodUid::from(BURSTABLE_UID), PodUid::from(GUARANTEED_UID)]
    );

    // The QoS update goes through SetUnitProperties: the burstable slice gets its pods'
    // shares.
    cgroups.update_qos_cgroups(burstable_cpu_shares([&burstable, &guaranteed]))?;
    if v1 {
        assert_eq!(
            systemd.property("kubepods-burstable.slice", "CPUShares")?,
            "256"
        );
        assert_eq!(
            read(
                dir(&layout, "cpu", "/kubepods.slice/kubepods-burstable.slice").join("cpu.shares")
            ),
            "256"
        );
    }

    // Destroy: the unit is stopped and its cgroups are gone everywhere.
    cgroups.destroy(&PodUid::from(BURSTABLE_UID))?;
    assert_ne!(systemd.property(b_unit, "ActiveState")?, "active");
    for c in ["cpu", "memory", "cpuset"] {
        if v1 || c == "memory" {
            assert!(
                !dir(&layout, c, &b_path).exists(),
                "{c} cgroup of the burstable pod"
            );
        }
    }
    assert_eq!(cgroups.pod_cgroups()?, [PodUid::from(GUARANTEED_UID)]);
    cgroups.destroy(&PodUid::from(BURSTABLE_UID))?;
    Ok(())
}

#[test]
fn containers_run_in_their_pod_slice() {
    let dir = tempfile::tempdir().expect("tmp");
    let Some(systemd) = systemd(dir.path()) else {
        return;
    };
    let mut node = support::Node::new_in_systemd("systemd", &systemd);
    node.start_kubelet();
    node.write_manifest(
        "web.yaml",
        &support::pod_yaml("web", "Always", &[("c", "sleep 3600")]),
    );
    let pod = node.wait_for(Duration::from_secs(60), "web running", |n| {
        n.pod("web").filter(|p| support::phase(p) == "Running")
    });
    let uid = support::uid(&pod);
    let unit = format!("kubepods-besteffort-pod{}.slice", uid.replace('-', "_"));
    assert_eq!(
        systemd.property(&unit, "ActiveState").expect("show"),
        "active"
    );
    // The sandbox and the container: runc's scopes in the pod slice.
    let status = systemd.systemctl(&["status", &unit]).expect("status");
    assert!(
        status.contains(&format!(
            "CGroup: /kubepods.slice/kubepods-besteffort.slice/{unit}"
        )),
        "{status}"
    );
    eprintln!("{status}");
    let scopes = status.matches("cri-containerd-").count();
    assert_eq!(scopes, 2, "sandbox and container scopes in {status}");
    assert!(status.contains("sleep 3600"), "{status}");
    assert!(status.contains("/pause"), "{status}");

    // Gone with the pod: the kubelet's housekeeping stops the orphaned slice.
    node.remove_manifest("web.yaml");
    node.wait_for(Duration::from_secs(90), "the pod slice stopped", |_| {
        (systemd.property(&unit, "ActiveState").ok()? != "active").then_some(())
    });
    node.kill9_kubelet();
}
