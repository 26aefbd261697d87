use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Method, Request, StatusCode};
use tower::ServiceExt;

use super::*;
use crate::server::authn::{Authenticator, AuthnOptions};
use crate::server::fake_reviews::FakeReviews;
use crate::server::filter::{KubeletAuth, auth_filter};

fn subresources(method: Method, path: &str) -> (Vec<&'static str>, &'static str) {
    let attrs = request_attributes("node-a", &User::anonymous(), &method, path);
    assert!(attrs.iter().all(|a| a.name == "node-a" && a.path == path));
    let verb = attrs[0].verb;
    (attrs.into_iter().map(|a| a.subresource).collect(), verb)
}

/// Upstream `auth_test.go` (`TestAuthzCoverage`/`GetRequestAttributes` with
/// `KubeletFineGrainedAuthz` on).
#[test]
fn paths_map_to_upstreams_subresources() {
    let cases: &[(&str, &[&str])] = &[
        ("/stats", &["stats"]),
        ("/stats/", &["stats"]),
        ("/stats/summary", &["stats"]),
        ("/stats/container", &["stats"]),
        ("/metrics", &["metrics"]),
        ("/metrics/cadvisor", &["metrics"]),
        ("/metrics/probes", &["metrics"]),
        ("/metrics/resource", &["metrics"]),
        ("/logs/", &["log"]),
        ("/logs/kubelet.log", &["log"]),
        ("/checkpoint/ns/pod/ctr", &["checkpoint"]),
        ("/pods", &["pods", "proxy"]),
        ("/pods/", &["pods", "proxy"]),
        ("/runningpods/", &["pods", "proxy"]),
        ("/runningpods", &["pods", "proxy"]),
        ("/healthz", &["healthz", "proxy"]),
        ("/healthz/syncloop", &["healthz", "proxy"]),
        ("/configz", &["configz", "proxy"]),
        ("/spec/", &["proxy"]),
        ("/containerLogs/ns/pod/ctr", &["proxy"]),
        ("/exec/ns/pod/ctr", &["proxy"]),
        ("/attach/ns/pod/ctr", &["proxy"]),
        ("/portForward/ns/pod", &["proxy"]),
        ("/run/ns/pod/ctr", &["proxy"]),
        ("/statsfoo", &["proxy"]),
        ("/metricsfoo", &["proxy"]),
        ("/podsfoo", &["proxy"]),
        ("/", &["proxy"]),
    ];
    for (path, want) in cases {
        assert_eq!(subresources(Method::GET, path).0, *want, "{path}");
    }
}

#[test]
fn methods_map_to_api_verbs() {
    for (method, verb) in [
        (Method::GET, "get"),
        (Method::POST, "create"),
        (Method::PUT, "update"),
        (Method::PATCH, "patch"),
        (Method::DELETE, "delete"),
        (Method::HEAD, ""),
        (Method::OPTIONS, ""),
    ] {
        assert_eq!(
            subresources(method.clone(), "/exec/a/b/c").1,
            verb,
            "{method}"
        );
    }
}

#[test]
fn modes_by_upstream_name() {
    assert_eq!(Mode::parse("Webhook").expect("valid"), Mode::Webhook);
    assert_eq!(
        Mode::parse("AlwaysAllow").expect("valid"),
        Mode::AlwaysAllow
    );
    assert_eq!(
        Mode::parse("RBAC").expect_err("bad").to_string(),
        "unknown authorization mode RBAC"
    );
    assert_eq!(
        Mode::parse("").expect_err("bad").to_string(),
        "no authorization mode specified"
    );
    let err = Authorizer::new(
        &AuthzOptions {
            mode: Mode::Webhook,
            ..AuthzOptions::default()
        },
        None,
    )
    .expect_err("no client");
    assert_eq!(
        err.to_string(),
        "no client provided, cannot use webhook authorization"
    );
}

fn webhook(reviews: &Arc<FakeReviews>) -> Authorizer {
    Authorizer::new(
        &AuthzOptions {
            mode: Mode::Webhook,
            ..AuthzOptions::default()
        },
        Some(reviews.clone() as Arc<dyn Reviews>),
    )
    .expect("valid")
}

fn attrs(user: &str, subresource: &'static str) -> Attributes {
    Attributes {
        user: User {
            name: user.into(),
            ..User::default()
        },
        verb: "get",
        subresource,
        name: "node-a".into(),
        path: "/pods".into(),
    }
}

#[tokio::test(start_paused = true)]
async fn allowed_answers_are_cached_five_minutes_denied_thirty_seconds() {
    let reviews = Arc::new(FakeReviews::default());
    reviews.allow("alice", "pods");
    let authz = webhook(&reviews);
    let calls = || reviews.access_calls.load(Ordering::SeqCst);
    assert_eq!(
        authz.authorize(&attrs("alice", "pods")).await.expect("ok"),
        Decision::Allow
    );
    assert_eq!(
        authz.authorize(&attrs("bob", "pods")).await.expect("ok"),
        Decision::NoOpinion
    );
    assert_eq!(calls(), 2);
    // Bob is allowed now, but the denial is cached for 30 s.
    reviews.allow("bob", "pods");
    tokio::time::advance(DEFAULT_CACHE_UNAUTHORIZED_TTL - std::time::Duration::from_secs(1)).await;
    assert_eq!(
        authz.authorize(&attrs("bob", "pods")).await.expect("ok"),
        Decision::NoOpinion
    );
    assert_eq!(
        authz.authorize(&attrs("alice", "pods")).await.expect("ok"),
        Decision::Allow
    );
    assert_eq!(calls(), 2);
    tokio::time::advance(std::time::Duration::from_secs(1)).await;
    assert_eq!(
        authz.authorize(&attrs("bob", "pods")).await.expect("ok"),
        Decision::Allow
    );
    assert_eq!(calls(), 3);
    // Alice's allowance is kept for 5 minutes.
    tokio::time::advance(
        DEFAULT_CACHE_AUTHORIZED_TTL
            - DEFAULT_CACHE_UNAUTHORIZED_TTL
            - std::time::Duration::from_secs(1),
    )
    .await;
    authz.authorize(&attrs("alice", "pods")).await.expect("ok");
    assert_eq!(calls(), 3);
    tokio::time::advance(std::time::Duration::from_secs(1)).await;
    authz.authorize(&attrs("alice", "pods")).await.expect("ok");
    assert_eq!(calls(), 4);
}

async fn call(
    app: &Router,
    method: Method,
    path: &str,
    token: Option<&str>,
) -> (StatusCode, String) {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("response");
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn app(reviews: &Arc<FakeReviews>, anonymous: bool) -> Router {
    let auth = KubeletAuth {
        node_name: "node-a".into(),
        authenticator: Authenticator::new(
            &AuthnOptions {
                webhook: true,
                anonymous,
                ..AuthnOptions::default()
            },
            None,
            Some(reviews.clone() as Arc<dyn Reviews>),
        )
        .expect("valid"),
        authorizer: webhook(reviews),
    };
    Router::new()
        .route("/pods", get(|| async { "pods" }))
        .route(
            "/exec/{ns}/{pod}/{ctr}",
            axum::routing::post(|| async { "exec" }),
        )
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(auth),
            auth_filter,
        ))
}

#[tokio::test]
async fn the_filter_answers_with_upstreams_texts() {
    let reviews = Arc::new(FakeReviews::default().token("a", "alice").token("b", "bob"));
    reviews.allow("alice", "proxy");
    reviews.allow("bob", "pods");
    let app = app(&reviews, false);
    assert_eq!(
        call(&app, Method::GET, "/pods", None).await,
        (StatusCode::UNAUTHORIZED, "Unauthorized".into())
    );
    assert_eq!(
        call(&app, Method::GET, "/pods", Some("nope")).await,
        (StatusCode::UNAUTHORIZED, "Unauthorized".into())
    );
    // Either subresource is enough for /pods.
    assert_eq!(
        call(&app, Method::GET, "/pods", Some("a")).await,
        (StatusCode::OK, "pods".into())
    );
    assert_eq!(
        call(&app, Method::GET, "/pods", Some("b")).await,
        (StatusCode::OK, "pods".into())
    );
    // nodes/pods does not reach /exec.
    assert_eq!(
        call(&app, Method::POST, "/exec/ns/p/c", Some("b")).await,
        (
            StatusCode::FORBIDDEN,
            "Forbidden (user=bob, verb=create, resource=nodes, subresource(s)=[proxy])\n".into()
        )
    );
    reviews.failing.store(true, Ordering::SeqCst);
    let anonymous = app_anonymous(&reviews);
    let (status, body) = call(&anonymous, Method::GET, "/pods", None).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        body,
        "Authorization error (user=system:anonymous, verb=get, resource=nodes, subresource=pods)"
    );
}

fn app_anonymous(reviews: &Arc<FakeReviews>) -> Router {
    app(reviews, true)
}

#[tokio::test]
async fn anonymous_requests_are_authorized_like_any_other() {
    let reviews = Arc::new(FakeReviews::default());
    let app = app(&reviews, true);
    assert_eq!(
        call(&app, Method::GET, "/pods", None).await,
        (
            StatusCode::FORBIDDEN,
            "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
                .into()
        )
    );
    // (The denial is cached for 30 s: a new authorizer sees the new policy.)
    reviews.allow("system:anonymous", "pods");
    let app = app_anonymous(&reviews);
    assert_eq!(
        call(&app, Method::GET, "/pods", None).await.0,
        StatusCode::OK
    );
}
