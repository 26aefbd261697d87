//! `cargo xtask bench --micro`: the Criterion micro-benchmarks of the hot paths, in each
//! crate's `benches/` (manifest decode and container hash in `kubelet-core`, the relist diff
//! at 1,000 containers in `kubelet-pleg`, status generation in `kubelet-status`).

use std::{env, fs, path::Path, process::Command};

use anyhow::{Context, Result, bail};
use xtask::project_root;

/// `(package, bench target)` of every micro-benchmark.
const BENCHES: [(&str, &str); 3] = [
    ("kubelet-core", "hot_paths"),
    ("kubelet-pleg", "relist_diff"),
    ("kubelet-status", "generate"),
];

/// Runs every micro-benchmark (Criterion's `--quick` mode with `quick`), echoes the output and
/// writes it to `out/micro.txt`.
pub(crate) fn run(out: &Path, quick: bool) -> Result<()> {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut report = String::new();
    for (package, bench) in BENCHES {
        println!("==> cargo bench -p {package} --bench {bench}");
        let mut cmd = Command::new(&cargo);
        cmd.args(["bench", "-p", package, "--bench", bench, "--"])
            .current_dir(project_root());
        if quick {
            cmd.arg("--quick");
        }
        let output = cmd.output().context("cannot run cargo bench")?;
        let text = String::from_utf8_lossy(&output.stdout);
        print!("{text}");
        if !output.status.success() {
            bail!(
                "cargo bench -p {package} failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        report.push_str(&format!("## {package} ({bench})\n\n{text}\n"));
    }
    fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    fs::write(out.join("micro.txt"), report)?;
    println!("==> wrote {}", out.join("micro.txt").display());
    Ok(())
}
