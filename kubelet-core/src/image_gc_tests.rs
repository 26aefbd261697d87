//! Tests of the image garbage collector against a scripted runtime and image filesystem, on
//! a paused clock.

use std::sync::Mutex;

use super::*;
use crate::runtime::{ContainerSummary, MockRuntime, RunningPod};
use crate::stats::MockPodStatsProvider;
use crate::stats::v1alpha1::FsStats;
use crate::testing::CollectingRecorder;

const CAPACITY: u64 = 1000;

/// The node: images, what containers use, and bytes used outside images.
#[derive(Default)]
struct Disk {
    images: Vec<Image>,
    in_use: Vec<String>,
    other_bytes: u64,
    removed: Vec<String>,
    capacity: u64,
}

type Shared = Arc<Mutex<Disk>>;

fn image(id: &str, tag: &str, size: u64) -> Image {
    Image {
        id: id.to_owned(),
        repo_tags: vec![tag.to_owned()],
        size,
        ..Default::default()
    }
}

fn disk(other_bytes: u64) -> Shared {
    let mut pause = image("sha256:pause", "registry.k8s.io/pause:3.10", 50);
    pause.pinned = true;
    Arc::new(Mutex::new(Disk {
        images: vec![
            image("sha256:a", "example.com/a:1", 100),
            image("sha256:b", "example.com/b:1", 100),
            image("sha256:c", "example.com/c:1", 100),
            image("sha256:sandbox", "example.com/pause:3.9", 50),
            pause,
        ],
        other_bytes,
        capacity: CAPACITY,
        ..Disk::default()
    }))
}

fn lock(d: &Shared) -> std::sync::MutexGuard<'_, Disk> {
    d.lock().expect("lock")
}

fn manager(d: &Shared, policy: Policy) -> (ImageGcManager, CollectingRecorder) {
    let mut runtime = MockRuntime::new();
    let images = d.clone();
    runtime
        .expect_list_images()
        .returning(move || Ok(lock(&images).images.clone()));
    let pods = d.clone();
    runtime.expect_get_pods().returning(move |_| {
        let containers = lock(&pods)
            .in_use
            .iter()
            .map(|image| ContainerSummary {
                image: image.clone(),
                ..Default::default()
            })
            .collect();
        Ok(vec![RunningPod {
            containers,
            ..Default::default()
        }])
    });
    let removals = d.clone();
    runtime.expect_remove_image().returning(move |id| {
        let mut disk = lock(&removals);
        disk.images.retain(|i| i.id != id);
        disk.removed.push(id.to_owned());
        Ok(())
    });
    let mut stats = MockPodStatsProvider::new();
    let fs = d.clone();
    stats.expect_image_fs_stats().returning(move || {
        let disk = lock(&fs);
        let used = disk.other_bytes + disk.images.iter().map(|i| i.size).sum::<u64>();
        Ok(Some(FsStats {
            capacity_bytes: Some(disk.capacity),
            available_bytes: Some(disk.capacity.saturating_sub(used)),
            ..FsStats::default()
        }))
    });
    let events = CollectingRecorder::default();
    let gc = ImageGcManager::new(
        Arc::new(runtime),
        Arc::new(stats),
        policy,
        Arc::new(events.clone()),
        crate::events::node_ref("n"),
    )
    .expect("valid policy")
    .with_sandbox_image("example.com/pause:3.9");
    (gc, events)
}

fn removed(d: &Shared) -> Vec<String> {
    lock(d).removed.clone()
}

#[tokio::test(start_paused = true)]
async fn over_the_high_threshold_the_least_recently_used_go_down_to_the_low_threshold() {
    // 500 other + 400 images = 90 % used.
    let d = disk(500);
    lock(&d).in_use = vec!["example.com/b:1".into(), "sha256:c".into()];
    let (gc, events) = manager(&d, Policy::default());
    let metrics = crate::metrics::KubeletMetrics::default();
    let gc = gc.with_metrics(metrics.clone());
    let began = Instant::now();
    // Everything was just detected: younger than the minimum age, nothing goes.
    let err = gc
        .garbage_collect(began)
        .await
        .expect_err("nothing eligible");
    assert!(
        matches!(
            err,
            Error::NotEnoughFreed {
                wanted: 100,
                freed: 0
            }
        ),
        "{err}"
    );
    assert!(events.has(
        reasons::FREE_DISK_SPACE_FAILED,
        "Failed to garbage collect required amount of images. Attempted to free 100 bytes, but only found 0 bytes eligible to free."
    ));
    assert!(removed(&d).is_empty());
    // b stops being used; a was never used: a goes first, and 100 bytes are enough.
    tokio::time::advance(Duration::from_secs(3 * 60)).await;
    lock(&d).in_use = vec!["sha256:c".into()];
    gc.garbage_collect(began).await.expect("freed down to 80 %");
    assert_eq!(removed(&d), ["sha256:a"]);
    // Still at 80 %: under the high threshold, nothing more.
    gc.garbage_collect(began)
        .await
        .expect("under the threshold");
    assert_eq!(removed(&d), ["sha256:a"]);
    // 90 % again: b (the least recently used left) goes; c (in use), the pinned image and
    // the sandbox image never do.
    lock(&d).other_bytes = 600;
    gc.garbage_collect(began).await.expect("freed");
    assert_eq!(removed(&d), ["sha256:a", "sha256:b"]);
    assert_eq!(metrics.image_garbage_collected_total("space"), 2);
    assert_eq!(metrics.image_garbage_collected_total("age"), 0);
    lock(&d).other_bytes = 950;
    let err = gc
        .garbage_collect(began)
        .await
        .expect_err("nothing left to free");
    assert!(
        matches!(err, Error::NotEnoughFreed { freed: 0, .. }),
        "{err}"
    );
    assert_eq!(removed(&d), ["sha256:a", "sha256:b"]);
}

#[tokio::test(start_paused = true)]
async fn under_the_high_threshold_nothing_goes() {
    let d = disk(400); // 80 %
    let (gc, _) = manager(&d, Policy::default());
    let began = Instant::now();
    tokio::time::advance(Duration::from_secs(600)).await;
    gc.garbage_collect(began).await.expect("nothing to do");
    tokio::time::advance(Duration::from_secs(600)).await;
    gc.garbage_collect(began).await.expect("nothing to do");
    assert!(removed(&d).is_empty());
}

#[tokio::test(start_paused = true)]
async fn images_unused_for_longer_than_the_maximum_age_go_whatever_the_usage() {
    let d = disk(0);
    lock(&d).in_use = vec!["sha256:b".into()];
    let policy = Policy {
        max_age: Duration::from_secs(600),
        ..Policy::default()
    };
    let (gc, _) = manager(&d, policy);
    let metrics = crate::metrics::KubeletMetrics::default();
    let gc = gc.with_metrics(metrics.clone());
    let began = Instant::now();
    gc.garbage_collect(began).await.expect("gc");
    tokio::time::advance(Duration::from_secs(300)).await;
    gc.garbage_collect(began).await.expect("gc");
    assert!(
        removed(&d).is_empty(),
        "the kubelet has not run max_age yet"
    );
    lock(&d).in_use.clear();
    tokio::time::advance(Duration::from_secs(301)).await;
    gc.garbage_collect(began).await.expect("gc");
    // a and c were never used; b was last used 301 s ago.
    let mut gone = removed(&d);
    gone.sort();
    assert_eq!(gone, ["sha256:a", "sha256:c"]);
    assert_eq!(metrics.image_garbage_collected_total("age"), 2);
    tokio::time::advance(Duration::from_secs(300)).await;
    gc.garbage_collect(began).await.expect("gc");
    assert_eq!(removed(&d).len(), 3, "b is past the maximum age now");
}

#[tokio::test(start_paused = true)]
async fn a_zero_capacity_is_an_invalid_disk_capacity_event() {
    let d = disk(0);
    lock(&d).capacity = 0;
    let (gc, events) = manager(&d, Policy::default());
    let err = gc
        .garbage_collect(Instant::now())
        .await
        .expect_err("invalid");
    assert_eq!(err.to_string(), "invalid capacity 0 on image filesystem");
    assert!(events.has(
        reasons::INVALID_DISK_CAPACITY,
        "invalid capacity 0 on image filesystem"
    ));
}

#[tokio::test(start_paused = true)]
async fn delete_unused_images_removes_every_unused_unpinned_image_old_enough() {
    let d = disk(0);
    lock(&d).in_use = vec!["example.com/c:1".into()];
    let (gc, _) = manager(&d, Policy::default());
    assert_eq!(
        gc.delete_unused_images().await.expect("delete"),
        0,
        "too young"
    );
    tokio::time::advance(Duration::from_secs(121)).await;
    assert_eq!(gc.delete_unused_images().await.expect("delete"), 200);
    let mut gone = removed(&d);
    gone.sort();
    assert_eq!(gone, ["sha256:a", "sha256:b"]);
}

#[tokio::test(start_paused = true)]
async fn a_repeated_failure_is_an_image_gc_failed_event_and_off_means_no_loop() {
    let d = disk(0);
    lock(&d).capacity = 0;
    let (gc, events) = manager(&d, Policy::default());
    let token = CancellationToken::new();
    let task = tokio::spawn(gc.run(IMAGE_GC_PERIOD, token.clone()));
    tokio::time::sleep(IMAGE_GC_PERIOD / 2).await;
    assert_eq!(events.reasons(), [reasons::INVALID_DISK_CAPACITY]);
    tokio::time::sleep(IMAGE_GC_PERIOD).await;
    assert_eq!(
        events.reasons(),
        [
            reasons::INVALID_DISK_CAPACITY,
            reasons::INVALID_DISK_CAPACITY,
            reasons::IMAGE_GC_FAILED
        ]
    );
    token.cancel();
    task.await.expect("loop");

    let off = Policy {
        high_threshold_percent: 100,
        ..Policy::default()
    };
    assert!(!off.is_enabled());
    let (gc, events) = manager(&d, off);
    // Returns at once, without collecting.
    gc.run(IMAGE_GC_PERIOD, CancellationToken::new()).await;
    assert!(events.reasons().is_empty());
}

#[test]
fn the_policy_is_validated_as_upstream() {
    assert!(Policy::default().validate().is_ok());
    let p = |high, low| Policy {
        high_threshold_percent: high,
        low_threshold_percent: low,
        ..Policy::default()
    };
    assert_eq!(
        p(101, 80).validate().expect_err("high").to_string(),
        "invalid HighThresholdPercent 101, must be in range [0-100]"
    );
    assert_eq!(
        p(85, -1).validate().expect_err("low").to_string(),
        "invalid LowThresholdPercent -1, must be in range [0-100]"
    );
    assert_eq!(
        p(80, 85).validate().expect_err("order").to_string(),
        "LowThresholdPercent 85 can not be higher than HighThresholdPercent 80"
    );
}
