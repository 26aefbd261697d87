//! Image pull backoff: `ErrImagePull` once, then `ImagePullBackOff` until the window ends.
//!
//! Mirrors the backoff half of upstream `pkg/kubelet/images/image_manager.go` (`pullImage`):
//! windows keyed by `<pod uid>_<image>`, measured from the last failed pull
//! (`IsInBackOffSinceUpdate`), 10 s doubling to 300 s (`imageBackOffPeriod`,
//! `MaxImageBackOff`), and the last pull error kept to explain the back-off
//! (`prevPullErrMsg`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::backoff::Backoff;

use super::reasons::ERR_IMAGE_PULL;

/// Upstream's first image pull backoff window (`imageBackOffPeriod`).
pub const DEFAULT_INITIAL: Duration = Duration::from_secs(10);
/// Upstream's largest image pull backoff window (`MaxImageBackOff`).
pub const DEFAULT_MAX: Duration = Duration::from_secs(300);

/// Per pod and image pull backoff with the last pull error of each key.
#[derive(Debug)]
pub struct ImagePullBackoff {
    backoff: Backoff,
    last_errors: Mutex<HashMap<String, String>>,
}

impl Default for ImagePullBackoff {
    fn default() -> Self {
        Self::new(DEFAULT_INITIAL, DEFAULT_MAX)
    }
}

/// A pull refused because an earlier one failed too recently.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PullBackoff {
    /// The `ImagePullBackOff` message.
    pub message: String,
    /// Time until the window ends.
    pub retry_after: Duration,
}

fn key(pod_uid: &str, image: &str) -> String {
    format!("{pod_uid}_{image}")
}

impl ImagePullBackoff {
    /// Windows from `initial` doubling to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            backoff: Backoff::new(initial, max),
            last_errors: Mutex::new(HashMap::new()),
        }
    }

    fn errors(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.last_errors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Some` while a pull of `image` (as the user wrote it) for the pod must wait, with
    /// upstream's message: `Back-off pulling image "<image>": ErrImagePull: <last error>`.
    /// `None` means pull now (the last error is forgotten).
    pub(crate) fn check(&self, pod_uid: &str, image: &str) -> Option<PullBackoff> {
        let key = key(pod_uid, image);
        let Some(retry_after) = self.backoff.remaining(&key) else {
            self.errors().remove(&key);
            return None;
        };
        let mut message = format!("Back-off pulling image {image:?}");
        if let Some(last) = self.errors().get(&key) {
            message.push_str(": ");
            message.push_str(last);
        }
        Some(PullBackoff {
            message,
            retry_after,
        })
    }

    /// Records a failed pull with its `ErrImagePull` message; opens or doubles the window.
    pub(crate) fn failed(&self, pod_uid: &str, image: &str, message: &str) {
        let key = key(pod_uid, image);
        self.backoff.next(&key);
        self.errors()
            .insert(key, format!("{ERR_IMAGE_PULL}: {message}"));
    }

    /// A pull succeeded: drop expired windows (upstream `backOff.GC()`).
    pub(crate) fn succeeded(&self) {
        self.backoff.gc();
        let mut errors = self.errors();
        errors.retain(|k, _| self.backoff.current(k).is_some());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn err_image_pull_then_back_off_with_the_last_error() {
        let b = ImagePullBackoff::new(Duration::from_secs(10), Duration::from_secs(40));
        assert_eq!(b.check("uid", "missing:1"), None);
        b.failed("uid", "missing:1", "pull access denied");
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(
            b.check("uid", "missing:1"),
            Some(PullBackoff {
                message: "Back-off pulling image \"missing:1\": ErrImagePull: pull access denied"
                    .into(),
                retry_after: Duration::from_secs(7),
            })
        );
        // another pod or image is not affected
        assert_eq!(b.check("other", "missing:1"), None);
        assert_eq!(b.check("uid", "missing:2"), None);
        // the window ends: pull again; a second failure doubles it
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(b.check("uid", "missing:1"), None);
        b.failed("uid", "missing:1", "still denied");
        let refused = b.check("uid", "missing:1").expect("in backoff");
        assert_eq!(refused.retry_after, Duration::from_secs(20));
        assert!(refused.message.ends_with("ErrImagePull: still denied"));
    }
}
