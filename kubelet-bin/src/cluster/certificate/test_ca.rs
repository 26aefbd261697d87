//! A certificate authority for the tests: plays the signer of CertificateSigningRequests.

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use super::store::offset_date_time;

/// A CA with its key.
pub(crate) struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub(crate) cert_pem: String,
}

impl TestCa {
    pub(crate) fn new() -> Self {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "test-client-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("key");
        let cert_pem = params.self_signed(&key).expect("ca").pem();
        Self {
            issuer: Issuer::new(params, key),
            cert_pem,
        }
    }

    /// A client certificate for `cn` valid from a minute ago for `valid_for`, and its key.
    pub(crate) fn client_pair(&self, cn: &str, valid_for: Duration) -> (String, String) {
        let now = SystemTime::now();
        self.pair_between(cn, now - Duration::from_secs(60), now + valid_for)
    }

    /// A client certificate for `cn` valid between the two times, and its key.
    pub(crate) fn pair_between(
        &self,
        cn: &str,
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> (String, String) {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "system:nodes");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = offset_date_time(not_before);
        params.not_after = offset_date_time(not_after);
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        (cert.pem(), key.serialize_pem())
    }

    /// Signs a CSR (PEM) as a signer would, valid from a minute ago for `valid_for`.
    pub(crate) fn sign(&self, csr_pem: &str, valid_for: Duration) -> String {
        let mut csr = CertificateSigningRequestParams::from_pem(csr_pem).expect("a CSR");
        let now = SystemTime::now();
        csr.params.not_before = offset_date_time(now - Duration::from_secs(60));
        csr.params.not_after = offset_date_time(now + valid_for);
        csr.signed_by(&self.issuer).expect("signed").pem()
    }
}

/// What the test signer does with each new request.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Verdict {
    /// Approve and issue a certificate valid for this long.
    Approve(Duration),
    /// Deny it (reason `NotAllowed`).
    Deny,
    /// Deny the first request, approve the later ones (certificates valid this long).
    DenyFirst(Duration),
}

/// Plays the signer (and approver) of every new CertificateSigningRequest it sees through
/// `client`, until dropped: the approval through `/approval`, the certificate through
/// `/status`, as kube-controller-manager does.
pub(crate) async fn sign_requests(
    client: kube::Client,
    ca: std::sync::Arc<TestCa>,
    verdict: Verdict,
) {
    use futures::TryStreamExt as _;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestCondition,
        CertificateSigningRequestStatus,
    };
    use kube::api::{Api, PostParams};
    use kube::runtime::{WatchStreamExt as _, watcher};

    let api: Api<CertificateSigningRequest> = Api::all(client);
    let mut stream = std::pin::pin!(
        watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .applied_objects()
    );
    let mut seen = 0;
    while let Ok(Some(mut csr)) = stream.try_next().await {
        if csr.status.as_ref().is_some_and(|s| s.conditions.is_some()) {
            continue;
        }
        seen += 1;
        let name = csr.metadata.name.clone().expect("a name");
        let approve = match verdict {
            Verdict::Approve(valid_for) => Some(valid_for),
            Verdict::DenyFirst(valid_for) if seen > 1 => Some(valid_for),
            Verdict::Deny | Verdict::DenyFirst(_) => None,
        };
        let (type_, reason) = match approve {
            Some(_) => ("Approved", "AutoApproved"),
            None => ("Denied", "NotAllowed"),
        };
        csr.status = Some(CertificateSigningRequestStatus {
            conditions: Some(vec![CertificateSigningRequestCondition {
                type_: type_.into(),
                status: "True".into(),
                reason: Some(reason.into()),
                message: Some(format!("the test signer says {type_}")),
                ..CertificateSigningRequestCondition::default()
            }]),
            certificate: None,
        });
        let mut approved = api
            .replace_subresource("approval", &name, &PostParams::default(), &csr)
            .await
            .expect("approval");
        if let Some(valid_for) = approve {
            let request = String::from_utf8(csr.spec.request.0.clone()).expect("pem");
            let cert = ca.sign(&request, valid_for);
            if let Some(status) = approved.status.as_mut() {
                status.certificate = Some(ByteString(cert.into_bytes()));
            }
            api.replace_status(&name, &PostParams::default(), &approved)
                .await
                .expect("status");
        }
    }
}
