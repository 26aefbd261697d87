//! Blocking work (file system, cgroupfs, mounts, process waits) off the async workers
//! (issue 16): a blocked worker stalls every task queued on it, the HTTP endpoints included.
//!
//! Upstream has no counterpart (Go parks a goroutine in a blocking syscall and starts another
//! thread); with tokio the kubelet moves such calls to the blocking pool itself. The crate's
//! `clippy.toml` bans the blocking `std` calls on async code; a sync helper that makes them
//! is called through [`unblock`] and carries a reviewed
//! `#[allow(clippy::disallowed_methods)]`.

/// Runs `f` on tokio's blocking pool and returns its value.
///
/// A panic in `f` resumes on the caller, as if `f` had been called in place. The only
/// error is the runtime shutting down before `f` ran.
///
/// Cancel safety: dropping the future does not stop `f`; it runs to completion unobserved.
pub async fn unblock<T, F>(f: F) -> std::io::Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(value) => Ok(value),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn runs_off_the_async_worker_and_returns_the_value() {
        let worker = std::thread::current().id();
        let (value, ran_on) = unblock(|| (7, std::thread::current().id()))
            .await
            .expect("runtime is up");
        assert_eq!(value, 7);
        assert_ne!(ran_on, worker);
    }

    #[tokio::test]
    #[should_panic(expected = "boom")]
    async fn a_panic_resumes_on_the_caller() {
        let _ = unblock(|| -> u8 { panic!("boom") }).await;
    }
}
