//! Cases of upstream `plugin_test.go` (`Test_Provide`, `Test_ProvideParallel`,
//! `Test_encodeRequest`/`decodeResponse`) and `config_test.go`
//! (`Test_readCredentialProviderConfigFile`, `Test_validateCredentialProviderConfig`).

#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

const V1: &str = "credentialprovider.kubelet.k8s.io/v1";

fn config(name: &str, match_images: &[&str], default_cache: Duration) -> ProviderConfig {
    ProviderConfig {
        name: name.into(),
        match_images: match_images.iter().map(|s| (*s).to_owned()).collect(),
        default_cache_duration: default_cache,
        api_version: V1.into(),
        args: Vec::new(),
        env: Vec::new(),
    }
}

/// Answers every request with `response`, counting the runs.
struct Counting {
    calls: Arc<AtomicUsize>,
    response: Response,
}

#[async_trait]
impl Plugin for Counting {
    async fn exec(&self, _image: &str) -> std::result::Result<Response, String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(self.response.clone())
    }
}

fn response(key_type: CacheKeyType, duration: Option<Duration>) -> Response {
    Response {
        cache_key_type: key_type,
        cache_duration: duration,
        auth: [(
            "*.registry.io".to_owned(),
            ("user".to_owned(), "password".to_owned()),
        )]
        .into(),
    }
}

fn providers(
    default_cache: Duration,
    response: Response,
) -> (CredentialProviders, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let plugin = Counting {
        calls: calls.clone(),
        response,
    };
    let providers = CredentialProviders::with_plugins(vec![(
        config("test", &["*.registry.io"], default_cache),
        Box::new(plugin),
    )]);
    (providers, calls)
}

#[tokio::test(start_paused = true)]
async fn answers_are_cached_per_image_registry_or_globally_for_their_duration() {
    let minute = Duration::from_secs(60);
    // Image: another image of the registry asks again.
    let (p, calls) = providers(minute, response(CacheKeyType::Image, None));
    let creds = p.lookup("test.registry.io/foo").await;
    assert_eq!(
        creds
            .iter()
            .map(|c| (c.username.as_str(), c.password.as_str()))
            .collect::<Vec<_>>(),
        [("user", "password")]
    );
    p.lookup("test.registry.io/foo").await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "cached per image");
    p.lookup("test.registry.io/bar").await;
    assert_eq!(calls.load(Ordering::SeqCst), 2, "another image runs again");

    // Registry: one run for every image of the registry, until the default duration ends.
    let (p, calls) = providers(minute, response(CacheKeyType::Registry, None));
    p.lookup("test.registry.io/foo").await;
    p.lookup("test.registry.io/bar").await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "cached per registry");
    p.lookup("other.registry.io/foo").await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    tokio::time::advance(minute + Duration::from_millis(1)).await;
    p.lookup("test.registry.io/foo").await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "expired after defaultCacheDuration"
    );

    // Global, with the response's own duration over the default.
    let (p, calls) = providers(
        minute,
        response(CacheKeyType::Global, Some(Duration::from_secs(5))),
    );
    p.lookup("a.registry.io/foo").await;
    p.lookup("b.registry.io/bar").await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "cached globally");
    tokio::time::advance(Duration::from_secs(6)).await;
    p.lookup("a.registry.io/foo").await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the response's cacheDuration wins"
    );

    // cacheDuration 0 (or a default of 0): never cached.
    let (p, calls) = providers(minute, response(CacheKeyType::Image, Some(Duration::ZERO)));
    p.lookup("test.registry.io/foo").await;
    p.lookup("test.registry.io/foo").await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let (p, calls) = providers(Duration::ZERO, response(CacheKeyType::Image, None));
    p.lookup("test.registry.io/foo").await;
    p.lookup("test.registry.io/foo").await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn only_matching_images_ask_the_plugin_and_concurrent_pulls_share_a_run() {
    let (p, calls) = providers(Duration::from_secs(60), response(CacheKeyType::Image, None));
    assert!(p.lookup("docker.io/library/busybox").await.is_empty());
    assert!(
        p.lookup("registry.io/foo").await.is_empty(),
        "*. needs a label"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let p = Arc::new(p);
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let p = p.clone();
            tokio::spawn(async move { p.lookup("test.registry.io/foo").await })
        })
        .collect();
    for r in runs {
        assert_eq!(r.await.expect("lookup").len(), 1);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn responses_are_checked_as_upstream() {
    let ok = br#"{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","cacheDuration":"5m","auth":{"127.0.0.1:5000":{"username":"alice","password":"s3cret"}}}"#;
    let r = decode_response(ok, V1).expect("valid");
    assert_eq!(r.cache_key_type, CacheKeyType::Registry);
    assert_eq!(r.cache_duration, Some(Duration::from_secs(300)));
    assert_eq!(
        r.auth["127.0.0.1:5000"],
        ("alice".to_owned(), "s3cret".to_owned())
    );
    assert_eq!(
        decode_response(ok, "credentialprovider.kubelet.k8s.io/v1beta1").err(),
        Some("apiVersion from credential plugin response did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1beta1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1".into())
    );
    let no_key = br#"{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","auth":{}}"#;
    assert_eq!(
        decode_response(no_key, V1).err(),
        Some("credential provider plugin did not return a valid cacheKeyType: \"\"".into())
    );
    let secret_garbage = b"password=s3cret";
    let e = decode_response(secret_garbage, V1).expect_err("not JSON");
    assert!(!e.contains("s3cret"), "{e}");
}

#[test]
fn config_files_are_read_and_validated_as_upstream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        r#"apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: test-plugin
  matchImages: ["*.registry.io", "127.0.0.1:5000"]
  defaultCacheDuration: 10m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: [get-credentials]
  env: [{name: REGION, value: us}]
"#,
    )
    .expect("write");
    let got = read_config(&file).expect("valid");
    assert_eq!(
        got,
        [ProviderConfig {
            name: "test-plugin".into(),
            match_images: vec!["*.registry.io".into(), "127.0.0.1:5000".into()],
            default_cache_duration: Duration::from_secs(600),
            api_version: V1.into(),
            args: vec!["get-credentials".into()],
            env: vec![("REGION".into(), "us".into())],
        }]
    );
    let bad = |yaml: &str| {
        std::fs::write(&file, yaml).expect("write");
        read_config(&file).expect_err("invalid").to_string()
    };
    let e = bad(
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: a/b\n  matchImages: []\n  apiVersion: credentialprovider.kubelet.k8s.io/v2\n",
    );
    for part in [
        "providers.name: Invalid value: \"a/b\": provider name cannot contain '/'",
        "providers.apiVersion: Unsupported value: \"credentialprovider.kubelet.k8s.io/v2\"",
        "providers.matchImages: Required value",
        "providers.defaultCacheDuration: Required value",
    ] {
        assert!(e.contains(part), "{part}: {e}");
    }
    assert!(e.starts_with(&format!("credential provider config {}", file.display())));
    let e = bad("apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n");
    assert!(
        e.contains("kind: must be \"CredentialProviderConfig\""),
        "{e}"
    );
    let e = bad(
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: []\n",
    );
    assert!(e.contains("at least 1 item in plugins is required"), "{e}");
    for version in CONFIG_API_VERSIONS {
        std::fs::write(
            &file,
            format!("apiVersion: {version}\nkind: CredentialProviderConfig\nproviders:\n- name: p\n  matchImages: [x.io]\n  defaultCacheDuration: 0s\n  apiVersion: credentialprovider.kubelet.k8s.io/v1alpha1\n"),
        )
        .expect("write");
        assert!(read_config(&file).is_ok(), "{version}");
    }
}

#[tokio::test]
async fn a_plugin_executable_gets_the_request_and_its_answer_is_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin dir");
    let log = dir.path().join("requests");
    let script = bin.join("test-plugin");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat >> {log}\necho \" $1 $REGION\" >> {log}\nprintf '%s' '{{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"cacheKeyType\":\"Registry\",\"auth\":{{\"127.0.0.1:5000\":{{\"username\":\"alice\",\"password\":\"s3cret\"}}}}}}'\n",
            log = log.display()
        ),
    )
    .expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        r#"{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[{"name":"test-plugin","matchImages":["127.0.0.1:5000"],"defaultCacheDuration":"1h","apiVersion":"credentialprovider.kubelet.k8s.io/v1","args":["get"],"env":[{"name":"REGION","value":"eu"}]}]}"#,
    )
    .expect("config");
    let p = CredentialProviders::load(&cfg, &bin).expect("loads");
    let creds = p.lookup("127.0.0.1:5000/private/busybox").await;
    assert_eq!(creds.len(), 1);
    assert_eq!(
        (creds[0].username.as_str(), creds[0].password.as_str()),
        ("alice", "s3cret")
    );
    p.lookup("127.0.0.1:5000/private/other").await;
    let requests = std::fs::read_to_string(&log).expect("log");
    assert_eq!(
        requests,
        "{\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"image\":\"127.0.0.1:5000/private/busybox\",\"kind\":\"CredentialProviderRequest\"} get eu\n",
        "one run for the registry, with the request, args and env"
    );
    // A missing executable is refused at load, naming it.
    let e = CredentialProviders::load(&cfg, dir.path()).expect_err("no executable");
    assert_eq!(
        e.to_string(),
        format!(
            "plugin binary executable did not exist: {}",
            dir.path().join("test-plugin").display()
        )
    );
}
