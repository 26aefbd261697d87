//! What every thread of a process is doing, from `/proc/<pid>/task/*` (Linux): name, state,
//! kernel wait channel, the syscall it is in, CPU time, the tracing spans it is in (for the
//! current process, see [`super::spans`]) and, where readable (root), its kernel stack.
//!
//! A blocked tokio worker shows up as e.g. `tokio-rt-worker state=S wchan=pipe_read
//! syscall=read(fd 17)` (reading a FIFO), `wchan=do_wait syscall=wait4` (waiting for a child
//! process) or state `R` with growing CPU time (a busy loop). Threads that look the same
//! (idle blocking-pool threads) are folded into one line.

// Reviewed (issue 16): procfs reads for a stall dump, made on the watchdog's own OS thread
// (or by a test harness), never on an async worker.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The threads of the current process (see the [module docs](self)).
pub fn dump_current() -> String {
    dump_dir(Path::new("/proc/self"), true)
}

/// The threads of process `pid`, e.g. a kubelet child process a test waited for in vain.
pub fn dump_process(pid: u32) -> String {
    dump_dir(&Path::new("/proc").join(pid.to_string()), false)
}

/// One thread, as read from `/proc`.
#[derive(Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Thread {
    name: String,
    state: String,
    wchan: String,
    syscall: String,
    spans: String,
    kernel_stack: Vec<String>,
}

fn dump_dir(proc_dir: &Path, own: bool) -> String {
    let tasks = match std::fs::read_dir(proc_dir.join("task")) {
        Ok(tasks) => tasks,
        Err(e) => return format!("  (cannot list {}: {e})\n", proc_dir.display()),
    };
    // The same thread description → its TIDs and CPU seconds.
    let mut groups: BTreeMap<Thread, Vec<(u32, f64)>> = BTreeMap::new();
    for task in tasks.flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<u32>().ok())
        else {
            continue;
        };
        let (thread, cpu) = read_thread(&task.path(), own.then_some(tid));
        groups.entry(thread).or_default().push((tid, cpu));
    }
    let mut out = String::new();
    for (thread, tids) in &groups {
        let ids: Vec<String> = tids.iter().map(|(tid, _)| tid.to_string()).collect();
        let cpu: f64 = tids.iter().map(|(_, cpu)| cpu).sum();
        let _ = write!(
            out,
            "  {} ×{} [{}] state={} wchan={} syscall={} cpu={cpu:.2}s",
            thread.name,
            tids.len(),
            ids.join(","),
            thread.state,
            thread.wchan,
            thread.syscall,
        );
        if !thread.spans.is_empty() {
            let _ = write!(out, " spans={}", thread.spans);
        }
        out.push('\n');
        for frame in &thread.kernel_stack {
            let _ = writeln!(out, "      {frame}");
        }
    }
    out
}

/// Reads one task directory; `own_tid` is set for a thread of this process (its spans are
/// known).
fn read_thread(dir: &Path, own_tid: Option<u32>) -> (Thread, f64) {
    let read = |file: &str| {
        std::fs::read_to_string(dir.join(file))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    let (state, cpu) = parse_stat(&read("stat")).unwrap_or_else(|| ("?".into(), 0.0));
    let wchan = match read("wchan") {
        w if w.is_empty() || w == "0" => "-".to_owned(),
        w => w,
    };
    let kernel_stack = read("stack")
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .take(8)
        .collect();
    let spans = own_tid.map(super::spans::of_thread).unwrap_or_default();
    let thread = Thread {
        name: read("comm"),
        state,
        wchan,
        syscall: describe_syscall(&read("syscall")),
        spans,
        kernel_stack,
    };
    (thread, cpu)
}

/// The state letter and the user + system CPU seconds from a `stat` line (the name in
/// parentheses may hold spaces and parentheses; the fields after the last `)` do not).
fn parse_stat(stat: &str) -> Option<(String, f64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = (*fields.first()?).to_owned();
    // Fields 14 and 15 of stat(5) (utime, stime) are the 12th and 13th after the name, in
    // USER_HZ ticks, which Linux exports as 100 per second.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    #[allow(clippy::cast_precision_loss)]
    Some((state, ticks as f64 / 100.0))
}

/// `/proc/<pid>/task/<tid>/syscall` in words: `running`, `-` (blocked outside a syscall, e.g.
/// a page fault) or the syscall's name and first argument.
fn describe_syscall(syscall: &str) -> String {
    let mut fields = syscall.split_whitespace();
    let Some(nr) = fields.next() else {
        return "?".into();
    };
    if nr == "running" {
        return nr.into();
    }
    let Ok(nr) = nr.parse::<i64>() else {
        return "?".into();
    };
    if nr < 0 {
        return "-".into();
    }
    let first = fields
        .next()
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    match syscall_name(nr) {
        Some(name) if takes_fd(name) => format!("{name}(fd {first})"),
        Some(name) => name.to_owned(),
        None => format!("#{nr}"),
    }
}

fn takes_fd(name: &str) -> bool {
    matches!(
        name,
        "read"
            | "write"
            | "pread64"
            | "pwrite64"
            | "readv"
            | "writev"
            | "ioctl"
            | "fsync"
            | "fdatasync"
            | "epoll_wait"
            | "epoll_pwait"
            | "flock"
            | "recvfrom"
            | "sendto"
            | "recvmsg"
            | "sendmsg"
            | "accept4"
            | "connect"
    )
}

/// The names of the syscalls a blocked thread is likely to be in.
fn syscall_name(nr: i64) -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    let arch_only: &[(i64, &str)] = &[
        (libc::SYS_open, "open"),
        (libc::SYS_poll, "poll"),
        (libc::SYS_select, "select"),
        (libc::SYS_epoll_wait, "epoll_wait"),
        (libc::SYS_pause, "pause"),
        (libc::SYS_stat, "stat"),
    ];
    #[cfg(not(target_arch = "x86_64"))]
    let arch_only: &[(i64, &str)] = &[];
    let common: &[(i64, &str)] = &[
        (libc::SYS_read, "read"),
        (libc::SYS_write, "write"),
        (libc::SYS_pread64, "pread64"),
        (libc::SYS_pwrite64, "pwrite64"),
        (libc::SYS_readv, "readv"),
        (libc::SYS_writev, "writev"),
        (libc::SYS_openat, "openat"),
        (libc::SYS_close, "close"),
        (libc::SYS_ioctl, "ioctl"),
        (libc::SYS_fsync, "fsync"),
        (libc::SYS_fdatasync, "fdatasync"),
        (libc::SYS_flock, "flock"),
        (libc::SYS_futex, "futex"),
        (libc::SYS_nanosleep, "nanosleep"),
        (libc::SYS_clock_nanosleep, "clock_nanosleep"),
        (libc::SYS_epoll_pwait, "epoll_pwait"),
        (libc::SYS_ppoll, "ppoll"),
        (libc::SYS_pselect6, "pselect6"),
        (libc::SYS_wait4, "wait4"),
        (libc::SYS_waitid, "waitid"),
        (libc::SYS_mount, "mount"),
        (libc::SYS_umount2, "umount2"),
        (libc::SYS_clone, "clone"),
        (libc::SYS_clone3, "clone3"),
        (libc::SYS_execve, "execve"),
        (libc::SYS_connect, "connect"),
        (libc::SYS_accept4, "accept4"),
        (libc::SYS_recvfrom, "recvfrom"),
        (libc::SYS_sendto, "sendto"),
        (libc::SYS_recvmsg, "recvmsg"),
        (libc::SYS_sendmsg, "sendmsg"),
        (libc::SYS_newfstatat, "newfstatat"),
        (libc::SYS_statx, "statx"),
        (libc::SYS_getdents64, "getdents64"),
        (libc::SYS_renameat, "renameat"),
        (libc::SYS_unlinkat, "unlinkat"),
        (libc::SYS_mkdirat, "mkdirat"),
        (libc::SYS_sched_yield, "sched_yield"),
    ];
    arch_only
        .iter()
        .chain(common)
        .find(|(n, _)| *n == nr)
        .map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_a_tricky_name() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 1 0 0";
        assert_eq!(parse_stat(stat), Some(("S".into(), 3.0)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn syscalls_in_words() {
        assert_eq!(describe_syscall("running"), "running");
        assert_eq!(describe_syscall("-1 0x7ffd 0x1"), "-");
        assert_eq!(
            describe_syscall(&format!(
                "{} 0x11 0x7f00 0x1000 0x0 0x0 0x0 0x7ffd 0x7f01",
                libc::SYS_read
            )),
            "read(fd 17)"
        );
        assert_eq!(
            describe_syscall(&format!("{} 0x7f00 0x0", libc::SYS_wait4)),
            "wait4"
        );
        assert_eq!(describe_syscall(""), "?");
    }

    #[test]
    fn dumps_this_process_with_a_sleeping_thread() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::Builder::new()
            .name("dump-test-slp".into())
            .spawn(move || {
                // The thread names itself as it starts: only now does /proc show the name.
                let _ = started_tx.send(());
                let _ = rx.recv();
            })
            .expect("a thread");
        started.recv().expect("the thread started");
        // Nothing tells when the thread is inside its futex wait: look until it is (each
        // look is a fresh dump; no line at all fails at once). A count of looks was too few
        // on a loaded machine (1 failure in 8 runs at load 20): look for up to a minute.
        let mut line = String::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            let dump = dump_current();
            line = dump
                .lines()
                .find(|l| l.contains("dump-test-slp"))
                .unwrap_or_else(|| panic!("no line for the thread in\n{dump}"))
                .to_owned();
            // `stat` and `syscall` are two reads: the state can say R while the syscall
            // read a moment later already says futex (CI saw it once). Wait for both.
            if line.contains("state=S") && line.contains("syscall=futex") {
                break;
            }
            std::thread::yield_now();
        }
        drop(tx);
        sleeper.join().expect("joined");
        assert!(line.contains("state=S"), "{line}");
        assert!(line.contains("syscall=futex"), "{line}");
    }
}
