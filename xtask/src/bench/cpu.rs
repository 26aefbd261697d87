//! CPU time of a process from `/proc/PID/stat` (`utime` + `stime`, every thread, living or
//! exited), sampled once a second over a steady window (goal G5).

use std::{
    fs, thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::{
    report::{Row, Verdict},
    stats::percentile,
};

/// Clock ticks per second of `/proc/PID/stat` (`USER_HZ`, 100 on every Linux ABI we run on).
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU seconds `pid` has used so far (user + system).
pub(crate) fn seconds(pid: u32) -> Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("process {pid} is gone"))?;
    parse_stat(&stat).with_context(|| format!("malformed /proc/{pid}/stat"))
}

/// `utime + stime` of a `/proc/PID/stat` line, in seconds. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted after its last `)`.
fn parse_stat(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name: state (3), ppid (4), …, utime (14), stime (15).
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / TICKS_PER_SECOND)
}

/// CPU use of several processes over one window, in millicores.
#[derive(Debug, Clone, Default)]
pub(crate) struct Window {
    /// The window's length.
    pub(crate) seconds: f64,
    /// Per process: one millicore figure per 1 s sample.
    pub(crate) samples: Vec<Vec<f64>>,
    /// Per process: CPU seconds over the whole window / its length, in millicores.
    pub(crate) mean: Vec<f64>,
}

impl Window {
    /// CPU seconds process `i` used over the window (0 when it was not sampled).
    pub(crate) fn cpu_seconds(&self, i: usize) -> f64 {
        self.mean.get(i).map_or(0.0, |m| m * self.seconds / 1e3)
    }

    /// As JSON, with `names` for the processes.
    pub(crate) fn to_json(&self, names: &[&str]) -> Value {
        let per: serde_json::Map<String, Value> = names
            .iter()
            .zip(self.samples.iter().zip(&self.mean))
            .map(|(n, (s, m))| ((*n).to_owned(), json!({ "mean_m": m, "samples_m": s })))
            .collect();
        json!({ "seconds": self.seconds, "processes": per })
    }
}

/// Samples `pids` once a second for `length`; millicores = CPU seconds per wall second × 1000.
pub(crate) fn window(pids: &[u32], length: Duration) -> Result<Window> {
    let began = Instant::now();
    let first: Vec<f64> = pids.iter().map(|&p| seconds(p)).collect::<Result<_>>()?;
    let mut last = (began, first.clone());
    let mut samples = vec![Vec::new(); pids.len()];
    let mut tick = began;
    while began.elapsed() < length {
        tick += Duration::from_secs(1);
        thread::sleep(tick.saturating_duration_since(Instant::now()));
        let now = Instant::now();
        let cpu: Vec<f64> = pids.iter().map(|&p| seconds(p)).collect::<Result<_>>()?;
        let wall = (now - last.0).as_secs_f64();
        for (i, s) in samples.iter_mut().enumerate() {
            s.push((cpu[i] - last.1[i]) / wall * 1e3);
        }
        last = (now, cpu);
    }
    let wall = (last.0 - began).as_secs_f64();
    Ok(Window {
        seconds: wall,
        mean: first
            .iter()
            .zip(&last.1)
            .map(|(a, b)| (b - a) / wall * 1e3)
            .collect(),
        samples,
    })
}

/// G5 rows: `window` sampled the kubelet (index 0) and containerd (index 1) with `n` pods.
pub(crate) fn rows(window: &Window, n: usize) -> Vec<Row> {
    let (Some(k), Some(c)) = (window.samples.first(), window.samples.get(1)) else {
        return Vec::new();
    };
    let (km, cm) = (window.mean[0], window.mean[1]);
    let (kp, cp) = (percentile(k, 95.0), percentile(c, 95.0));
    let secs = window.seconds;
    vec![
        Row {
            metric: format!("G5 CPU mean, {n} pods steady ({secs:.0} s)"),
            kubelet: format!("{km:.1} m"),
            baseline: format!("{cm:.1} m (containerd)"),
            ratio: format!("{:.2}", km / cm),
            goal: "≤ 10 m (stretch 3 m)".into(),
            verdict: Verdict::le(km, 10.0, 3.0),
        },
        Row {
            metric: format!("G5 CPU p95 of 1 s samples, {n} pods (10 m resolution)"),
            kubelet: format!("{kp:.1} m"),
            baseline: format!("{cp:.1} m (containerd)"),
            ratio: format!("{:.2}", kp / cp),
            goal: "≤ 30 m (stretch 10 m)".into(),
            verdict: Verdict::le(kp, 30.0, 10.0),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_times_after_an_odd_name() {
        let line = "42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 99 0 0";
        assert_eq!(parse_stat(line), Some(3.0));
        assert_eq!(parse_stat("42 (x) S 1"), None);
    }

    #[test]
    fn reads_this_process() {
        assert!(seconds(std::process::id()).expect("own stat") >= 0.0);
    }
}
