//! The process metrics of Go's process collector (client_golang
//! `prometheus/process_collector_procfs.go`), read from `/proc/self` at each scrape:
//! `process_cpu_seconds_total`, `process_open_fds`, `process_max_fds`,
//! `process_virtual_memory_bytes`, `process_virtual_memory_max_bytes`,
//! `process_resident_memory_bytes`, `process_start_time_seconds`.
//!
//! Like the Go collector (procfs' `userHZ`), CPU times and the start time are read in ticks of
//! 1/100 s. A value that cannot be read is left out of the scrape.

use std::path::PathBuf;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second of `/proc/<pid>/stat` (procfs `userHZ`).
const USER_HZ: f64 = 100.0;

/// What procfs reports for an unlimited resource (`RLIM_INFINITY` as a float).
const UNLIMITED: f64 = u64::MAX as f64;

/// Go's process collector over a `/proc/<pid>` directory.
#[derive(Debug)]
pub struct ProcessCollector {
    proc_dir: PathBuf,
    proc_root: PathBuf,
}

impl Default for ProcessCollector {
    /// This process (`/proc/self`).
    fn default() -> Self {
        Self {
            proc_dir: PathBuf::from("/proc/self"),
            proc_root: PathBuf::from("/proc"),
        }
    }
}

/// One scrape's readings.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Readings {
    pub cpu_seconds: Option<f64>,
    pub open_fds: Option<i64>,
    pub max_fds: Option<f64>,
    pub virtual_memory_bytes: Option<f64>,
    pub virtual_memory_max_bytes: Option<f64>,
    pub resident_memory_bytes: Option<f64>,
    pub start_time_seconds: Option<f64>,
}

/// The fields of `stat` after the command's closing parenthesis (field 3 onward).
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// A `limits` row's soft limit (`unlimited` as procfs reports it).
fn soft_limit(limits: &str, name: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with(name))?;
    let soft = line[name.len()..].split_whitespace().next()?;
    if soft == "unlimited" {
        Some(UNLIMITED)
    } else {
        soft.parse().ok()
    }
}

impl ProcessCollector {
    pub(crate) fn read(&self) -> Readings {
        let stat = std::fs::read_to_string(self.proc_dir.join("stat")).unwrap_or_default();
        let fields = stat_fields(&stat).unwrap_or_default();
        let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
        let boot_time = std::fs::read_to_string(self.proc_root.join("stat"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("btime "))
                    .and_then(|v| v.trim().parse::<f64>().ok())
            });
        let limits = std::fs::read_to_string(self.proc_dir.join("limits")).unwrap_or_default();
        let rss_kib = std::fs::read_to_string(self.proc_dir.join("status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            });
        let open_fds = std::fs::read_dir(self.proc_dir.join("fd"))
            .ok()
            .map(|dir| i64::try_from(dir.count()).unwrap_or(i64::MAX));
        Readings {
            cpu_seconds: field(14)
                .zip(field(15))
                .map(|(user, system)| (user + system) / USER_HZ),
            open_fds,
            max_fds: soft_limit(&limits, "Max open files"),
            virtual_memory_bytes: field(23),
            virtual_memory_max_bytes: soft_limit(&limits, "Max address space"),
            resident_memory_bytes: rss_kib.map(|k| k * 1024.0),
            start_time_seconds: boot_time
                .zip(field(22))
                .map(|(boot, ticks)| boot + ticks / USER_HZ),
        }
    }
}

fn gauge<N: prometheus_client::encoding::EncodeGaugeValue + std::fmt::Debug + Send + Sync>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: Option<N>,
) -> Result<(), std::fmt::Error> {
    let Some(value) = value else {
        return Ok(());
    };
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let r = self.read();
        if let Some(cpu) = r.cpu_seconds {
            let counter = ConstCounter::new(cpu);
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                counter.metric_type(),
            )?)?;
        }
        let e = &mut encoder;
        gauge(
            e,
            "process_open_fds",
            "Number of open file descriptors.",
            r.open_fds,
        )?;
        gauge(
            e,
            "process_max_fds",
            "Maximum number of open file descriptors.",
            r.max_fds,
        )?;
        gauge(
            e,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            r.virtual_memory_bytes,
        )?;
        gauge(
            e,
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            r.virtual_memory_max_bytes,
        )?;
        gauge(
            e,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            r.resident_memory_bytes,
        )?;
        gauge(
            e,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            r.start_time_seconds,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_proc_directory() {
        let root = tempfile::tempdir().expect("tempdir");
        let proc_dir = root.path().join("42");
        std::fs::create_dir_all(proc_dir.join("fd")).expect("fd dir");
        for fd in ["0", "1", "2"] {
            std::fs::write(proc_dir.join("fd").join(fd), "").expect("fd");
        }
        // pid (comm with ) and spaces) state ppid ... utime=250 stime=50 ... starttime=1000 vsize rss
        let mut fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        fields[14 - 3] = "250".into();
        fields[15 - 3] = "50".into();
        fields[22 - 3] = "1000".into();
        fields[23 - 3] = "8192000".into();
        std::fs::write(
            proc_dir.join("stat"),
            format!("42 (kube let) x) {}\n", fields.join(" ")),
        )
        .expect("stat");
        std::fs::write(root.path().join("stat"), "cpu 1 2 3\nbtime 1700000000\n").expect("stat");
        std::fs::write(
            proc_dir.join("limits"),
            "Limit                     Soft Limit           Hard Limit           Units     \n\
             Max open files            1024                 524288               files     \n\
             Max address space         unlimited            unlimited            bytes     \n",
        )
        .expect("limits");
        std::fs::write(
            proc_dir.join("status"),
            "Name:\tkubelet\nVmRSS:\t   2048 kB\n",
        )
        .expect("status");
        let collector = ProcessCollector {
            proc_dir,
            proc_root: root.path().to_owned(),
        };
        assert_eq!(
            collector.read(),
            Readings {
                cpu_seconds: Some(3.0),
                open_fds: Some(3),
                max_fds: Some(1024.0),
                virtual_memory_bytes: Some(8_192_000.0),
                virtual_memory_max_bytes: Some(UNLIMITED),
                resident_memory_bytes: Some(2_097_152.0),
                start_time_seconds: Some(1_700_000_010.0),
            }
        );
    }

    #[test]
    fn this_process_has_every_reading() {
        let r = ProcessCollector::default().read();
        assert!(r.cpu_seconds.is_some(), "{r:?}");
        assert!(r.open_fds.is_some_and(|n| n > 0), "{r:?}");
        assert!(r.resident_memory_bytes.is_some_and(|b| b > 0.0), "{r:?}");
        assert!(r.start_time_seconds.is_some_and(|t| t > 1.0e9), "{r:?}");
    }
}
