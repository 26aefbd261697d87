//! Goals measured without containerd, by examples of `kubelet-bin` that print one JSON object:
//! G6, the relist at 500 pods / 1,000 containers against the raw `List` calls on a fake CRI
//! server (`examples/relist_cost.rs`), and G8, the sync loop's throughput against the
//! in-process fake runtime (`examples/sync_throughput.rs`).

use std::{path::Path, process::Command};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::{
    report::{Row, Verdict},
    stats::percentile,
};

/// Runs example `bin` with `args` and parses its JSON output.
pub(crate) fn run(bin: &Path, args: &[String]) -> Result<Value> {
    let out = Command::new(bin)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("bad output of {}", bin.display()))
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .collect()
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// G6 rows from `relist_cost`'s output.
pub(crate) fn relist_rows(v: &Value) -> Vec<Row> {
    let (relist, list) = (floats(&v["relist_ms"]), floats(&v["list_ms"]));
    let (ra, rb) = (percentile(&relist, 50.0), percentile(&list, 50.0));
    let r = ra / rb;
    let (lo, hi) = super::stats::ratio_ci(&relist, &list, 50.0);
    let scale = format!(
        "{} pods / {} containers, n={}",
        v["sandboxes"], v["containers"], v["rounds"]
    );
    let changed = num(&v["changed_relist_ms"]);
    vec![
        Row {
            metric: format!("G6 relist, no change, median ({scale})"),
            kubelet: format!("{ra:.2} ms"),
            baseline: format!("{rb:.2} ms (raw List×2)"),
            ratio: format!("{r:.2} [{lo:.2}–{hi:.2}]"),
            goal: "ratio ≤ 1.20 (stretch 1.05)".into(),
            verdict: Verdict::le(r, 1.20, 1.05),
        },
        Row {
            metric: "G6 relist kubelet-side compute (relist − raw List), median".into(),
            kubelet: format!("{:.2} ms", ra - rb),
            baseline: String::new(),
            ratio: String::new(),
            goal: "≤ 2 ms (stretch 0.5 ms)".into(),
            verdict: Verdict::le(ra - rb, 2.0, 0.5),
        },
        Row {
            metric: format!(
                "G6 relist with {} containers changed (one cycle)",
                v["changed"]
            ),
            kubelet: format!("{changed:.1} ms"),
            baseline: String::new(),
            ratio: String::new(),
            goal: "≤ 150 ms (stretch 50 ms)".into(),
            verdict: Verdict::le(changed, 150.0, 50.0),
        },
    ]
}

/// G8 rows from `sync_throughput`'s output.
pub(crate) fn sync_rows(v: &Value) -> Vec<Row> {
    let rate = num(&v["pods_per_second"]);
    let cpu = num(&v["cpu_ms_per_pod"]);
    let what = format!("bursts of {} × {}, fake runtime", v["pods"], v["rounds"]);
    vec![
        Row {
            metric: format!("G8 sync-loop throughput, ADD → status Running ({what})"),
            kubelet: format!("{rate:.0} pods/s"),
            baseline: String::new(),
            ratio: String::new(),
            goal: "≥ 500 pods/s (stretch 2000)".into(),
            verdict: Verdict::ge(rate, 500.0, 2000.0),
        },
        Row {
            metric: "G8 CPU per pod start (whole process)".into(),
            kubelet: format!("{cpu:.3} ms"),
            baseline: String::new(),
            ratio: String::new(),
            goal: "≤ 2 ms (stretch 0.5 ms)".into(),
            verdict: Verdict::le(cpu, 2.0, 0.5),
        },
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn relist_rows_compare_medians() {
        let v = json!({
            "sandboxes": 500, "containers": 1000, "rounds": 3,
            "relist_ms": [11.0, 11.5, 12.0], "list_ms": [10.0, 10.0, 10.0],
            "changed": 100, "changed_relist_ms": 40.0,
        });
        let rows = relist_rows(&v);
        assert_eq!(rows[0].kubelet, "11.50 ms");
        assert!(rows[0].ratio.starts_with("1.15"));
        assert_eq!(rows[0].verdict, Verdict::Must);
        assert_eq!(rows[1].kubelet, "1.50 ms");
        assert_eq!(rows[1].verdict, Verdict::Must);
        assert_eq!(rows[2].verdict, Verdict::Stretch);
    }

    #[test]
    fn sync_rows_judge_rate_and_cpu() {
        let v =
            json!({ "pods": 110, "rounds": 2, "pods_per_second": 700.0, "cpu_ms_per_pod": 0.4 });
        let rows = sync_rows(&v);
        assert_eq!(rows[0].verdict, Verdict::Must);
        assert_eq!(rows[1].verdict, Verdict::Stretch);
    }
}
