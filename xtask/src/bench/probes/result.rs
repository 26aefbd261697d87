//! What the probe scenario measured ([`Probes`]): each probe type's runs from each clock
//! ([`Series`]), and their rows, JSON and notes in the bench's report.

use serde_json::{Value, json};

use super::{
    LATENESS_P99_MS, PERIOD,
    timeline::{deviations_ms, lateness_ms, skipped_in_window},
};
use crate::bench::{
    report::{Row, Verdict},
    stats::{median, percentile},
};

/// One probe type's runs over the window, from one clock.
#[derive(Debug, Clone, Default)]
pub(crate) struct Series {
    /// Probes of this type.
    pub(crate) probes: usize,
    /// Runs seen in the window.
    pub(crate) runs: usize,
    /// Runs skipped between runs seen (gaps of two periods or more).
    pub(crate) skipped: usize,
    /// How late each run started behind its ticker, ms.
    pub(crate) lateness_ms: Vec<f64>,
    /// `interval − period` of consecutive runs, ms.
    pub(crate) deviation_ms: Vec<f64>,
}

impl Series {
    /// The series of `probes`, each probe's run times, kept within `[t0, t1]`.
    pub(crate) fn of(probes: &[Vec<f64>], (t0, t1): (f64, f64)) -> Series {
        let mut s = Series::default();
        for times in probes {
            let mut times: Vec<f64> = times
                .iter()
                .copied()
                .filter(|t| (t0..=t1).contains(t))
                .collect();
            times.sort_by(f64::total_cmp);
            s.probes += 1;
            s.runs += times.len();
            s.skipped += skipped_in_window(&times, (t0, t1), PERIOD);
            s.lateness_ms.extend(lateness_ms(&times, PERIOD));
            s.deviation_ms.extend(deviations_ms(&times, PERIOD));
        }
        s
    }

    fn to_json(&self) -> Value {
        json!({
            "probes": self.probes,
            "runs": self.runs,
            "skipped": self.skipped,
            "lateness_ms": self.lateness_ms,
            "interval_minus_period_ms": self.deviation_ms,
        })
    }

    fn summary(&self) -> String {
        let dev: Vec<f64> = self.deviation_ms.iter().map(|d| d.abs()).collect();
        format!(
            "{} runs, {} skipped; late p50 {:.1} ms, p99 {:.1} ms; |interval − 1 s| p99 {:.1} ms",
            self.runs,
            self.skipped,
            median(&self.lateness_ms),
            percentile(&self.lateness_ms, 99.0),
            percentile(&dev, 99.0),
        )
    }
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct Probes {
    /// Pods that ran.
    pub(crate) pods: usize,
    /// The window's length, s.
    pub(crate) window_s: f64,
    /// The window's start and end, seconds since the epoch.
    pub(crate) window_unix_s: (f64, f64),
    /// CPU over the window, % of one core: the kubelet.
    pub(crate) kubelet_pct: f64,
    /// containerd's CPU, % of one core.
    pub(crate) containerd_pct: f64,
    /// The pods' shims' CPU (with their reaped `runc` children), % of one core.
    pub(crate) shims_pct: f64,
    /// httpGet readiness runs, from the server's accept times.
    pub(crate) http: Series,
    /// tcpSocket liveness runs, from the server's accept times.
    pub(crate) tcp: Series,
    /// exec liveness runs, from the container's own clock.
    pub(crate) exec: Series,
    /// The same three (httpGet, tcpSocket, exec) from the kubelet's log: its own lateness.
    pub(crate) kubelet: [Series; 3],
    /// Exec runs: the kubelet's start of the run → the command's start, ms (the runtime's
    /// share: CRI, containerd, the shim and runc exec).
    pub(crate) exec_runtime_ms: Vec<f64>,
    /// The kubelet's own account (`late_us` in its log) of how late each run started behind
    /// its tick (httpGet, tcpSocket, exec), ms: the tokio timer and the worker threads.
    pub(crate) tick_late_ms: [Vec<f64>; 3],
    /// How late a plain thread of the bench woke from its sleeps over the window, ms: the
    /// machine's share of the kubelet's tick → run lateness.
    pub(crate) wakeup_ms: Vec<f64>,
    /// Whether the listeners' timestamps were taken at real-time priority.
    pub(crate) realtime: bool,
}

impl Probes {
    fn expected(&self, s: &Series) -> f64 {
        s.probes as f64 * self.window_s / PERIOD.as_secs_f64()
    }

    fn series(&self) -> [(&'static str, &Series, &Series, &[f64]); 3] {
        [
            (
                "httpGet readiness",
                &self.http,
                &self.kubelet[0],
                &self.tick_late_ms[0],
            ),
            (
                "tcpSocket liveness",
                &self.tcp,
                &self.kubelet[1],
                &self.tick_late_ms[1],
            ),
            (
                "exec liveness",
                &self.exec,
                &self.kubelet[2],
                &self.tick_late_ms[2],
            ),
        ]
    }

    /// The report's rows.
    pub(crate) fn rows(&self) -> Vec<Row> {
        let runs: usize = [&self.http, &self.tcp, &self.exec]
            .iter()
            .map(|s| s.runs)
            .sum();
        let cpu_per_run_us = self.kubelet_pct / 100.0 * self.window_s / runs.max(1) as f64 * 1e6;
        let mut rows = vec![
            Row::info(
                format!(
                    "Probes: kubelet CPU, {} pods × 2 probes, 1 s period ({:.0} s window)",
                    self.pods, self.window_s
                ),
                format!("{:.1} % of a core", self.kubelet_pct),
                format!(
                    "{:.1} % containerd, {:.1} % shims",
                    self.containerd_pct, self.shims_pct
                ),
                format!("{:.2}", self.kubelet_pct / self.containerd_pct),
                "(info: kubelet / containerd)",
            ),
            Row::info(
                "Probes: kubelet CPU per probe run",
                format!("{cpu_per_run_us:.0} µs"),
                String::new(),
                String::new(),
                format!("(info: {runs} runs)"),
            ),
        ];
        for (name, seen, kubelet, tick_late) in self.series() {
            let network = !name.starts_with("exec");
            let expected = self.expected(seen);
            // Whether a run was skipped is the kubelet's decision: for exec probes its log says,
            // as the container's clock adds the runtime's delays to the gaps.
            let skips = if network {
                seen.skipped
            } else {
                kubelet.skipped
            };
            rows.push(Row::new(
                format!("Probe runs, {name} ({} probes)", seen.probes),
                format!("{} of {expected:.0}, {} skipped", seen.runs, seen.skipped),
                format!("kubelet log: {}", kubelet.runs),
                String::new(),
                if network {
                    "0 skipped".into()
                } else {
                    "0 skipped (kubelet log)".into()
                },
                if skips == 0 {
                    Verdict::Stretch
                } else {
                    Verdict::Miss
                },
            ));
            let p99 = percentile(&seen.lateness_ms, 99.0);
            let dev: Vec<f64> = seen.deviation_ms.iter().map(|d| d.abs()).collect();
            rows.push(Row::new(
                format!(
                    "Probe start lateness, {name}, {} (n={})",
                    if network { "server" } else { "in container" },
                    seen.lateness_ms.len()
                ),
                format!("p50 {:.1} ms, p99 {p99:.1} ms", median(&seen.lateness_ms)),
                format!(
                    "kubelet p50 {:.1} ms, p99 {:.1} ms",
                    median(&kubelet.lateness_ms),
                    percentile(&kubelet.lateness_ms, 99.0)
                ),
                format!(
                    "tick → run p99 {:.1} ms; |interval − 1 s| p99 {:.1} ms",
                    percentile(tick_late, 99.0),
                    percentile(&dev, 99.0)
                ),
                if network {
                    format!("p99 ≤ {LATENESS_P99_MS:.0} ms")
                } else {
                    "(info)".into()
                },
                if network {
                    Verdict::le(p99, LATENESS_P99_MS, LATENESS_P99_MS / 2.0)
                } else {
                    Verdict::Info
                },
            ));
        }
        rows.push(Row::info(
            format!(
                "Wake-up lateness of a plain thread, the machine's share (n={})",
                self.wakeup_ms.len()
            ),
            format!(
                "p50 {:.1} ms, p99 {:.1} ms",
                median(&self.wakeup_ms),
                percentile(&self.wakeup_ms, 99.0)
            ),
            String::new(),
            String::new(),
            "(info: baseline of the kubelet's tick → run)",
        ));
        rows.push(Row::info(
            format!(
                "Probe exec: kubelet start → command start, the runtime's share (n={})",
                self.exec_runtime_ms.len()
            ),
            format!(
                "p50 {:.1} ms, p99 {:.1} ms",
                median(&self.exec_runtime_ms),
                percentile(&self.exec_runtime_ms, 99.0)
            ),
            String::new(),
            String::new(),
            "(info: CRI ExecSync, shim, runc exec)",
        ));
        rows
    }

    /// As JSON, with every sample.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "pods": self.pods,
            "period_s": PERIOD.as_secs_f64(),
            "window_s": self.window_s,
            "window_unix_s": self.window_unix_s,
            "cpu_pct": {
                "kubelet": self.kubelet_pct,
                "containerd": self.containerd_pct,
                "shims": self.shims_pct,
            },
            "http_server": self.http.to_json(),
            "tcp_server": self.tcp.to_json(),
            "exec_container": self.exec.to_json(),
            "kubelet_log": {
                "http": self.kubelet[0].to_json(),
                "tcp": self.kubelet[1].to_json(),
                "exec": self.kubelet[2].to_json(),
            },
            "exec_runtime_ms": self.exec_runtime_ms,
            "wakeup_baseline_ms": self.wakeup_ms,
            "kubelet_tick_late_ms": {
                "http": self.tick_late_ms[0],
                "tcp": self.tick_late_ms[1],
                "exec": self.tick_late_ms[2],
            },
            "listeners_realtime": self.realtime,
        })
    }

    /// The notes' lines.
    pub(crate) fn note(&self) -> String {
        let mut out = format!(
            "Probes: {} pods (httpGet readiness each, exec liveness on half, tcpSocket on the \
             other half) at 1 s, {:.0} s window: kubelet {:.1} % of a core (containerd {:.1} %, \
             shims {:.1} %); server timestamps {}.",
            self.pods,
            self.window_s,
            self.kubelet_pct,
            self.containerd_pct,
            self.shims_pct,
            if self.realtime {
                "at SCHED_FIFO"
            } else {
                "at normal priority"
            },
        );
        for (name, seen, kubelet, tick_late) in self.series() {
            out.push_str(&format!(
                "\n  {name}: {} (expected {:.0}); kubelet's log: {}; its tick → run p50 {:.1} ms, \
                 p99 {:.1} ms",
                seen.summary(),
                self.expected(seen),
                kubelet.summary(),
                median(tick_late),
                percentile(tick_late, 99.0),
            ));
        }
        out.push_str(&format!(
            "\n  a plain thread's wake-up lateness (the machine's share): p50 {:.1} ms, p99 \
             {:.1} ms",
            median(&self.wakeup_ms),
            percentile(&self.wakeup_ms, 99.0)
        ));
        out.push_str(&format!(
            "\n  exec runtime share (kubelet start → command start): p50 {:.1} ms, p99 {:.1} ms",
            median(&self.exec_runtime_ms),
            percentile(&self.exec_runtime_ms, 99.0)
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_count_runs_in_the_window_only() {
        let runs = vec![vec![9.0, 10.0, 11.01, 13.0, 14.0, 20.0], vec![10.5, 11.5]];
        let s = Series::of(&runs, (10.0, 14.5));
        // The first probe misses 12 s; the second runs at 10.5 and 11.5 only (12.5, 13.5).
        assert_eq!((s.probes, s.runs, s.skipped), (2, 6, 3));
        assert_eq!(s.lateness_ms.len(), 6);
    }
}
