//! The flag sets installers pass parse, each ignored flag gives one warning, a repeated
//! scalar flag takes its last value, and a repeated map flag adds up.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::settings::{Flags, Settings, UsageError};

fn parse(args: &[&str]) -> Result<Settings, UsageError> {
    let argv = std::iter::once("kubelet").chain(args.iter().copied());
    Settings::from_flags(Flags::try_parse_from(argv).map_err(|e| UsageError(e.to_string()))?)
}

/// `line` split at spaces, with `{config}` replaced by a written KubeletConfiguration.
fn parse_line(line: &str, config: &str) -> Result<Settings, UsageError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config).expect("write");
    let line = line.replace("{config}", path.to_str().expect("utf8"));
    parse(&line.split_whitespace().collect::<Vec<_>>())
}

fn warned(s: &Settings, flag: &str) -> usize {
    s.flag_warnings
        .iter()
        .filter(|w| w.starts_with(&format!("{flag}=")) || w.starts_with(&format!("{flag} ")))
        .count()
}

/// kubeadm v1.20's drop-in (`10-kubeadm.conf`) with `kubeadm-flags.env`, and the file it
/// writes.
#[test]
fn kubeadm_drop_in_flags_parse() {
    let config = include_str!("../../tests/fixtures/kubeadm-v1.20.2-init-defaults.yaml")
        .split("\n---\n")
        .find(|doc| doc.contains("kind: KubeletConfiguration"))
        .expect("kubelet document");
    let s = parse_line(
        "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf --config={config} --network-plugin=cni --pod-infra-container-image=k8s.gcr.io/pause:3.2 --container-runtime=remote --container-runtime-endpoint=unix:///run/containerd/containerd.sock",
        config,
    )
    .expect("kubeadm's flags parse");
    assert_eq!(
        s.cluster.bootstrap_kubeconfig,
        Some(PathBuf::from("/etc/kubernetes/bootstrap-kubelet.conf"))
    );
    assert_eq!(
        s.cluster.kubeconfig,
        Some(PathBuf::from("/etc/kubernetes/kubelet.conf"))
    );
    assert!(
        s.cluster.rotate_certificates,
        "rotateCertificates: true in the file"
    );
    assert_eq!(s.gc.pod_infra_container_image, "k8s.gcr.io/pause:3.2");
    assert_eq!(
        s.runtime_socket,
        PathBuf::from("/run/containerd/containerd.sock")
    );
    assert_eq!(warned(&s, "--network-plugin"), 1, "{:?}", s.flag_warnings);
    assert_eq!(
        warned(&s, "--container-runtime"),
        1,
        "{:?}",
        s.flag_warnings
    );
    assert_eq!(
        warned(&s, "--bootstrap-kubeconfig"),
        0,
        "the TLS bootstrap is implemented: {:?}",
        s.flag_warnings
    );
    assert!(
        s.flag_warnings
            .iter()
            .any(|w| w.starts_with("--network-plugin=cni is ignored: ")),
        "{:?}",
        s.flag_warnings
    );
}

/// kubespray's `kubelet.env` (containerd, v2.15-era).
#[test]
fn kubespray_flags_parse() {
    let s = parse_line(
        "--logtostderr=true --v=2 --node-ip=10.0.0.11 --hostname-override=node1 --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --config={config} --kubeconfig=/etc/kubernetes/kubelet.conf --pod-infra-container-image=k8s.gcr.io/pause:3.3 --container-runtime=remote --container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --runtime-cgroups=/system.slice/containerd.service --image-pull-progress-deadline=2m --network-plugin=cni --cni-conf-dir=/etc/cni/net.d --cni-bin-dir=/opt/cni/bin --volume-plugin-dir=/var/lib/kubelet/volumeplugins --node-labels=node-role.kubernetes.io/worker= --resolv-conf=/run/systemd/resolve/resolv.conf --cgroup-driver=systemd --max-pods=110 --fail-swap-on=false --register-with-taints=dedicated=infra:NoSchedule --kube-reserved=cpu=100m,memory=256Mi --system-reserved=cpu=100m,memory=256Mi",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /etc/kubernetes/manifests\nclusterDNS:\n- 169.254.25.10\nclusterDomain: cluster.local\nrotateCertificates: true\n",
    )
    .expect("kubespray's flags parse");
    assert_eq!(s.node_name, "node1");
    assert_eq!(s.node_ips, vec!["10.0.0.11".to_owned()]);
    assert_eq!(s.verbosity, 2);
    assert_eq!(
        s.pod_runtime.resolv_conf,
        PathBuf::from("/run/systemd/resolve/resolv.conf")
    );
    assert_eq!(s.node_status.max_pods, 110);
    assert_eq!(
        s.runtime_socket,
        PathBuf::from("/var/run/containerd/containerd.sock")
    );
    for flag in [
        "--logtostderr",
        "--container-runtime",
        "--image-pull-progress-deadline",
        "--network-plugin",
        "--cni-conf-dir",
        "--cni-bin-dir",
        "--volume-plugin-dir",
        "--fail-swap-on",
    ] {
        assert_eq!(warned(&s, flag), 1, "{flag}: {:?}", s.flag_warnings);
    }
}

/// The flags k3s's agent gives its embedded kubelet.
#[test]
fn k3s_flags_parse() {
    let s = parse(&[
        "--address=0.0.0.0",
        "--anonymous-auth=false",
        "--authentication-token-webhook=true",
        "--authorization-mode=Webhook",
        "--cgroup-driver=cgroupfs",
        "--cloud-provider=external",
        "--cluster-dns=10.43.0.10",
        "--cluster-domain=cluster.local",
        "--cni-bin-dir=/var/lib/rancher/k3s/data/current/bin",
        "--cni-conf-dir=/var/lib/rancher/k3s/agent/etc/cni/net.d",
        "--container-runtime-endpoint=unix:///run/k3s/containerd/containerd.sock",
        "--container-runtime=remote",
        "--containerd=/run/k3s/containerd/containerd.sock",
        "--eviction-hard=imagefs.available<5%,nodefs.available<5%",
        "--eviction-minimum-reclaim=imagefs.available=10%,nodefs.available=10%",
        "--fail-swap-on=false",
        "--feature-gates=CloudDualStackNodeIPs=true",
        "--healthz-bind-address=127.0.0.1",
        "--hostname-override=k3s-server",
        "--kubeconfig=/var/lib/rancher/k3s/agent/kubelet.kubeconfig",
        "--node-ip=10.0.0.5,fd00::5",
        "--node-labels=",
        "--pod-manifest-path=/var/lib/rancher/k3s/agent/pod-manifests",
        "--provider-id=k3s://k3s-server",
        "--read-only-port=0",
        "--resolv-conf=/etc/resolv.conf",
        "--serialize-image-pulls=false",
        "--alsologtostderr",
        "--log-dir=/var/log/k3s",
    ])
    .expect("k3s's flags parse");
    assert_eq!(s.node_name, "k3s-server");
    assert_eq!(
        s.node_ips,
        vec!["10.0.0.5".to_owned(), "fd00::5".to_owned()]
    );
    assert_eq!(s.read_only, None);
    assert_eq!(
        s.runtime_socket,
        PathBuf::from("/run/k3s/containerd/containerd.sock")
    );
    assert!(s.node_status.external_cloud_provider);
    for flag in [
        "--containerd",
        "--provider-id",
        "--feature-gates",
        "--serialize-image-pulls",
        "--alsologtostderr",
        "--log-dir",
    ] {
        assert_eq!(warned(&s, flag), 1, "{flag}: {:?}", s.flag_warnings);
    }
    assert!(
        s.flag_warnings
            .iter()
            .any(|w| w.starts_with("--alsologtostderr=true is ignored")),
        "{:?}",
        s.flag_warnings
    );
}

#[test]
fn a_repeated_flag_takes_its_last_value() {
    let s = parse(&[
        "--sync-frequency=10s",
        "--max-pods=50",
        "--node-labels=a=1",
        "--sync-frequency",
        "30s",
        "--max-pods=60",
        "--node-labels=b=2",
        "--network-plugin=kubenet",
        "--network-plugin=cni",
        "--cluster-dns=10.0.0.10",
        "--cluster-dns=10.0.0.53",
    ])
    .expect("valid");
    assert_eq!(s.sync_frequency, Duration::from_secs(30));
    assert_eq!(s.node_status.max_pods, 60);
    // map and list flags add up, as upstream's (cliflag.MapStringString, StringSlice)
    assert_eq!(
        s.node_status.node_labels.len(),
        2,
        "{:?}",
        s.node_status.node_labels
    );
    assert_eq!(
        s.pod_runtime.cluster_dns,
        vec!["10.0.0.10".to_owned(), "10.0.0.53".to_owned()]
    );
    assert_eq!(warned(&s, "--network-plugin"), 1, "{:?}", s.flag_warnings);
    assert!(
        s.flag_warnings
            .iter()
            .any(|w| w.starts_with("--network-plugin=cni "))
    );
}

/// Upstream's `cliflag.MapStringString` / `MapStringBool`: every repetition of a map flag
/// adds its pairs, a later value for a key wins, and the flag replaces the file's map.
#[test]
fn a_repeated_map_flag_adds_up_and_replaces_the_files_map() {
    let config = "kind: KubeletConfiguration\nkubeReserved:\n  pid: \"1000\"\nsystemReserved:\n  cpu: \"1\"\nevictionHard:\n  nodefs.available: 5%\n";
    let s = parse_line(
        "--config={config} --kube-reserved cpu=100m --kube-reserved memory=1Gi --eviction-hard memory.available<1Gi --eviction-hard memory.available<2Gi --eviction-soft-grace-period memory.available=1m --eviction-soft memory.available<3Gi --eviction-soft imagefs.available<20% --eviction-soft-grace-period imagefs.available=2m --feature-gates=A=true,B=true --feature-gates B=false",
        config,
    )
    .expect("valid");
    let reserved = &s.node_status.kube_reserved.0;
    assert_eq!(
        reserved.keys().collect::<Vec<_>>(),
        ["cpu", "memory"],
        "both repetitions, and not the file's pid: {reserved:?}"
    );
    assert_eq!(
        s.node_status.system_reserved.0.keys().collect::<Vec<_>>(),
        ["cpu"],
        "the file's map without a flag"
    );
    assert_eq!(
        s.node_status.eviction_hard,
        "memory.available<2Gi".parse().expect("threshold"),
        "the later value wins and the file's nodefs.available is replaced"
    );
    let soft: Vec<_> = s
        .eviction
        .thresholds
        .iter()
        .filter(|t| !t.is_hard())
        .map(|t| (t.signal.to_string(), t.grace_period.as_secs()))
        .collect();
    assert_eq!(
        soft,
        [
            ("imagefs.available".to_owned(), 120),
            ("memory.available".to_owned(), 60)
        ],
        "{:?}",
        s.eviction.thresholds
    );
    assert!(
        s.flag_warnings
            .iter()
            .any(|w| w.starts_with("--feature-gates=A=true,B=false is ignored")),
        "{:?}",
        s.flag_warnings
    );
    assert_eq!(warned(&s, "--feature-gates"), 1, "{:?}", s.flag_warnings);
    let err = parse(&["--feature-gates=A=maybe"]).expect_err("not a bool");
    assert!(err.0.contains("--feature-gates"), "{}", err.0);
}

#[test]
fn a_rejected_value_is_a_usage_error() {
    let err = parse(&["--container-runtime=docker"]).expect_err("dockershim is gone");
    assert!(err.0.contains("--container-runtime"), "{}", err.0);
    let err = parse(&["--cloud-provider=aws"]).expect_err("in-tree providers are gone");
    assert!(err.0.contains("--cloud-provider"), "{}", err.0);
    let err = parse(&["--fail-swap-on=maybe"]).expect_err("not a bool");
    assert!(err.0.contains("--fail-swap-on"), "{}", err.0);
    assert!(parse(&["--no-such-flag"]).is_err());
    let s = parse(&["--cloud-provider=", "--cni-bin-dir="]).expect("empty values are accepted");
    assert_eq!(s.flag_warnings.len(), 1, "{:?}", s.flag_warnings);
    assert!(!s.node_status.external_cloud_provider);
}

/// `deploy/10-kubeadm.conf`'s `ExecStart` as systemd expands it: its `Environment=` values,
/// `kubeadm-flags.env` as kubeadm v1.20 writes it on a containerd node, and an operator's
/// `KUBELET_EXTRA_ARGS` that repeats a flag (the last value wins).
#[test]
fn the_shipped_kubeadm_drop_in_starts_the_kubelet() {
    let drop_in = include_str!("../../../deploy/10-kubeadm.conf");
    let mut env: std::collections::HashMap<&str, String> = drop_in
        .lines()
        .filter_map(|l| l.strip_prefix("Environment=\""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k, v.to_owned()))
        .collect();
    env.insert(
        "KUBELET_KUBEADM_ARGS",
        "--container-runtime=remote --container-runtime-endpoint=unix:///run/containerd/containerd.sock --pod-infra-container-image=k8s.gcr.io/pause:3.2".into(),
    );
    env.insert(
        "KUBELET_EXTRA_ARGS",
        "--node-ip=10.0.0.7 --node-ip=10.0.0.8".into(),
    );
    let exec = drop_in
        .lines()
        .filter_map(|l| l.strip_prefix("ExecStart="))
        .rfind(|l| !l.is_empty())
        .expect("an ExecStart line");
    let config_file = env["KUBELET_CONFIG_ARGS"].clone();
    let line: Vec<String> = exec
        .split_whitespace()
        .skip(1)
        .map(|word| match word.strip_prefix('$') {
            Some(var) => env.get(var).cloned().unwrap_or_default(),
            None => word.to_owned(),
        })
        .collect();
    assert_eq!(config_file, "--config=/var/lib/kubelet/config.yaml");
    let line = line
        .join(" ")
        .replace("/var/lib/kubelet/config.yaml", "{config}");
    let config = include_str!("../../tests/fixtures/kubeadm-v1.20.2-init-defaults.yaml")
        .split("\n---\n")
        .find(|doc| doc.contains("kind: KubeletConfiguration"))
        .expect("the kubelet document");
    let s = parse_line(&line, config).expect("the drop-in's command line parses");
    assert_eq!(
        s.cluster.bootstrap_kubeconfig,
        Some(PathBuf::from("/etc/kubernetes/bootstrap-kubelet.conf"))
    );
    assert_eq!(
        s.runtime_socket,
        PathBuf::from("/run/containerd/containerd.sock")
    );
    assert_eq!(s.node_ips, ["10.0.0.8"], "the last --node-ip wins");
}

/// component-base's logging flags of upstream's `kubelet --help` (v1.31): `--logging-format`
/// and `-v` work, the others are accepted with a warning each.
#[test]
fn upstreams_logging_flags_parse() {
    let s = parse(&[
        "--logging-format=json",
        "--v=4",
        "--log-flush-frequency=5s",
        "--log-json-info-buffer-size=0",
        "--log-json-split-stream",
        "--log-text-info-buffer-size=0",
        "--log-text-split-stream=false",
        "--vmodule=pod_workers=4",
    ])
    .expect("valid");
    assert_eq!(s.logging_format, crate::log_format::Format::Json);
    assert_eq!(s.verbosity, 4);
    for flag in [
        "--log-flush-frequency",
        "--log-json-info-buffer-size",
        "--log-json-split-stream",
        "--log-text-info-buffer-size",
        "--log-text-split-stream",
        "--vmodule",
    ] {
        assert_eq!(warned(&s, flag), 1, "{flag}: {:?}", s.flag_warnings);
    }
}

/// `--node-ip` as upstream's `ParseNodeIPArgument`: one IP or a dual-stack pair, the primary
/// first; entries that are not IPs are ignored with a warning; errors name the flag.
#[test]
fn node_ip_takes_one_ip_or_a_dual_stack_pair() {
    let s = parse(&["--node-ip", "fd00::5, 10.0.0.5"]).expect("a dual-stack pair");
    assert_eq!(s.node_ips, ["fd00::5", "10.0.0.5"]);
    assert_eq!(s.node_status.node_ips.len(), 2);
    let s = parse(&["--node-ip=2001:db8::7"]).expect("IPv6 only");
    assert_eq!(s.node_ips, ["2001:db8::7"]);
    let s = parse(&["--node-ip=0.0.0.0"]).expect("unspecified: detect");
    assert!(s.node_ips.is_empty());
    let s = parse(&["--node-ip=10.0.0.5,not-an-ip"]).expect("bad entries are ignored");
    assert_eq!(s.node_ips, ["10.0.0.5"]);
    assert!(
        s.flag_warnings.iter().any(|w| w.contains("not-an-ip")),
        "{:?}",
        s.flag_warnings
    );
    for (value, reason) in [
        (
            "10.0.0.5,10.0.0.6",
            "must contain either a single IP or a dual-stack pair of IPs",
        ),
        (
            "10.0.0.5,fd00::5,fd00::6",
            "must contain either a single IP or a dual-stack pair of IPs",
        ),
        (
            "0.0.0.0,fd00::5",
            "dual-stack node IP cannot include '0.0.0.0' or '::'",
        ),
    ] {
        let err = parse(&["--node-ip", value]).expect_err(value);
        assert_eq!(err.0, format!("bad --node-ip {value:?}: {reason}"));
    }
}
