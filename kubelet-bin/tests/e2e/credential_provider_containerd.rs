//! Issue 34 item 5 against a real containerd and a registry on loopback that requires a
//! password (`xtask::registry`): with `--image-credential-provider-config` and
//! `--image-credential-provider-bin-dir`, pods with no pull secret pull a private image
//! (pull policy Always) with the credentials a plugin script prints; the script gets
//! upstream's `CredentialProviderRequest` on stdin, and its answer (`cacheKeyType: Registry`,
//! the provider's `defaultCacheDuration` of 1h) is cached: two pods, one run.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use support::{Node, phase};
use xtask::registry::Registry;

#[test]
fn a_plugin_supplies_the_credentials_once_per_cache_period() {
    let mut node = Node::new("cred-plugin");
    let registry =
        Registry::start(&node.dir.join("registry"), "alice", "s3cret").expect("registry starts");
    let image = registry
        .push_busybox("private/busybox:latest")
        .expect("busybox pushed");
    let host = registry.host();

    let bin_dir = node.dir.join("plugins");
    std::fs::create_dir_all(&bin_dir).expect("plugin dir");
    let calls = node.dir.join("plugin-calls");
    let _ = std::fs::remove_file(&calls);
    let plugin = bin_dir.join("loopback-credentials");
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\n# One line per run: the request as received.\ncat >> {calls}\necho >> {calls}\n\
             printf '%s' '{{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\
             \"cacheKeyType\":\"Registry\",\"auth\":{{\"{host}\":{{\"username\":\"alice\",\"password\":\"s3cret\"}}}}}}'\n",
            calls = calls.display()
        ),
    )
    .expect("plugin");
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let config = node.dir.join("credential-providers.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n\
             - name: loopback-credentials\n  matchImages: [\"{host}\"]\n  defaultCacheDuration: 1h\n  \
             apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
        ),
    )
    .expect("config");
    node.extra_args.extend([
        format!("--image-credential-provider-config={}", config.display()),
        format!("--image-credential-provider-bin-dir={}", bin_dir.display()),
    ]);
    node.start_kubelet();

    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  \
             containers:\n  - name: app\n    image: {image}\n    imagePullPolicy: Always\n    \
             command: [\"sleep\", \"3600\"]\n"
        )
    };
    node.write_manifest("first.yaml", &pod("first"));
    node.wait_for(Duration::from_secs(90), "first Running", |n| {
        n.pod("first").filter(|p| phase(p) == "Running")
    });
    node.write_manifest("second.yaml", &pod("second"));
    node.wait_for(Duration::from_secs(90), "second Running", |n| {
        n.pod("second").filter(|p| phase(p) == "Running")
    });

    let runs = std::fs::read_to_string(&calls).unwrap_or_default();
    let runs: Vec<&str> = runs.lines().collect();
    assert_eq!(
        runs.len(),
        1,
        "two pulls within the cache period, one plugin run: {runs:?}"
    );
    let request: serde_json::Value = serde_json::from_str(runs[0]).expect("JSON request");
    assert_eq!(request["kind"], "CredentialProviderRequest");
    assert_eq!(
        request["apiVersion"],
        "credentialprovider.kubelet.k8s.io/v1"
    );
    assert_eq!(request["image"], format!("{host}/private/busybox"));
    // The registry saw the plugin's user pull the manifest.
    let log = registry.log();
    assert!(
        log.contains("alice") && log.contains("/v2/private/busybox/manifests/latest"),
        "authenticated pulls in the registry's log:\n{log}"
    );
}
