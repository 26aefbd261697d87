//! The stall rule on scripted samples, and the watchdog on a real runtime with a blocked
//! worker.

use super::*;

fn sample(park_unpark: u64, busy_ms: u64) -> Sample {
    Sample {
        park_unpark,
        busy: Duration::from_millis(busy_ms),
    }
}

const T: Duration = Duration::from_secs(5);

#[test]
fn a_busy_worker_that_publishes_nothing_is_stalled_after_the_threshold() {
    let start = Instant::now();
    let mut detector = Detector::new(T);
    let idle = sample(3, 10);
    let stuck = sample(4, 10);
    assert_eq!(detector.observe(start, &[idle, stuck]), None);
    assert_eq!(
        detector.observe(start + T - Duration::from_millis(1), &[idle, stuck]),
        None
    );
    assert_eq!(
        detector.observe(start + T, &[idle, stuck]),
        Some(Stall {
            worker: 1,
            stalled_for: T
        })
    );
    // It publishes again: no stall.
    assert_eq!(
        detector.observe(start + T * 2, &[idle, sample(4, 20)]),
        None
    );
}

#[test]
fn a_parked_worker_is_never_stalled() {
    let start = Instant::now();
    let mut detector = Detector::new(T);
    let parked = sample(7, 10);
    detector.observe(start, &[parked]);
    assert_eq!(detector.observe(start + T * 10, &[parked]), None);
}

#[test]
fn the_longest_stalled_worker_is_reported() {
    let start = Instant::now();
    let mut detector = Detector::new(T);
    detector.observe(start, &[sample(2, 1), sample(1, 1)]);
    detector.observe(start + T, &[sample(2, 1), sample(2, 1)]);
    let stall = detector.observe(start + T * 3, &[sample(2, 1), sample(2, 1)]);
    assert_eq!(
        stall,
        Some(Stall {
            worker: 0,
            stalled_for: T * 3
        })
    );
    assert_eq!(
        stall.map(|s| s.to_string()).as_deref(),
        Some("async runtime worker 0 has made no progress for 15.0s")
    );
}

/// The acceptance check in small: a worker blocked in a synchronous sleep is reported, and
/// the health is fine again once it returns.
#[test]
fn a_blocked_worker_fails_the_health_until_it_returns() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let config = Config {
        threshold: Duration::from_millis(300),
        check_every: Duration::from_millis(20),
    };
    let watchdog = Watchdog::start(runtime.handle(), config).expect("started");
    let health = watchdog.health();
    let (release, released) = std::sync::mpsc::channel::<()>();
    runtime.spawn(async move {
        // Deliberately blocking: what the watchdog is for.
        let _ = released.recv();
    });
    // Wait (on this thread, outside the runtime) for the health to fail; a generous bound
    // so a watchdog that never fires fails the test instead of hanging it.
    let mut looks = 0;
    let stall = loop {
        if let Err(stall) = health.check() {
            break stall;
        }
        looks += 1;
        assert!(looks < 500, "no stall seen in 10 s");
        std::thread::sleep(config.check_every);
    };
    assert!(stall.stalled_for >= config.threshold, "{stall:?}");
    drop(release);
    let mut looks = 0;
    while health.check().is_err() {
        looks += 1;
        assert!(looks < 500, "still stalled 10 s after the release");
        std::thread::sleep(config.check_every);
    }
    drop(watchdog);
}

#[test]
fn a_current_thread_runtime_is_not_watched() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let watchdog = Watchdog::start(runtime.handle(), Config::default()).expect("started");
    assert!(watchdog.health().check().is_ok());
}
