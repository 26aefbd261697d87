//! Image garbage collection on a real containerd (issue 15, acceptance 2): with the image
//! filesystem over the high threshold, unused images are removed until the bytes that bring
//! it down to the low threshold are freed (and no more); the image in use and the pause image
//! never are.
//!
//! The testbed's containerd keeps its images on a 256 MiB tmpfs of its own, so that its usage
//! is known and moves only with the test: four unused 16 MiB images
//! (`xtask::images::filler_image`, imported with `ctr`: the loopback registry needs
//! credentials, which a standalone kubelet has none of) plus busybox and pause. The
//! thresholds are computed from the filesystem's usage so that freeing one and a half of
//! them is asked for: two go. Collection runs every 2 s here
//! (`--experimental-image-gc-period`) instead of upstream's 5 min, with no minimum age.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::{Node, Unmount, container_status, pod_yaml};

const TMPFS_MIB: u64 = 256;
const FILLER_BYTES: u64 = 16 << 20;
const FILLERS: [&str; 4] = [
    "example.com/gc/filler-1:v1",
    "example.com/gc/filler-2:v1",
    "example.com/gc/filler-3:v1",
    "example.com/gc/filler-4:v1",
];

/// (capacity, available) bytes of the filesystem holding `path`.
fn statfs(path: &Path) -> (u64, u64) {
    let out = Command::new("df")
        .args(["-B1", "--output=size,avail"])
        .arg(path)
        .output()
        .expect("df runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut numbers = text
        .lines()
        .nth(1)
        .expect("df line")
        .split_whitespace()
        .map(|n| n.parse::<u64>().expect("df number"));
    (
        numbers.next().expect("size"),
        numbers.next().expect("avail"),
    )
}

/// Upstream's usage: `100 - available * 100 / capacity`.
fn usage_percent(path: &Path) -> i64 {
    let (capacity, available) = statfs(path);
    100 - (available * 100 / capacity) as i64
}

fn images(node: &Node) -> Vec<String> {
    node.testbed
        .ctr(&["images", "ls", "-q"])
        .expect("ctr images ls")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn fillers_left(node: &Node) -> Vec<String> {
    let present = images(node);
    FILLERS
        .iter()
        .filter(|f| present.iter().any(|p| p == *f))
        .map(|f| (*f).to_owned())
        .collect()
}

#[test]
fn over_the_high_threshold_unused_images_go_down_to_the_low_threshold() {
    // The testbed directory on a tmpfs of its own, before containerd starts there.
    let testbed_dir = support::node_dir("imagegc").join("cd");
    let _ = kubelet_volumes::mount::unmount_all_under(&testbed_dir);
    std::fs::create_dir_all(&testbed_dir).expect("testbed dir");
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={TMPFS_MIB}m"), "tmpfs"])
        .arg(&testbed_dir)
        .status()
        .expect("mount runs");
    assert!(status.success(), "mount tmpfs on {}", testbed_dir.display());
    let _unmount = Unmount(testbed_dir.clone());

    let mut node = Node::new("imagegc");
    let cache = xtask::images::default_dir();
    for reference in FILLERS {
        let tarball =
            xtask::images::filler_image(&cache, reference, FILLER_BYTES as usize).expect("image");
        node.testbed
            .ctr(&["images", "import", &tarball.to_string_lossy()])
            .expect("ctr images import");
    }
    assert_eq!(fillers_left(&node), FILLERS);

    // A pod using busybox, started while image GC is off (threshold 100).
    node.extra_args = [
        "--image-gc-high-threshold",
        "100",
        "--image-gc-low-threshold",
        "80",
    ]
    .map(String::from)
    .to_vec();
    node.start_kubelet();
    node.write_manifest(
        "user.yaml",
        &pod_yaml("user", "Always", &[("app", "exec sleep 3600")]),
    );
    node.wait_for(Duration::from_secs(60), "busybox pod running", |n| {
        let pod = n.pod("user")?;
        container_status(&pod, "app")?["state"]["running"]
            .is_object()
            .then_some(())
    });
    node.kill9_kubelet();

    // Thresholds: over the high one now, and the low one asks for 1.5 fillers' bytes.
    let (capacity, available) = statfs(&testbed_dir);
    let usage = usage_percent(&testbed_dir);
    let wanted = FILLER_BYTES * 3 / 2;
    let low = 100 - (((available + wanted) * 100 + capacity / 2) / capacity) as i64;
    let high = usage - 1;
    eprintln!(
        "capacity {capacity}, available {available}, usage {usage}%, high {high}%, low {low}%"
    );
    assert!(low < high, "the test's images fill too little of the tmpfs");
    node.extra_args = [
        "--image-gc-high-threshold",
        &high.to_string(),
        "--image-gc-low-threshold",
        &low.to_string(),
        "--minimum-image-ttl-duration",
        "0s",
        "--experimental-image-gc-period",
        "2s",
        "--pod-infra-container-image",
        xtask::images::PAUSE_REF,
    ]
    .map(String::from)
    .to_vec();
    node.start_kubelet();

    node.wait_for(Duration::from_secs(60), "unused images collected", |n| {
        (fillers_left(n).len() < FILLERS.len()).then_some(())
    });
    // Freeing stops once 1.5 fillers' bytes are freed: two go, two stay, and the usage is
    // at or below the low threshold.
    let left = node.wait_for(Duration::from_secs(30), "two fillers left", |n| {
        let left = fillers_left(n);
        (left.len() == 2).then_some(left)
    });
    eprintln!("left: {left:?}");
    assert!(usage_percent(&testbed_dir) <= low);
    let present = images(&node);
    for kept in xtask::images::BUSYBOX_REFS
        .iter()
        .chain([&xtask::images::PAUSE_REF])
    {
        assert!(
            present.iter().any(|p| p == kept),
            "{kept} removed: {present:?}"
        );
    }
    let log = node.log();
    assert!(
        log.contains(
            "Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold"
        ),
        "{log}"
    );
    assert!(log.contains("Removing image to free bytes"));
    // The pod still runs.
    let pod = node.listed_pod("user");
    assert!(container_status(&pod, "app").expect("status")["state"]["running"].is_object());
}
