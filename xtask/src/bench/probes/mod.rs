//! The probe load of issue 5's performance row: [`PODS`] static pods, each with two probes at
//! a 1 s period, with the kubelet's CPU and the probes' start jitter over a steady window.
//!
//! Each pod runs busybox `httpd` serving a CGI script from a hostPath directory and has
//!
//! - an **exec liveness** probe, `sh -c 'adjtimex >> /probe/live'` (CRI `ExecSync`, so runc
//!   exec in the shim: the common probe and the costly one for the runtime), and
//! - an **httpGet readiness** probe of `/cgi-bin/ready` on the pod IP, a script doing
//!   `adjtimex >> /probe/ready` (the kubelet's HTTP client; nearly nothing on the runtime side).
//!
//! Every probe run thus appends the wall clock at its start inside the container, to
//! microseconds (busybox `date` has no `%N`; `adjtimex` reads the time with `tv_usec`). The
//! start jitter of a probe is `|interval − period|` over the consecutive runs of one probe of
//! one pod within the window; it includes the path from the kubelet's timer to the command
//! (ExecSync and runc exec for exec, a TCP connect and a CGI fork for httpGet).
//!
//! CPU is `utime + stime + cutime + cstime` of `/proc/PID/stat` (the process and the children
//! it reaped) over the same window, in % of one core, for the kubelet and, as the same-run
//! baseline, for containerd and for the pods' shims (which reap the `runc exec` of every exec
//! probe).

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::mpsc::Receiver,
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::{
    kubelet::Kubelet,
    report::Row,
    stats::{median, percentile},
};

/// Pods in the scenario.
pub(crate) const PODS: usize = 50;

/// The probes' period.
const PERIOD: Duration = Duration::from_secs(1);

/// Steady time before the window, once every probe has run a few times.
const WARM_UP: Duration = Duration::from_secs(5);

/// How long the pods may take to start or to go away.
const TIMEOUT: Duration = Duration::from_secs(180);

/// Clock ticks per second of `/proc/PID/stat` (`USER_HZ`: 100 on every Linux ABI we run on).
const TICKS_PER_SECOND: f64 = 100.0;

/// The CGI script the readiness probe requests.
const READY_CGI: &str =
    "#!/bin/sh\nadjtimex >> /probe/ready\nprintf 'Content-Type: text/plain\\r\\n\\r\\nok\\n'\n";

/// One pod's manifest: `httpd` on port 8080 with its document root on `host_dir`.
fn manifest(name: &str, host_dir: &Path) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 0
  volumes:
  - name: probe
    hostPath:
      path: {host}
      type: Directory
  containers:
  - name: httpd
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: [\"httpd\", \"-f\", \"-p\", \"8080\", \"-h\", \"/probe/www\"]
    volumeMounts:
    - name: probe
      mountPath: /probe
    livenessProbe:
      exec:
        command: [\"sh\", \"-c\", \"adjtimex >> /probe/live\"]
      periodSeconds: {period}
      failureThreshold: 30
    readinessProbe:
      httpGet:
        path: /cgi-bin/ready
        port: 8080
      periodSeconds: {period}
",
        host = host_dir.display(),
        period = PERIOD.as_secs(),
    )
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct Probes {
    /// Pods that ran.
    pub(crate) pods: usize,
    /// The window's length, s.
    pub(crate) window_s: f64,
    /// CPU over the window, % of one core: the kubelet, containerd, the shims (summed).
    pub(crate) kubelet_pct: f64,
    /// containerd's CPU, % of one core.
    pub(crate) containerd_pct: f64,
    /// The pods' shims' CPU (with their reaped `runc` children), % of one core.
    pub(crate) shims_pct: f64,
    /// `interval − period` of every pair of consecutive exec (liveness) runs, ms.
    pub(crate) exec_dev_ms: Vec<f64>,
    /// The same for the httpGet (readiness) runs, ms.
    pub(crate) http_dev_ms: Vec<f64>,
    /// Probe runs seen in the window (both probes, every pod).
    pub(crate) runs: usize,
}

/// `|x|` of each.
fn abs(xs: &[f64]) -> Vec<f64> {
    xs.iter().map(|x| x.abs()).collect()
}

impl Probes {
    /// Every probe's deviations, ms.
    fn all_dev_ms(&self) -> Vec<f64> {
        self.exec_dev_ms
            .iter()
            .chain(&self.http_dev_ms)
            .copied()
            .collect()
    }

    /// Runs expected in the window: two probes per pod per period.
    fn expected_runs(&self) -> f64 {
        self.pods as f64 * 2.0 * self.window_s / PERIOD.as_secs_f64()
    }

    /// The report's rows.
    pub(crate) fn rows(&self) -> Vec<Row> {
        let what = format!("{} pods × 2 probes, 1 s period", self.pods);
        let cpu_per_run_us =
            self.kubelet_pct / 100.0 * self.window_s / self.runs.max(1) as f64 * 1e6;
        let mut rows = vec![
            Row::info(
                format!(
                    "Probes: kubelet CPU, {what} ({:.0} s window)",
                    self.window_s
                ),
                format!("{:.1} % of a core", self.kubelet_pct),
                format!(
                    "{:.1} % containerd, {:.1} % shims",
                    self.containerd_pct, self.shims_pct
                ),
                format!("{:.2}", self.kubelet_pct / self.containerd_pct),
                "(info: kubelet / containerd)",
            ),
            Row::info(
                "Probes: kubelet CPU per probe run",
                format!("{cpu_per_run_us:.0} µs"),
                String::new(),
                String::new(),
                format!(
                    "(info: {} runs, {:.0} expected)",
                    self.runs,
                    self.expected_runs()
                ),
            ),
        ];
        for (name, devs) in [
            ("exec liveness", &self.exec_dev_ms),
            ("httpGet readiness", &self.http_dev_ms),
            ("both", &self.all_dev_ms()),
        ] {
            let dev = abs(devs);
            rows.push(Row::info(
                format!(
                    "Probe start jitter |interval − 1 s|, {name} (n={})",
                    dev.len()
                ),
                format!(
                    "p50 {:.1} ms, p99 {:.1} ms",
                    median(&dev),
                    percentile(&dev, 99.0)
                ),
                String::new(),
                String::new(),
                "(info)",
            ));
        }
        rows
    }

    /// As JSON, with every deviation.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "pods": self.pods,
            "period_s": PERIOD.as_secs_f64(),
            "window_s": self.window_s,
            "cpu_pct": {
                "kubelet": self.kubelet_pct,
                "containerd": self.containerd_pct,
                "shims": self.shims_pct,
            },
            "runs": self.runs,
            "expected_runs": self.expected_runs(),
            "exec_interval_minus_period_ms": self.exec_dev_ms,
            "http_interval_minus_period_ms": self.http_dev_ms,
        })
    }

    /// One line for the notes.
    pub(crate) fn note(&self) -> String {
        let dev = abs(&self.all_dev_ms());
        format!(
            "Probes: {} pods, exec liveness + httpGet readiness at 1 s, {:.0} s window: kubelet \
             {:.1} % of a core (containerd {:.1} %, shims {:.1} %), {} of {:.0} expected runs, \
             start jitter p50 {:.1} ms, p99 {:.1} ms (timestamps taken in the container).",
            self.pods,
            self.window_s,
            self.kubelet_pct,
            self.containerd_pct,
            self.shims_pct,
            self.runs,
            self.expected_runs(),
            median(&dev),
            percentile(&dev, 99.0),
        )
    }
}

/// Runs the scenario: starts the pods from `manifests`, waits until every probe runs, warms up,
/// measures over `window`, then deletes the pods and waits until their shims are gone.
/// `work` holds the pods' hostPath directories.
pub(crate) fn run(
    kubelet: &mut Kubelet,
    containerd: u32,
    socket: &Path,
    manifests: &Path,
    work: &Path,
    window: Duration,
    interrupted: &Receiver<()>,
) -> Result<Probes> {
    let shims_before = shims(socket)?.len();
    let host_dirs = prepare(work)?;
    let names: Vec<String> = (0..PODS).map(|i| format!("probes-{i}")).collect();
    for (name, dir) in names.iter().zip(&host_dirs) {
        write_atomically(
            &manifests.join(format!("{name}.yaml")),
            &manifest(name, dir),
        )?;
    }
    let measured = measure(kubelet, containerd, socket, &host_dirs, window, interrupted);
    for name in &names {
        let _ = fs::remove_file(manifests.join(format!("{name}.yaml")));
    }
    let deadline = Instant::now() + TIMEOUT;
    while shims(socket)?.len() > shims_before {
        if Instant::now() > deadline {
            bail!("the probe pods were not removed within {TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(200));
    }
    measured
}

/// Fresh hostPath directories `work/probes/<i>` with the CGI script; returns them.
fn prepare(work: &Path) -> Result<Vec<PathBuf>> {
    let root = work.join("probes");
    match fs::remove_dir_all(&root) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("cannot empty {}", root.display()));
        }
        _ => {}
    }
    (0..PODS)
        .map(|i| {
            let dir = root.join(i.to_string());
            let cgi = dir.join("www").join("cgi-bin");
            fs::create_dir_all(&cgi).with_context(|| format!("cannot create {}", cgi.display()))?;
            let script = cgi.join("ready");
            fs::write(&script, READY_CGI)?;
            fs::set_permissions(&script, fs::Permissions::from_mode(0o755))?;
            Ok(dir)
        })
        .collect()
}

/// Writes `path` through a hidden temporary file and a rename, so the kubelet never reads a
/// half-written manifest.
fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let name = path.file_name().context("manifest path has no file name")?;
    let tmp = path.with_file_name(format!(".{}.tmp", name.to_string_lossy()));
    fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot rename to {}", path.display()))
}

/// Waits for the probes, warms up, and measures one window.
fn measure(
    kubelet: &mut Kubelet,
    containerd: u32,
    socket: &Path,
    host_dirs: &[PathBuf],
    window: Duration,
    interrupted: &Receiver<()>,
) -> Result<Probes> {
    let deadline = Instant::now() + TIMEOUT;
    println!("    waiting for {} pods' probes to run", host_dirs.len());
    loop {
        check(interrupted, kubelet)?;
        let running = host_dirs
            .iter()
            .filter(|d| {
                ["live", "ready"]
                    .iter()
                    .all(|f| stamps_in(&d.join(f)).len() >= 3)
            })
            .count();
        if running == host_dirs.len() {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "only {running} of {} probe pods ran their probes within {TIMEOUT:?}; see {}",
                host_dirs.len(),
                kubelet.log().display()
            );
        }
        thread::sleep(Duration::from_millis(500));
    }
    sleep_checked(WARM_UP, interrupted, kubelet)?;

    let shim_pids = shims(socket)?;
    let pids: Vec<u32> = [kubelet.pid(), containerd]
        .into_iter()
        .chain(shim_pids.iter().copied())
        .collect();
    let (t0, wall0) = (unix_now(), Instant::now());
    let cpu0 = pids.iter().map(|&p| cpu_seconds(p)).collect::<Vec<_>>();
    sleep_checked(window, interrupted, kubelet)?;
    let cpu1 = pids.iter().map(|&p| cpu_seconds(p)).collect::<Vec<_>>();
    let (t1, wall) = (unix_now(), wall0.elapsed().as_secs_f64());

    let pct = |i: usize| -> Result<f64> {
        match (&cpu0[i], &cpu1[i]) {
            (Ok(a), Ok(b)) => Ok((b - a) / wall * 100.0),
            (Err(e), _) | (_, Err(e)) => bail!("cannot read the CPU of process {}: {e:#}", pids[i]),
        }
    };
    // A shim that went away meanwhile (a pod restarted) is left out rather than failing.
    let shims_pct = (2..pids.len()).filter_map(|i| pct(i).ok()).sum::<f64>();
    let mut probes = Probes {
        pods: host_dirs.len(),
        window_s: wall,
        kubelet_pct: pct(0)?,
        containerd_pct: pct(1)?,
        shims_pct,
        ..Probes::default()
    };
    for dir in host_dirs {
        for (file, devs) in [
            ("live", &mut probes.exec_dev_ms),
            ("ready", &mut probes.http_dev_ms),
        ] {
            let stamps: Vec<f64> = stamps_in(&dir.join(file))
                .into_iter()
                .filter(|t| (t0..=t1).contains(t))
                .collect();
            probes.runs += stamps.len();
            devs.extend(deviations_ms(&stamps, PERIOD));
        }
    }
    Ok(probes)
}

/// Sleeps `total` in steps, failing on Ctrl-C or when the kubelet died.
fn sleep_checked(total: Duration, interrupted: &Receiver<()>, kubelet: &mut Kubelet) -> Result<()> {
    let end = Instant::now() + total;
    while Instant::now() < end {
        check(interrupted, kubelet)?;
        thread::sleep(
            end.saturating_duration_since(Instant::now())
                .min(Duration::from_secs(1)),
        );
    }
    check(interrupted, kubelet)
}

fn check(interrupted: &Receiver<()>, kubelet: &mut Kubelet) -> Result<()> {
    if interrupted.try_recv().is_ok() {
        bail!("interrupted");
    }
    kubelet.check_alive()
}

/// Seconds since the epoch, now (the clock `adjtimex` reads in the containers).
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The probe start times appended to `file` (none if it does not exist yet).
fn stamps_in(file: &Path) -> Vec<f64> {
    fs::read_to_string(file)
        .map(|t| stamps(&t))
        .unwrap_or_default()
}

/// The times in concatenated `adjtimex` outputs: each `time.tv_sec:` line with the
/// `time.tv_usec:` line after it, in seconds. A torn last entry is skipped.
fn stamps(text: &str) -> Vec<f64> {
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

/// `interval − period` of each pair of consecutive times (sorted), in ms.
fn deviations_ms(stamps: &[f64], period: Duration) -> Vec<f64> {
    let mut sorted = stamps.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
        .windows(2)
        .map(|w| (w[1] - w[0] - period.as_secs_f64()) * 1e3)
        .collect()
}

/// CPU seconds `pid` and the children it reaped have used (`utime + stime + cutime + cstime`).
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("process {pid} is gone"))?;
    parse_cpu(&stat).with_context(|| format!("malformed /proc/{pid}/stat"))
}

/// `utime + stime + cutime + cstime` of a `/proc/PID/stat` line, in seconds. The command name
/// (field 2) may hold spaces and parentheses, so fields are counted after its last `)`.
fn parse_cpu(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state (3), ppid (4), …, utime (14), stime (15), cutime (16), cstime (17).
    let ticks: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    (ticks.len() == 4).then(|| ticks.iter().sum::<u64>() as f64 / TICKS_PER_SECOND)
}

/// The pids of the containerd shims serving `socket` (their command line names it).
fn shims(socket: &Path) -> Result<Vec<u32>> {
    let socket = socket.to_string_lossy();
    let mut out = Vec::new();
    for entry in fs::read_dir("/proc").context("cannot list /proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // Processes come and go while we look: skip what cannot be read.
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_shim = args.first().is_some_and(|a| {
            a.rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with("containerd-shim"))
        });
        if is_shim && args.iter().any(|a| *a == socket) {
            out.push(pid);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let got = stamps(&text);
        assert_eq!(got.len(), 2);
        assert!((got[0] - 1_795_292_004.804).abs() < 1e-6, "{got:?}");
        assert!((got[1] - 1_795_292_005.806_5).abs() < 1e-6, "{got:?}");
    }

    #[test]
    fn deviations_are_intervals_minus_the_period() {
        let devs = deviations_ms(&[12.0, 10.0, 11.002, 13.5], Duration::from_secs(1));
        let want = [2.0, -2.0, 500.0];
        assert_eq!(devs.len(), 3);
        for (d, w) in devs.iter().zip(want) {
            assert!((d - w).abs() < 1e-6, "{devs:?}");
        }
        assert!(deviations_ms(&[1.0], Duration::from_secs(1)).is_empty());
    }

    #[test]
    fn parses_cpu_of_proc_stat() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 1 0 5 0 0";
        assert_eq!(parse_cpu(stat), Some(3.1));
        assert_eq!(parse_cpu("42 (x) S 1"), None);
        assert!(cpu_seconds(std::process::id()).is_ok());
    }

    #[test]
    fn manifest_has_both_probes_at_one_second() {
        let m = manifest("probes-0", Path::new("/x/0"));
        assert!(m.contains("path: /x/0"));
        assert!(m.contains("adjtimex >> /probe/live"));
        assert!(m.contains("path: /cgi-bin/ready"));
        assert_eq!(m.matches("periodSeconds: 1\n").count(), 2);
    }
}
