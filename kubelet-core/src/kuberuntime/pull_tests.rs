//! The credentialed pull against the fake runtime service acting as a registry with basic auth.

use std::path::PathBuf;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};

use super::*;
use crate::kuberuntime::api::Labels;
use crate::testing::{FakeRuntimeService, UNAUTHORIZED, pod};

const IMAGE: &str = "127.0.0.1:5000/library/busybox:latest";

fn sandbox(pod: &Pod) -> PodSandboxConfig<'_> {
    PodSandboxConfig {
        pod,
        attempt: 0,
        hostname: "p".into(),
        dns: Default::default(),
        log_directory: PathBuf::from("/var/log/pods/x"),
        cgroup_parent: String::new(),
        labels: Labels::new(),
        annotations: Labels::new(),
        runtime_handler: String::new(),
    }
}

fn pull_secret(name: &str, registry: &str, user: &str, password: &str) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    s.metadata.namespace = Some("default".into());
    s.type_ = Some("kubernetes.io/dockerconfigjson".into());
    let json =
        format!(r#"{{"auths":{{"{registry}":{{"username":"{user}","password":"{password}"}}}}}}"#);
    s.data = Some(
        [(
            ".dockerconfigjson".to_owned(),
            ByteString(json.into_bytes()),
        )]
        .into(),
    );
    s
}

fn registry() -> FakeRuntimeService {
    let fake = FakeRuntimeService::new();
    fake.require_pull_credentials(IMAGE, "alice", "s3cret");
    fake
}

#[tokio::test]
async fn without_a_matching_secret_the_pull_is_anonymous_and_refused() {
    let fake = registry();
    let p = pod("p");
    let other = pull_secret("other", "registry.example", "bob", "x");
    let err = pull_image(&fake, IMAGE, &sandbox(&p), &[other], None)
        .await
        .expect_err("registry refuses");
    assert!(err.to_string().contains(UNAUTHORIZED), "{err}");
    assert_eq!(fake.pulls(), [(IMAGE.to_owned(), None)]);
}

#[tokio::test]
async fn matching_credentials_are_tried_in_order_until_one_pulls() {
    let fake = registry();
    let p = pod("p");
    let secrets = [
        pull_secret("stale", "127.0.0.1:5000", "mallory", "old"),
        pull_secret("good", "http://127.0.0.1:5000/v2/", "alice", "s3cret"),
        pull_secret("unused", "127.0.0.1:5000", "carol", "x"),
    ];
    let image_ref = pull_image(&fake, IMAGE, &sandbox(&p), &secrets, None)
        .await
        .expect("second credential pulls");
    assert!(!image_ref.is_empty());
    assert_eq!(
        fake.pulls(),
        [
            (IMAGE.to_owned(), Some("mallory".to_owned())),
            (IMAGE.to_owned(), Some("alice".to_owned())),
        ],
        "no anonymous attempt, no attempt after the success"
    );
}

#[tokio::test]
async fn when_every_credential_fails_there_is_no_anonymous_retry() {
    let fake = registry();
    let p = pod("p");
    let secrets = [
        pull_secret("a", "127.0.0.1:5000", "x", "1"),
        pull_secret("b", "127.0.0.1:5000/library", "y", "2"),
    ];
    let err = pull_image(&fake, IMAGE, &sandbox(&p), &secrets, None)
        .await
        .expect_err("both refused");
    let Error::Runtime { message, .. } = err else {
        panic!("{err:?}")
    };
    // Identical refusals collapse into one message, as Go's aggregate prints them.
    assert!(
        message.contains(UNAUTHORIZED) && !message.starts_with('['),
        "{message}"
    );
    let users: Vec<Option<String>> = fake.pulls().into_iter().map(|(_, u)| u).collect();
    assert_eq!(
        users,
        [Some("y".into()), Some("x".into())],
        "path key first"
    );
}

#[tokio::test]
async fn a_malformed_secret_fails_the_pull_naming_it() {
    let fake = registry();
    let p = pod("p");
    let mut bad = pull_secret("regcred", "127.0.0.1:5000", "a", "b");
    bad.data = Some(
        [(
            ".dockerconfigjson".to_owned(),
            ByteString(b"{\"auths\": 3}".to_vec()),
        )]
        .into(),
    );
    let err = pull_image(&fake, IMAGE, &sandbox(&p), &[bad], None)
        .await
        .expect_err("malformed");
    let msg = err.to_string();
    assert!(
        msg.contains("default/regcred") && msg.contains(".dockerconfigjson"),
        "{msg}"
    );
    assert!(fake.pulls().is_empty(), "nothing pulled");
}

#[tokio::test]
async fn a_runtime_that_goes_down_ends_the_attempts() {
    let fake = registry();
    fake.fail_pull(IMAGE, Error::Unavailable("socket gone".into()));
    let p = pod("p");
    let secrets = [
        pull_secret("a", "127.0.0.1:5000", "x", "1"),
        pull_secret("b", "127.0.0.1:5000", "y", "2"),
    ];
    let err = pull_image(&fake, IMAGE, &sandbox(&p), &secrets, None)
        .await
        .expect_err("down");
    assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    assert_eq!(fake.pulls().len(), 1);
}

#[test]
fn aggregate_prints_like_go() {
    assert_eq!(aggregate(&["a".into()]), "a");
    assert_eq!(aggregate(&["a".into(), "a".into()]), "a");
    assert_eq!(aggregate(&["a".into(), "b".into(), "a".into()]), "[a, b]");
}

/// A credential provider plugin answering `user`/`password` for the loopback registry.
struct Plugin(&'static str, &'static str);

#[async_trait::async_trait]
impl crate::credentialprovider::plugin::Plugin for Plugin {
    async fn exec(
        &self,
        _image: &str,
    ) -> std::result::Result<crate::credentialprovider::plugin::Response, String> {
        Ok(crate::credentialprovider::plugin::Response {
            cache_key_type: crate::credentialprovider::plugin::CacheKeyType::Registry,
            cache_duration: None,
            auth: [(
                "127.0.0.1:5000".to_owned(),
                (self.0.to_owned(), self.1.to_owned()),
            )]
            .into(),
        })
    }
}

fn plugins(user: &'static str, password: &'static str) -> CredentialProviders {
    use crate::credentialprovider::plugin::ProviderConfig;
    CredentialProviders::with_plugins(vec![(
        ProviderConfig {
            name: "loopback".into(),
            match_images: vec!["127.0.0.1:5000".into()],
            default_cache_duration: std::time::Duration::from_secs(60),
            api_version: "credentialprovider.kubelet.k8s.io/v1".into(),
            args: Vec::new(),
            env: Vec::new(),
        },
        Box::new(Plugin(user, password)),
    )])
}

#[tokio::test]
async fn plugin_credentials_are_tried_after_the_pull_secrets() {
    let p = pod("p");
    // No secret: the plugin's credentials pull.
    let fake = registry();
    pull_image(
        &fake,
        IMAGE,
        &sandbox(&p),
        &[],
        Some(&plugins("alice", "s3cret")),
    )
    .await
    .expect("the plugin's credentials pull");
    assert_eq!(fake.pulls(), [(IMAGE.to_owned(), Some("alice".to_owned()))]);
    // A stale secret is tried first, then the plugin's.
    let fake = registry();
    let stale = pull_secret("stale", "127.0.0.1:5000", "mallory", "old");
    pull_image(
        &fake,
        IMAGE,
        &sandbox(&p),
        &[stale],
        Some(&plugins("alice", "s3cret")),
    )
    .await
    .expect("the plugin's credentials pull");
    assert_eq!(
        fake.pulls(),
        [
            (IMAGE.to_owned(), Some("mallory".to_owned())),
            (IMAGE.to_owned(), Some("alice".to_owned())),
        ]
    );
}
