//! Certificate signing requests (client-go `util/certificate/csr/csr.go` `RequestCertificate`
//! and `WaitForCertificate`; the templates of upstream `pkg/kubelet/certificate/kubelet.go`).

use std::net::IpAddr;
use std::time::Duration;

use futures::TryStreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

use super::store::Pair;
use super::{Error, Result};

/// The signer of the kubelet's client certificates.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of the kubelet's serving certificates.
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// What a requested certificate is for: its subject, alternative names, signer and usages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    /// The subject's CommonName.
    pub common_name: String,
    /// The subject's Organizations.
    pub organizations: Vec<String>,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// IP subject alternative names.
    pub ips: Vec<IpAddr>,
    /// `spec.signerName`.
    pub signer_name: String,
    /// `spec.usages`.
    pub usages: Vec<String>,
}

impl Template {
    /// The client certificate of node `node_name` (upstream `NewKubeletClientCertificateManager`):
    /// `CN=system:node:<name>, O=system:nodes`, usages digital signature, key encipherment and
    /// client auth. Key encipherment means nothing for these ECDSA keys, and upstream stopped
    /// asking for it with them in v1.27, but approvers and signers before v1.27 (kubeadm
    /// v1.20's kube-controller-manager among them) sign only this exact set, and every later
    /// one still accepts it (`IsKubeletClientCSR`, `IsKubeletServingCSR`).
    pub fn client(node_name: &str) -> Self {
        Self {
            common_name: format!("system:node:{node_name}"),
            organizations: vec!["system:nodes".into()],
            dns_names: Vec::new(),
            ips: Vec::new(),
            signer_name: CLIENT_SIGNER.into(),
            usages: vec![
                "digital signature".into(),
                "key encipherment".into(),
                "client auth".into(),
            ],
        }
    }

    /// The serving certificate of node `node_name` for `hostnames` and `ips` (upstream
    /// `NewKubeletServerCertificateManager`): digital signature, key encipherment and server
    /// auth, for the same reason as [`Template::client`]'s usages.
    pub fn serving(node_name: &str, hostnames: Vec<String>, ips: Vec<IpAddr>) -> Self {
        Self {
            common_name: format!("system:node:{node_name}"),
            organizations: vec!["system:nodes".into()],
            dns_names: hostnames,
            ips,
            signer_name: SERVING_SIGNER.into(),
            usages: vec![
                "digital signature".into(),
                "key encipherment".into(),
                "server auth".into(),
            ],
        }
    }

    /// A new ECDSA P-256 key and a PEM certificate request for it with this subject and
    /// these alternative names.
    pub fn new_request(&self) -> Result<(KeyPair, String)> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(Error::Key)?;
        let pem = self.request_for(&key)?;
        Ok((key, pem))
    }

    /// A PEM certificate request for `key` with this subject and these alternative names.
    pub fn request_for(&self, key: &KeyPair) -> Result<String> {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        for o in &self.organizations {
            params
                .distinguished_name
                .push(DnType::OrganizationName, o.as_str());
        }
        params
            .distinguished_name
            .push(DnType::CommonName, self.common_name.as_str());
        for name in &self.dns_names {
            params.subject_alt_names.push(SanType::DnsName(
                name.clone().try_into().map_err(Error::Key)?,
            ));
        }
        params
            .subject_alt_names
            .extend(self.ips.iter().copied().map(SanType::IpAddress));
        let request = params.serialize_request(key).map_err(Error::Key)?;
        request.pem().map_err(Error::Key)
    }

    /// The name upstream's TLS bootstrap gives its request for `key` (`digestedName`):
    /// `node-csr-` and a hash of the public key, the subject and the usages, so that a restart
    /// with the same key finds the same request.
    pub fn digested_name(&self, key: &KeyPair) -> String {
        use base64::Engine as _;
        use sha2::Digest as _;
        let encode = |data: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data);
        let mut hash = sha2::Sha512_256::new();
        let mut write = |data: &[u8]| {
            hash.update(encode(data).as_bytes());
            hash.update(b"|");
        };
        write(&rcgen::PublicKeyData::subject_public_key_info(key));
        write(self.common_name.as_bytes());
        for o in &self.organizations {
            write(o.as_bytes());
        }
        for u in &self.usages {
            write(u.as_bytes());
        }
        format!("node-csr-{}", encode(&hash.finalize()))
    }

    /// The CertificateSigningRequest object of `request_pem` (`generateName: csr-`).
    pub fn object(&self, request_pem: &str) -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: ObjectMeta {
                generate_name: Some("csr-".into()),
                ..ObjectMeta::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(request_pem.as_bytes().to_vec()),
                signer_name: self.signer_name.clone(),
                usages: Some(self.usages.clone()),
                ..CertificateSigningRequestSpec::default()
            },
            status: None,
        }
    }
}

/// Requests a certificate for `template` with a new key through `client`, and waits up to
/// `wait` for it to be approved and issued (a watch of the request, resumed with back-off
/// after errors). Returns the issued certificate and its key.
///
/// Cancel safe: dropping the future leaves at most a pending request behind.
pub async fn request_certificate(
    client: kube::Client,
    template: &Template,
    wait: Duration,
) -> Result<(String, KeyPair)> {
    let (key, _) = template.new_request()?;
    let cert = request_certificate_for(client, template, &key, None, wait).await?;
    Ok((cert, key))
}

/// [`request_certificate`] for an existing `key`, as the request `name` when given (else
/// `generateName: csr-`): a request of that name that exists already is waited for when it is
/// for the same key (upstream `RequestCertificate` on `AlreadyExists`). Returns the issued
/// certificate.
pub async fn request_certificate_for(
    client: kube::Client,
    template: &Template,
    key: &KeyPair,
    name: Option<&str>,
    wait: Duration,
) -> Result<String> {
    let request_pem = template.request_for(key)?;
    let api: Api<CertificateSigningRequest> = Api::all(client);
    let mut object = template.object(&request_pem);
    if let Some(name) = name {
        object.metadata.generate_name = None;
        object.metadata.name = Some(name.to_owned());
    }
    let api_error = |source| Error::Api {
        name: name.unwrap_or("csr-*").to_owned(),
        source,
    };
    let created = match api.create(&PostParams::default(), &object).await {
        Ok(created) => created,
        Err(kube::Error::Api(status)) if status.code == 409 && name.is_some() => {
            let existing = api.get(name.unwrap_or_default()).await.map_err(api_error)?;
            if existing.spec.signer_name != template.signer_name
                || !same_key(&existing.spec.request.0, key)
            {
                return Err(Error::Issued {
                    name: name.unwrap_or_default().to_owned(),
                    message: "request exists for another key or signer".into(),
                });
            }
            tracing::info!(csr = %name.unwrap_or_default(), "certificate signing request exists already; waiting for it");
            existing
        }
        Err(source) => return Err(api_error(source)),
    };
    let name = created.metadata.name.clone().unwrap_or_default();
    let uid = created.metadata.uid.clone();
    tracing::info!(csr = %name, signer = %template.signer_name, "certificate signing request created; waiting for its certificate");
    let issued = tokio::time::timeout(wait, wait_for_certificate(&api, &name, uid.as_deref()))
        .await
        .map_err(|_| Error::Timeout {
            name: name.clone(),
            after: wait,
        })??;
    let pair =
        Pair::parse(std::path::Path::new(&name), &issued, false).map_err(|e| Error::Issued {
            name: name.clone(),
            message: format!("is not a PEM certificate: {e}"),
        })?;
    if pair.public_key_der != rcgen::PublicKeyData::subject_public_key_info(key) {
        return Err(Error::Issued {
            name,
            message: "is not for the request's key".into(),
        });
    }
    tracing::info!(csr = %name, "certificate issued");
    Ok(issued)
}

/// Whether the PEM certificate request `request` is for `key`.
fn same_key(request: &[u8], key: &KeyPair) -> bool {
    use x509_parser::prelude::FromDer as _;
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(request) else {
        return false;
    };
    let Ok((_, csr)) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents)
    else {
        return false;
    };
    csr.certification_request_info.subject_pki.raw
        == rcgen::PublicKeyData::subject_public_key_info(key).as_slice()
}

/// Watches request `name` until it has a certificate (or was denied or failed).
async fn wait_for_certificate(
    api: &Api<CertificateSigningRequest>,
    name: &str,
    uid: Option<&str>,
) -> Result<String> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = std::pin::pin!(
        watcher(api.clone(), config)
            .default_backoff()
            .applied_objects()
    );
    loop {
        match stream.try_next().await {
            Ok(Some(csr)) => {
                if uid.is_some() && csr.metadata.uid.as_deref() != uid {
                    continue;
                }
                if let Some(cert) = issued(name, &csr)? {
                    return Ok(cert);
                }
            }
            Ok(None) => {
                return Err(Error::Timeout {
                    name: name.into(),
                    after: Duration::ZERO,
                });
            }
            Err(e) => {
                tracing::warn!(csr = %name, error = %e, "watching the certificate signing request")
            }
        }
    }
}

/// The certificate of an approved and issued request; an error if it was denied or failed.
fn issued(name: &str, csr: &CertificateSigningRequest) -> Result<Option<String>> {
    let Some(status) = &csr.status else {
        return Ok(None);
    };
    let mut approved = false;
    for c in status.conditions.iter().flatten() {
        let reason = c.reason.clone().unwrap_or_default();
        let message = c.message.clone().unwrap_or_default();
        match c.type_.as_str() {
            "Denied" if c.status != "False" => {
                return Err(Error::Denied {
                    name: name.into(),
                    reason,
                    message,
                });
            }
            "Failed" if c.status != "False" => {
                return Err(Error::Failed {
                    name: name.into(),
                    reason,
                    message,
                });
            }
            "Approved" if c.status != "False" => approved = true,
            _ => {}
        }
    }
    match &status.certificate {
        Some(cert) if approved && !cert.0.is_empty() => String::from_utf8(cert.0.clone())
            .map(Some)
            .map_err(|_| Error::Issued {
                name: name.into(),
                message: "is not text".into(),
            }),
        _ => Ok(None),
    }
}

#[cfg(test)]
#[path = "csr_tests.rs"]
mod tests;
