//! The subject of a client certificate, for the x509 authenticator (upstream
//! `k8s.io/apiserver/pkg/authentication/request/x509` `CommonNameUserConversion`: user = the
//! subject's CommonName, groups = its Organizations). Reads only what it needs of the DER
//! (RFC 5280 `TBSCertificate.subject`); the chain was verified before.

use yasna::models::ObjectIdentifier;
use yasna::{ASN1Error, ASN1ErrorKind, BERReaderSeq, Tag};

/// `id-at-commonName`.
const COMMON_NAME: &[u64] = &[2, 5, 4, 3];
/// `id-at-organizationName`.
const ORGANIZATION: &[u64] = &[2, 5, 4, 10];

/// The parts of a subject the authenticator uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Subject {
    /// The last CommonName (as Go's `pkix.Name` keeps it); empty when there is none.
    pub common_name: String,
    /// Every Organization, in order.
    pub organizations: Vec<String>,
}

/// The subject of a DER certificate.
pub(crate) fn subject(der: &[u8]) -> Result<Subject, ASN1Error> {
    yasna::parse_der(der, |r| {
        r.read_sequence(|r| {
            let subject = r.next().read_sequence(tbs_subject)?;
            r.next().read_der()?; // signatureAlgorithm
            r.next().read_der()?; // signatureValue
            Ok(subject)
        })
    })
}

fn tbs_subject(r: &mut BERReaderSeq<'_, '_>) -> Result<Subject, ASN1Error> {
    r.read_optional(|r| r.read_tagged(Tag::context(0), |r| r.read_der()))?; // version
    r.next().read_der()?; // serialNumber
    r.next().read_der()?; // signature
    r.next().read_der()?; // issuer
    r.next().read_der()?; // validity
    let mut subject = Subject::default();
    r.next().read_sequence_of(|r| {
        r.read_set_of(|r| {
            r.read_sequence(|r| {
                let oid = r.next().read_oid()?;
                let value = r.next().read_tagged_der()?;
                let text = string(value.tag(), value.value())?;
                if oid == ObjectIdentifier::from_slice(COMMON_NAME) {
                    subject.common_name = text;
                } else if oid == ObjectIdentifier::from_slice(ORGANIZATION) {
                    subject.organizations.push(text);
                }
                Ok(())
            })
        })
    })?;
    // subjectPublicKeyInfo, then the optional unique IDs and extensions.
    r.next().read_der()?;
    for _ in 0..3 {
        r.read_optional(|r| r.read_der())?;
    }
    Ok(subject)
}

/// A DirectoryString's text (UTF8String, PrintableString, IA5String, TeletexString as Latin-1
/// the way Go reads T61, BMPString).
fn string(tag: Tag, value: &[u8]) -> Result<String, ASN1Error> {
    let invalid = || ASN1Error::new(ASN1ErrorKind::Invalid);
    use yasna::tags::{
        TAG_BMPSTRING, TAG_IA5STRING, TAG_PRINTABLESTRING, TAG_TELETEXSTRING, TAG_UTF8STRING,
        TAG_VISIBLESTRING,
    };
    match tag {
        TAG_UTF8STRING | TAG_PRINTABLESTRING | TAG_IA5STRING | TAG_VISIBLESTRING => {
            String::from_utf8(value.to_vec()).map_err(|_| invalid())
        }
        TAG_TELETEXSTRING => Ok(value.iter().map(|b| char::from(*b)).collect()),
        TAG_BMPSTRING => {
            let units: Vec<u16> = value
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).map_err(|_| invalid())
        }
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

    #[test]
    fn common_name_and_organizations() {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, "alice");
        params
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        params.distinguished_name.push(DnType::CountryName, "DE");
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("cert");
        let s = subject(cert.der()).expect("parses");
        assert_eq!(s.common_name, "alice");
        assert_eq!(s.organizations, vec!["system:masters".to_owned()]);
    }

    #[test]
    fn no_common_name_and_garbage() {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "a");
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("cert");
        assert_eq!(subject(cert.der()).expect("parses").common_name, "");
        assert!(subject(b"\x30\x03\x02\x01\x01").is_err());
    }
}
