//! `cargo xtask fuzz`: runs each cargo-fuzz target (issue 16 item 4) for a while and prints
//! its executions; a crash fails the command and leaves the input under
//! `<crate>/fuzz/artifacts/<target>/`.
//!
//! The targets live in two cargo-fuzz crates, each its own workspace: `kubelet-core/fuzz`
//! (kubelet-core's and kubelet-volumes' parsers) and `kubelet-bin/fuzz` (the
//! `KubeletConfiguration` file and the API watch-event decoder, which need the kubelet
//! library). Each target's body is in `<crate>/fuzz/harness/<target>.rs`; the workspace's
//! `tests/integration/fuzz_corpus.rs` run it over the checked-in inputs `<crate>/fuzz/seeds/<target>/`
//! on stable, which is what CI does (it has no nightly).
//!
//! Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). The corpus
//! (`<crate>/fuzz/corpus/<target>/`, not in git) starts from the seeds (and, for the
//! manifest targets, `examples/manifests`) and grows from run to run.

use std::{fs, path::Path, process::Command};

use anyhow::{Context, Result, bail};
use xtask::project_root;

/// The targets and the crate whose `fuzz/` holds each.
pub const TARGETS: [(&str, &str); 9] = [
    ("manifest_decode", "kubelet-core"),
    ("manifest_dir", "kubelet-core"),
    ("quantity", "kubelet-core"),
    ("duration", "kubelet-core"),
    ("cri_log_line", "kubelet-core"),
    ("atomic_writer", "kubelet-core"),
    ("subpath", "kubelet-core"),
    ("kubelet_config", "kubelet-bin"),
    ("watch_event", "kubelet-bin"),
];

/// How cargo-fuzz builds the targets (its defaults when `None`).
pub struct Build {
    /// `--sanitizer`.
    pub sanitizer: Option<String>,
    /// `--codegen-units`.
    pub codegen_units: Option<u32>,
}

impl Build {
    /// The `cargo fuzz run` options for these settings.
    fn options(&self) -> Vec<String> {
        let mut options = Vec::new();
        if let Some(sanitizer) = &self.sanitizer {
            options.extend(["--sanitizer".to_owned(), sanitizer.clone()]);
        }
        if let Some(units) = self.codegen_units {
            options.extend(["--codegen-units".to_owned(), units.to_string()]);
        }
        options
    }
}

/// Runs `targets` (all when empty) for `seconds` each, built as `build` says.
pub fn run(build: &Build, seconds: u64, targets: &[String]) -> Result<()> {
    let names: Vec<&str> = TARGETS.iter().map(|(t, _)| *t).collect();
    let selected: Vec<&str> = if targets.is_empty() {
        names.clone()
    } else {
        targets.iter().map(String::as_str).collect()
    };
    let mut summary = Vec::new();
    for target in selected {
        let Some((_, krate)) = TARGETS.iter().find(|(t, _)| *t == target) else {
            bail!("unknown fuzz target {target:?}; the targets are {names:?}");
        };
        let crate_dir = project_root().join(krate);
        let corpus = crate_dir.join("fuzz/corpus").join(target);
        seed(&crate_dir, &corpus, target)?;
        println!("fuzz: {target} for {seconds}s");
        let output = Command::new("cargo")
            .args(["+nightly", "fuzz", "run"])
            .args(build.options())
            .args([target, "--"])
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
                "fuzz target {target} failed ({}); the input is under {krate}/fuzz/artifacts/{target}/\n{}",
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

/// Copies the checked-in seeds (and for the manifest decoder the example manifests) into a
/// target's corpus directory.
fn seed(crate_dir: &Path, corpus: &Path, target: &str) -> Result<()> {
    fs::create_dir_all(corpus).with_context(|| format!("creating {}", corpus.display()))?;
    let mut dirs = vec![crate_dir.join("fuzz/seeds").join(target)];
    if target == "manifest_decode" {
        dirs.push(project_root().join("examples/manifests"));
    }
    for dir in dirs {
        for entry in fs::read_dir(&dir).with_context(|| dir.display().to_string())? {
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
