//! `cargo xtask ci`: packages, apiserver, fmt, clippy, doc and tests, in that order, stopping at
//! the first failure. `.ci/run` calls exactly this.
//!
//! The apiserver step builds the real kube-apiserver when it is not cached (10-15 min once), and
//! the test step runs with [`apiserver::REQUIRE_ENV`] set, so end-to-end tests that need the
//! server fail instead of skipping.

use std::{
    env,
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context, Result, bail};
use xtask::{apiserver, project_root, testbed};

/// A cargo invocation that is one CI step.
struct Step {
    name: &'static str,
    args: &'static [&'static str],
    rustdocflags: Option<&'static str>,
}

const STEPS: &[Step] = &[
    Step {
        name: "fmt",
        args: &["fmt", "--all", "--", "--check"],
        rustdocflags: None,
    },
    Step {
        name: "clippy",
        args: &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        rustdocflags: None,
    },
    Step {
        name: "doc",
        args: &["doc", "--workspace", "--no-deps"],
        rustdocflags: Some("-D warnings"),
    },
    Step {
        name: "test",
        args: &["test", "--workspace"],
        rustdocflags: None,
    },
];

pub(crate) fn run() -> Result<()> {
    let started = Instant::now();
    let total = STEPS.len() + 2;
    header(
        1,
        total,
        "packages",
        "apt-get install, only what is missing",
    );
    testbed::ensure_packages().context("ci step `packages` failed")?;
    header(
        2,
        total,
        "apiserver",
        "build kube-apiserver for the end-to-end tests unless cached",
    );
    let binary = apiserver::ensure_built().context("ci step `apiserver` failed")?;
    println!("--- apiserver ok: {}", binary.display());

    let mut counts = Counts::default();
    for (i, step) in STEPS.iter().enumerate() {
        let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        // CI builds each crate once: incremental caches would only cost disk (8.5 GB here).
        cmd.args(step.args)
            .current_dir(project_root())
            .env("CARGO_INCREMENTAL", "0");
        let mut shown = format!("cargo {}", step.args.join(" "));
        if let Some(flags) = step.rustdocflags {
            let mut all = env::var("RUSTDOCFLAGS").unwrap_or_default();
            all.push(' ');
            all.push_str(flags);
            cmd.env("RUSTDOCFLAGS", all.trim());
            shown = format!("RUSTDOCFLAGS='{flags}' {shown}");
        }
        if step.name == "test" {
            cmd.env(apiserver::REQUIRE_ENV, "1");
            shown = format!("{}=1 {shown}", apiserver::REQUIRE_ENV);
        }
        header(i + 3, total, step.name, &shown);
        let step_started = Instant::now();
        let ok = if step.name == "test" {
            run_counting(&mut cmd, &mut counts)?
        } else {
            cmd.status()
                .with_context(|| format!("cannot run {shown}"))?
                .success()
        };
        if !ok {
            bail!(
                "ci step `{}` failed after {:.0?}: {shown}",
                step.name,
                step_started.elapsed()
            );
        }
        println!("--- {} ok in {:.1?}", step.name, step_started.elapsed());
    }
    eprintln!(
        "==> ci: all {total} steps passed in {:.0?}",
        started.elapsed()
    );
    // The closing line: the test totals over every test binary.
    println!(
        "ci: {} passed, {} failed, {} skipped",
        counts.passed, counts.failed, counts.ignored
    );
    Ok(())
}

fn header(n: usize, total: usize, name: &str, what: &str) {
    println!("\n==> ci [{n}/{total}] {name}: {what}");
}

/// Totals of libtest's `test result:` lines.
#[derive(Default)]
struct Counts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

/// Runs `cmd`, echoing its stdout while adding up the `test result:` lines; returns success.
fn run_counting(cmd: &mut Command, counts: &mut Counts) -> Result<bool> {
    let mut child = cmd.stdout(Stdio::piped()).spawn()?;
    let stdout = child.stdout.take().context("no stdout")?;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            for part in rest.split(';') {
                let mut words = part.split_whitespace().rev();
                let (Some(what), Some(n)) = (words.next(), words.next()) else {
                    continue;
                };
                let Ok(n) = n.parse::<u64>() else { continue };
                match what {
                    "passed" => counts.passed += n,
                    "failed" => counts.failed += n,
                    "ignored" => counts.ignored += n,
                    _ => {}
                }
            }
        }
    }
    Ok(child.wait()?.success())
}
