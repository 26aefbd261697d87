//! `cargo xtask`: the project's automation commands (`cargo xtask --help`).

mod bench;
mod ci;
mod conformance;
mod demo;
mod fuzz;
mod kubeadm;

use std::{path::PathBuf, process::ExitCode, sync::mpsc, time::Instant};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use xtask::{apiserver, images, target_dir, testbed};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "Automation for the Rust kubelet workspace"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// A private containerd (CRI, CNI bridge, local images) for manual testing.
    #[command(subcommand)]
    Testbed(TestbedCmd),
    /// Build the busybox and pause OCI image tarballs (cached by content).
    Images {
        /// Where to put them [default: target/testbed/images].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Build kube-apiserver v1.20.2 from Debian's source package for the end-to-end tests, once:
    /// cached in ~/.cache/rust-kubelet (needs root for apt; 10-15 min cold).
    Apiserver {
        /// Also build these from the same tree: commands under cmd/ (kubelet, kubeadm,
        /// kube-controller-manager, …), agnhost, ginkgo or e2e.test.
        #[arg(long, value_delimiter = ',')]
        also: Vec<String>,
    },
    /// The real kubeadm v1.20.2 (init, join, certificate rotation) on two nodes running this
    /// kubelet, all inside namespaces the scenario creates (~15 min; not part of `ci`).
    Kubeadm {
        /// Run this kubelet binary on the nodes instead of building package kubelet-bin
        /// (for example the static release build).
        #[arg(long)]
        kubelet: Option<PathBuf>,
    },
    /// The upstream conformance suite (e2e.test v1.20.2) on a one-node kubeadm cluster running
    /// this kubelet or, with --kubelet upstream, the Go kubelet; writes
    /// target/conformance/results.md. Not part of `ci`.
    Conformance(conformance::Args),
    /// Run examples/manifests as static pods with the kubelet on a private containerd.
    Demo {
        /// Use this kubelet binary instead of building package kubelet-bin.
        #[arg(long)]
        kubelet: Option<PathBuf>,
    },
    /// What CI runs: packages, apiserver, fmt, clippy, doc, tests; stops at the first failure.
    Ci,
    /// Pod start latency and memory of the release kubelet against a raw-CRI baseline from the
    /// same run; writes target/bench/bench.md and bench.json.
    Bench(bench::Args),
    /// Half an hour of pod churn over 110 steady pods with the release kubelet's RSS, threads,
    /// open fds and mounts sampled; fails unless each stays flat within 10 % after the warm-up.
    /// Writes target/soak/soak.md and soak.json. Not part of `ci`.
    Soak(bench::soak::Args),
    /// List the functions the idle release kubelet runs (gdb, on a private containerd) in
    /// kubelet-bin/idle-functions.txt, which its release link places together. Not part of
    /// `ci`; rerun after a toolchain or dependency update (the bench reports how many listed
    /// names the binary still defines).
    IdleOrder(bench::idle_order::Args),
    /// Run the cargo-fuzz targets of kubelet-core/fuzz and kubelet-bin/fuzz (nightly +
    /// cargo-fuzz) for a while each and print their executions; a crash fails with the input
    /// saved under <crate>/fuzz/artifacts. CI replays the checked-in inputs instead
    /// (tests/integration/fuzz_corpus.rs).
    Fuzz {
        /// How long each target runs.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// cargo-fuzz's `--sanitizer` (`address` by default; `none` builds the kubelet-bin
        /// targets in about half the time, and a panic is still a crash).
        #[arg(long)]
        sanitizer: Option<String>,
        /// cargo-fuzz's `--codegen-units` (1 by default: slower to build, faster to run).
        #[arg(long)]
        codegen_units: Option<u32>,
        /// Targets to run [default: all].
        targets: Vec<String>,
    },
}

#[derive(Subcommand)]
enum TestbedCmd {
    /// Start a testbed, print its CRI endpoint and keep it until Ctrl-C.
    Up {
        /// The testbed's directory [default: target/testbed/up].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Testbed(TestbedCmd::Up { dir }) => testbed_up(dir),
        Cmd::Images { dir } => {
            testbed::ensure_packages()?;
            let dir = dir.unwrap_or_else(images::default_dir);
            let started = Instant::now();
            let tarballs = images::ensure_images(&dir)?;
            println!("images ready in {:.2?}:", started.elapsed());
            println!("  {} ({})", tarballs.pause.display(), images::PAUSE_REF);
            println!(
                "  {} ({})",
                tarballs.busybox.display(),
                images::BUSYBOX_REFS.join(", ")
            );
            Ok(())
        }
        Cmd::Apiserver { also } => {
            let also: Vec<&str> = also.iter().map(String::as_str).collect();
            for built in apiserver::ensure_commands(&also)? {
                println!("{}", built.display());
            }
            let binary = apiserver::ensure_built()?;
            println!(
                "kube-apiserver {}: {}",
                apiserver::VERSION,
                binary.display()
            );
            Ok(())
        }
        Cmd::Demo { kubelet } => demo::run(kubelet),
        Cmd::Kubeadm { kubelet } => kubeadm::run(kubelet),
        Cmd::Conformance(args) => conformance::run(args),
        Cmd::Ci => ci::run(),
        Cmd::Bench(args) => bench::run(args),
        Cmd::Soak(args) => bench::soak::run(args),
        Cmd::IdleOrder(args) => bench::idle_order::run(args),
        Cmd::Fuzz {
            seconds,
            sanitizer,
            codegen_units,
            targets,
        } => fuzz::run(
            &fuzz::Build {
                sanitizer,
                codegen_units,
            },
            seconds,
            &targets,
        ),
    }
}

fn testbed_up(dir: Option<PathBuf>) -> Result<()> {
    let interrupted = interrupts()?;
    let dir = dir.unwrap_or_else(|| target_dir().join("testbed").join("up"));
    let started = Instant::now();
    let testbed = testbed::Testbed::start(&dir)?;
    let socket = testbed.socket().display();
    println!("testbed ready in {:.2?}", started.elapsed());
    println!("  endpoint: {}", testbed.endpoint());
    println!("  log:      {}", testbed.log().display());
    println!(
        "  network:  bridge {} subnet {}",
        testbed.bridge(),
        testbed.subnet()
    );
    println!("  try:      ctr -a {socket} -n k8s.io images ls");
    println!("Ctrl-C stops containerd and removes its pods.");
    interrupted.recv().context("signal thread ended")?;
    println!("stopping");
    testbed.shutdown()
}

/// Returns a channel that receives a message on each SIGINT (Ctrl-C) or SIGTERM.
///
/// The testbed and the demo's kubelet run in their own process groups, so a Ctrl-C in the
/// terminal reaches only xtask, which then stops them in order.
pub(crate) fn interrupts() -> Result<mpsc::Receiver<()>> {
    let (tx, rx) = mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("cannot handle Ctrl-C")?;
    Ok(rx)
}
