//! Gives memory back to the kernel once the kubelet has gone quiet after a burst: the free
//! pages of its heap and the pages of its own code.
//!
//! Most of the idle kubelet's RSS is file-backed: the pages of its executable that ran. A
//! burst (start-up, a batch of pods started and deleted) runs far more code than idle does,
//! and the kernel keeps every page it faulted in mapped until memory runs short: after the
//! bench's batches, 11.1 MiB of the kubelet's code stayed resident where idle needs about
//! 6.5 MiB. The pages are clean copies of the file, so nothing is lost by dropping them.
//!
//! Every [`PERIOD`] this reads the process's CPU time and file-backed RSS. Once the kubelet
//! has used less than [`QUIET_CPU`] per period for [`QUIET_FOR`], and its file-backed RSS is
//! [`THRESHOLD`] above where it settled after the last trim (or, after a burst, above the
//! lowest level it ever settled at: 110 steady pods count as quiet, and what they needed
//! must not stay once they are gone), it calls `malloc_trim(0)` (the
//! periodic heap trim leaves up to its threshold behind, 1.75 MiB in one bench run) and asks
//! the kernel to reclaim the executable's read-only mappings (`madvise(MADV_PAGEOUT)`, Linux
//! 5.4). What idle still runs faults straight back in, mostly without I/O (the page cache
//! keeps the file's pages); the next burst faults in the rest. Start-up counts as a burst.
//! Upstream's kubelet is a Go program with no such step; its scavenger returns heap memory in
//! the background, as [`crate::heap_trim`] does here.

use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often CPU time and RSS are read (the heap trim's period).
pub(crate) const PERIOD: Duration = crate::heap_trim::PERIOD;

/// CPU time per [`PERIOD`] under which the kubelet counts as quiet: 1 % of a core. Idle, it
/// uses about 0.15 %; a pod start or a probe round uses more.
pub(crate) const QUIET_CPU: Duration = Duration::from_millis(20);

/// How long the kubelet must stay quiet before a trim, and after a trim before the
/// file-backed RSS that idle needs is taken as the new mark.
pub(crate) const QUIET_FOR: Duration = Duration::from_secs(10);

/// How much file-backed RSS above the mark makes a trim worth the faults that follow it.
pub(crate) const THRESHOLD: u64 = 1 << 20;

/// Quiet periods in [`QUIET_FOR`].
const QUIET_PERIODS: u32 = (QUIET_FOR.as_millis() / PERIOD.as_millis()) as u32;

/// When to trim, from each period's CPU time and the file-backed RSS at its end.
#[derive(Debug)]
struct Trigger {
    /// Quiet periods in a row.
    quiet: u32,
    /// File-backed RSS that idle needs: measured [`QUIET_FOR`] after a trim; 0 before the
    /// first one, so that start-up's code goes too.
    mark: u64,
    /// The lowest mark so far: what idle needs with the least work (no pods, usually).
    floor: u64,
    /// A trim happened and the mark is not measured yet.
    settling: bool,
    /// A busy period since the last trim.
    burst: bool,
}

impl Default for Trigger {
    fn default() -> Trigger {
        Trigger {
            quiet: 0,
            mark: 0,
            floor: u64::MAX,
            settling: false,
            burst: false,
        }
    }
}

impl Trigger {
    /// Takes one period's `cpu` time and the `rss_file` bytes at its end; `true` when a trim
    /// is due: quiet for [`QUIET_FOR`] with [`THRESHOLD`] more than the mark, or, after a
    /// burst, more than the floor. The floor matters when the mark was measured under a
    /// heavier steady load (pods that have gone since): their code would otherwise stay.
    fn due(&mut self, cpu: Duration, rss_file: u64) -> bool {
        if cpu >= QUIET_CPU {
            // A burst: what it faults in is trimmed once it is over.
            self.quiet = 0;
            self.settling = false;
            self.burst = true;
            return false;
        }
        self.quiet = self.quiet.saturating_add(1);
        if self.quiet < QUIET_PERIODS {
            return false;
        }
        if self.settling {
            self.settling = false;
            self.mark = rss_file;
            self.floor = self.floor.min(rss_file);
            return false;
        }
        self.mark = self.mark.min(rss_file);
        let after_burst =
            std::mem::take(&mut self.burst) && rss_file >= self.floor.saturating_add(THRESHOLD);
        after_burst || rss_file >= self.mark + THRESHOLD
    }

    /// Notes a trim: the mark is measured once the kubelet has been quiet again.
    fn trimmed(&mut self) {
        self.quiet = 0;
        self.settling = true;
        self.burst = false;
    }
}

/// Trims the heap and the code every [`PERIOD`] when due, until `token` is cancelled. Stops
/// for good when the kernel refuses (older than 5.4) or the executable's mappings cannot be
/// found.
pub(crate) async fn run(token: CancellationToken) {
    let Some(code) = own_code() else {
        tracing::debug!("idle trim off: the executable's mappings were not found");
        return;
    };
    let mut trigger = Trigger::default();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + PERIOD, PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut cpu_before = cpu_time();
    loop {
        tokio::select! {
            biased;
            () = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        let (Some(cpu), Some(rss_file)) = (cpu_time(), own_status_kib("RssFile:")) else {
            return;
        };
        let period = cpu.saturating_sub(cpu_before.unwrap_or(cpu));
        cpu_before = Some(cpu);
        if !trigger.due(period, rss_file * 1024) {
            continue;
        }
        let ranges = code.clone();
        let trim = move || {
            crate::heap_trim::trim_now();
            page_out(&ranges)
        };
        match tokio::task::spawn_blocking(trim).await {
            Ok(Ok(())) => {
                tracing::debug!(
                    rss_file_kib = rss_file,
                    after_kib = own_status_kib("RssFile:"),
                    "heap trimmed and code pages given back"
                );
                trigger.trimmed();
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, "idle trim off: madvise(MADV_PAGEOUT) refused");
                return;
            }
            Err(_) => return,
        }
    }
}

/// Address ranges of the running executable's read-only mappings (code and constants).
fn own_code() -> Option<Vec<Range<usize>>> {
    let exe = std::fs::read_link("/proc/self/exe").ok()?;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let ranges = read_only_mappings(&maps, &exe);
    (!ranges.is_empty()).then_some(ranges)
}

/// The ranges of `maps` (the format of `/proc/<pid>/maps`) that map `file` without write
/// permission.
fn read_only_mappings(maps: &str, file: &Path) -> Vec<Range<usize>> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let range = fields.next()?;
            let perms = fields.next()?;
            let path = fields.nth(3)?.trim_start();
            if perms.contains('w') || Path::new(path) != file {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(usize::from_str_radix(start, 16).ok()?..usize::from_str_radix(end, 16).ok()?)
        })
        .collect()
}

/// A `kB` field of `/proc/self/status`, such as `RssFile:`.
pub(crate) fn own_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status_kib(&status, field)
}

fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The process's CPU time, user and system.
fn cpu_time() -> Option<Duration> {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let micros = |t: nix::sys::time::TimeVal| {
        u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000 + u64::try_from(t.tv_usec()).unwrap_or(0)
    };
    Some(Duration::from_micros(
        micros(usage.user_time()) + micros(usage.system_time()),
    ))
}

/// `madvise(MADV_PAGEOUT)` over `ranges`: the kernel drops this process's mappings of their
/// pages and reclaims the pages no other process maps.
#[allow(unsafe_code)]
fn page_out(ranges: &[Range<usize>]) -> nix::Result<()> {
    use nix::sys::mman::{MmapAdvise, madvise};
    for range in ranges {
        let Some(start) = std::ptr::NonNull::new(range.start as *mut std::ffi::c_void) else {
            continue;
        };
        // SAFETY: the range is a read-only file mapping of this process's executable, from
        // /proc/self/maps, which the process never unmaps. MADV_PAGEOUT only drops clean
        // page-cache pages from it, which the next access reads back from the same file
        // (which is not writable while it runs: ETXTBSY); the memory's contents are unchanged.
        unsafe { madvise(start, range.len(), MmapAdvise::MADV_PAGEOUT)? };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn quiet() -> Duration {
        QUIET_CPU / 4
    }

    /// Feeds quiet periods until the trigger fires or `limit` periods have passed.
    fn quiet_periods_until_due(t: &mut Trigger, rss: u64, limit: u32) -> Option<u32> {
        (1..=limit).find(|_| t.due(quiet(), rss))
    }

    /// A trigger past its start-up trim, with idle settled at `idle` bytes.
    fn settled_at(idle: u64) -> Trigger {
        let mut t = Trigger::default();
        assert!(quiet_periods_until_due(&mut t, 12 * MIB, 100).is_some());
        t.trimmed();
        assert_eq!(quiet_periods_until_due(&mut t, idle, 100), None);
        t
    }

    #[test]
    fn start_up_code_is_trimmed_once_quiet_for_long_enough() {
        let mut t = Trigger::default();
        assert_eq!(
            quiet_periods_until_due(&mut t, 12 * MIB, 100),
            Some(QUIET_PERIODS)
        );
    }

    #[test]
    fn a_busy_period_restarts_the_wait() {
        let mut t = Trigger::default();
        for _ in 1..QUIET_PERIODS {
            assert!(!t.due(quiet(), 12 * MIB));
        }
        assert!(!t.due(QUIET_CPU, 12 * MIB), "busy");
        assert_eq!(
            quiet_periods_until_due(&mut t, 12 * MIB, 100),
            Some(QUIET_PERIODS)
        );
    }

    #[test]
    fn idle_code_that_faults_back_is_not_trimmed_again() {
        let mut t = Trigger::default();
        assert!(quiet_periods_until_due(&mut t, 12 * MIB, 100).is_some());
        t.trimmed();
        // Idle faults 7 MiB back: that is the mark, not a reason to trim.
        assert_eq!(quiet_periods_until_due(&mut t, 7 * MIB, 1000), None);
        assert_eq!(t.mark, 7 * MIB);
    }

    #[test]
    fn a_burst_after_the_mark_is_trimmed_once_it_is_over() {
        let mut t = settled_at(7 * MIB);
        assert!(!t.due(QUIET_CPU * 10, 11 * MIB), "burst");
        assert!(quiet_periods_until_due(&mut t, 7 * MIB + THRESHOLD - 1, 100).is_none());
        assert!(!t.due(QUIET_CPU * 10, 11 * MIB), "burst");
        assert_eq!(
            quiet_periods_until_due(&mut t, 11 * MIB, 100),
            Some(QUIET_PERIODS)
        );
    }

    #[test]
    fn code_a_heavier_steady_load_kept_is_trimmed_once_its_pods_are_gone() {
        let mut t = settled_at(5 * MIB);
        // 110 pods running steadily, quiet by the CPU rule: their code is trimmed once and
        // what they need becomes the mark.
        assert!(quiet_periods_until_due(&mut t, 12 * MIB, 100).is_some());
        t.trimmed();
        assert_eq!(
            quiet_periods_until_due(&mut t, 11 * MIB + MIB / 2, 100),
            None
        );
        assert_eq!(t.mark, 11 * MIB + MIB / 2);
        // The pods are deleted (a burst), less than the threshold above that mark...
        assert!(!t.due(QUIET_CPU * 10, 12 * MIB), "burst");
        // ...but far above what idle with no pods needed: trimmed.
        assert_eq!(
            quiet_periods_until_due(&mut t, 12 * MIB, 100),
            Some(QUIET_PERIODS)
        );
    }

    #[test]
    fn a_burst_while_settling_keeps_the_old_mark() {
        let mut t = settled_at(7 * MIB);
        assert!(quiet_periods_until_due(&mut t, 11 * MIB, 100).is_some());
        t.trimmed();
        // The next burst starts before idle settled: its code still goes afterwards.
        assert!(!t.due(QUIET_CPU, 11 * MIB));
        assert_eq!(
            quiet_periods_until_due(&mut t, 11 * MIB, 100),
            Some(QUIET_PERIODS)
        );
    }

    #[test]
    fn finds_the_executable_read_only_mappings() {
        let maps = "\
55d0c0000000-55d0c0100000 r--p 00000000 fe:00 123  /usr/bin/kubelet
55d0c0100000-55d0c0900000 r-xp 00100000 fe:00 123  /usr/bin/kubelet
55d0c0900000-55d0c0a00000 rw-p 00900000 fe:00 123  /usr/bin/kubelet
55d0c0a00000-55d0c0b00000 rw-p 00000000 00:00 0    [heap]
7f0000000000-7f0000100000 r-xp 00000000 fe:00 456  /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000200000-7f0000300000 r-xp 00000000 fe:00 789  /usr/bin/kubelet (deleted)
";
        assert_eq!(
            read_only_mappings(maps, Path::new("/usr/bin/kubelet")),
            vec![
                0x55d0c0000000..0x55d0c0100000,
                0x55d0c0100000..0x55d0c0900000
            ]
        );
        assert!(read_only_mappings(maps, Path::new("/usr/bin/other")).is_empty());
    }

    #[test]
    fn parses_status_fields() {
        let status = "Name:\tkubelet\nRssAnon:\t    6104 kB\nRssFile:\t   15368 kB\n";
        assert_eq!(status_kib(status, "RssFile:"), Some(15368));
        assert_eq!(status_kib(status, "RssAnon:"), Some(6104));
        assert_eq!(status_kib(status, "RssShmem:"), None);
    }

    #[test]
    fn cpu_time_grows_with_work() {
        let before = cpu_time().expect("getrusage");
        let mut x = 0u64;
        while cpu_time().expect("getrusage") < before + Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(x > 0);
    }

    /// Resident bytes of the test binary's read-only mappings, from /proc/self/smaps.
    fn resident_code_kib(code: &[Range<usize>]) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("own smaps");
        let mut inside = false;
        let mut kib = 0;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((start, _)) = range.split_once('-')
                && let Ok(start) = usize::from_str_radix(start, 16)
            {
                inside = code.iter().any(|r| r.start == start);
            } else if inside && let Some(v) = status_kib(line, "Rss:") {
                kib += v;
            }
        }
        kib
    }

    #[test]
    fn a_trim_gives_resident_code_back() {
        let code = own_code().expect("the test binary's mappings");
        let before = resident_code_kib(&code);
        page_out(&code).expect("MADV_PAGEOUT");
        let after = resident_code_kib(&code);
        assert!(
            before >= 1024 && after * 2 < before,
            "resident code {before} KiB before the trim, {after} KiB after"
        );
    }
}
