//! The binary's command line: bad flags or config exit with status 64 and a message naming
//! what is wrong; `--help` documents upstream's flag names.

use std::process::Command;

fn kubelet(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubelet"))
        .args(args)
        .output()
        .expect("run kubelet");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// `kubelet(args)` with its directories under `dir`, a runtime socket that does not exist and
/// no plain-HTTP ports: for runs that fail before they touch the runtime.
fn kubelet_offline(dir: &std::path::Path, args: &[&str]) -> (i32, String) {
    let root = dir.join("root");
    let mut all = args.to_vec();
    all.extend([
        "--root-dir",
        root.to_str().expect("utf8"),
        "--container-runtime-endpoint",
        "unix:///does/not/exist.sock",
        "--read-only-port",
        "0",
        "--healthz-port",
        "0",
    ]);
    kubelet(&all)
}

#[test]
fn bad_flags_exit_64_with_a_clear_message() {
    let cases: &[(&[&str], &str)] = &[
        (&["--no-such-flag"], "--no-such-flag"),
        (&["--port", "0"], "--port"),
        (
            &["--tls-cipher-suites", "TLS_RSA_WITH_RC4_128_SHA"],
            "TLS_RSA_WITH_RC4_128_SHA",
        ),
        (&["--tls-min-version", "VersionTLS9"], "VersionTLS9"),
        (&["--authorization-mode", "RBAC"], "RBAC"),
        (&["--tls-cert-file", "/x.crt"], "--tls-private-key-file"),
        (&["--sync-frequency", "soon"], "sync-frequency"),
        (&["--read-only-port", "70000"], "read-only-port"),
        (
            &["--container-runtime-endpoint", "tcp://10.0.0.1:1"],
            "unix://",
        ),
        (
            &["--config", "/does/not/exist.yaml"],
            "/does/not/exist.yaml",
        ),
        (&["--file-check-frequency", "0s"], "file-check-frequency"),
        (&["--kube-api-burst", "-1"], "kube-api-burst"),
        (&["--logging-format", "xml"], "--logging-format"),
        (
            &["--node-status-update-frequency", "0s"],
            "node-status-update-frequency",
        ),
    ];
    for (args, needle) in cases {
        let (code, text) = kubelet(args);
        assert_eq!(code, 64, "{args:?} exited {code}: {text}");
        assert!(
            text.contains(needle),
            "{args:?}: message does not name {needle:?}: {text}"
        );
    }
}

#[test]
fn bad_config_file_exits_64_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubelet.yaml");
    std::fs::write(&path, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequency: often\n")
        .expect("write");
    let (code, text) = kubelet(&["--config", path.to_str().expect("utf8")]);
    assert_eq!(code, 64, "{text}");
    assert!(text.contains("syncFrequency"), "{text}");
}

#[test]
fn help_lists_upstream_flag_names() {
    let (code, text) = kubelet(&["--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--pod-manifest-path",
        "--container-runtime-endpoint",
        "--root-dir",
        "--hostname-override",
        "--node-ip",
        "--read-only-port",
        "--healthz-port",
        "--healthz-bind-address",
        "--sync-frequency",
        "--file-check-frequency",
        "--config",
        "--kubeconfig",
        "--bootstrap-kubeconfig",
        "--rotate-certificates",
        "--kube-api-qps",
        "--kube-api-burst",
        "--node-status-update-frequency",
        "--manifest-url",
        "--manifest-url-header",
        "--http-check-frequency",
        "--port",
        "--address",
        "--tls-cert-file",
        "--tls-private-key-file",
        "--cert-dir",
        "--tls-min-version",
        "--tls-cipher-suites",
        "--client-ca-file",
        "--anonymous-auth",
        "--authentication-token-webhook",
        "--authentication-token-webhook-cache-ttl",
        "--authorization-mode",
        "--authorization-webhook-cache-authorized-ttl",
        "--authorization-webhook-cache-unauthorized-ttl",
        "-v",
        "--logging-format",
    ] {
        assert!(text.contains(flag), "--help lacks {flag}");
    }
}

#[test]
fn an_unreadable_kubeconfig_fails_before_touching_the_runtime() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("kubeconfig");
    let (code, text) = kubelet_offline(
        dir.path(),
        &["--kubeconfig", missing.to_str().expect("utf8")],
    );
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("--kubeconfig"), "{text}");
    assert!(text.contains(missing.to_str().expect("utf8")), "{text}");
}

/// The kubelet's log lines in `format`, from a run that fails fast (no kubeconfig to read).
fn log_lines(format: &str) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, text) = kubelet_offline(
        dir.path(),
        &[
            "--logging-format",
            format,
            "--kubeconfig",
            dir.path().join("kubeconfig").to_str().expect("utf8"),
        ],
    );
    assert_eq!(code, 1, "{text}");
    text.lines().map(str::to_owned).collect()
}

#[test]
fn log_lines_have_klogs_header_or_upstreams_json_keys() {
    let lines = log_lines("text");
    let first = lines.first().expect("a log line");
    let header = first.as_bytes();
    assert!(
        header.first() == Some(&b'I')
            && header.len() > 5
            && header[1..5].iter().all(u8::is_ascii_digit)
            && header[5] == b' '
            && first.contains("] \""),
        "not klog's header: {first}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with('E') && l.contains("--kubeconfig")),
        "{lines:?}"
    );
    for line in log_lines("json") {
        let value: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        assert!(value["ts"].is_f64() && value["msg"].is_string(), "{line}");
        assert!(value["caller"].is_string(), "{line}");
    }
}

#[test]
fn the_tls_bootstrap_runs_before_the_runtime_and_names_its_kubeconfig() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bootstrap = dir.path().join("bootstrap-kubelet.conf");
    let kubeconfig = dir.path().join("kubelet.conf");
    let (code, text) = kubelet_offline(
        dir.path(),
        &[
            "--bootstrap-kubeconfig",
            bootstrap.to_str().expect("utf8"),
            "--kubeconfig",
            kubeconfig.to_str().expect("utf8"),
            "--cert-dir",
            dir.path().join("pki").to_str().expect("utf8"),
        ],
    );
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("TLS bootstrap"), "{text}");
    assert!(text.contains(bootstrap.to_str().expect("utf8")), "{text}");
    assert!(!kubeconfig.exists());
    // Without --kubeconfig there is nowhere to write: a usage error.
    let (code, text) = kubelet(&["--bootstrap-kubeconfig", "/b.conf"]);
    assert_eq!(code, 64, "{text}");
    assert!(text.contains("--bootstrap-kubeconfig"), "{text}");
}

#[test]
fn a_config_file_wants_webhooks_which_a_standalone_kubelet_cannot_have() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
    )
    .expect("write");
    let (code, text) = kubelet(&[
        "--config",
        config.to_str().expect("utf8"),
        "--root-dir",
        dir.path().join("root").to_str().expect("utf8"),
        "--container-runtime-endpoint",
        "unix:///does/not/exist.sock",
        "--port",
        "1",
        "--healthz-port",
        "0",
    ]);
    // As upstream BuildAuth: before the runtime or any port is touched.
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("no client provided, cannot use webhook authentication"),
        "{text}"
    );
    assert!(!text.contains("Starting kubelet"), "{text}");
}

#[test]
fn version_prints_the_targeted_upstream_release() {
    for args in [&["--version"][..], &["--version=true"], &["--version=raw"]] {
        let (code, text) = kubelet(args);
        assert_eq!(code, 0, "{args:?}: {text}");
        // kubeadm's preflight parses `Kubernetes vX.Y.Z`
        assert_eq!(text, "Kubernetes v1.36.0\n", "{args:?}");
        assert_eq!(
            text.trim_end(),
            kubelet_core::version::VERSION_LINE,
            "{args:?}"
        );
    }
}
