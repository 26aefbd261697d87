//! Memory of a process: `VmRSS` and its anonymous and file-backed parts (`RssAnon`,
//! `RssFile`) from `/proc/PID/status`, `Pss` from `/proc/PID/smaps_rollup`, and the resident
//! pages of its own executable from `/proc/PID/smaps`.

use std::fs;

use anyhow::{Context, Result};
use serde_json::{Value, json};

/// One memory sample, in KiB.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mem {
    /// Resident set size (`VmRSS`).
    pub(crate) rss_kib: u64,
    /// Proportional set size (`Pss` of `smaps_rollup`): shared pages divided among sharers.
    pub(crate) pss_kib: u64,
    /// Resident anonymous memory (`RssAnon`): the heap, stacks; what an allocator can return.
    pub(crate) anon_kib: u64,
    /// Resident file-backed memory (`RssFile`): the pages of the binary and the libraries
    /// that were touched.
    pub(crate) file_kib: u64,
    /// Of the file-backed pages, those of the process's own executable (its code and
    /// read-only data; the rest are shared libraries).
    pub(crate) exe_kib: u64,
}

impl Mem {
    /// As JSON, in KiB.
    pub(crate) fn to_json(self) -> Value {
        json!({
            "rss_kib": self.rss_kib,
            "pss_kib": self.pss_kib,
            "anon_kib": self.anon_kib,
            "file_kib": self.file_kib,
            "exe_kib": self.exe_kib,
        })
    }
}

/// The `<key>: <n> kB` value in a `/proc` file's text.
fn field_kib(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// The summed `Rss` of the mappings of `path` in a `/proc/PID/smaps` text.
fn mapped_rss_kib(smaps: &str, path: &str) -> u64 {
    let mut total = 0;
    let mut in_path = false;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // A mapping's header: `start-end perms offset dev inode [path]`.
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            in_path = fields.get(5) == Some(&path);
        } else if in_path && let Some(kib) = field_kib(line, "Rss") {
            total += kib;
        }
    }
    total
}

/// Samples `pid`'s memory now.
pub(crate) fn sample(pid: u32) -> Result<Mem> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("process {pid} is gone"))?;
    let rollup = fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .with_context(|| format!("cannot read /proc/{pid}/smaps_rollup"))?;
    Ok(Mem {
        rss_kib: field_kib(&status, "VmRSS").context("no VmRSS")?,
        pss_kib: field_kib(&rollup, "Pss").context("no Pss")?,
        anon_kib: field_kib(&status, "RssAnon").context("no RssAnon")?,
        file_kib: field_kib(&status, "RssFile").context("no RssFile")?,
        exe_kib: match (
            fs::read_link(format!("/proc/{pid}/exe")),
            fs::read_to_string(format!("/proc/{pid}/smaps")),
        ) {
            (Ok(exe), Ok(smaps)) => mapped_rss_kib(&smaps, &exe.to_string_lossy()),
            _ => 0,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_fields() {
        let text = "Rss:                5000 kB\nPss:                4096 kB\nPss_Anon:   10 kB\n";
        assert_eq!(field_kib(text, "Pss"), Some(4096));
        assert_eq!(field_kib(text, "Rss"), Some(5000));
        assert_eq!(field_kib(text, "VmRSS"), None);
    }

    #[test]
    fn sums_the_rss_of_one_files_mappings() {
        let smaps = "\
55d0-55d1 r--p 00000000 fe:01 42 /usr/bin/kubelet
Size:                 64 kB
Rss:                  12 kB
55d1-55d2 r-xp 00010000 fe:01 42 /usr/bin/kubelet
Rss:                  30 kB
7f00-7f01 r-xp 00000000 fe:01 7 /usr/lib/libc.so.6
Rss:                 100 kB
7f02-7f03 rw-p 00000000 00:00 0
Rss:                   8 kB
";
        assert_eq!(mapped_rss_kib(smaps, "/usr/bin/kubelet"), 42);
        assert_eq!(mapped_rss_kib(smaps, "/usr/lib/libc.so.6"), 100);
    }

    #[test]
    fn samples_this_process() {
        let mem = sample(std::process::id()).expect("own memory");
        assert!(mem.rss_kib > 0 && mem.pss_kib > 0);
        assert!(mem.anon_kib > 0 && mem.file_kib > 0);
        assert!(mem.anon_kib + mem.file_kib <= mem.rss_kib);
        assert!(mem.exe_kib > 0 && mem.exe_kib <= mem.file_kib);
    }
}
