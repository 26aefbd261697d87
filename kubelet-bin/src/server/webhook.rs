//! TokenReviews and SubjectAccessReviews through the kubelet's API client, retried as
//! upstream's webhooks retry them (`k8s.io/apiserver/pkg/util/webhook` with
//! `DefaultAuthWebhookRetryBackoff`: 500 ms, ×1.5, jitter 0.2, 5 tries; only transport
//! errors, 429 and 5xx are retried).

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use kube::api::{Api, PostParams};

/// Where reviews are created (the API server; a fake in tests).
#[async_trait::async_trait]
pub trait Reviews: Send + Sync + 'static {
    /// Creates a TokenReview and returns it with its status.
    async fn token_review(&self, review: TokenReview) -> Result<TokenReview, kube::Error>;
    /// Creates a SubjectAccessReview and returns it with its status.
    async fn subject_access_review(
        &self,
        review: SubjectAccessReview,
    ) -> Result<SubjectAccessReview, kube::Error>;
}

#[async_trait::async_trait]
impl Reviews for kube::Client {
    async fn token_review(&self, review: TokenReview) -> Result<TokenReview, kube::Error> {
        Api::<TokenReview>::all(self.clone())
            .create(&PostParams::default(), &review)
            .await
    }

    async fn subject_access_review(
        &self,
        review: SubjectAccessReview,
    ) -> Result<SubjectAccessReview, kube::Error> {
        Api::<SubjectAccessReview>::all(self.clone())
            .create(&PostParams::default(), &review)
            .await
    }
}

/// Tries of one review (upstream `Steps: 5`).
const TRIES: u32 = 5;
/// The first wait between tries.
const FIRST_WAIT: Duration = Duration::from_millis(500);

/// Whether a failed review is worth another try.
fn retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Runs `call` until it succeeds, fails for good, or [`TRIES`] tries failed.
pub(crate) async fn with_retries<T, F, Fut>(mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut wait = FIRST_WAIT;
    let mut tries = 1;
    loop {
        match call().await {
            Err(e) if tries < TRIES && retryable(&e) => {
                let jitter = wait.mul_f64(rand::random::<f64>() * 0.2);
                tracing::debug!(error = %e, try_ = tries, "webhook review failed; retrying");
                tokio::time::sleep(wait + jitter).await;
                wait = wait.mul_f64(1.5);
                tries += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("x", "y").with_code(code),
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn server_errors_are_retried_five_times() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = with_retries(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(status(503)) }
        })
        .await;
        assert!(result.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn forbidden_is_final_and_success_stops() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = with_retries(|| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(status(403)) }
        })
        .await;
        assert!(result.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let calls = AtomicU32::new(0);
        let result = with_retries(|| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move { if n < 2 { Err(status(500)) } else { Ok(n) } }
        })
        .await;
        assert_eq!(result.expect("third try"), 2);
    }
}
