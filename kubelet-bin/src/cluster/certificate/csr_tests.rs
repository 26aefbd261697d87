use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::Api;
use kubelet_core::testing::apiserver::FakeApiServer;
use x509_parser::prelude::FromDer;

use super::*;
use crate::cluster::certificate::test_ca::{TestCa, Verdict, sign_requests};

/// The subject (CN, O), SANs and key algorithm of a PEM CSR.
fn read_request(pem: &str) -> (String, Vec<String>, Vec<String>, String) {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("pem");
    assert_eq!(block.label, "CERTIFICATE REQUEST");
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
            .expect("a CSR");
    csr.verify_signature().expect("self-signed by its key");
    let info = &csr.certification_request_info;
    let cn = info
        .subject
        .iter_common_name()
        .map(|a| a.as_str().expect("text").to_owned())
        .collect::<Vec<_>>()
        .join(",");
    let orgs = info
        .subject
        .iter_organization()
        .map(|a| a.as_str().expect("text").to_owned())
        .collect();
    let mut sans = Vec::new();
    for ext in csr.requested_extensions().into_iter().flatten() {
        if let x509_parser::extensions::ParsedExtension::SubjectAlternativeName(san) = ext {
            sans.extend(san.general_names.iter().map(|n| n.to_string()));
        }
    }
    let curve = info
        .subject_pki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok())
        .map(|oid| oid.to_id_string())
        .unwrap_or_default();
    (cn, orgs, sans, curve)
}

#[test]
fn client_request_names_the_node_and_asks_the_kubelet_client_signer() {
    let template = Template::client("node-a");
    let (_key, pem) = template.new_request().expect("request");
    let (cn, orgs, sans, curve) = read_request(&pem);
    assert_eq!(cn, "system:node:node-a");
    assert_eq!(orgs, vec!["system:nodes"]);
    assert!(sans.is_empty(), "{sans:?}");
    assert_eq!(curve, "1.2.840.10045.3.1.7", "P-256");

    let object = template.object(&pem);
    assert_eq!(object.metadata.generate_name.as_deref(), Some("csr-"));
    assert_eq!(
        object.spec.signer_name,
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(
        object.spec.usages,
        Some(vec![
            "digital signature".into(),
            "key encipherment".into(),
            "client auth".into()
        ]),
        "the exact set pre-v1.27 approvers (kubeadm v1.20's) sign"
    );
    assert_eq!(object.spec.request.0, pem.as_bytes());
}

#[test]
fn serving_request_carries_the_node_addresses() {
    let template = Template::serving(
        "node-a",
        vec!["node-a.example".into()],
        vec!["10.0.0.7".parse().expect("ip")],
    );
    let (_key, pem) = template.new_request().expect("request");
    let (cn, _, sans, _) = read_request(&pem);
    assert_eq!(cn, "system:node:node-a");
    assert_eq!(
        sans,
        vec!["DNSName(node-a.example)", "IPAddress(0a:00:00:07)"]
    );
    let object = template.object(&pem);
    assert_eq!(object.spec.signer_name, "kubernetes.io/kubelet-serving");
    assert_eq!(
        object.spec.usages,
        Some(vec![
            "digital signature".into(),
            "key encipherment".into(),
            "server auth".into()
        ])
    );
}

#[tokio::test]
async fn an_approved_request_gives_a_certificate_for_its_key() {
    let fake = FakeApiServer::start().await.expect("fake");
    let ca = Arc::new(TestCa::new());
    let signer = tokio::spawn(sign_requests(
        fake.client("signer").expect("client"),
        ca.clone(),
        Verdict::Approve(Duration::from_secs(3600)),
    ));
    let client = fake.client("kubelet").expect("client");
    let (cert, key) = request_certificate(
        client.clone(),
        &Template::client("node-a"),
        Duration::from_secs(30),
    )
    .await
    .expect("issued");
    signer.abort();
    let pair = Pair::parse(std::path::Path::new("issued"), &cert, false).expect("pem");
    assert_eq!(
        pair.public_key_der,
        rcgen::PublicKeyData::subject_public_key_info(&key)
    );
    // The request the server stored: the signer, the usages, approved.
    let csrs: Vec<CertificateSigningRequest> = Api::all(client)
        .list(&Default::default())
        .await
        .expect("list")
        .items;
    assert_eq!(csrs.len(), 1);
    assert_eq!(csrs[0].spec.signer_name, CLIENT_SIGNER);
    assert_eq!(
        fake.journal()
            .count("update", "certificatesigningrequests/approval"),
        1
    );
}

#[tokio::test]
async fn a_denied_request_is_an_error_naming_it_and_the_reason() {
    let fake = FakeApiServer::start().await.expect("fake");
    let signer = tokio::spawn(sign_requests(
        fake.client("signer").expect("client"),
        Arc::new(TestCa::new()),
        Verdict::Deny,
    ));
    let err = request_certificate(
        fake.client("kubelet").expect("client"),
        &Template::client("node-a"),
        Duration::from_secs(30),
    )
    .await
    .expect_err("denied");
    signer.abort();
    let text = err.to_string();
    assert!(matches!(err, Error::Denied { .. }), "{err:?}");
    assert!(text.contains("certificate signing request csr-"), "{text}");
    assert!(text.contains("denied: NotAllowed"), "{text}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn a_request_nobody_signs_times_out() {
    let fake = FakeApiServer::start().await.expect("fake");
    let err = request_certificate(
        fake.client("kubelet").expect("client"),
        &Template::client("node-a"),
        Duration::from_millis(300),
    )
    .await
    .expect_err("no signer");
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(
        err.to_string().contains("no certificate issued within"),
        "{err}"
    );
}

#[test]
fn the_bootstrap_name_follows_the_key_and_the_subject() {
    let template = Template::client("node-a");
    let (key, _) = template.new_request().expect("request");
    let (other, _) = template.new_request().expect("request");
    let name = template.digested_name(&key);
    assert!(name.starts_with("node-csr-"), "{name}");
    // SHA-512/256 in unpadded base64url: 43 characters.
    assert_eq!(name.len(), "node-csr-".len() + 43, "{name}");
    assert_eq!(name, template.digested_name(&key));
    assert_ne!(name, template.digested_name(&other));
    assert_ne!(name, Template::client("node-b").digested_name(&key));
}
