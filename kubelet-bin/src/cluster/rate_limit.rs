//! Client-side rate limiting of API requests: a token bucket as a tower layer on the API
//! client's service (upstream client-go `flowcontrol.NewTokenBucketRateLimiter`, fed by the
//! kubelet's `--kube-api-qps` and `--kube-api-burst`).
//!
//! A request waits for a token: the bucket holds up to `burst` tokens and refills at `qps`
//! per second, so a burst of `burst` requests goes out at once and the rest at `qps`. A
//! `qps` of zero or less disables the limit (upstream's `QPS = -1`, used for the heartbeat
//! client).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// Requests per second and burst of a [`TokenBucket`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Sustained requests per second; zero or less: unlimited.
    pub qps: f32,
    /// Requests allowed at once.
    pub burst: u32,
}

impl Limits {
    /// Upstream's `kubeAPIQPS` default.
    pub const DEFAULT_QPS: f32 = 50.0;
    /// Upstream's `kubeAPIBurst` default.
    pub const DEFAULT_BURST: u32 = 100;

    /// No limit (upstream `QPS = -1`).
    pub const UNLIMITED: Self = Self {
        qps: -1.0,
        burst: 0,
    };

    /// Whether requests are limited at all.
    pub fn is_limited(&self) -> bool {
        self.qps > 0.0
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            qps: Self::DEFAULT_QPS,
            burst: Self::DEFAULT_BURST,
        }
    }
}

/// A token bucket shared by every clone of a rate-limited service.
#[derive(Debug)]
pub struct TokenBucket {
    per_token: Duration,
    burst: f64,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket of `limits.burst` tokens (at least one) refilled at `limits.qps`.
    pub fn new(limits: Limits) -> Self {
        let burst = f64::from(limits.burst.max(1));
        Self {
            per_token: Duration::from_secs_f64(1.0 / f64::from(limits.qps.max(f32::MIN_POSITIVE))),
            burst,
            state: Mutex::new(State {
                tokens: burst,
                last: Instant::now(),
            }),
        }
    }

    /// Takes a token and returns when it may be used (now, or later when the bucket is
    /// empty: reservations queue up, as client-go's `Wait`).
    pub fn reserve(&self) -> Instant {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let refill =
            now.saturating_duration_since(state.last).as_secs_f64() / self.per_token.as_secs_f64();
        state.tokens = (state.tokens + refill).min(self.burst);
        state.last = now;
        state.tokens -= 1.0;
        if state.tokens >= 0.0 {
            now
        } else {
            now + self.per_token.mul_f64(-state.tokens)
        }
    }
}

/// Applies a [`TokenBucket`] to a service (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Option<Arc<TokenBucket>>,
}

impl RateLimitLayer {
    /// A layer with its own bucket of `limits` (none when unlimited).
    pub fn new(limits: Limits) -> Self {
        Self {
            bucket: limits
                .is_limited()
                .then(|| Arc::new(TokenBucket::new(limits))),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            permitted: false,
        }
    }
}

/// A service whose requests wait for a token of a [`TokenBucket`].
///
/// The token is taken in `poll_ready`, so it works under `tower::buffer::Buffer` (which
/// `kube::Client` puts on top) without cloning the inner service.
#[derive(Debug)]
pub struct RateLimit<S> {
    inner: S,
    bucket: Option<Arc<TokenBucket>>,
    wait: Option<Pin<Box<Sleep>>>,
    permitted: bool,
}

impl<S, R> Service<R> for RateLimit<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if let Some(bucket) = &self.bucket
            && !self.permitted
        {
            if self.wait.is_none() {
                let at = bucket.reserve();
                if at > Instant::now() {
                    self.wait = Some(Box::pin(tokio::time::sleep_until(at)));
                }
            }
            if let Some(wait) = &mut self.wait {
                ready!(wait.as_mut().poll(cx));
                self.wait = None;
            }
            self.permitted = true;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.permitted = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_then_qps() {
        let start = Instant::now();
        let mut service = RateLimitLayer::new(Limits { qps: 2.0, burst: 3 }).layer(
            tower::service_fn(|()| async { Ok::<_, std::convert::Infallible>(Instant::now()) }),
        );
        let mut sent = Vec::new();
        for _ in 0..6 {
            let at = service
                .ready()
                .await
                .expect("ready")
                .call(())
                .await
                .expect("ok");
            sent.push(at.duration_since(start).as_millis());
        }
        assert_eq!(sent, vec![0, 0, 0, 500, 1000, 1500]);
    }

    #[tokio::test(start_paused = true)]
    async fn refills_while_idle_up_to_the_burst() {
        let bucket = TokenBucket::new(Limits {
            qps: 10.0,
            burst: 2,
        });
        let now = Instant::now();
        assert_eq!(bucket.reserve(), now);
        assert_eq!(bucket.reserve(), now);
        assert_eq!(bucket.reserve(), now + Duration::from_millis(100));
        tokio::time::advance(Duration::from_secs(10)).await;
        let now = Instant::now();
        assert_eq!(bucket.reserve(), now);
        assert_eq!(bucket.reserve(), now);
        assert!(bucket.reserve() > now, "the bucket holds at most the burst");
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_never_waits() {
        let start = Instant::now();
        let mut service =
            RateLimitLayer::new(Limits::UNLIMITED).layer(tower::service_fn(|()| async {
                Ok::<_, std::convert::Infallible>(Instant::now())
            }));
        for _ in 0..1000 {
            let at = service
                .ready()
                .await
                .expect("ready")
                .call(())
                .await
                .expect("ok");
            assert_eq!(at, start);
        }
    }
}
