//! Gives the heap the kubelet has freed back to the kernel (glibc malloc).
//!
//! glibc returns memory to the kernel only from the top of an arena, so what a burst frees
//! in the middle (a batch of pods started, then deleted: the pod copies of every
//! config update, sync and status write) stays resident: after 110 API pods came and went,
//! 3.0 MiB of the heap was in use and 14.3 MiB held. Upstream's kubelet is a Go program,
//! whose runtime returns such memory with its background scavenger; this is the Rust
//! kubelet's: every [`PERIOD`] it reads how much the allocator holds free (`mallinfo2`) and,
//! once [`THRESHOLD`] more than after its last trim, calls `malloc_trim(0)`, which hands the
//! free pages of every arena back (`MADV_DONTNEED`). Idle, it costs one `mallinfo2` call
//! every two seconds. Other C libraries: nothing to do.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often the allocator's free memory is looked at (upstream's housekeeping period).
pub(crate) const PERIOD: Duration = Duration::from_secs(2);

/// How much newly freed memory makes a trim worth its syscalls.
pub(crate) const THRESHOLD: usize = 1 << 20;

/// When to trim, from the allocator's free bytes over time.
#[derive(Debug, Default)]
struct Trigger {
    /// Free bytes right after the last trim: those pages are back with the kernel already.
    released: usize,
}

impl Trigger {
    /// `true` when `free` bytes are held free and at least [`THRESHOLD`] of them were freed
    /// since the last trim. Free memory that was allocated again since is resident again,
    /// so the mark follows `free` down.
    fn due(&mut self, free: usize) -> bool {
        self.released = self.released.min(free);
        free >= self.released + THRESHOLD
    }

    /// Notes a trim with `free` bytes held free.
    fn trimmed(&mut self, free: usize) {
        self.released = free;
    }
}

/// `malloc_trim(0)` now: gives every free page of the heap back ([`crate::idle_trim`] calls it
/// once the kubelet has gone quiet, whatever the threshold says).
pub(crate) fn trim_now() {
    glibc::trim();
}

/// Trims every [`PERIOD`] when due, until `token` is cancelled.
pub(crate) async fn run(token: CancellationToken) {
    let mut trigger = Trigger::default();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(free) = glibc::free_bytes() else {
            return;
        };
        if trigger.due(free) {
            glibc::trim();
            tracing::trace!(free, "heap trimmed");
            trigger.trimmed(free);
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod glibc {
    /// Bytes the allocator holds in free chunks (`mallinfo2().fordblks`).
    pub(super) fn free_bytes() -> Option<usize> {
        // SAFETY: `mallinfo2` only reads the allocator's statistics (under its arena locks)
        // and returns them by value.
        Some(unsafe { libc::mallinfo2() }.fordblks)
    }

    /// `malloc_trim(0)`: releases the free pages of every arena.
    pub(super) fn trim() {
        // SAFETY: `malloc_trim` takes the arena locks itself; it only gives free pages back
        // and its return value (whether any were) needs no handling.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod glibc {
    pub(super) fn free_bytes() -> Option<usize> {
        None
    }

    pub(super) fn trim() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_is_due_once_a_threshold_more_is_free() {
        let mut t = Trigger::default();
        assert!(!t.due(THRESHOLD - 1), "too little free");
        assert!(t.due(THRESHOLD));
        t.trimmed(5 * THRESHOLD);
        assert!(!t.due(5 * THRESHOLD), "nothing freed since");
        assert!(!t.due(6 * THRESHOLD - 1));
        assert!(t.due(6 * THRESHOLD));
    }

    #[test]
    fn memory_allocated_again_counts_when_freed_again() {
        let mut t = Trigger::default();
        t.trimmed(8 * THRESHOLD);
        // The free pages were reused (resident again), then freed again.
        assert!(!t.due(2 * THRESHOLD));
        assert!(t.due(3 * THRESHOLD));
    }

    /// Resident anonymous memory of this process, in KiB.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn rss_anon_kib() -> u64 {
        crate::idle_trim::own_status_kib("RssAnon:").expect("RssAnon")
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_trim_gives_freed_heap_back() {
        // 32 MiB in small blocks (below the mmap threshold), all freed but the last one,
        // which pins the arena's top so that free() alone returns nothing.
        let mut blocks: Vec<Vec<u8>> = (0..8192).map(|_| vec![1u8; 4096]).collect();
        let pin = blocks.pop();
        let free_before = glibc::free_bytes().expect("glibc");
        drop(blocks);
        let free = glibc::free_bytes().expect("glibc");
        assert!(free >= free_before + 16 * THRESHOLD, "{free} bytes free");
        let held = rss_anon_kib();
        glibc::trim();
        let trimmed = rss_anon_kib();
        drop(pin);
        assert!(
            held.saturating_sub(trimmed) >= 16 * 1024,
            "RssAnon {held} KiB before malloc_trim, {trimmed} KiB after"
        );
    }
}
