use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kubelet_core::testing::apiserver::FakeApiServer;

use super::*;
use crate::cluster::certificate::test_ca::{TestCa, Verdict, sign_requests};

/// A store holding a certificate already past its rotation deadline (5 s left of 105 s).
fn nearly_expired(ca: &TestCa, dir: &Path) -> Pair {
    let now = SystemTime::now();
    let (cert, key) = ca.pair_between(
        "system:node:node-a",
        now - Duration::from_secs(100),
        now + Duration::from_secs(5),
    );
    Store::client(dir).update(&cert, &key).expect("stored")
}

#[tokio::test]
async fn a_certificate_past_its_deadline_is_renewed_and_the_clients_told() {
    let fake = FakeApiServer::start().await.expect("fake");
    let ca = Arc::new(TestCa::new());
    let dir = tempfile::tempdir().expect("tempdir");
    let old = nearly_expired(&ca, dir.path());
    let signer = tokio::spawn(sign_requests(
        fake.client("signer").expect("client"),
        ca.clone(),
        Verdict::Approve(Duration::from_secs(3600)),
    ));
    let metrics = KubeletMetrics::default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let on_rotated: OnRotated = Arc::new(move |path: &Path| {
        let _ = tx.send(path.to_owned());
    });
    let token = CancellationToken::new();
    let task = tokio::spawn(Rotation::client(dir.path(), "node-a").run(
        fake.client("kubelet").expect("client"),
        metrics.clone(),
        on_rotated,
        token.clone(),
    ));
    let path = rx.recv().await.expect("rotated");
    assert_eq!(path, dir.path().join("kubelet-client-current.pem"));
    let new = Store::client(dir.path())
        .current()
        .expect("read")
        .expect("a pair");
    assert!(new.not_after > old.not_after + Duration::from_secs(3000));
    assert_ne!(new.key_pem(), old.key_pem(), "a new key");
    let ttl = metrics
        .certificate_manager_client_ttl
        .seconds()
        .expect("a ttl");
    assert!((3000.0..=3600.0).contains(&ttl), "{ttl}");
    assert_eq!(metrics.certificate_manager_client_renew_errors.get(), 0);
    // The next deadline is 70-90 % of an hour away: nothing else happens now.
    assert_eq!(
        fake.journal().count("create", "certificatesigningrequests"),
        1
    );
    token.cancel();
    task.await.expect("stops");
    signer.abort();
}

#[tokio::test]
async fn a_failed_renewal_counts_and_is_retried() {
    let fake = FakeApiServer::start().await.expect("fake");
    let ca = Arc::new(TestCa::new());
    let dir = tempfile::tempdir().expect("tempdir");
    let old = nearly_expired(&ca, dir.path());
    let signer = tokio::spawn(sign_requests(
        fake.client("signer").expect("client"),
        ca.clone(),
        Verdict::Deny,
    ));
    let metrics = KubeletMetrics::default();
    let token = CancellationToken::new();
    let task = tokio::spawn(Rotation::client(dir.path(), "node-a").run(
        fake.client("kubelet").expect("client"),
        metrics.clone(),
        Arc::new(|_: &Path| panic!("nothing was issued")),
        token.clone(),
    ));
    // The retry after the first denial (2 s back-off) is the second request.
    fake.journal()
        .wait_for_count("create", "certificatesigningrequests", 2)
        .await;
    assert!(metrics.certificate_manager_client_renew_errors.get() >= 1);
    let current = Store::client(dir.path())
        .current()
        .expect("read")
        .expect("a pair");
    assert_eq!(current.not_after, old.not_after, "the old pair stays");
    token.cancel();
    task.await.expect("stops");
    signer.abort();
}

#[tokio::test]
async fn a_kubeconfig_certificate_seeds_an_empty_store_and_is_renewed_at_once() {
    let fake = FakeApiServer::start().await.expect("fake");
    let ca = Arc::new(TestCa::new());
    let dir = tempfile::tempdir().expect("tempdir");
    // kubeadm's kubelet.conf on a control-plane node: a year-long certificate it signed itself,
    // embedded in the kubeconfig; the store is empty.
    let now = SystemTime::now();
    let (cert, key) = ca.pair_between(
        "system:node:node-a",
        now - Duration::from_secs(100),
        now + Duration::from_secs(365 * 24 * 3600),
    );
    let pki = dir.path().join("pki");
    let rotation = Rotation::client(&pki, "node-a").seed(cert.clone(), key);
    assert!(
        rotation.current().expect("read").is_none(),
        "nothing stored before run"
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let token = CancellationToken::new();
    let task = tokio::spawn(rotation.run(
        fake.client("kubelet").expect("client"),
        KubeletMetrics::default(),
        Arc::new(move |path: &Path| {
            let _ = tx.send(path.to_owned());
        }),
        token.clone(),
    ));
    // No signer yet: the renewal waits, and the seed is the current pair meanwhile.
    let store = Store::client(&pki);
    let seeded = async {
        loop {
            if let Ok(Some(pair)) = store.current() {
                return pair;
            }
            tokio::task::yield_now().await;
        }
    };
    let seeded = tokio::time::timeout(Duration::from_secs(10), seeded)
        .await
        .expect("the seed is stored");
    assert_eq!(seeded.cert_pem, cert);
    let signer = tokio::spawn(sign_requests(
        fake.client("signer").expect("client"),
        ca.clone(),
        Verdict::Approve(Duration::from_secs(3600)),
    ));
    assert_eq!(
        rx.recv().await.expect("rotated"),
        pki.join("kubelet-client-current.pem")
    );
    let stored = Store::client(&pki)
        .current()
        .expect("read")
        .expect("a pair");
    assert_ne!(
        stored.cert_pem, cert,
        "the seed was renewed at once, not in ~300 days"
    );
    token.cancel();
    task.await.expect("stops");
    signer.abort();
}
