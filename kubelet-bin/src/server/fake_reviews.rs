//! A scripted review server for the authenticator and authorizer tests: tokens → users, a set
//! of allowed `(user, subresource)` pairs, call counters, and a switch that makes every call
//! fail with a 500.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewStatus, UserInfo};
use k8s_openapi::api::authorization::v1::{SubjectAccessReview, SubjectAccessReviewStatus};

use super::webhook::Reviews;

#[derive(Default)]
pub(crate) struct FakeReviews {
    pub tokens: Mutex<HashMap<String, String>>,
    pub allowed: Mutex<HashSet<(String, String)>>,
    pub token_calls: AtomicU32,
    pub access_calls: AtomicU32,
    pub failing: AtomicBool,
}

impl FakeReviews {
    pub fn token(self, token: &str, user: &str) -> Self {
        self.tokens
            .lock()
            .expect("lock")
            .insert(token.into(), user.into());
        self
    }

    pub fn allow(&self, user: &str, subresource: &str) {
        self.allowed
            .lock()
            .expect("lock")
            .insert((user.into(), subresource.into()));
    }

    fn fail(&self) -> Result<(), kube::Error> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(kube::Error::Api(Box::new(
                kube::core::Status::failure("down", "InternalError").with_code(500),
            )));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Reviews for FakeReviews {
    async fn token_review(&self, mut review: TokenReview) -> Result<TokenReview, kube::Error> {
        self.token_calls.fetch_add(1, Ordering::SeqCst);
        self.fail()?;
        let token = review.spec.token.clone();
        let user = self.tokens.lock().expect("lock").get(&token).cloned();
        review.status = Some(TokenReviewStatus {
            authenticated: Some(user.is_some()),
            user: user.map(|name| UserInfo {
                username: Some(name),
                groups: Some(vec!["team".into()]),
                ..UserInfo::default()
            }),
            ..TokenReviewStatus::default()
        });
        Ok(review)
    }

    async fn subject_access_review(
        &self,
        mut review: SubjectAccessReview,
    ) -> Result<SubjectAccessReview, kube::Error> {
        self.access_calls.fetch_add(1, Ordering::SeqCst);
        self.fail()?;
        let user = review.spec.user.clone().unwrap_or_default();
        let attrs = review.spec.resource_attributes.clone().unwrap_or_default();
        assert_eq!(attrs.resource.as_deref(), Some("nodes"));
        let sub = attrs.subresource.unwrap_or_default();
        let allowed = self.allowed.lock().expect("lock").contains(&(user, sub));
        review.status = Some(SubjectAccessReviewStatus {
            allowed,
            ..SubjectAccessReviewStatus::default()
        });
        Ok(review)
    }
}
