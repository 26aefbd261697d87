//! The start times of one probe's runs and what they say: how late each run was behind its
//! worker's ticker (scheduled vs actual start), `interval − period`, and how many ticks were
//! skipped. Times come from three clocks that all read `CLOCK_REALTIME`: the probed server's
//! accept times (httpGet, tcpSocket), `adjtimex` inside the container (exec), and the kubelet's
//! own log (`probe running` at trace level, every probe type).

use std::{
    collections::HashMap,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

/// Seconds since the epoch, now.
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// How late each run of one probe started behind its ticker, in ms.
///
/// The worker's ticker fires on a grid `start + k × period` that the bench does not see; a run
/// starts on its tick or later. The grid's phase is recovered from the runs themselves: on the
/// circle of `time mod period`, the runs crowd just after the grid point, so the grid point is
/// the run that follows the largest empty arc. Each run's lateness is its distance after that
/// point. A constant offset (the same path length every time) is not lateness: this measures
/// the start jitter.
pub(crate) fn lateness_ms(times: &[f64], period: Duration) -> Vec<f64> {
    let p = period.as_secs_f64();
    let Some(&first) = times.first() else {
        return Vec::new();
    };
    let offsets: Vec<f64> = times.iter().map(|t| (t - first).rem_euclid(p)).collect();
    let mut sorted = offsets.clone();
    sorted.sort_by(f64::total_cmp);
    // The arc before sorted[0] wraps around from the last offset.
    let mut phase = sorted[0];
    let mut widest = sorted[0] + p - sorted[sorted.len() - 1];
    for w in sorted.windows(2) {
        if w[1] - w[0] > widest {
            widest = w[1] - w[0];
            phase = w[1];
        }
    }
    offsets
        .iter()
        .map(|o| (o - phase).rem_euclid(p) * 1e3)
        .collect()
}

/// `interval − period` of each pair of consecutive runs (sorted), in ms.
pub(crate) fn deviations_ms(times: &[f64], period: Duration) -> Vec<f64> {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
        .windows(2)
        .map(|w| (w[1] - w[0] - period.as_secs_f64()) * 1e3)
        .collect()
}

/// Ticks without a run between consecutive runs: a gap of `n` periods (rounded) means `n − 1`
/// runs skipped.
pub(crate) fn skipped(times: &[f64], period: Duration) -> usize {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
        .windows(2)
        .map(|w| {
            let periods = ((w[1] - w[0]) / period.as_secs_f64()).round();
            (periods as usize).saturating_sub(1)
        })
        .sum()
}

/// [`skipped`] over the window `[t0, t1]` that `times` (all within it) were taken from,
/// counting the ticks missed at its edges too: a probe that stopped running for a while in
/// the window, or for all of it, skipped those runs.
pub(crate) fn skipped_in_window(times: &[f64], (t0, t1): (f64, f64), period: Duration) -> usize {
    let p = period.as_secs_f64();
    let missed = |gap: f64| ((gap / p).round() as usize).saturating_sub(1);
    let (Some(first), Some(last)) = (
        times.iter().copied().reduce(f64::min),
        times.iter().copied().reduce(f64::max),
    ) else {
        return ((t1 - t0) / p).round() as usize;
    };
    skipped(times, period) + missed(first - t0) + missed(t1 - last)
}

/// For each time in `ends`, how long after the latest time of `starts` before it (ms): the
/// runtime's share of an exec probe is from the kubelet's start of the run to the command's own
/// first instruction. Times with no start before them are left out.
pub(crate) fn delays_ms(starts: &[f64], ends: &[f64]) -> Vec<f64> {
    let mut starts = starts.to_vec();
    starts.sort_by(f64::total_cmp);
    ends.iter()
        .filter_map(|end| {
            let i = starts.partition_point(|s| s <= end);
            (i > 0).then(|| (end - starts[i - 1]) * 1e3)
        })
        .collect()
}

/// The times in concatenated `adjtimex` outputs: each `time.tv_sec:` line with the
/// `time.tv_usec:` line after it, in seconds. A torn last entry is skipped.
pub(crate) fn adjtimex_stamps(text: &str) -> Vec<f64> {
    let value = |line: &str, key: &str| -> Option<f64> {
        line.trim()
            .strip_prefix(key)?
            .trim()
            .parse::<u64>()
            .ok()
            .map(|v| v as f64)
    };
    let mut out = Vec::new();
    let mut sec = None;
    for line in text.lines() {
        if let Some(s) = value(line, "time.tv_sec:") {
            sec = Some(s);
        } else if let (Some(s), Some(us)) = (sec, value(line, "time.tv_usec:")) {
            out.push(s + us / 1e6);
            sec = None;
        }
    }
    out
}

/// What the kubelet's log says about one probe run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LoggedRun {
    /// When the worker started the probe, seconds since the epoch.
    pub(crate) at: f64,
    /// The pod's full name (`name_namespace`).
    pub(crate) pod: String,
    /// `Liveness`, `Readiness` or `Startup`.
    pub(crate) probe: String,
    /// How late the run started behind its tick by the kubelet's own clock, ms.
    pub(crate) late_ms: Option<f64>,
}

/// The message of the worker's trace event at the start of each probe run.
pub(crate) const RUN_MESSAGE: &str = "probe running";

/// The runs in the kubelet's JSON log (`"msg":"probe running"` lines with `pod`, `probe` and
/// `late_us`), grouped by pod and probe type.
pub(crate) fn logged_runs(log: &str) -> HashMap<(String, String), Vec<LoggedRun>> {
    let mut out: HashMap<(String, String), Vec<LoggedRun>> = HashMap::new();
    for run in log.lines().filter_map(logged_run) {
        out.entry((run.pod.clone(), run.probe.clone()))
            .or_default()
            .push(run);
    }
    out
}

fn logged_run(line: &str) -> Option<LoggedRun> {
    let line = crate::bench::kubelet_log::Line::parse(line)?;
    if line.msg != RUN_MESSAGE {
        return None;
    }
    Some(LoggedRun {
        at: line.at,
        pod: line.field("pod")?,
        probe: line.field("probe")?,
        late_ms: line
            .field("late_us")
            .and_then(|us| us.parse::<f64>().ok())
            .map(|us| us / 1e3),
    })
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z` in seconds since the epoch (the tests' times).
#[cfg(test)]
pub(crate) fn rfc3339_seconds(s: &str) -> Option<f64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (h, min, sec) = (t.next()??, t.next()??, t.next()??);
    let frac: f64 = format!("0.{frac}").parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + min * 60 + sec) as f64 + frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Duration = Duration::from_secs(1);

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
    }

    #[test]
    fn lateness_is_measured_from_the_ticker_grid() {
        // Grid at 10.9 + k; runs 3, 0, 40 and 5 ms late, across the second boundary.
        let times = [10.903, 11.9, 12.94, 13.905];
        let got = lateness_ms(&times, P);
        assert!(close(&got, &[3.0, 0.0, 40.0, 5.0]), "{got:?}");
        // A constant path length is no lateness.
        let got = lateness_ms(&[1.2, 2.2, 3.2], P);
        assert!(close(&got, &[0.0, 0.0, 0.0]), "{got:?}");
        assert!(lateness_ms(&[], P).is_empty());
    }

    #[test]
    fn deviations_and_skipped_ticks() {
        let devs = deviations_ms(&[12.0, 10.0, 11.002, 13.5], P);
        assert!(close(&devs, &[2.0, -2.0, 500.0]), "{devs:?}");
        assert_eq!(skipped(&[10.0, 11.0, 12.01, 13.0], P), 0);
        // 12 and 14 are missing; a late run (15.4) is no skip.
        assert_eq!(skipped(&[10.0, 11.0, 13.0, 15.4, 16.0], P), 2);
        // At the window's edges too: 5 s to 7 s has no run, nor 18 s to 20 s.
        let window = (5.0, 20.0);
        assert_eq!(skipped_in_window(&[7.2, 8.2, 17.2], window, P), 1 + 8 + 2);
        assert_eq!(skipped_in_window(&[5.9, 6.9, 19.1], window, P), 11);
        assert_eq!(skipped_in_window(&[], window, P), 15);
    }

    #[test]
    fn runtime_share_pairs_each_command_with_its_start() {
        let got = delays_ms(&[10.0, 11.0, 12.0], &[10.05, 11.2, 9.0, 12.001]);
        assert!(close(&got, &[50.0, 200.0, 1.0]), "{got:?}");
    }

    const ADJTIMEX: &str = "    mode:         0
-o  offset:       0 us
    status:       64 (UNSYNC)
-t  tick:         10000 us
    time.tv_sec:  1795292004
    time.tv_usec: 804000
    return value: 5 (clock not synchronized)
";

    #[test]
    fn parses_adjtimex_outputs_and_skips_a_torn_one() {
        let text = format!(
            "{ADJTIMEX}{}    time.tv_sec:  1795292007\n",
            ADJTIMEX
                .replace("1795292004", "1795292005")
                .replace("804000", "806500")
        );
        let got = adjtimex_stamps(&text);
        assert!(
            close(&got, &[1_795_292_004.804, 1_795_292_005.806_5]),
            "{got:?}"
        );
    }

    #[test]
    fn parses_the_kubelets_probe_runs() {
        assert_eq!(rfc3339_seconds("1970-01-01T00:00:01.5Z"), Some(1.5));
        assert_eq!(
            rfc3339_seconds("2026-11-26T08:43:11.123456Z").map(|s| (s * 1e6).round() / 1e6),
            Some(1_795_682_591.123_456)
        );
        assert_eq!(rfc3339_seconds("2026-11-26 08:43:11"), None);
        let log = r#"{"ts":1795682591100,"caller":"src/x.rs:1","msg":"probe running","v":5,"pod":"probes-1-bench-node_default","container":"app","probe":"Liveness","late_us":1500}
{"ts":1795682591200,"caller":"src/x.rs:1","msg":"pod started","v":0,"pod":"probes-1-bench-node_default"}
{"ts":1795682592100,"caller":"src/x.rs:1","msg":"probe running","v":5,"pod":"probes-1-bench-node_default","container":"app","probe":"Liveness","late_us":20}
{"ts":1795682592300,"caller":"src/x.rs:1","msg":"probe running","v":5,"pod":"probes-2-bench-node_default","container":"app","probe":"Readiness"}
"#;
        let runs = logged_runs(log);
        assert_eq!(runs.len(), 2);
        let live = &runs[&("probes-1-bench-node_default".into(), "Liveness".into())];
        assert_eq!(live.len(), 2);
        assert!((live[1].at - live[0].at - 1.0).abs() < 1e-6);
        assert_eq!((live[0].late_ms, live[1].late_ms), (Some(1.5), Some(0.02)));
        let ready = &runs[&("probes-2-bench-node_default".into(), "Readiness".into())];
        assert_eq!(ready[0].late_ms, None);
    }
}
