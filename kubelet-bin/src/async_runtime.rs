//! The tokio runtime the kubelet runs on.
//!
//! One worker thread per core (tokio's default) and a blocking pool for the file system,
//! cgroupfs, mount and `/proc` work the libraries move off the workers (issue 16). A burst
//! of pods can have dozens of those calls in flight at once, each on its own pool thread;
//! tokio keeps an idle pool thread for 10 s by default, and with its stack and allocator
//! caches each holds memory: 78 of them were still alive 5 s after a batch of 110 pods, about
//! 8 MiB of the kubelet's anonymous RSS (issue 17). [`BLOCKING_THREAD_KEEP_ALIVE`] lets them go
//! sooner, and the pool starts threads again when work comes: in `cargo xtask bench --memory`
//! the kubelet's CPU time per pod stayed the same (25.3–26.9 ms in three runs, 25.4 ms before)
//! while its anonymous RSS after the bench fell from 18–20 to 10–11 MiB.

use std::time::Duration;

/// How long an idle blocking-pool thread waits for more work before it exits.
pub(crate) const BLOCKING_THREAD_KEEP_ALIVE: Duration = Duration::from_secs(1);

/// The kubelet's multi-thread runtime, ready to build.
pub(crate) fn builder() -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .enable_all()
        .thread_keep_alive(BLOCKING_THREAD_KEEP_ALIVE);
    builder
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};
    use std::time::Instant;

    use super::*;

    /// Threads of this process whose name is `name` (from `/proc/self/task/*/comm`).
    fn threads_named(name: &str) -> usize {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return 0;
        };
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim_end() == name)
            .count()
    }

    #[test]
    fn idle_blocking_threads_exit_after_the_keep_alive() {
        // A name no other test's runtime uses, so only this runtime's threads are counted.
        const NAME: &str = "keepalive-test";
        const WORKERS: usize = 1;
        let runtime = builder()
            .worker_threads(WORKERS)
            .thread_name(NAME)
            .build()
            .expect("runtime");
        const BURST: usize = 8;
        let all_running = Arc::new(Barrier::new(BURST));
        runtime.block_on(async {
            let calls: Vec<_> = (0..BURST)
                .map(|_| {
                    let all_running = all_running.clone();
                    tokio::task::spawn_blocking(move || {
                        all_running.wait();
                    })
                })
                .collect();
            for call in calls {
                call.await.expect("blocking call");
            }
        });
        assert!(
            threads_named(NAME) >= WORKERS + BURST,
            "one pool thread per call in flight"
        );

        // tokio's default keep-alive is 10 s: a pool that still holds them at 8 s did not get
        // the setting.
        let deadline = Instant::now() + Duration::from_secs(8);
        while threads_named(NAME) > WORKERS {
            assert!(
                Instant::now() < deadline,
                "{} blocking threads still alive after 8 s",
                threads_named(NAME) - WORKERS
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
