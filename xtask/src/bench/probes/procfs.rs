//! What `/proc` says about the processes around the probes: their CPU time, and which
//! processes are the pods' containerd shims.

use std::{fs, path::Path};

use anyhow::{Context, Result};

/// Clock ticks per second of `/proc/PID/stat` (`USER_HZ`: 100 on every Linux ABI we run on).
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU seconds `pid` and the children it reaped have used (`utime + stime + cutime + cstime`).
pub(crate) fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("process {pid} is gone"))?;
    parse_cpu(&stat).with_context(|| format!("malformed /proc/{pid}/stat"))
}

/// `utime + stime + cutime + cstime` of a `/proc/PID/stat` line, in seconds. The command name
/// (field 2) may hold spaces and parentheses, so fields are counted after its last `)`.
fn parse_cpu(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state (3), ppid (4), …, utime (14), stime (15), cutime (16), cstime (17).
    let ticks: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    (ticks.len() == 4).then(|| ticks.iter().sum::<u64>() as f64 / TICKS_PER_SECOND)
}

/// The pids of the containerd shims serving `socket` (their command line names it).
pub(crate) fn shims(socket: &Path) -> Result<Vec<u32>> {
    let socket = socket.to_string_lossy();
    let mut out = Vec::new();
    for entry in fs::read_dir("/proc").context("cannot list /proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // Processes come and go while we look: skip what cannot be read.
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_shim = args.first().is_some_and(|a| {
            a.rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with("containerd-shim"))
        });
        if is_shim && args.iter().any(|a| *a == socket) {
            out.push(pid);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_of_proc_stat() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 1 0 5 0 0";
        assert_eq!(parse_cpu(stat), Some(3.1));
        assert_eq!(parse_cpu("42 (x) S 1"), None);
        assert!(cpu_seconds(std::process::id()).is_ok());
    }
}
