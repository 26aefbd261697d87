use std::sync::Arc;
use std::sync::atomic::Ordering;

use http::{HeaderMap, HeaderValue};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::CertificateDer;

use super::*;
use crate::server::fake_reviews::FakeReviews;

fn bearer(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).expect("header"),
    );
    h
}

fn opts(webhook: bool, anonymous: bool) -> AuthnOptions {
    AuthnOptions {
        webhook,
        anonymous,
        ..AuthnOptions::default()
    }
}

fn webhook(reviews: &Arc<FakeReviews>, anonymous: bool) -> Authenticator {
    Authenticator::new(
        &opts(true, anonymous),
        None,
        Some(reviews.clone() as Arc<dyn Reviews>),
    )
    .expect("valid")
}

#[test]
fn bearer_tokens_as_upstream_reads_them() {
    assert_eq!(bearer_token(&bearer("abc")), Some("abc"));
    let mut h = HeaderMap::new();
    h.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_static("bearer  x"),
    );
    assert_eq!(
        bearer_token(&h),
        None,
        "an empty token after the first space"
    );
    h.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_static("Basic abc"),
    );
    assert_eq!(bearer_token(&h), None);
    assert_eq!(bearer_token(&HeaderMap::new()), None);
}

#[tokio::test]
async fn anonymous_when_enabled_and_nothing_else() {
    let a = Authenticator::new(&opts(false, true), None, None).expect("valid");
    let user = a
        .authenticate(&[], &mut HeaderMap::new())
        .await
        .expect("ok");
    assert_eq!(user, Some(User::anonymous()));
    assert_eq!(User::anonymous().groups, vec!["system:unauthenticated"]);
    // Without the token webhook a bearer token is not looked at.
    let user = a.authenticate(&[], &mut bearer("x")).await.expect("ok");
    assert_eq!(user.map(|u| u.name), Some("system:anonymous".into()));
}

#[test]
fn webhooks_need_a_client() {
    let err = Authenticator::new(&opts(true, true), None, None).expect_err("no client");
    assert_eq!(
        err.to_string(),
        "no client provided, cannot use webhook authentication"
    );
}

#[tokio::test]
async fn with_nothing_to_authenticate_with_no_request_is_authenticated() {
    let a = Authenticator::new(&opts(false, false), None, None).expect("secure default");
    let user = a.authenticate(&[], &mut bearer("x")).await.expect("ok");
    assert_eq!(user, None, "a token nobody reviews is not a user");
    let user = a
        .authenticate(&[], &mut http::HeaderMap::new())
        .await
        .expect("ok");
    assert_eq!(user, None);
}

#[tokio::test(start_paused = true)]
async fn tokens_are_reviewed_and_cached_for_the_ttl() {
    let reviews = Arc::new(FakeReviews::default().token("good", "alice"));
    let a = webhook(&reviews, false);
    let user = a
        .authenticate(&[], &mut bearer("good"))
        .await
        .expect("ok")
        .expect("authenticated");
    assert_eq!(user.name, "alice");
    assert_eq!(user.groups, vec!["team", "system:authenticated"]);
    a.authenticate(&[], &mut bearer("good"))
        .await
        .expect("cached");
    assert_eq!(reviews.token_calls.load(Ordering::SeqCst), 1);
    tokio::time::advance(DEFAULT_CACHE_TTL).await;
    a.authenticate(&[], &mut bearer("good"))
        .await
        .expect("reviewed again");
    assert_eq!(reviews.token_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_rejected_token_fails_even_with_anonymous_and_the_failure_is_cached() {
    let reviews = Arc::new(FakeReviews::default());
    let a = webhook(&reviews, true);
    let err = a
        .authenticate(&[], &mut bearer("bad"))
        .await
        .expect_err("401");
    assert!(matches!(err, Error::InvalidToken(_)), "{err}");
    a.authenticate(&[], &mut bearer("bad"))
        .await
        .expect_err("401");
    assert_eq!(reviews.token_calls.load(Ordering::SeqCst), 1);
    // No token: anonymous.
    let user = a
        .authenticate(&[], &mut HeaderMap::new())
        .await
        .expect("ok");
    assert_eq!(user.map(|u| u.name), Some("system:anonymous".into()));
}

#[tokio::test(start_paused = true)]
async fn review_errors_are_retried_and_not_cached() {
    let reviews = Arc::new(FakeReviews::default().token("good", "alice"));
    reviews.failing.store(true, Ordering::SeqCst);
    let a = webhook(&reviews, false);
    let err = a
        .authenticate(&[], &mut bearer("good"))
        .await
        .expect_err("down");
    assert!(matches!(err, Error::Review(_)), "{err}");
    assert_eq!(reviews.token_calls.load(Ordering::SeqCst), 5);
    reviews.failing.store(false, Ordering::SeqCst);
    let user = a
        .authenticate(&[], &mut bearer("good"))
        .await
        .expect("back");
    assert_eq!(user.map(|u| u.name), Some("alice".into()));
}

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("ca");
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

fn client_cert(ca: &Ca, cn: &str, orgs: &[&str]) -> CertificateDer<'static> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    for o in orgs {
        params.distinguished_name.push(DnType::OrganizationName, *o);
    }
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &ca.issuer).expect("cert");
    cert.der().clone()
}

fn x509_authenticator(ca: &Ca, anonymous: bool) -> (Authenticator, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ca.crt");
    std::fs::write(&path, &ca.pem).expect("write");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = crate::server::tls::client_ca(&path, &provider).expect("ca");
    let opts = AuthnOptions {
        client_ca_file: Some(path),
        ..opts(false, anonymous)
    };
    (
        Authenticator::new(&opts, Some(verifier), None).expect("valid"),
        dir,
    )
}

#[tokio::test]
async fn client_certificates_of_the_ca_are_their_common_name_in_their_organizations() {
    let ours = ca("client-ca");
    let (a, _dir) = x509_authenticator(&ours, true);
    // (rcgen keeps one value per attribute type: one Organization here.)
    let cert = client_cert(&ours, "carol", &["ops"]);
    let user = a
        .authenticate(&[cert], &mut HeaderMap::new())
        .await
        .expect("ok")
        .expect("authenticated");
    assert_eq!(user.name, "carol");
    assert_eq!(user.groups, vec!["ops", "system:authenticated"]);
    // Signed by another CA: a 401 even with anonymous on.
    let theirs = ca("other-ca");
    let err = a
        .authenticate(
            &[client_cert(&theirs, "mallory", &[])],
            &mut HeaderMap::new(),
        )
        .await
        .expect_err("unknown issuer");
    assert!(matches!(err, Error::Certificate(_)), "{err}");
    // No certificate: anonymous.
    let user = a
        .authenticate(&[], &mut HeaderMap::new())
        .await
        .expect("ok");
    assert_eq!(user.map(|u| u.name), Some("system:anonymous".into()));
    // No CommonName: not authenticated by it.
    let (strict, _dir2) = x509_authenticator(&ours, false);
    let user = strict
        .authenticate(&[client_cert(&ours, "", &["ops"])], &mut HeaderMap::new())
        .await
        .expect("ok");
    assert_eq!(user, None);
}

fn websocket(protocols: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(
        http::header::CONNECTION,
        HeaderValue::from_static("keep-alive, Upgrade"),
    );
    h.insert(
        WEBSOCKET_PROTOCOL,
        HeaderValue::from_str(protocols).expect("header"),
    );
    h
}

#[tokio::test]
async fn websocket_subprotocol_tokens_as_upstream() {
    let reviews = Arc::new(FakeReviews::default().token("good", "alice"));
    let a = webhook(&reviews, false);
    // base64url("good") = "Z29vZA"
    let mut h = websocket("base64url.bearer.authorization.k8s.io.Z29vZA, v5.channel.k8s.io");
    let user = a
        .authenticate(&[], &mut h)
        .await
        .expect("ok")
        .expect("user");
    assert_eq!(user.name, "alice");
    assert_eq!(
        h.get(WEBSOCKET_PROTOCOL).expect("kept"),
        "v5.channel.k8s.io"
    );
    // Alone, twice, or not base64url: errors.
    for bad in [
        "base64url.bearer.authorization.k8s.io.Z29vZA",
        "base64url.bearer.authorization.k8s.io.Z29vZA,base64url.bearer.authorization.k8s.io.Z29vZA,v4",
        "base64url.bearer.authorization.k8s.io.!!!,v4",
    ] {
        let err = a
            .authenticate(&[], &mut websocket(bad))
            .await
            .expect_err(bad);
        assert!(matches!(err, Error::WebsocketProtocol(_)), "{bad}: {err}");
    }
    // Not a websocket request: the subprotocol is not read.
    let mut h = websocket("base64url.bearer.authorization.k8s.io.Z29vZA, v4");
    h.remove(http::header::UPGRADE);
    assert_eq!(a.authenticate(&[], &mut h).await.expect("ok"), None);
}

#[tokio::test]
async fn an_accepted_bearer_token_is_removed_from_the_request() {
    let reviews = Arc::new(FakeReviews::default().token("good", "alice"));
    let a = webhook(&reviews, false);
    let mut h = bearer("good");
    a.authenticate(&[], &mut h)
        .await
        .expect("ok")
        .expect("user");
    assert!(h.get(http::header::AUTHORIZATION).is_none());
}
