//! The results table (goal, measured, baseline, ratio, target, verdict) against the goals of
//! `performance.md`, as text, Markdown and JSON.

use serde_json::{Value, json};

use super::{
    rss::Mem,
    scenario::Runs,
    stats::{median, percentile, ratio_ci},
};

/// Where a figure stands against its goal's must and stretch targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Meets the stretch target.
    Stretch,
    /// Meets the must target only.
    Must,
    /// Misses the must target.
    Miss,
    /// No goal: for information.
    Info,
}

impl Verdict {
    /// `value ≤ must` / `value ≤ stretch`.
    pub(crate) fn le(value: f64, must: f64, stretch: f64) -> Verdict {
        if value <= stretch {
            Verdict::Stretch
        } else if value <= must {
            Verdict::Must
        } else {
            Verdict::Miss
        }
    }

    /// `value ≥ must` / `value ≥ stretch`.
    pub(crate) fn ge(value: f64, must: f64, stretch: f64) -> Verdict {
        Verdict::le(-value, -must, -stretch)
    }

    /// The weaker of two verdicts (both conditions must hold).
    pub(crate) fn and(self, other: Verdict) -> Verdict {
        use Verdict::*;
        match (self, other) {
            (Miss, _) | (_, Miss) => Miss,
            (Must, _) | (_, Must) => Must,
            (Info, v) | (v, Info) => v,
            (Stretch, Stretch) => Stretch,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Verdict::Stretch => "stretch ✓",
            Verdict::Must => "must ✓",
            Verdict::Miss => "✗ miss",
            Verdict::Info => "",
        }
    }
}

/// One line of the table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// The goal and what is measured (column "goal").
    pub(crate) metric: String,
    /// The kubelet's figure (column "measured").
    pub(crate) kubelet: String,
    /// The same-run baseline's figure.
    pub(crate) baseline: String,
    /// Measured / baseline.
    pub(crate) ratio: String,
    /// The goal's must and stretch targets (column "target").
    pub(crate) goal: String,
    /// Where the figure stands against the target.
    pub(crate) verdict: Verdict,
}

impl Row {
    /// A row without a goal verdict (for information).
    pub(crate) fn info(
        metric: impl Into<String>,
        kubelet: impl Into<String>,
        baseline: impl Into<String>,
        ratio: impl Into<String>,
        goal: impl Into<String>,
    ) -> Row {
        Row {
            metric: metric.into(),
            kubelet: kubelet.into(),
            baseline: baseline.into(),
            ratio: ratio.into(),
            goal: goal.into(),
            verdict: Verdict::Info,
        }
    }

    /// A row from its cells, for scenarios kept in their own modules.
    pub(crate) fn new(
        metric: String,
        kubelet: String,
        baseline: String,
        ratio: String,
        goal: String,
        verdict: Verdict,
    ) -> Row {
        Row {
            metric,
            kubelet,
            baseline,
            ratio,
            goal,
            verdict,
        }
    }

    fn json(&self) -> Value {
        json!({
            "metric": self.metric,
            "kubelet": self.kubelet,
            "baseline": self.baseline,
            "ratio": self.ratio,
            "goal": self.goal,
            "verdict": format!("{:?}", self.verdict).to_lowercase(),
        })
    }
}

/// Memory samples of the kubelet and of containerd at the same moments.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Memory {
    /// Kubelet, no pods, 5 s after start.
    pub(crate) kubelet_idle: Mem,
    /// containerd at the same moment.
    pub(crate) containerd_idle: Mem,
    /// Kubelet, the batch's pods all running + 5 s (last A block).
    pub(crate) kubelet_busy: Mem,
    /// containerd at the same moment.
    pub(crate) containerd_busy: Mem,
    /// Kubelet, all pods gone + 5 s, at the end.
    pub(crate) kubelet_after: Mem,
    /// containerd at the same moment.
    pub(crate) containerd_after: Mem,
    /// Kubelet, all pods gone + 30 s: idle again, after its trims.
    pub(crate) kubelet_quiet: Mem,
    /// containerd at the same moment.
    pub(crate) containerd_quiet: Mem,
    /// The kubelet's CPU time from the idle sample to the after sample (G1 and G2: its pods
    /// started and stopped, the raw arm's frozen), per pod it started, in ms.
    pub(crate) kubelet_cpu_ms_per_pod: f64,
    /// How many of the functions `kubelet-bin/idle-functions.txt` lists the binary defines,
    /// and how many it lists (`None` without a list).
    pub(crate) idle_functions_found: Option<(usize, usize)>,
}

fn ms(v: f64) -> String {
    format!("{v:.1} ms")
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn ratio(a: f64, b: f64) -> f64 {
    a / b
}

fn start_rows(g1: &Runs) -> Vec<Row> {
    let (a, b) = (g1.a_totals(), g1.b_totals());
    let n = a.len();
    let mut rows = Vec::new();
    for (p, name, must, stretch) in [(50.0, "p50", 1.15, 1.05), (99.0, "p99", 1.30, 1.15)] {
        let (pa, pb) = (percentile(&a, p), percentile(&b, p));
        let r = ratio(pa, pb);
        let (lo, hi) = ratio_ci(&a, &b, p);
        rows.push(Row {
            metric: format!("G1 pod start {name} (1 pod, n={n})"),
            kubelet: ms(pa),
            baseline: ms(pb),
            ratio: format!("{r:.2} [{lo:.2}–{hi:.2}]"),
            goal: format!("ratio ≤ {must:.2} (stretch {stretch:.2})"),
            verdict: Verdict::le(r, must, stretch),
        });
    }
    let c = g1.c_totals();
    if !c.is_empty() {
        // Issue 17: against the floor, a bare pod's start on the same runtime.
        let (pa, pc) = (percentile(&a, 50.0), percentile(&c, 50.0));
        let r = ratio(pa, pc);
        let (lo, hi) = ratio_ci(&a, &c, 50.0);
        rows.push(Row {
            metric: format!("G1 pod start p50 vs a bare pod (n={n})"),
            kubelet: ms(pa),
            baseline: format!("{} minimal CRI", ms(pc)),
            ratio: format!("{r:.2} [{lo:.2}–{hi:.2}] ({:+.1} ms)", pa - pc),
            goal: "ratio ≤ 1.10 (+20 ms), or the breakdown".into(),
            verdict: Verdict::le(r, 1.10, 1.10).and(Verdict::le(pa - pc, 20.0, 20.0)),
        });
    }
    let reported = g1.a_reported();
    for (p, name) in [(50.0, "p50"), (99.0, "p99")] {
        let (pa, pb) = (percentile(&reported, p), percentile(&b, p));
        let end_to_end = p >= 99.0;
        rows.push(Row {
            metric: format!("G1 manifest → kubelet /pods says Running {name}"),
            kubelet: ms(pa),
            baseline: ms(pb),
            ratio: format!("{:.2}", ratio(pa, pb)),
            goal: if end_to_end {
                "end to end ≤ 1000 ms (stretch 500 ms)".into()
            } else {
                "(status path, info)".into()
            },
            verdict: if end_to_end {
                Verdict::le(pa, 1000.0, 500.0)
            } else {
                Verdict::Info
            },
        });
    }
    for (p, name, must, stretch) in [(50.0, "p50", 30.0, 10.0), (99.0, "p99", 100.0, 40.0)] {
        let added = percentile(&a, p) - percentile(&b, p);
        rows.push(Row {
            metric: format!("G1 added time {name} (kubelet − raw)"),
            kubelet: format!("{added:+.1} ms"),
            baseline: String::new(),
            ratio: String::new(),
            goal: format!("≤ {must:.0} ms (stretch {stretch:.0} ms)"),
            verdict: Verdict::le(added, must, stretch),
        });
    }
    rows
}

fn batch_rows(g2: &Runs, n: usize) -> Vec<Row> {
    let (a, b) = (g2.a_totals(), g2.b_totals());
    let blocks = a.len();
    let (ma, mb) = (median(&a), median(&b));
    let r = ratio(ma, mb);
    let (lo, hi) = ratio_ci(&a, &b, 50.0);
    let (pa, pb) = (
        percentile(&g2.a_pods(), 99.0),
        percentile(&g2.b_pods(), 99.0),
    );
    vec![
        Row {
            metric: format!("G2 batch of {n}: first write → last running (median of {blocks})"),
            kubelet: ms(ma),
            baseline: ms(mb),
            ratio: format!("{r:.2} [{lo:.2}–{hi:.2}]"),
            goal: "ratio ≤ 1.20 (stretch 1.10), set for 110 pods".into(),
            verdict: Verdict::le(r, 1.20, 1.10),
        },
        Row {
            metric: format!("G2 batch of {n}: first write → kubelet /pods says all Running"),
            kubelet: ms(median(&g2.a_reported_totals())),
            baseline: ms(mb),
            ratio: format!("{:.2}", ratio(median(&g2.a_reported_totals()), mb)),
            goal: "(status path, info)".into(),
            verdict: Verdict::Info,
        },
        Row {
            metric: format!("G2 per-pod start p99 within the batches (n={})", n * blocks),
            kubelet: ms(pa),
            baseline: ms(pb),
            ratio: format!("{:.2}", ratio(pa, pb)),
            goal: "≤ 5 s (stretch 2.5 s)".into(),
            verdict: Verdict::le(pa, 5000.0, 2500.0),
        },
    ]
}

fn mem_row(what: &str, kubelet: u64, containerd: u64, must_mib: f64, stretch_mib: f64) -> Row {
    let r = ratio(kubelet as f64, containerd as f64);
    let size = Verdict::le(kubelet as f64 / 1024.0, must_mib, stretch_mib);
    Row {
        metric: what.to_owned(),
        kubelet: mib(kubelet),
        baseline: format!("{} (containerd)", mib(containerd)),
        ratio: format!("{r:.2}"),
        goal: format!(
            "≤ {must_mib:.0} MiB (stretch {stretch_mib:.0}); ≤ 1.0× containerd (stretch 0.5×)"
        ),
        verdict: size.and(Verdict::le(r, 1.0, 0.5)),
    }
}

pub(crate) fn memory_rows(m: &Memory, n: usize) -> Vec<Row> {
    let slope = |busy: u64, idle: u64| (busy as f64 - idle as f64) / n as f64;
    let (ks, cs) = (
        slope(m.kubelet_busy.rss_kib, m.kubelet_idle.rss_kib),
        slope(m.containerd_busy.rss_kib, m.containerd_idle.rss_kib),
    );
    vec![
        mem_row(
            "G4 RSS idle (VmRSS, 0 pods)",
            m.kubelet_idle.rss_kib,
            m.containerd_idle.rss_kib,
            30.0,
            15.0,
        ),
        mem_row(
            "G4 PSS idle (0 pods)",
            m.kubelet_idle.pss_kib,
            m.containerd_idle.pss_kib,
            30.0,
            15.0,
        ),
        mem_row(
            &format!("G4 RSS with {n} pods running (VmRSS)"),
            m.kubelet_busy.rss_kib,
            m.containerd_busy.rss_kib,
            60.0,
            30.0,
        ),
        mem_row(
            &format!("G4 PSS with {n} pods running"),
            m.kubelet_busy.pss_kib,
            m.containerd_busy.pss_kib,
            60.0,
            30.0,
        ),
        Row {
            metric: format!("G4 RSS slope (with {n} − idle) / {n}"),
            kubelet: format!("{ks:.0} KiB/pod"),
            baseline: format!("{cs:.0} KiB/pod (containerd)"),
            ratio: String::new(),
            goal: "≤ 300 KiB/pod (stretch 150)".into(),
            verdict: Verdict::le(ks, 300.0, 150.0),
        },
        after_row(
            "RSS 5 s after the bench (VmRSS)",
            &m.kubelet_after,
            &m.containerd_after,
            None,
        ),
        after_row(
            "RSS idle after the bench, 30 s on (VmRSS)",
            &m.kubelet_quiet,
            &m.containerd_quiet,
            Some("≤ 15 MiB (issue 17; also the leak check)"),
        ),
        Row {
            metric: "kubelet CPU per pod started and stopped (G1 + G2)".into(),
            kubelet: ms(m.kubelet_cpu_ms_per_pod),
            baseline: String::new(),
            ratio: String::new(),
            goal: "(CPU side of the memory trade-off)".into(),
            verdict: Verdict::Info,
        },
        Row {
            metric: "idle code linked together (kubelet-bin/idle-functions.txt)".into(),
            kubelet: match m.idle_functions_found {
                Some((found, listed)) => format!("{found} of {listed} listed functions found"),
                None => "no list".into(),
            },
            baseline: String::new(),
            ratio: String::new(),
            goal: format!(
                "≥ {} % found (else: `cargo xtask idle-order`)",
                super::idle_order::MIN_FOUND_PERCENT
            ),
            verdict: match m.idle_functions_found {
                Some((found, listed)) if super::idle_order::list_is_fresh(found, listed) => {
                    Verdict::Must
                }
                Some(_) => Verdict::Miss,
                None => Verdict::Info,
            },
        },
    ]
}

/// The kubelet's memory after the bench, its parts, and containerd's beside it; judged
/// against 15 MiB when `goal` is given.
fn after_row(what: &str, kubelet: &Mem, containerd: &Mem, goal: Option<&str>) -> Row {
    Row {
        metric: what.into(),
        kubelet: format!(
            "{} (anon {}, file {}: {} the binary's own)",
            mib(kubelet.rss_kib),
            mib(kubelet.anon_kib),
            mib(kubelet.file_kib),
            mib(kubelet.exe_kib)
        ),
        baseline: format!("{} (containerd)", mib(containerd.rss_kib)),
        ratio: format!(
            "{:.2}",
            ratio(kubelet.rss_kib as f64, containerd.rss_kib as f64)
        ),
        goal: goal.unwrap_or_default().into(),
        verdict: match goal {
            Some(_) => Verdict::le(kubelet.rss_kib as f64 / 1024.0, 15.0, 15.0),
            None => Verdict::Info,
        },
    }
}

/// Every row of the report.
pub(crate) fn rows(g1: &Runs, g2: &Runs, batch: usize, mem: &Memory) -> Vec<Row> {
    let mut rows = start_rows(g1);
    rows.extend(batch_rows(g2, batch));
    rows.extend(memory_rows(mem, batch));
    rows
}

const HEADER: [&str; 6] = ["goal", "measured", "baseline", "ratio", "target", "verdict"];

fn cells(r: &Row) -> [&str; 6] {
    [
        &r.metric,
        &r.kubelet,
        &r.baseline,
        &r.ratio,
        &r.goal,
        r.verdict.label(),
    ]
}

/// The rows as an aligned text table.
pub(crate) fn text(rows: &[Row]) -> String {
    let width = |i: usize| {
        rows.iter()
            .map(|r| cells(r)[i].chars().count())
            .chain([HEADER[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..HEADER.len()).map(width).collect();
    let line = |cs: [&str; 6]| {
        cs.iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![line(HEADER)];
    out.extend(rows.iter().map(|r| line(cells(r))));
    out.join("\n")
}

/// The rows as a Markdown table.
pub(crate) fn markdown(rows: &[Row]) -> String {
    let line = |cs: [&str; 6]| format!("| {} |", cs.join(" | "));
    let mut out = vec![line(HEADER), format!("|{}", "---|".repeat(HEADER.len()))];
    out.extend(rows.iter().map(|r| line(cells(r))));
    out.join("\n")
}

/// The rows as JSON.
pub(crate) fn json(rows: &[Row]) -> Value {
    Value::Array(rows.iter().map(Row::json).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        assert_eq!(Verdict::le(1.0, 1.15, 1.05), Verdict::Stretch);
        assert_eq!(Verdict::le(1.1, 1.15, 1.05), Verdict::Must);
        assert_eq!(Verdict::le(1.2, 1.15, 1.05), Verdict::Miss);
        assert_eq!(Verdict::Stretch.and(Verdict::Must), Verdict::Must);
        assert_eq!(Verdict::Info.and(Verdict::Stretch), Verdict::Stretch);
        assert_eq!(Verdict::Must.and(Verdict::Miss), Verdict::Miss);
        assert_eq!(Verdict::ge(600.0, 500.0, 2000.0), Verdict::Must);
        assert_eq!(Verdict::ge(400.0, 500.0, 2000.0), Verdict::Miss);
        assert_eq!(Verdict::ge(2000.0, 500.0, 2000.0), Verdict::Stretch);
    }

    #[test]
    fn tables() {
        let rows = vec![Row {
            metric: "m".into(),
            kubelet: "1.0 ms".into(),
            baseline: "2.0 ms".into(),
            ratio: "0.50".into(),
            goal: "≤ 1".into(),
            verdict: Verdict::Stretch,
        }];
        assert!(
            text(&rows)
                .lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("m "))
        );
        assert!(markdown(&rows).contains("| m | 1.0 ms | 2.0 ms | 0.50 | ≤ 1 | stretch ✓ |"));
        assert_eq!(json(&rows)[0]["verdict"], "stretch");
    }
}
