//! `cargo xtask fuzz`: runs each cargo-fuzz target of `kubelet-core/fuzz` (issue 16 item 4)
//! for a while and prints its executions; a crash fails the command and leaves the input
//! under `kubelet-core/fuzz/artifacts/<target>/`.
//!
//! Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). The corpus
//! (`kubelet-core/fuzz/corpus/<target>/`, not in git) is seeded from `examples/manifests` and a
//! few valid inputs of each parser, and grows from run to run.

use std::{fs, path::Path, process::Command};

use anyhow::{Context, Result, bail};
use xtask::project_root;

/// The targets, in `kubelet-core/fuzz/fuzz_targets/`.
pub const TARGETS: [&str; 4] = ["manifest_decode", "quantity", "duration", "cri_log_line"];

/// Valid inputs each corpus starts from, besides the example manifests.
fn seeds(target: &str) -> &'static [&'static str] {
    match target {
        "manifest_decode" => &[
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}"#,
        ],
        "quantity" => &[
            "100m",
            "1Gi",
            "1.5",
            "2e3",
            "128974848",
            "129e6",
            "123Mi",
            "0.1Ki",
        ],
        "duration" => &["2s", "1h30m", "500ms", "1.5h", "0", "3µs", "2m3s"],
        "cri_log_line" => &[
            "2024-01-01T00:00:00.000000001Z stdout F hello\n",
            "2024-01-01T00:00:00Z stderr P part",
            r#"{"log":"hello\n","stream":"stdout","time":"2024-01-01T00:00:00.000000001Z"}"#,
        ],
        _ => &[],
    }
}

/// Runs `targets` (all when empty) for `seconds` each.
pub fn run(seconds: u64, targets: &[String]) -> Result<()> {
    let crate_dir = project_root().join("kubelet-core");
    let selected: Vec<&str> = if targets.is_empty() {
        TARGETS.to_vec()
    } else {
        targets.iter().map(String::as_str).collect()
    };
    let mut summary = Vec::new();
    for target in selected {
        if !TARGETS.contains(&target) {
            bail!("unknown fuzz target {target:?}; the targets are {TARGETS:?}");
        }
        let corpus = crate_dir.join("fuzz/corpus").join(target);
        seed(&corpus, target)?;
        println!("fuzz: {target} for {seconds}s");
        let output = Command::new("cargo")
            .args(["+nightly", "fuzz", "run", target, "--"])
            .arg(format!("-max_total_time={seconds}"))
            .current_dir(&crate_dir)
            .output()
            .context(
                "running `cargo +nightly fuzz` (install it with `cargo install cargo-fuzz`)",
            )?;
        let log = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            bail!(
                "fuzz target {target} failed ({}); the input is under kubelet-core/fuzz/artifacts/{target}/\n{}",
                output.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        summary.push((target, executions(&log)));
    }
    println!("fuzz: {seconds}s per target, no crash");
    for (target, runs) in summary {
        let runs = runs.map_or_else(|| "?".to_owned(), |r| r.to_string());
        println!("  {target:<16} {runs:>12} executions");
    }
    Ok(())
}

/// Writes the seeds (once) into a target's corpus directory.
fn seed(corpus: &Path, target: &str) -> Result<()> {
    fs::create_dir_all(corpus).with_context(|| format!("creating {}", corpus.display()))?;
    for (i, s) in seeds(target).iter().enumerate() {
        fs::write(corpus.join(format!("seed-{i}")), s)?;
    }
    if target == "manifest_decode" {
        let examples = project_root().join("examples/manifests");
        for entry in fs::read_dir(&examples).with_context(|| examples.display().to_string())? {
            let path = entry?.path();
            if let Some(name) = path.file_name() {
                fs::copy(&path, corpus.join(name))?;
            }
        }
    }
    Ok(())
}

/// libFuzzer's closing `Done <n> runs in <s> second(s)`.
fn executions(log: &str) -> Option<u64> {
    log.lines().rev().find_map(|l| {
        l.strip_prefix("Done ")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executions_from_the_closing_line() {
        let log = "#1024 pulse  cov: 10\nDone 123456 runs in 11 second(s)\n";
        assert_eq!(executions(log), Some(123_456));
        assert_eq!(executions("crashed\n"), None);
    }
}
