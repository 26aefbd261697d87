//! A PLEG that only does on-demand relists against a runtime (no periodic relist, no events).

use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::cache::PodCache;
use crate::pleg::{HealthError, Pleg};
use crate::pod::PodUid;
use crate::runtime::{Error, Runtime};

/// A [`Pleg`] whose `relist_pod` reads the pod from a runtime into a cache; always healthy.
#[derive(Clone)]
pub struct FakePleg {
    runtime: Arc<dyn Runtime>,
    cache: PodCache,
}

impl std::fmt::Debug for FakePleg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakePleg").finish_non_exhaustive()
    }
}

impl FakePleg {
    /// A PLEG over `runtime` writing to `cache`.
    pub fn new(runtime: Arc<dyn Runtime>, cache: PodCache) -> Self {
        Self { runtime, cache }
    }
}

#[async_trait]
impl Pleg for FakePleg {
    async fn relist_pod(&self, uid: &PodUid, name: &str, namespace: &str) -> Result<(), Error> {
        let at = Instant::now();
        let status = self.runtime.get_pod_status(uid, name, namespace).await?;
        self.cache.set(uid, status, at);
        Ok(())
    }

    fn healthy(&self) -> Result<(), HealthError> {
        Ok(())
    }
}
