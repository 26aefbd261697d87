//! `cargo xtask soak` (issue 16): the release kubelet under churn for a long time, with its
//! resources sampled, to show that nothing leaks.
//!
//! On a private containerd, the kubelet runs [`Args::steady`] static pods, then for
//! [`Args::minutes`] the soak creates [`Args::rate`] pods per second and deletes as many (each
//! churn pod lives [`Args::lifetime`] seconds). Every [`Args::every`] seconds it samples the
//! kubelet's RSS (anonymous and file-backed), its threads (`/proc/PID/task`), open file
//! descriptors (`/proc/PID/fd`), the host's mounts (`/proc/PID/mountinfo`) and the pods its
//! `/pods` lists. After the warm-up each series must stay within [`FLAT`] of its value at the end
//! of the warm-up (compared median to median, first third against last third, so a single busy
//! sample does not decide). Not part of the default CI run: it takes half an hour.
//!
//! containerd is supervised as systemd supervises it on a node (`Restart=always`): when it
//! exits, the soak starts it again on the same state and counts it. containerd 1.6.20 (Debian's)
//! can die under this churn with `fatal error: concurrent map iteration and map write` in its
//! sandbox store's `List` (fixed upstream in containerd PR #11306, 1.6 backport #11319); the
//! kubelet must ride that out, and the report says how often it happened.

use std::{
    collections::VecDeque,
    fs,
    path::{Path, PathBuf},
    sync::mpsc::Receiver,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use xtask::{target_dir, testbed};

use super::{
    build, check,
    kubelet::{Dirs, Kubelet, http_get},
    probes::write_atomically,
    rss,
    scenario::{self, NODE},
    stats::median,
};

/// How far a series may drift after the warm-up (a fraction of its value).
const FLAT: f64 = 0.10;

/// How long the steady pods may take to start and the churn pods to go away at the end.
const TIMEOUT: Duration = Duration::from_secs(300);

/// Options of `cargo xtask soak`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Minutes of churn.
    #[arg(long, default_value_t = 30)]
    minutes: u64,
    /// Minutes of the churn that are warm-up (not judged) [default: a sixth of --minutes].
    #[arg(long)]
    warmup: Option<u64>,
    /// Pods that run throughout.
    #[arg(long, default_value_t = 110)]
    steady: usize,
    /// Pods created (and as many deleted) per second.
    #[arg(long, default_value_t = 2)]
    rate: u32,
    /// Seconds each churn pod lives before its manifest is removed.
    #[arg(long, default_value_t = 10)]
    lifetime: u64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 15)]
    every: u64,
    /// Use this kubelet binary instead of building package kubelet-bin in release.
    #[arg(long)]
    kubelet: Option<PathBuf>,
    /// Do not build: use the release binaries already in the target directory.
    #[arg(long)]
    prebuilt: bool,
    /// Where soak.md and soak.json go [default: target/soak].
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The samples of one soak.
struct Samples {
    /// With the steady pods running, before the churn.
    before: Sample,
    /// During the churn, every [`Args::every`] seconds.
    churn: Vec<Sample>,
    /// Once the churn pods are gone again.
    after: Sample,
    /// When containerd exited and was started again, seconds since the churn began.
    containerd_restarts: Vec<f64>,
}

/// One sample of the kubelet's resources.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Seconds since the churn began (0 before it).
    at_s: f64,
    rss_kib: u64,
    anon_kib: u64,
    file_kib: u64,
    threads: usize,
    fds: usize,
    mounts: usize,
    pods: usize,
    running: usize,
}

impl Sample {
    fn take(kubelet: &Kubelet, since: Instant) -> Result<Sample> {
        let pid = kubelet.pid();
        let mem = rss::sample(pid)?;
        let (pods, running) = pod_counts(kubelet)?;
        Ok(Sample {
            at_s: since.elapsed().as_secs_f64(),
            rss_kib: mem.rss_kib,
            anon_kib: mem.anon_kib,
            file_kib: mem.file_kib,
            threads: entries(&format!("/proc/{pid}/task"))?,
            fds: entries(&format!("/proc/{pid}/fd"))?,
            mounts: fs::read_to_string(format!("/proc/{pid}/mountinfo"))?
                .lines()
                .count(),
            pods,
            running,
        })
    }

    fn to_json(self) -> Value {
        json!({
            "at_s": self.at_s, "rss_kib": self.rss_kib, "anon_kib": self.anon_kib,
            "file_kib": self.file_kib, "threads": self.threads, "fds": self.fds,
            "mounts": self.mounts, "pods": self.pods, "running": self.running,
        })
    }
}

/// Reads one series off a sample.
type Read = fn(&Sample) -> f64;

/// The judged series: name and how to read it off a sample.
const SERIES: &[(&str, Read)] = &[
    ("RSS (KiB)", |s| s.rss_kib as f64),
    ("threads", |s| s.threads as f64),
    ("open fds", |s| s.fds as f64),
    ("mounts", |s| s.mounts as f64),
];

fn entries(dir: &str) -> Result<usize> {
    Ok(fs::read_dir(dir)
        .with_context(|| format!("cannot list {dir}"))?
        .count())
}

/// Pods the runtime still has, as the kubelet's `/runningpods/` lists them.
fn runtime_pods(kubelet: &Kubelet) -> Result<usize> {
    let pods: Value = serde_json::from_str(&http_get(kubelet.read_only_port(), "/runningpods/")?)?;
    Ok(pods["items"].as_array().map_or(0, Vec::len))
}

/// Pods the kubelet's `/pods` lists, and how many of them are Running.
fn pod_counts(kubelet: &Kubelet) -> Result<(usize, usize)> {
    let pods: Value = serde_json::from_str(&http_get(kubelet.read_only_port(), "/pods")?)?;
    let items = pods["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let running = items
        .iter()
        .filter(|p| p["status"]["phase"] == "Running")
        .count();
    Ok((items.len(), running))
}

/// Runs the soak and writes the report; fails when a series drifted more than [`FLAT`].
pub(crate) fn run(args: Args) -> Result<()> {
    let interrupted = crate::interrupts()?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| target_dir().join("soak"));
    testbed::ensure_packages()?;
    let (kubelet_bin, _agent) = build(args.kubelet.clone(), args.prebuilt, false, false)?;
    let work = target_dir().join("testbed").join("soak");
    let dirs = Dirs::fresh(&work)?;
    println!("==> starting a private containerd in {}", work.display());
    let mut testbed = testbed::Testbed::start(&work.join("containerd"))?;
    println!("==> starting the kubelet ({})", kubelet_bin.display());
    // Room for the churn pods beside the steady ones (upstream's default is 110, which the
    // steady pods alone fill): those alive and as many again still terminating.
    let max_pods = args.steady + 2 * churn_in_flight(&args)?;
    let mut kubelet = Kubelet::start_with(
        &kubelet_bin,
        &testbed.endpoint(),
        &dirs,
        NODE,
        &["--max-pods".to_owned(), max_pods.to_string()],
        "info",
    )?;
    let result = soak(
        &args,
        &mut kubelet,
        &mut testbed,
        &dirs.manifests,
        &interrupted,
    );
    kubelet.stop();
    let shutdown = testbed.shutdown();
    let samples = result?;
    shutdown?;
    let log = fs::read_to_string(dirs.logs.join("kubelet.log")).unwrap_or_default();
    let refused = log.matches("pod admission denied").count();
    if refused > 0 {
        bail!(
            "the kubelet refused {refused} pods (see {}): the churn did not run",
            dirs.logs.display()
        );
    }
    report(&args, &samples, &out)
}

/// How many churn pods are alive at once: `rate` × `lifetime`.
fn churn_in_flight(args: &Args) -> Result<usize> {
    Ok(usize::try_from(
        u64::from(args.rate.max(1)) * args.lifetime,
    )?)
}

/// Starts the steady pods, churns, and returns every sample.
fn soak(
    args: &Args,
    kubelet: &mut Kubelet,
    testbed: &mut testbed::Testbed,
    manifests: &Path,
    interrupted: &Receiver<()>,
) -> Result<Samples> {
    let began = Instant::now();
    println!("==> {} steady pods", args.steady);
    for i in 0..args.steady {
        let name = format!("steady-{i}");
        write_atomically(
            &manifests.join(format!("{name}.yaml")),
            &scenario::manifest(&name),
        )?;
    }
    wait_for(kubelet, interrupted, "the steady pods to run", |kubelet| {
        Ok(pod_counts(kubelet)? == (args.steady, args.steady))
    })?;
    println!("    running after {:.0?}", began.elapsed());
    let before = Sample::take(kubelet, Instant::now())?;
    let mut churn = Vec::new();

    println!(
        "==> churn for {} min: {} pods/s created and deleted, each living {} s",
        args.minutes, args.rate, args.lifetime
    );
    let churn_began = Instant::now();
    let end = churn_began + Duration::from_secs(args.minutes * 60);
    let step = Duration::from_secs(1) / args.rate.max(1);
    let in_flight = churn_in_flight(args)?;
    let mut live: VecDeque<PathBuf> = VecDeque::new();
    let mut next_sample = churn_began;
    let mut created = 0u64;
    let mut tick = churn_began;
    let mut containerd_restarts = Vec::new();
    while Instant::now() < end {
        check(interrupted, kubelet)?;
        if !testbed.is_running() {
            let at = churn_began.elapsed().as_secs_f64();
            println!(
                "    {at:>6.0} s: containerd exited (see {}); starting it again",
                testbed.log().display()
            );
            containerd_restarts.push(at);
            testbed.kill()?;
            testbed.restart()?;
        }
        let name = format!("churn-{created}");
        let path = manifests.join(format!("{name}.yaml"));
        write_atomically(&path, &scenario::manifest(&name))?;
        live.push_back(path);
        created += 1;
        if live.len() > in_flight
            && let Some(old) = live.pop_front()
        {
            fs::remove_file(&old).with_context(|| format!("cannot remove {}", old.display()))?;
        }
        if Instant::now() >= next_sample {
            let sample = Sample::take(kubelet, churn_began)?;
            println!(
                "    {:>6.0} s: RSS {} KiB (anon {}), {} threads, {} fds, {} mounts, {}/{} pods running",
                sample.at_s,
                sample.rss_kib,
                sample.anon_kib,
                sample.threads,
                sample.fds,
                sample.mounts,
                sample.running,
                sample.pods
            );
            churn.push(sample);
            next_sample += Duration::from_secs(args.every.max(1));
        }
        tick += step;
        thread::sleep(tick.saturating_duration_since(Instant::now()));
    }

    println!("==> churn over ({created} pods created); removing the churn pods");
    for path in live.drain(..) {
        fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
    }
    // `/pods` drops a pod when its manifest goes; the runtime keeps it until torn down.
    wait_for(kubelet, interrupted, "the churn pods to go", |kubelet| {
        Ok(runtime_pods(kubelet)? == args.steady)
    })?;
    let after = Sample::take(kubelet, churn_began)?;
    Ok(Samples {
        before,
        churn,
        after,
        containerd_restarts,
    })
}

/// Polls the kubelet until `done`, for at most [`TIMEOUT`].
fn wait_for(
    kubelet: &mut Kubelet,
    interrupted: &Receiver<()>,
    what: &str,
    done: impl Fn(&Kubelet) -> Result<bool>,
) -> Result<()> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        check(interrupted, kubelet)?;
        if done(kubelet)? {
            return Ok(());
        }
        if Instant::now() > deadline {
            let (pods, running) = pod_counts(kubelet)?;
            bail!(
                "waited {TIMEOUT:?} for {what}: {running} of {pods} pods running, {} in the runtime",
                runtime_pods(kubelet)?
            );
        }
        thread::sleep(Duration::from_millis(500));
    }
}

/// One judged series: the medians of the first and last thirds after the warm-up.
struct Drift {
    name: &'static str,
    start: f64,
    middle: f64,
    end: f64,
    first: f64,
    last: f64,
}

impl Drift {
    fn relative(&self) -> f64 {
        if self.first == 0.0 {
            0.0
        } else {
            (self.last - self.first) / self.first
        }
    }
}

/// The drift of every series over the churn samples after `warmup_s`.
fn drifts(samples: &Samples, warmup_s: f64) -> Result<Vec<Drift>> {
    let judged: Vec<&Sample> = samples
        .churn
        .iter()
        .filter(|s| s.at_s >= warmup_s)
        .collect();
    if judged.len() < 3 {
        bail!(
            "only {} samples after the warm-up: soak longer or sample more often",
            judged.len()
        );
    }
    let third = judged.len() / 3;
    Ok(SERIES
        .iter()
        .map(|(name, read)| {
            let values: Vec<f64> = judged.iter().map(|s| read(s)).collect();
            Drift {
                name,
                start: read(&samples.before),
                middle: values[values.len() / 2],
                end: read(&samples.after),
                first: median(&values[..third]),
                last: median(&values[values.len() - third..]),
            }
        })
        .collect())
}

fn report(args: &Args, samples: &Samples, out: &Path) -> Result<()> {
    let warmup_min = args.warmup.unwrap_or(args.minutes / 6);
    let drifts = drifts(samples, (warmup_min * 60) as f64)?;
    let mut table = String::from(
        "| series | before churn | mid-churn | after churn | after warm-up (median) | last third (median) | drift |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for d in &drifts {
        table.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:+.1} % |\n",
            d.name,
            d.start,
            d.middle,
            d.end,
            d.first,
            d.last,
            d.relative() * 100.0
        ));
    }
    let restarts = format!(
        "containerd exited and was started again {} times{}.\n",
        samples.containerd_restarts.len(),
        if samples.containerd_restarts.is_empty() {
            String::new()
        } else {
            let at: Vec<String> = samples
                .containerd_restarts
                .iter()
                .map(|s| format!("{s:.0} s"))
                .collect();
            format!(" (at {} into the churn)", at.join(", "))
        }
    );
    println!("\n{table}\n{restarts}");
    fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    fs::write(
        out.join("soak.md"),
        format!(
            "# Soak: {} min of churn ({} pods/s, {} s each) over {} steady pods, {warmup_min} min warm-up\n\n{table}\n{restarts}",
            args.minutes, args.rate, args.lifetime, args.steady
        ),
    )?;
    let data = json!({
        "params": {
            "minutes": args.minutes, "warmup_minutes": warmup_min, "steady": args.steady,
            "rate": args.rate, "lifetime_s": args.lifetime, "every_s": args.every,
        },
        "before": samples.before.to_json(),
        "churn": samples.churn.iter().map(|s| s.to_json()).collect::<Vec<_>>(),
        "after": samples.after.to_json(),
        "containerd_restarts_s": samples.containerd_restarts,
    });
    fs::write(out.join("soak.json"), serde_json::to_string_pretty(&data)?)?;
    println!("==> wrote {} and soak.json", out.join("soak.md").display());
    let drifted: Vec<String> = drifts
        .iter()
        .filter(|d| d.relative().abs() > FLAT)
        .map(|d| format!("{} {:+.1} %", d.name, d.relative() * 100.0))
        .collect();
    if !drifted.is_empty() {
        bail!(
            "not flat within {:.0} % after the warm-up: {}",
            FLAT * 100.0,
            drifted.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_s: f64, rss_kib: u64) -> Sample {
        Sample {
            at_s,
            rss_kib,
            anon_kib: 0,
            file_kib: 0,
            threads: 10,
            fds: 20,
            mounts: 30,
            pods: 0,
            running: 0,
        }
    }

    fn soak(churn: Vec<Sample>) -> Samples {
        Samples {
            before: sample(0.0, 5_000),
            churn,
            after: sample(0.0, 6_000),
            containerd_restarts: Vec::new(),
        }
    }

    #[test]
    fn a_steady_climb_after_the_warm_up_is_drift() {
        let churn = (0..13u32)
            .map(|i| sample(f64::from(i) * 10.0, 10_000 + u64::from(i) * 1_000))
            .collect();
        let drifts = drifts(&soak(churn), 30.0).expect("enough samples");
        let rss = &drifts[0];
        assert!(rss.relative() > FLAT, "drift {}", rss.relative());
        assert!(drifts[1..].iter().all(|d| d.relative() == 0.0));
    }

    #[test]
    fn the_warm_up_and_the_ends_are_not_judged() {
        let mut churn = vec![sample(0.0, 5_000), sample(10.0, 8_000)];
        churn.extend((2..12u32).map(|i| sample(f64::from(i) * 10.0, 10_000)));
        let drifts = drifts(&soak(churn), 20.0).expect("enough samples");
        assert_eq!(drifts[0].relative(), 0.0);
        assert_eq!((drifts[0].start, drifts[0].end), (5_000.0, 6_000.0));
    }

    #[test]
    fn too_few_samples_is_an_error() {
        let churn = vec![sample(0.0, 1), sample(10.0, 1)];
        assert!(drifts(&soak(churn), 0.0).is_err());
    }
}
