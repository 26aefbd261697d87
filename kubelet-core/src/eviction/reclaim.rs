//! Node-level reclaim before pods are evicted (upstream `ImageGC`, `ContainerGC` in
//! `pkg/kubelet/eviction/types.go` and `buildSignalToNodeReclaimFuncs` in `helpers.go`).
//!
//! Under disk pressure the manager first asks the container GC to delete every dead
//! container and the image GC to delete every unused image, then looks again; pods are only
//! evicted when that did not bring the signal back above its threshold and minimum
//! reclaim. [`NoReclaim`] is the default: nothing to reclaim.

use async_trait::async_trait;

use super::api::Signal;

/// Why a reclaim failed (logged; the manager goes on to evict pods).
pub type ReclaimError = Box<dyn std::error::Error + Send + Sync>;

/// Frees disk by deleting images (upstream `eviction.ImageGC`).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait ImageGC: Send + Sync + 'static {
    /// Deletes every image no container uses (upstream `DeleteUnusedImages`).
    async fn delete_unused_images(&self) -> Result<(), ReclaimError>;
}

/// Frees disk by deleting dead containers (upstream `eviction.ContainerGC`).
#[cfg_attr(any(test, feature = "test-util"), mockall::automock)]
#[async_trait]
pub trait ContainerGC: Send + Sync + 'static {
    /// Deletes every dead container and sandbox, whatever the GC policy keeps (upstream
    /// `DeleteAllUnusedContainers`).
    async fn delete_all_unused_containers(&self) -> Result<(), ReclaimError>;
}

/// Reclaims nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoReclaim;

#[async_trait]
impl ImageGC for NoReclaim {
    async fn delete_unused_images(&self) -> Result<(), ReclaimError> {
        Ok(())
    }
}

#[async_trait]
impl ContainerGC for NoReclaim {
    async fn delete_all_unused_containers(&self) -> Result<(), ReclaimError> {
        Ok(())
    }
}

/// What reclaims `signal` (upstream `buildSignalToNodeReclaimFuncs`, without a split
/// container filesystem).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reclaim {
    /// Nothing at node level: evict pods.
    Nothing,
    /// Dead containers, then unused images.
    ContainersThenImages,
}

/// The node-level reclaim for `signal`: with a dedicated image filesystem only its own
/// signals delete containers and images; on one filesystem every disk signal does.
pub fn reclaim_for(signal: Signal, dedicated_image_fs: bool) -> Reclaim {
    match signal {
        Signal::ImageFsAvailable | Signal::ImageFsInodesFree => Reclaim::ContainersThenImages,
        Signal::NodeFsAvailable | Signal::NodeFsInodesFree if !dedicated_image_fs => {
            Reclaim::ContainersThenImages
        }
        _ => Reclaim::Nothing,
    }
}
