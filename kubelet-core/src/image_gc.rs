//! Image garbage collection: unused images removed, least recently used first, when the image
//! filesystem is fuller than the high threshold, down to the low threshold; images unused for
//! longer than a maximum age regardless of usage.
//!
//! Mirrors upstream `pkg/kubelet/images/image_gc_manager.go` (`ImageGCPolicy`,
//! `realImageGCManager`: `detectImages`, `GarbageCollect`, `freeOldImages`, `freeSpace`,
//! `DeleteUnusedImages`, `imagesInEvictionOrder`) and the image half of
//! `Kubelet.StartGarbageCollection` (`pkg/kubelet/kubelet.go`):
//!
//! * every image the runtime lists is recorded when first detected, with the last time a
//!   container (of any pod, running or not) used it; an image is in use when a container's
//!   image is its ID, one of its tags or digests, or it is the sandbox image the kubelet was
//!   given (upstream's `--pod-infra-container-image`, for runtimes that do not report
//!   `pinned`);
//! * images in use and images the runtime pins are never removed; the others go least
//!   recently used first (never-used first, then by first detection), skipping those detected
//!   less than `min_age` ago;
//! * usage is `100 - available * 100 / capacity` of the image filesystem (CRI
//!   `ImageFsInfo`'s mountpoint, statfs'd by the stats provider); at or over the high
//!   threshold, `capacity * (100 - low) / 100 - available` bytes are freed, and freeing less
//!   is an error with a `FreeDiskSpaceFailed` event; a zero capacity is an
//!   `InvalidDiskCapacity` event;
//! * with a maximum age, once the kubelet has run that long, images unused for longer go
//!   first, whatever the usage.
//!
//! Times are the tokio clock's (monotonic), so the ages are tested with a paused clock.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::events::{EventRecorder, EventType, reasons};
use crate::kuberuntime::api::Image;
use crate::metrics::{IMAGE_GC_REASON_AGE, IMAGE_GC_REASON_SPACE, KubeletMetrics};
use crate::runtime::Runtime;
use crate::stats::PodStatsProvider;

/// How often images are collected (upstream `ImageGCPeriod`).
pub const IMAGE_GC_PERIOD: Duration = Duration::from_secs(5 * 60);

/// When images are collected (upstream `ImageGCPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(alias = "ImageGCPolicy")]
pub struct Policy {
    /// Usage of the image filesystem (percent) at or above which images are collected
    /// (`imageGCHighThresholdPercent`, default 85; 100 with no maximum age turns image GC
    /// off).
    pub high_threshold_percent: i32,
    /// Usage the collection frees down to (`imageGCLowThresholdPercent`, default 80).
    pub low_threshold_percent: i32,
    /// Minimum age (since first detected) of an image that may be collected
    /// (`imageMinimumGCAge`, default 2m).
    pub min_age: Duration,
    /// Images unused for longer are collected whatever the usage; zero for never
    /// (`imageMaximumGCAge`, default 0).
    pub max_age: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(2 * 60),
            max_age: Duration::ZERO,
        }
    }
}

impl Policy {
    /// Checks the thresholds as upstream `NewImageGCManager` does.
    pub fn validate(&self) -> Result<(), Error> {
        let (high, low) = (self.high_threshold_percent, self.low_threshold_percent);
        if !(0..=100).contains(&high) {
            return Err(Error::InvalidHighThreshold(high));
        }
        if !(0..=100).contains(&low) {
            return Err(Error::InvalidLowThreshold(low));
        }
        if low > high {
            return Err(Error::LowAboveHigh { low, high });
        }
        Ok(())
    }

    /// `false` when there is nothing to collect: a high threshold of 100 and no maximum age
    /// (upstream then stubs the image GC manager).
    pub fn is_enabled(&self) -> bool {
        self.high_threshold_percent < 100 || !self.max_age.is_zero()
    }
}

/// Why a collection failed (messages as upstream's).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The high threshold is outside 0–100.
    #[error("invalid HighThresholdPercent {0}, must be in range [0-100]")]
    InvalidHighThreshold(i32),
    /// The low threshold is outside 0–100.
    #[error("invalid LowThresholdPercent {0}, must be in range [0-100]")]
    InvalidLowThreshold(i32),
    /// The low threshold is above the high one.
    #[error("LowThresholdPercent {low} can not be higher than HighThresholdPercent {high}")]
    LowAboveHigh {
        /// The low threshold.
        low: i32,
        /// The high threshold.
        high: i32,
    },
    /// Listing images or pods failed (retryable: the next period tries again).
    #[error(transparent)]
    Runtime(#[from] crate::runtime::Error),
    /// The image filesystem's usage could not be read (retryable).
    #[error(transparent)]
    Stats(#[from] crate::stats::Error),
    /// The runtime reports no image filesystem.
    #[error("the container runtime reports no image filesystem")]
    NoImageFs,
    /// The image filesystem reports no capacity.
    #[error("invalid capacity 0 on image filesystem")]
    InvalidCapacity,
    /// Every eligible image was removed and it was not enough.
    #[error(
        "Failed to garbage collect required amount of images. Attempted to free {wanted} bytes, but only found {freed} bytes eligible to free."
    )]
    NotEnoughFreed {
        /// Bytes the low threshold asked for.
        wanted: i64,
        /// Bytes freed.
        freed: i64,
    },
    /// Some removals failed.
    #[error(
        "wanted to free {wanted} bytes, but freed {freed} bytes space with errors in image deletion: {errors}"
    )]
    Deletion {
        /// Bytes asked for.
        wanted: i64,
        /// Bytes freed.
        freed: i64,
        /// The runtime's errors, joined.
        errors: String,
    },
    /// Some removals of images past the maximum age failed.
    #[error(
        "wanted to free images older than {max_age:?}, encountered errors in image deletion: {errors}"
    )]
    OldImageDeletion {
        /// The maximum age.
        max_age: Duration,
        /// The runtime's errors, joined.
        errors: String,
    },
}

/// What is known of one image (upstream `imageRecord`).
#[derive(Clone, Copy, Debug)]
struct Record {
    first_detected: Instant,
    /// `None`: never seen in use.
    last_used: Option<Instant>,
    size: u64,
    pinned: bool,
}

/// An image that may be removed, with its record (upstream `evictionInfo`).
#[derive(Clone, Debug)]
struct Candidate {
    id: String,
    record: Record,
}

/// The image garbage collector (upstream `realImageGCManager`). Cheap to clone; clones share
/// the records.
#[derive(Clone)]
pub struct ImageGcManager {
    runtime: Arc<dyn Runtime>,
    stats: Arc<dyn PodStatsProvider>,
    policy: Policy,
    sandbox_image: Option<String>,
    records: Arc<Mutex<HashMap<String, Record>>>,
    events: Arc<dyn EventRecorder>,
    node: ObjectReference,
    metrics: KubeletMetrics,
}

impl std::fmt::Debug for ImageGcManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageGcManager")
            .field("policy", &self.policy)
            .field("sandbox_image", &self.sandbox_image)
            .finish_non_exhaustive()
    }
}

/// `true` when `image` is its ID, a tag or a digest named in `in_use`.
fn is_used(image: &Image, in_use: &HashSet<String>) -> bool {
    in_use.contains(&image.id)
        || image
            .repo_tags
            .iter()
            .chain(&image.repo_digests)
            .any(|r| in_use.contains(r))
}

impl ImageGcManager {
    /// A collector of `runtime`'s images under `policy` (validated), reading the image
    /// filesystem's usage from `stats`; events go to `events` about `node`.
    pub fn new(
        runtime: Arc<dyn Runtime>,
        stats: Arc<dyn PodStatsProvider>,
        policy: Policy,
        events: Arc<dyn EventRecorder>,
        node: ObjectReference,
    ) -> Result<Self, Error> {
        policy.validate()?;
        Ok(Self {
            runtime,
            stats,
            policy,
            sandbox_image: None,
            records: Arc::default(),
            events,
            node,
            metrics: KubeletMetrics::default(),
        })
    }

    /// Counts removed images in `metrics` (`kubelet_image_garbage_collected_total`).
    #[must_use]
    pub fn with_metrics(mut self, metrics: KubeletMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Never removes `image` (a reference as the runtime tags it, e.g.
    /// `registry.k8s.io/pause:3.10`): the sandbox image, for runtimes that do not pin it
    /// (upstream `--pod-infra-container-image`).
    #[must_use]
    pub fn with_sandbox_image(mut self, image: impl Into<String>) -> Self {
        self.sandbox_image = Some(image.into()).filter(|i| !i.is_empty());
        self
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    fn records(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the images the runtime has, and which are in use now; returns the IDs of
    /// those in use (upstream `detectImages`).
    async fn detect_images(&self, now: Instant) -> Result<HashSet<String>, Error> {
        let images = self.runtime.list_images().await?;
        let pods = self.runtime.get_pods(true).await?;
        let mut in_use: HashSet<String> = pods
            .iter()
            .flat_map(|p| p.containers.iter().map(|c| c.image.clone()))
            .collect();
        in_use.extend(self.sandbox_image.clone());
        let mut used_ids = HashSet::new();
        let mut records = self.records();
        let mut current = HashSet::new();
        for image in &images {
            current.insert(image.id.clone());
            let record = records.entry(image.id.clone()).or_insert_with(|| {
                tracing::debug!(image_id = %image.id, "Image ID is new");
                Record {
                    first_detected: now,
                    last_used: None,
                    size: 0,
                    pinned: false,
                }
            });
            if is_used(image, &in_use) {
                record.last_used = Some(now);
                used_ids.insert(image.id.clone());
            }
            record.size = image.size;
            record.pinned = image.pinned;
        }
        records.retain(|id, _| current.contains(id));
        Ok(used_ids)
    }

    /// Images that may go, least recently used first (upstream `imagesInEvictionOrder`).
    async fn images_in_eviction_order(&self, now: Instant) -> Result<Vec<Candidate>, Error> {
        let in_use = self.detect_images(now).await?;
        let records = self.records();
        let mut candidates: Vec<Candidate> = records
            .iter()
            .filter(|(id, r)| !in_use.contains(*id) && !r.pinned)
            .map(|(id, r)| Candidate {
                id: id.clone(),
                record: *r,
            })
            .collect();
        candidates.sort_by(|a, b| {
            (a.record.last_used, a.record.first_detected, &a.id).cmp(&(
                b.record.last_used,
                b.record.first_detected,
                &b.id,
            ))
        });
        Ok(candidates)
    }

    /// Removes `image`, counted under `reason` (upstream `freeImage`).
    async fn free_image(
        &self,
        image: &Candidate,
        reason: &'static str,
    ) -> Result<(), crate::runtime::Error> {
        tracing::info!(image_id = %image.id, size = image.record.size, "Removing image to free bytes");
        self.runtime.remove_image(&image.id).await?;
        self.records().remove(&image.id);
        self.metrics.record_image_garbage_collected(reason);
        Ok(())
    }

    /// Removes images unused for longer than the maximum age, once the kubelet has run that
    /// long (since `began`); returns the others (upstream `freeOldImages`).
    async fn free_old_images(
        &self,
        images: Vec<Candidate>,
        now: Instant,
        began: Instant,
    ) -> Result<Vec<Candidate>, Error> {
        let max_age = self.policy.max_age;
        if max_age.is_zero() || now.duration_since(began) <= max_age {
            return Ok(images);
        }
        let mut errors = Vec::new();
        let mut remaining = Vec::new();
        for image in images {
            let unused_for = image.record.last_used.map(|t| now.duration_since(t));
            if unused_for.is_none_or(|d| d > max_age) {
                if let Err(e) = self.free_image(&image, IMAGE_GC_REASON_AGE).await {
                    errors.push(e.to_string());
                    remaining.push(image);
                }
                continue;
            }
            remaining.push(image);
        }
        if errors.is_empty() {
            Ok(remaining)
        } else {
            Err(Error::OldImageDeletion {
                max_age,
                errors: errors.join(", "),
            })
        }
    }

    /// Removes images in order until `bytes` are freed; returns the bytes freed (upstream
    /// `freeSpace`).
    async fn free_space(
        &self,
        bytes: i64,
        now: Instant,
        images: &[Candidate],
    ) -> Result<i64, Error> {
        let mut errors = Vec::new();
        let mut freed: i64 = 0;
        for image in images {
            if image.record.last_used.is_some_and(|t| t >= now) {
                continue;
            }
            // Maybe just pulled, for a container about to start.
            if now.duration_since(image.record.first_detected) < self.policy.min_age {
                tracing::debug!(image_id = %image.id, "Image ID's age is less than the policy's minAge, not eligible for garbage collection");
                continue;
            }
            if let Err(e) = self.free_image(image, IMAGE_GC_REASON_SPACE).await {
                errors.push(e.to_string());
                continue;
            }
            freed = freed.saturating_add(i64::try_from(image.record.size).unwrap_or(i64::MAX));
            if freed >= bytes {
                break;
            }
        }
        if errors.is_empty() {
            Ok(freed)
        } else {
            Err(Error::Deletion {
                wanted: bytes,
                freed,
                errors: errors.join(", "),
            })
        }
    }

    /// One collection (upstream `GarbageCollect`); `began` is when collection started (the
    /// maximum age counts from then).
    pub async fn garbage_collect(&self, began: Instant) -> Result<(), Error> {
        let now = Instant::now();
        let images = self.images_in_eviction_order(now).await?;
        let images = self.free_old_images(images, now, began).await?;
        let fs = self.stats.image_fs_stats().await?.ok_or(Error::NoImageFs)?;
        let capacity = fs
            .capacity_bytes
            .map_or(0, |c| i64::try_from(c).unwrap_or(i64::MAX));
        let mut available = fs
            .available_bytes
            .map_or(0, |a| i64::try_from(a).unwrap_or(i64::MAX));
        if available > capacity {
            tracing::info!(available, capacity, "Availability is larger than capacity");
            available = capacity;
        }
        if capacity == 0 {
            let e = Error::InvalidCapacity;
            self.events.event(
                &self.node,
                EventType::Warning,
                reasons::INVALID_DISK_CAPACITY,
                &e.to_string(),
            );
            return Err(e);
        }
        let usage = 100 - i32::try_from(available * 100 / capacity).unwrap_or(100);
        if usage < self.policy.high_threshold_percent {
            return Ok(());
        }
        let low = i64::from(self.policy.low_threshold_percent);
        let to_free = capacity * (100 - low) / 100 - available;
        tracing::info!(
            usage,
            high_threshold = self.policy.high_threshold_percent,
            amount_to_free = to_free,
            low_threshold = low,
            "Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold"
        );
        let freed = self.free_space(to_free, now, &images).await?;
        if freed < to_free {
            let e = Error::NotEnoughFreed {
                wanted: to_free,
                freed,
            };
            self.events.event(
                &self.node,
                EventType::Warning,
                reasons::FREE_DISK_SPACE_FAILED,
                &e.to_string(),
            );
            return Err(e);
        }
        Ok(())
    }

    /// Removes every image not in use and not pinned, whatever the usage (minimum age
    /// still applies); returns the bytes freed (upstream `DeleteUnusedImages`, the eviction
    /// manager's node-level reclaim).
    pub async fn delete_unused_images(&self) -> Result<i64, Error> {
        tracing::info!("Attempting to delete unused images");
        let now = Instant::now();
        let images = self.images_in_eviction_order(now).await?;
        self.free_space(i64::MAX, now, &images).await
    }

    /// Collects now and then every `period` until `token` is cancelled (upstream
    /// `StartGarbageCollection`'s image loop); does nothing when the policy is off. A failure
    /// is logged; a repeated one also recorded as an `ImageGCFailed` warning on the node.
    pub async fn run(self, period: Duration, token: CancellationToken) {
        if !self.policy.is_enabled() {
            tracing::info!(
                "ImageGCHighThresholdPercent is set 100 and ImageMaximumGCAge is 0, Disable image GC"
            );
            return;
        }
        let began = Instant::now();
        let mut failed_before = false;
        loop {
            let collected = tokio::select! {
                biased;
                () = token.cancelled() => return,
                r = self.garbage_collect(began) => r,
            };
            match collected {
                Err(error) if failed_before => {
                    tracing::error!(%error, "Image garbage collection failed multiple times in a row");
                    self.events.event(
                        &self.node,
                        EventType::Warning,
                        reasons::IMAGE_GC_FAILED,
                        &error.to_string(),
                    );
                }
                Err(error) => {
                    tracing::error!(%error, "Image garbage collection failed once. Stats initialization may not have completed yet");
                    failed_before = true;
                }
                Ok(()) if failed_before => {
                    tracing::info!("Image garbage collection succeeded");
                    failed_before = false;
                }
                Ok(()) => tracing::debug!("Image garbage collection succeeded"),
            }
            tokio::select! {
                biased;
                () = token.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
        }
    }
}

/// The eviction manager's node-level reclaim (upstream's image GC manager is its `ImageGC`).
#[async_trait::async_trait]
impl crate::eviction::ImageGC for ImageGcManager {
    async fn delete_unused_images(&self) -> Result<(), crate::eviction::reclaim::ReclaimError> {
        ImageGcManager::delete_unused_images(self)
            .await
            .map(|freed| tracing::info!(freed, "deleted unused images"))
            .map_err(Into::into)
    }
}

#[cfg(test)]
#[path = "image_gc_tests.rs"]
mod tests;
