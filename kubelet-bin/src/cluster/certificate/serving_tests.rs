//! The serving certificate (`serverTLSBootstrap`) of a node on the fake API server: requested
//! with the node's addresses, issued by the test signer, served on the secure port without a
//! restart.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::Api;
use kubelet_core::metrics::KubeletMetrics;
use kubelet_core::testing::FakeRuntime;
use kubelet_core::testing::apiserver::FakeApiServer;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};

use super::Rotation;
use super::test_ca::{TestCa, Verdict, sign_requests};
use crate::NodeBuilder;
use crate::cluster::{ApiClients, ClusterOptions};
use crate::server::SecureOptions;

/// The leaf the secure port at `addr` serves, when it verifies against `ca` for 127.0.0.1.
async fn served_by(addr: std::net::SocketAddr, ca: &str) -> Option<CertificateDer<'static>> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).expect("ca pem"))
        .expect("root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let handshake = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp);
    let tls = tokio::time::timeout(Duration::from_secs(10), handshake)
        .await
        .expect("a handshake within 10 s")
        .ok()?;
    tls.get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.clone().into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secure_port_serves_the_certificate_issued_for_the_node() {
    let fake = FakeApiServer::start().await.expect("fake");
    let ca = Arc::new(TestCa::new());
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = dir.path().join("pki");
    let metrics = KubeletMetrics::default();
    let mut node = NodeBuilder::with_runtime(Arc::new(FakeRuntime::new()))
        .node_name("node-a")
        .node_ips(vec!["127.0.0.1".into()])
        .root_dir(dir.path().join("root"))
        .no_probes()
        .metrics(metrics.clone())
        .secure_server(SecureOptions::new(
            "127.0.0.1:0".parse().expect("addr"),
            &pki,
        ))
        .cluster(
            ClusterOptions::with_clients(ApiClients::from_client(
                fake.client("kubelet").expect("client"),
            ))
            .rotate_serving_certificate(Rotation::serving(&pki, "node-a")),
        )
        .build()
        .await
        .expect("node");
    let addr = node.secure_addr().expect("secure port");
    node.spawn().await;
    // Until the certificate is issued (no signer yet) the port serves its self-signed pair.
    fake.journal()
        .wait_for_count("create", "certificatesigningrequests", 1)
        .await;
    assert!(served_by(addr, &ca.cert_pem).await.is_none());
    let signer = tokio::spawn(sign_requests(
        fake.client("signer").expect("client"),
        ca.clone(),
        Verdict::Approve(Duration::from_secs(3600)),
    ));

    fake.journal()
        .wait_for_count("update", "certificatesigningrequests/status", 1)
        .await;
    // The rotation stores the pair and swaps it in right after the issue.
    let mut served = None;
    for _ in 0..100 {
        served = served_by(addr, &ca.cert_pem).await;
        if served.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let served = served.expect("the issued certificate is served");
    let stored = super::Store::new(&pki, "kubelet-server")
        .current()
        .expect("read")
        .expect("stored");
    let (_, leaf) = x509_parser::parse_x509_certificate(served.as_ref()).expect("x509");
    assert_eq!(
        leaf.public_key().raw,
        stored.public_key_der.as_slice(),
        "the stored pair is served"
    );

    let csrs: Vec<CertificateSigningRequest> = Api::all(fake.client("admin").expect("client"))
        .list(&Default::default())
        .await
        .expect("list")
        .items;
    assert_eq!(csrs.len(), 1);
    assert_eq!(csrs[0].spec.signer_name, "kubernetes.io/kubelet-serving");
    assert_eq!(
        csrs[0].spec.usages,
        Some(vec![
            "digital signature".into(),
            "key encipherment".into(),
            "server auth".into()
        ])
    );
    let ttl = metrics
        .certificate_manager_server_ttl
        .seconds()
        .expect("server ttl");
    assert!(ttl > 3000.0, "{ttl}");
    assert!(metrics.certificate_manager_client_ttl.seconds().is_none());
    signer.abort();
}
