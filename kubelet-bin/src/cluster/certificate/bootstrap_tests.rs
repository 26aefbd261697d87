use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kubelet_core::testing::apiserver::FakeApiServer;

use super::*;
use crate::cluster::certificate::test_ca::{TestCa, Verdict, sign_requests};

/// A kubeconfig at `dir/name` whose user has the certificate and key files given.
fn kubeconfig_with_files(dir: &Path, cert: &str, key: &str) -> PathBuf {
    let (cert_file, key_file) = (dir.join("c.pem"), dir.join("k.pem"));
    std::fs::write(&cert_file, cert).expect("write");
    std::fs::write(&key_file, key).expect("write");
    let path = dir.join("kubelet.conf");
    let text = kubeconfig_text(
        &ClusterInfo {
            server: "https://127.0.0.1:1".into(),
            ..ClusterInfo::default()
        },
        &cert_file,
    )
    .replace(
        &format!("client-key: {:?}", cert_file.to_string_lossy()),
        &format!("client-key: {:?}", key_file.to_string_lossy()),
    );
    std::fs::write(&path, text).expect("write");
    path
}

#[tokio::test]
async fn a_kubeconfig_with_a_valid_certificate_is_used_as_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new();
    let (cert, key) = ca.client_pair("system:node:n", Duration::from_secs(3600));
    let kubeconfig = kubeconfig_with_files(dir.path(), &cert, &key);
    assert_eq!(kubeconfig_still_valid(&kubeconfig), Ok(()));
    // The bootstrap kubeconfig does not even exist: it is not read.
    let outcome = Bootstrap::new(&kubeconfig, dir.path().join("missing"), dir.path(), "n")
        .load_client_cert()
        .await
        .expect("valid");
    assert!(matches!(outcome, Outcome::KubeconfigValid), "{outcome:?}");
}

#[test]
fn an_expired_or_unreadable_kubeconfig_certificate_is_not_used() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new();
    let now = SystemTime::now();
    let (cert, key) = ca.pair_between(
        "system:node:n",
        now - Duration::from_secs(7200),
        now - Duration::from_secs(60),
    );
    let kubeconfig = kubeconfig_with_files(dir.path(), &cert, &key);
    let reason = kubeconfig_still_valid(&kubeconfig).expect_err("expired");
    assert!(reason.contains("expired"), "{reason}");
    std::fs::write(dir.path().join("c.pem"), "garbage").expect("write");
    let reason = kubeconfig_still_valid(&kubeconfig).expect_err("unreadable");
    assert!(reason.contains("no certificate"), "{reason}");
    let reason = kubeconfig_still_valid(&dir.path().join("none")).expect_err("missing");
    assert!(reason.contains("does not exist"), "{reason}");
}

#[tokio::test]
async fn bootstrap_requests_stores_writes_the_kubeconfig_and_reuses_it() {
    let fake = FakeApiServer::start().await.expect("fake");
    let ca = Arc::new(TestCa::new());
    let signer = tokio::spawn(sign_requests(
        fake.client("signer").expect("client"),
        ca.clone(),
        Verdict::Approve(Duration::from_secs(3600)),
    ));
    let dir = tempfile::tempdir().expect("tempdir");
    let cert_dir = dir.path().join("pki");
    let kubeconfig = dir.path().join("kubelet.conf");
    let bootstrap_kubeconfig = fake.kubeconfig_file(Some("bootstrap-token")).expect("file");
    let bootstrap = Bootstrap::new(&kubeconfig, &bootstrap_kubeconfig, &cert_dir, "node-a");

    let outcome = bootstrap.load_client_cert().await.expect("bootstrapped");
    let Outcome::Issued(pair) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(pair.path, cert_dir.join("kubelet-client-current.pem"));
    let target = std::fs::read_link(&pair.path).expect("a link");
    assert!(
        target
            .to_string_lossy()
            .contains(&format!("{}/kubelet-client-20", cert_dir.display())),
        "{target:?}"
    );
    // The kubeconfig: the bootstrap kubeconfig's server, the stored pair.
    let text = std::fs::read_to_string(&kubeconfig).expect("kubeconfig");
    let pem = format!("{:?}", pair.path.to_string_lossy());
    assert!(
        text.contains(&format!("client-certificate: {pem}")),
        "{text}"
    );
    assert!(text.contains(&format!("client-key: {pem}")), "{text}");
    assert!(
        text.contains(&format!("server: \"{}\"", fake.url())),
        "{text}"
    );
    assert_eq!(kubeconfig_still_valid(&kubeconfig), Ok(()));
    let config = crate::cluster::client::load_kubeconfig(&kubeconfig)
        .await
        .expect("loads");
    assert_eq!(config.cluster_url.to_string(), format!("{}/", fake.url()));
    // Requested with the bootstrap credentials.
    let create = fake
        .journal()
        .entries()
        .into_iter()
        .find(|e| e.is("create", "certificatesigningrequests"))
        .expect("a CSR");
    assert!(
        create
            .user_agent
            .as_deref()
            .is_some_and(|a| a.starts_with("kubelet/")),
        "{create:?}"
    );

    // A restart: the kubeconfig is valid, nothing is requested.
    let again = bootstrap.load_client_cert().await.expect("valid");
    assert!(matches!(again, Outcome::KubeconfigValid), "{again:?}");
    // The kubeconfig lost: the stored certificate is reused, nothing is requested.
    std::fs::remove_file(&kubeconfig).expect("rm");
    let reused = bootstrap.load_client_cert().await.expect("reused");
    assert!(matches!(reused, Outcome::Reused(_)), "{reused:?}");
    assert_eq!(kubeconfig_still_valid(&kubeconfig), Ok(()));
    assert_eq!(
        fake.journal().count("create", "certificatesigningrequests"),
        1
    );
    signer.abort();
}

#[tokio::test]
async fn an_expired_stored_certificate_is_not_reused() {
    let fake = FakeApiServer::start().await.expect("fake");
    let ca = Arc::new(TestCa::new());
    let dir = tempfile::tempdir().expect("tempdir");
    let cert_dir = dir.path().join("pki");
    let now = SystemTime::now();
    let (cert, key) = ca.pair_between(
        "system:node:node-a",
        now - Duration::from_secs(7200),
        now - Duration::from_secs(60),
    );
    Store::client(&cert_dir)
        .update(&cert, &key)
        .expect("stored");
    let signer = tokio::spawn(sign_requests(
        fake.client("signer").expect("client"),
        ca.clone(),
        Verdict::Approve(Duration::from_secs(3600)),
    ));
    let bootstrap = Bootstrap::new(
        dir.path().join("kubelet.conf"),
        fake.kubeconfig_file(None).expect("file"),
        &cert_dir,
        "node-a",
    );
    let outcome = bootstrap.load_client_cert().await.expect("bootstrapped");
    assert!(matches!(outcome, Outcome::Issued(_)), "{outcome:?}");
    assert_eq!(
        fake.journal().count("create", "certificatesigningrequests"),
        1
    );
    let current = Store::client(&cert_dir)
        .current()
        .expect("read")
        .expect("a pair");
    assert!(current.is_valid_at(SystemTime::now()));
    signer.abort();
}

#[tokio::test]
async fn a_denied_request_is_retried_with_a_new_one() {
    let fake = FakeApiServer::start().await.expect("fake");
    let signer = tokio::spawn(sign_requests(
        fake.client("signer").expect("client"),
        Arc::new(TestCa::new()),
        Verdict::DenyFirst(Duration::from_secs(3600)),
    ));
    let dir = tempfile::tempdir().expect("tempdir");
    let bootstrap = Bootstrap::new(
        dir.path().join("kubelet.conf"),
        fake.kubeconfig_file(None).expect("file"),
        dir.path().join("pki"),
        "node-a",
    );
    // The denial, then a new request after the back-off (2 s).
    let outcome = bootstrap.load_client_cert().await.expect("bootstrapped");
    assert!(matches!(outcome, Outcome::Issued(_)), "{outcome:?}");
    assert_eq!(
        fake.journal().count("create", "certificatesigningrequests"),
        2
    );
    signer.abort();
}

#[tokio::test]
async fn a_restart_while_waiting_waits_for_the_same_request() {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    let fake = FakeApiServer::start().await.expect("fake");
    let dir = tempfile::tempdir().expect("tempdir");
    let cert_dir = dir.path().join("pki");
    let bootstrap = Bootstrap::new(
        dir.path().join("kubelet.conf"),
        fake.kubeconfig_file(None).expect("file"),
        &cert_dir,
        "node-a",
    );
    // No signer yet: the kubelet stops while its request waits.
    let waiting = tokio::spawn({
        let bootstrap = bootstrap.clone();
        async move { bootstrap.load_client_cert().await }
    });
    fake.journal()
        .wait_for_count("create", "certificatesigningrequests", 1)
        .await;
    waiting.abort();
    let _ = waiting.await;
    assert!(cert_dir.join(PENDING_KEY_FILE).exists());
    let api: kube::Api<CertificateSigningRequest> =
        kube::Api::all(fake.client("admin").expect("client"));
    let pending = api.list(&Default::default()).await.expect("list").items;
    assert_eq!(pending.len(), 1);
    let name = pending[0].metadata.name.clone().expect("name");
    assert!(name.starts_with("node-csr-"), "{name}");

    // Restarted, with a signer: the same request (same key, same name) gets its certificate.
    let signer = tokio::spawn(sign_requests(
        fake.client("signer").expect("client"),
        Arc::new(TestCa::new()),
        Verdict::Approve(Duration::from_secs(3600)),
    ));
    let outcome = bootstrap.load_client_cert().await.expect("bootstrapped");
    assert!(matches!(outcome, Outcome::Issued(_)), "{outcome:?}");
    let all = api.list(&Default::default()).await.expect("list").items;
    assert_eq!(all.len(), 1, "no second request");
    assert_eq!(all[0].metadata.name.as_deref(), Some(name.as_str()));
    assert!(
        !cert_dir.join(PENDING_KEY_FILE).exists(),
        "the key is stored"
    );
    signer.abort();
}

#[tokio::test]
async fn an_unreadable_bootstrap_kubeconfig_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = Bootstrap::new(
        dir.path().join("kubelet.conf"),
        dir.path().join("bootstrap.conf"),
        dir.path(),
        "n",
    )
    .load_client_cert()
    .await
    .expect_err("no bootstrap kubeconfig");
    assert!(err.to_string().contains("bootstrap.conf"), "{err}");
    assert!(!err.is_retryable());
}
