//! Upstream `keyring_test.go`'s tables.

use base64::Engine as _;

use super::*;
use crate::credentialprovider::parse_dockercfg;

const USER: &str = "foo";
const PASSWORD: &str = "bar";

/// A keyring with one `.dockercfg` entry for `registry` (upstream's `sampleDockerConfig`).
fn keyring_for(registry: &str) -> BasicDockerKeyring {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let cfg = parse_dockercfg(
        format!(r#"{{"{registry}": {{"email": "foo@bar.baz", "auth": "{auth}"}}}}"#).as_bytes(),
    )
    .expect("valid dockercfg");
    let mut keyring = BasicDockerKeyring::new();
    keyring.add(&cfg);
    keyring
}

fn assert_creds(creds: &[AuthConfig], what: &str) {
    let first = creds
        .first()
        .unwrap_or_else(|| panic!("{what}: no credentials"));
    assert_eq!(
        (first.username.as_str(), first.password.as_str()),
        (USER, PASSWORD),
        "{what}"
    );
}

#[test]
fn urls_match_table() {
    for (glob, target, want) in [
        // match when there is no path component
        ("*.kubernetes.io", "prefix.kubernetes.io", true),
        ("prefix.*.io", "prefix.kubernetes.io", true),
        ("prefix.kubernetes.*", "prefix.kubernetes.io", true),
        ("*-good.kubernetes.io", "prefix-good.kubernetes.io", true),
        // match with path components
        ("*.kubernetes.io/blah", "prefix.kubernetes.io/blah", true),
        ("prefix.*.io/foo", "prefix.kubernetes.io/foo/bar", true),
        // match with path components and ports
        (
            "*.kubernetes.io:1111/blah",
            "prefix.kubernetes.io:1111/blah",
            true,
        ),
        (
            "prefix.*.io:1111/foo",
            "prefix.kubernetes.io:1111/foo/bar",
            true,
        ),
        // no match when number of parts mismatch
        ("*.kubernetes.io", "kubernetes.io", false),
        ("*.*.kubernetes.io", "prefix.kubernetes.io", false),
        ("*.*.kubernetes.io", "kubernetes.io", false),
        // no match when some parts mismatch
        ("kubernetes.io", "kubernetes.com", false),
        ("k*.io", "quay.io", false),
        // no match when ports mismatch
        (
            "*.kubernetes.io:1234/blah",
            "prefix.kubernetes.io:1111/blah",
            false,
        ),
        (
            "prefix.*.io/foo",
            "prefix.kubernetes.io:1111/foo/bar",
            false,
        ),
    ] {
        assert_eq!(
            urls_match(glob, target).unwrap_or(false),
            want,
            "{glob} vs {target}"
        );
    }
}

#[test]
fn keyring_for_glob_table() {
    for (glob, target) in [
        ("https://hello.kubernetes.io", "hello.kubernetes.io"),
        ("https://*.docker.io", "prefix.docker.io"),
        ("https://prefix.*.io", "prefix.docker.io"),
        ("https://prefix.docker.*", "prefix.docker.io"),
        ("https://*.docker.io/path", "prefix.docker.io/path"),
        ("https://prefix.*.io/path", "prefix.docker.io/path/subpath"),
        ("https://prefix.docker.*/path", "prefix.docker.io/path"),
        ("https://*.docker.io:8888", "prefix.docker.io:8888"),
        ("https://prefix.*.io:8888", "prefix.docker.io:8888"),
        ("https://prefix.docker.*:8888", "prefix.docker.io:8888"),
        (
            "https://*.docker.io/path:1111",
            "prefix.docker.io/path:1111",
        ),
        ("https://*.docker.io/v1/", "prefix.docker.io/path:1111"),
        ("https://*.docker.io/v2/", "prefix.docker.io/path:1111"),
        (
            "https://prefix.docker.*/path:1111",
            "prefix.docker.io/path:1111",
        ),
        ("prefix.docker.io:1111", "prefix.docker.io:1111/path"),
        ("*.docker.io:1111", "prefix.docker.io:1111/path"),
    ] {
        let creds = keyring_for(glob).lookup(&format!("{target}/foo/bar"));
        assert_creds(&creds, &format!("{glob} for {target}"));
    }
}

#[test]
fn keyring_miss_table() {
    for (glob, lookup) in [
        ("https://hello.kubernetes.io", "world.mesos.org/foo/bar"),
        ("https://*.docker.com", "prefix.docker.io"),
        ("https://suffix.*.io", "prefix.docker.io"),
        ("https://prefix.docker.c*", "prefix.docker.io"),
        (
            "https://prefix.*.io/path:1111",
            "prefix.docker.io/path/subpath:1111",
        ),
        ("suffix.*.io", "prefix.docker.io"),
    ] {
        let creds = keyring_for(glob).lookup(&format!("{lookup}/foo/bar"));
        assert!(creds.is_empty(), "{glob} must not match {lookup}");
    }
}

#[test]
fn docker_hub_credentials() {
    let hub = keyring_for("https://index.docker.io/v1/");
    assert!(
        hub.lookup("world.mesos.org/foo/bar").is_empty(),
        "another registry"
    );
    for image in [
        "google/docker-registry",
        "jenkins",
        "docker.io/library/busybox",
    ] {
        let creds = hub.lookup(image);
        assert_eq!(creds.len(), 1, "{image}");
        assert_creds(&creds, image);
    }
    let creds = hub.lookup("index.docker.io/v1//google/docker-registry");
    assert!(!creds.is_empty() && creds.len() <= 2);
    assert_creds(&creds, "qualified");
}

#[test]
fn default_registry_match_table() {
    for (image, want) in [
        ("foo/bar", true),
        ("docker.io/foo/bar", true),
        ("index.docker.io/foo/bar", true),
        ("foo", true),
        ("", false),
        ("registry.tld/foo/bar", false),
        ("registry:5000/foo/bar", false),
        ("myhostdocker.io/foo/bar", false),
    ] {
        assert_eq!(is_default_registry_match(image), want, "{image:?}");
    }
}

#[test]
fn more_specific_paths_first_then_hosts_in_add_order() {
    let mut keyring = BasicDockerKeyring::new();
    let entry = |user: &str| {
        parse_dockercfg(format!(r#"{{"u": {{"username": "{user}"}}}}"#).as_bytes())
            .expect("valid")
            .remove("u")
            .expect("entry")
    };
    keyring.add(&[("quay.io".to_owned(), entry("host"))].into());
    keyring.add(&[("quay.io/coreos".to_owned(), entry("path"))].into());
    keyring.add(&[("https://quay.io".to_owned(), entry("host-again"))].into());
    let users: Vec<String> = keyring
        .lookup("quay.io/coreos/etcd")
        .into_iter()
        .map(|a| a.username)
        .collect();
    assert_eq!(users, ["path", "host", "host-again"]);
    assert_eq!(keyring.lookup("quay.io/other/x").len(), 2);
}

#[test]
fn ports_and_loopback_registries() {
    let keyring = keyring_for("127.0.0.1:5000");
    assert_creds(
        &keyring.lookup("127.0.0.1:5000/library/busybox"),
        "same port",
    );
    assert!(keyring.lookup("127.0.0.1:5001/library/busybox").is_empty());
    assert!(keyring.lookup("127.0.0.1/library/busybox").is_empty());
    let v6 = keyring_for("[::1]:5000");
    assert_creds(&v6.lookup("[::1]:5000/app"), "IPv6 literal");
}

#[test]
fn invalid_entries_are_skipped() {
    let mut keyring = keyring_for("bad host:5000");
    assert!(keyring.is_empty());
    keyring.add(
        &parse_dockercfg(
            br#"{"r.example:port": {"username": "u"}, "ok.example": {"username": "v"}}"#,
        )
        .expect("valid json"),
    );
    assert_eq!(keyring.lookup("ok.example/app")[0].username, "v");
    assert!(keyring.lookup("r.example/app").is_empty());
}

#[test]
fn url_parsing() {
    let u = Url::parse("https://user@h.example:5000/v2/?q#f").expect("valid");
    assert_eq!(
        u,
        Url {
            host: "h.example:5000".into(),
            path: "/v2/".into()
        }
    );
    assert!(Url::parse_schemeless("h.example:x").is_err());
    assert!(Url::parse_schemeless("[::1").is_err());
}
