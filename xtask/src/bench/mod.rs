//! `cargo xtask bench`: pod start latency, exit detection, memory and CPU of the kubelet against
//! baselines measured in the same run (goals G1, G2, G3, G4, G5, G6 and G8 of `performance.md`,
//! §3.1 ground rules), plus the probe row of issue 5.
//!
//! One private containerd (pod network on the testbed's CNI bridge) serves both arms:
//!
//! - **A, the kubelet**: the release `kubelet`, started once on an empty manifest directory.
//!   The agent writes manifests atomically (hidden temporary file, then rename) and times
//!   from the rename until CRI `ListContainers` shows each pod's container `RUNNING`; it then
//!   deletes them and waits until the kubelet has removed the pods from the runtime.
//! - **B, raw CRI**: the same long-lived agent replays, on its own connection, the requests
//!   the kubelet's `sync_pod` sends for the same manifest (captured from the kubelet's own
//!   code, see `kubelet-cri/examples/cri_replay`), timed from the first call until the same
//!   poller sees the container running; then `StopPodSandbox` + `RemovePodSandbox`. The
//!   kubelet is frozen (SIGSTOP) meanwhile: B's pods carry its labels, and it would otherwise
//!   kill them as pods no source wants.
//!
//! Scenarios, each alternating A and B (ABAB…) after a warm-up: G1, single pods in sequence;
//! G2, batches of 110 pods at once (B at the same parallelism: one task per pod). G4 samples
//! the kubelet's and containerd's `VmRSS` and `Pss` idle and with the batch running; G5 their
//! CPU over a steady window with the last batch running. G3 times a container's own exit to
//! its terminated status against containerd's `/tasks/exit` event (see [`exit`]). Probes (issue
//! 5, 17): 50 pods × 2 probes at a 1 s period, each run's scheduled vs actual start, skipped runs
//! and the kubelet's CPU next to containerd's (see [`probes`]; `--probes` runs only that). G6 and G8 run without containerd (see [`offline`]). The table
//! goes to stdout and, with every sample, to `bench.md` and `bench.json`.

mod agent;
mod breakdown;
mod chart;
mod cluster;
mod cpu;
mod exit;
mod exit_path;
pub(crate) mod idle_order;
mod kubelet;
mod kubelet_log;
mod micro;
mod offline;
mod probes;
mod report;
mod rss;
mod scenario;
pub(crate) mod soak;
mod stats;

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
    sync::mpsc::Receiver,
    thread,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use xtask::{project_root, target_dir, testbed};

use self::{
    agent::Agent,
    kubelet::{Dirs, Kubelet},
    report::Memory,
    scenario::Runs,
};

/// How long the kubelet settles before a memory sample.
const SETTLE: Duration = Duration::from_secs(5);

/// How long after the bench's last pods the idle sample waits: the kubelet gives its code
/// pages back after 10 s under 1 % of a core (kubelet-bin's `idle_trim`), and what idle runs
/// faults back in within seconds.
const QUIET: Duration = Duration::from_secs(30);

/// Options of `cargo xtask bench`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// A short run (10 single-pod rounds, 2 batch blocks per arm, 20 s CPU and probe windows
    /// instead of 60 s), a few minutes.
    #[arg(long)]
    quick: bool,
    /// Where bench.md and bench.json go [default: target/bench].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Single-pod rounds per arm [default: 10 with --quick, else 30].
    #[arg(long)]
    rounds: Option<usize>,
    /// Batch blocks per arm [default: 2 with --quick, else 5].
    #[arg(long)]
    blocks: Option<usize>,
    /// Pods per batch (G2, G4, G5).
    #[arg(long, default_value_t = 110)]
    batch: usize,
    /// Seconds of the steady CPU window with the last batch running (G5) [default: 20 with
    /// --quick, else 60].
    #[arg(long)]
    cpu_window: Option<u64>,
    /// Use this kubelet binary instead of building package kubelet-bin in release.
    #[arg(long)]
    kubelet: Option<PathBuf>,
    /// Do not build: use the release binaries already in the target directory.
    #[arg(long)]
    prebuilt: bool,
    /// Run only the Criterion micro-benchmarks of the hot paths (no containerd); output to
    /// stdout and `micro.txt`.
    #[arg(long)]
    micro: bool,
    /// Run only the cluster-mode bench (G11, G13 and the kubelet's memory against the real
    /// kube-apiserver, built by `cargo xtask apiserver` when missing); writes `cluster.json`.
    #[arg(long)]
    cluster: bool,
    /// Stop after the memory samples (idle, G1, G2 with the batch running, idle again) and
    /// print the memory rows with the kubelet's CPU per pod; a short run for memory work.
    #[arg(long)]
    memory: bool,
    /// Run only G3 (exit detection, 3 blocks of 10 pods) and print its rows; a short run for
    /// work on the exit path.
    #[arg(long)]
    exit: bool,
    /// Run only the probe scenario (50 pods × 2 probes at 1 s: httpGet, tcpSocket and exec
    /// runs with their scheduled vs actual starts, skipped runs, the kubelet's CPU) and print
    /// its rows; a short run for work on probe scheduling.
    #[arg(long)]
    probes: bool,
}

/// Runs the benchmark and writes the report.
pub(crate) fn run(args: Args) -> Result<()> {
    let interrupted = crate::interrupts()?;
    let began = Instant::now();
    let rounds = args.rounds.unwrap_or(if args.quick { 10 } else { 30 });
    let blocks = args.blocks.unwrap_or(if args.quick { 2 } else { 5 });
    let batch = args.batch.max(1);
    let cpu_window =
        Duration::from_secs(args.cpu_window.unwrap_or(if args.quick { 20 } else { 60 }));
    let out = args.out.unwrap_or_else(|| target_dir().join("bench"));
    if args.micro {
        return micro::run(&out, args.quick);
    }

    // protoc before cargo builds k8s-cri; containerd and friends for the testbed.
    testbed::ensure_packages()?;
    let offline = !(args.memory || args.cluster || args.exit || args.probes);
    let (kubelet_bin, agent_bin) = build(args.kubelet, args.prebuilt, offline, !args.probes)?;
    if args.cluster {
        return cluster::run(&kubelet_bin, &agent_bin, rounds, &out, &interrupted);
    }

    let (g6, g8) = if args.memory || args.exit || args.probes {
        (Value::Null, Value::Null)
    } else {
        offline_runs(args.quick, batch)?
    };

    let work = target_dir().join("testbed").join("bench");
    let dirs = Dirs::fresh(&work)?;
    println!("==> starting a private containerd in {}", work.display());
    let testbed = testbed::Testbed::start(&work.join("containerd"))?;
    let containerd = testbed.pid().context("containerd is not running")?;
    let endpoint = testbed.endpoint();

    println!("==> starting the kubelet ({})", kubelet_bin.display());
    let mut kubelet = Kubelet::start(&kubelet_bin, &endpoint, &dirs, scenario::NODE)?;
    if args.probes {
        let probes = probe_window(
            args.quick,
            &mut kubelet,
            &testbed,
            &dirs,
            &work,
            &interrupted,
        )?;
        println!("\n{}\n\n{}\n", report::text(&probes.rows()), probes.note());
        fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
        fs::write(
            out.join("probes.json"),
            serde_json::to_string_pretty(&probes.to_json())?,
        )?;
        kubelet.stop();
        return testbed.shutdown();
    }

    let mut agent = Agent::spawn(&agent_bin, &endpoint, &dirs)?;
    println!(
        "    runtime {}; kubelet log {}",
        agent.runtime,
        kubelet.log().display()
    );

    if args.exit {
        println!("==> G3: containers exiting on their own, 3 blocks of 10 pods");
        let g3 = exit::run(&kubelet, testbed.socket(), &dirs.manifests, 3, &interrupted)?;
        let exit_path = exit_path::ExitPath::new(&fs::read_to_string(kubelet.log())?, &g3.exits);
        println!(
            "\n{}\n\n{}",
            report::text(&exit::rows(&g3)),
            exit_path.markdown()
        );
        drop(agent);
        kubelet.stop();
        return testbed.shutdown();
    }

    let mut mem = Memory {
        idle_functions_found: idle_order::listed_in(&kubelet_bin)?,
        ..Memory::default()
    };
    thread::sleep(SETTLE);
    (mem.kubelet_idle, mem.containerd_idle) =
        (rss::sample(kubelet.pid())?, rss::sample(containerd)?);
    let cpu_idle = cpu::seconds(kubelet.pid())?;

    println!("==> G1: single pod, {rounds} rounds per arm (A = kubelet, B = raw CRI)");
    let g1 = scenario::single_pod(&mut agent, &kubelet, &dirs.manifests, rounds, &interrupted)?;
    check(&interrupted, &mut kubelet)?;
    let start_path = breakdown::Breakdown::new(&fs::read_to_string(kubelet.log())?, &g1);
    println!("\n{}", start_path.markdown());

    println!("==> G2: batches of {batch} pods, {blocks} blocks per arm");
    let kubelet_pid = kubelet.pid();
    let mut busy = Vec::new();
    let mut g5 = cpu::Window::default();
    let g2 = scenario::batch(
        &mut agent,
        &kubelet,
        &dirs.manifests,
        batch,
        blocks,
        &interrupted,
        |i| {
            thread::sleep(SETTLE);
            busy.push((rss::sample(kubelet_pid)?, rss::sample(containerd)?));
            if i + 1 == blocks && !args.memory {
                println!("    G5: CPU of the kubelet and containerd over {cpu_window:?}");
                g5 = cpu::window(&[kubelet_pid, containerd], cpu_window)?;
            }
            Ok(())
        },
    )?;
    (mem.kubelet_busy, mem.containerd_busy) = busy.last().copied().unwrap_or_default();
    check(&interrupted, &mut kubelet)?;

    thread::sleep(SETTLE);
    (mem.kubelet_after, mem.containerd_after) =
        (rss::sample(kubelet.pid())?, rss::sample(containerd)?);
    let pods_started = rounds + blocks * batch;
    mem.kubelet_cpu_ms_per_pod =
        (cpu::seconds(kubelet.pid())? - cpu_idle - g5.cpu_seconds(0)) * 1e3 / pods_started as f64;
    thread::sleep(QUIET - SETTLE);
    (mem.kubelet_quiet, mem.containerd_quiet) =
        (rss::sample(kubelet.pid())?, rss::sample(containerd)?);
    check(&interrupted, &mut kubelet)?;
    if args.memory {
        println!("\n{}\n", report::text(&report::memory_rows(&mem, batch)));
        drop(agent);
        kubelet.stop();
        return testbed.shutdown();
    }

    println!(
        "==> G3: containers exiting on their own, {exit_blocks} blocks of 10 pods",
        exit_blocks = if args.quick { 1 } else { 3 }
    );
    let g3 = exit::run(
        &kubelet,
        testbed.socket(),
        &dirs.manifests,
        if args.quick { 1 } else { 3 },
        &interrupted,
    )?;
    check(&interrupted, &mut kubelet)?;
    let exit_path = exit_path::ExitPath::new(&fs::read_to_string(kubelet.log())?, &g3.exits);

    let probes = probe_window(
        args.quick,
        &mut kubelet,
        &testbed,
        &dirs,
        &work,
        &interrupted,
    )?;

    let mut rows = report::rows(&g1, &g2, batch, &mem);
    rows.extend(exit::rows(&g3));
    rows.extend(probes.rows());
    rows.extend(cpu::rows(&g5, batch));
    rows.extend(offline::relist_rows(&g6));
    rows.extend(offline::sync_rows(&g8));
    let table = report::text(&rows);
    println!("\n{table}\n");
    let notes = format!(
        "{}\n{}\n\n{}\n{}",
        notes(&g1, &busy),
        probes.note(),
        start_path.markdown(),
        exit_path.markdown()
    );
    println!("{notes}");

    fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let params = json!({
        "quick": args.quick, "rounds": rounds, "blocks": blocks, "batch": batch,
        "kubelet": kubelet_bin, "seconds": began.elapsed().as_secs_f64(),
    });
    let env = environment(&agent.runtime);
    fs::write(
        out.join("bench.md"),
        markdown(&report::markdown(&rows), &notes, &params, &env),
    )?;
    let data = json!({
        "params": params,
        "env": env,
        "rows": report::json(&rows),
        "g1": runs_json(&g1),
        "g1_start_path": start_path.to_json(),
        "g2": runs_json(&g2),
        "g3_exit_detect_ms": g3.detect_ms,
        "g3_after_task_delete_ms": g3.after_delete_ms,
        "g3_exit_path": exit_path.to_json(),
        "memory_kib": {
            "kubelet_idle": mem.kubelet_idle.to_json(),
            "containerd_idle": mem.containerd_idle.to_json(),
            "kubelet_busy": busy.iter().map(|(k, _)| k.to_json()).collect::<Vec<_>>(),
            "containerd_busy": busy.iter().map(|(_, c)| c.to_json()).collect::<Vec<_>>(),
            "kubelet_after": mem.kubelet_after.to_json(),
            "containerd_after": mem.containerd_after.to_json(),
            "kubelet_quiet": mem.kubelet_quiet.to_json(),
            "containerd_quiet": mem.containerd_quiet.to_json(),
        },
        "idle_functions_found": mem.idle_functions_found,
        "kubelet_sync_calls": g1.b.first().map(|s| s.calls.clone()).unwrap_or_default(),
        "probes": probes.to_json(),
        "cpu": g5.to_json(&["kubelet", "containerd"]),
        "relist": g6,
        "sync_throughput": g8,
    });
    fs::write(out.join("bench.json"), serde_json::to_string_pretty(&data)?)?;
    chart::write(
        &out.join("start-latency.png"),
        [&g1.a_totals(), &g1.b_totals()],
        [&g2.a_pods(), &g2.b_pods()],
    )?;
    println!(
        "==> wrote {}, bench.json and start-latency.png in {:.0?}",
        out.join("bench.md").display(),
        began.elapsed()
    );

    drop(agent);
    kubelet.stop();
    testbed.shutdown()?;
    idle_order::check_list(mem.idle_functions_found)
}

/// The probe scenario (see [`probes`]) over a 20 s window with `quick`, else 60 s.
fn probe_window(
    quick: bool,
    kubelet: &mut Kubelet,
    testbed: &testbed::Testbed,
    dirs: &Dirs,
    work: &Path,
    interrupted: &Receiver<()>,
) -> Result<probes::Probes> {
    let window = Duration::from_secs(if quick { 20 } else { 60 });
    println!(
        "==> probes: {} pods × 2 probes at 1 s, {window:?} window",
        probes::PODS
    );
    let containerd = testbed.pid().context("containerd is not running")?;
    probes::run(
        kubelet,
        containerd,
        testbed.socket(),
        &dirs.manifests,
        work,
        window,
        interrupted,
    )
}

/// G6 and G8: the relist and sync-loop examples on fakes, without containerd.
fn offline_runs(quick: bool, batch: usize) -> Result<(Value, Value)> {
    println!("==> G6: relist at 500 pods / 1000 containers on a fake CRI server");
    let relist_rounds = if quick { 50 } else { 200 };
    let g6 = offline::run(
        &example("relist_cost"),
        &["--pods", "500", "--rounds", &relist_rounds.to_string()].map(String::from),
    )?;
    println!("==> G8: sync-loop throughput on the fake runtime");
    let sync_rounds = if quick { 5 } else { 20 };
    let g8 = offline::run(
        &example("sync_throughput"),
        &[
            "--pods",
            &batch.to_string(),
            "--rounds",
            &sync_rounds.to_string(),
        ]
        .map(String::from),
    )?;

    Ok((g6, g8))
}

/// Builds the release kubelet (unless given), the agent (with `agent`) and, with `offline`,
/// G6's and G8's examples; returns the kubelet's and the agent's paths.
pub(crate) fn build(
    kubelet: Option<PathBuf>,
    prebuilt: bool,
    offline: bool,
    agent: bool,
) -> Result<(PathBuf, PathBuf)> {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let release = target_dir().join("release");
    if prebuilt {
        return Ok((
            kubelet.unwrap_or_else(|| release.join("kubelet")),
            example("cri_replay"),
        ));
    }
    let mut builds = Vec::new();
    if agent {
        builds.push(vec!["-p", "kubelet-cri", "--example", "cri_replay"]);
    }
    if offline {
        builds.push(vec![
            "-p",
            "kubelet-bin",
            "--example",
            "relist_cost",
            "--example",
            "sync_throughput",
        ]);
    }
    if kubelet.is_none() {
        builds.insert(0, vec!["-p", "kubelet-bin", "--bin", "kubelet"]);
    }
    for args in builds {
        println!("==> cargo build --release {}", args.join(" "));
        let status = Command::new(&cargo)
            .arg("build")
            .arg("--release")
            .args(&args)
            .current_dir(project_root())
            .status()?;
        if !status.success() {
            bail!("cannot build {} ({status})", args[1]);
        }
    }
    Ok((
        kubelet.unwrap_or_else(|| release.join("kubelet")),
        release.join("examples").join("cri_replay"),
    ))
}

/// The release build of example `name`.
fn example(name: &str) -> PathBuf {
    target_dir().join("release").join("examples").join(name)
}

/// Fails on Ctrl-C or when the kubelet has died.
fn check(interrupted: &Receiver<()>, kubelet: &mut Kubelet) -> Result<()> {
    if interrupted.try_recv().is_ok() {
        bail!("interrupted");
    }
    kubelet.check_alive()
}

fn runs_json(runs: &Runs) -> Value {
    json!({
        "kubelet_total_ms": runs.a_totals(),
        "raw_total_ms": runs.b_totals(),
        "minimal_total_ms": runs.c_totals(),
        "kubelet_pod_ms": runs.a.iter().map(|s| &s.running_ms).collect::<Vec<_>>(),
        "raw_pod_ms": runs.b.iter().map(|s| &s.running_ms).collect::<Vec<_>>(),
        "kubelet_reported_pod_ms": runs.a.iter().map(|s| &s.reported_ms).collect::<Vec<_>>(),
        "raw_start_container_returned_ms": runs.b.iter().map(|s| &s.started_ms).collect::<Vec<_>>(),
    })
}

/// What the table does not say: how B is built, how much of B is the poller, the status lag
/// and the kubelet's memory after each batch.
fn notes(g1: &Runs, busy: &[(rss::Mem, rss::Mem)]) -> String {
    let returned: Vec<f64> = g1.b.iter().flat_map(|s| s.started_ms.clone()).collect();
    let calls =
        g1.b.first()
            .map(|s| s.calls.join(" → "))
            .unwrap_or_default();
    let lag: Vec<f64> =
        g1.a.iter()
            .flat_map(|s| s.reported_ms.iter().zip(&s.running_ms).map(|(r, c)| r - c))
            .collect();
    format!(
        "B replays the kubelet's sync_pod sequence: {calls} (the kubelet frozen meanwhile).\n\
         Both arms end when ListContainers(RUNNING), polled every 2 ms, shows the container; \
         B's StartContainer returned at p50 {:.1} ms (running seen at p50 {:.1} ms).\n\
         The kubelet's /pods said Running p50 {:.1} ms (p99 {:.1} ms) after CRI did (polled \
         only after that, every 2 ms).\n\
         Kubelet VmRSS with the batch running, per block: {} MiB.",
        stats::median(&returned),
        stats::median(&g1.b_totals()),
        stats::median(&lag),
        stats::percentile(&lag, 99.0),
        busy.iter()
            .map(|(k, _)| format!("{:.1}", k.rss_kib as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

fn environment(runtime: &str) -> Value {
    let read = |p: &str| fs::read_to_string(p).unwrap_or_default().trim().to_owned();
    let git = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(project_root())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    json!({
        "unix_time": SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "kernel": read("/proc/sys/kernel/osrelease"),
        "cpus": thread::available_parallelism().map_or(0, usize::from),
        "loadavg": read("/proc/loadavg"),
        "runtime": runtime,
        "git": git,
    })
}

fn markdown(table: &str, notes: &str, params: &Value, env: &Value) -> String {
    let s = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    format!(
        "# cargo xtask bench\n\n\
         Commit {}, kubelet `{}`, {}, kernel {}, {} CPUs, load at the end {}. Mode: {}, {} \
         single-pod rounds and {} batch blocks of {} pods per arm, {:.0} s.\n\n\
         A = the kubelet (manifest written → container running per CRI); B = a long-lived raw \
         CRI client sending the same requests, in the same run, interleaved ABAB. Ratios are \
         A/B with a 95 % bootstrap interval; goals are from `performance.md` §3.2.\n\n\
         {table}\n\n{}\n\n\
         ![start latency CDFs: G1 left, G2 per pod right; kubelet blue, raw CRI orange; x in \
         ms](start-latency.png)\n",
        s(&env["git"]),
        s(&params["kubelet"]),
        s(&env["runtime"]),
        s(&env["kernel"]),
        env["cpus"],
        s(&env["loadavg"]),
        if params["quick"] == json!(true) {
            "quick"
        } else {
            "full"
        },
        params["rounds"],
        params["blocks"],
        params["batch"],
        params["seconds"].as_f64().unwrap_or(0.0),
        notes.replace('\n', "\n\n"),
    )
}
