//! The probe load of issues 5 and 17: [`PODS`] static pods with two probes each at a 1 s
//! period, 100 probe runs a second, with each run's scheduled vs actual start, the runs that
//! were skipped, and the kubelet's CPU over a steady window.
//!
//! Every pod runs busybox `sleep` and has an **httpGet readiness** probe; even pods have an
//! **exec liveness** probe, odd pods a **tcpSocket liveness** probe. Each run's start is taken
//! where it lands:
//!
//! - httpGet and tcpSocket probes go to `127.0.0.1`, to one listener per probe in this process
//!   ([`server`]), which notes when it accepts the connection: the server is the truth.
//! - exec probes run `sh -c 'adjtimex >> /probe/live'` (CRI `ExecSync`, runc exec in the shim):
//!   the container notes its own start, to microseconds, in a hostPath file.
//! - the kubelet logs each run's start (`probe running`, trace level of the worker), so the
//!   exec probes' time in the runtime (kubelet start → command start) is separated from the
//!   kubelet's own lateness.
//!
//! A run's lateness is measured from its worker's ticker grid (see [`timeline::lateness_ms`]);
//! `|interval − period|` of consecutive runs is kept for comparison with earlier reports, and a
//! gap of `n` periods between consecutive runs counts `n − 1` skipped runs.
//!
//! CPU is `utime + stime + cutime + cstime` of `/proc/PID/stat` (the process and the children
//! it reaped) over the same window, in % of one core, for the kubelet and, as the same-run
//! baseline, for containerd and for the pods' shims (which reap the `runc exec` of every exec
//! probe).

mod procfs;
mod result;
mod server;
pub(crate) mod timeline;
mod wakeup;

use std::{
    fs,
    path::{Path, PathBuf},
    sync::mpsc::Receiver,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

pub(crate) use self::result::Probes;
use self::{
    result::Series,
    server::{Listeners, Protocol},
    timeline::{adjtimex_stamps, delays_ms, unix_now},
};
use super::kubelet::Kubelet;

/// Pods in the scenario: two probes each, 100 runs a second at [`PERIOD`].
pub(crate) const PODS: usize = 50;

/// The probes' period.
const PERIOD: Duration = Duration::from_secs(1);

/// Steady time before the window, once every probe has run a few times.
const WARM_UP: Duration = Duration::from_secs(5);

/// How long the pods may take to start or to go away.
const TIMEOUT: Duration = Duration::from_secs(180);

/// The goal of issue 17 for httpGet and tcpSocket: start lateness p99 (ms).
const LATENESS_P99_MS: f64 = 50.0;

/// The `RUST_LOG` directive that makes the kubelet log each probe run's start.
pub(crate) const LOG_RUNS: &str = "kubelet_probe::worker=trace";

/// Pod `i`'s liveness probe: exec on even pods, tcpSocket on odd ones.
fn exec_liveness(i: usize) -> bool {
    i.is_multiple_of(2)
}

/// Pod `i`'s manifest: its readiness probe asks `http_port`, its liveness probe connects to
/// `tcp_port` (odd pods) or runs a command that appends the time to `host_dir/live` (even pods).
fn manifest(i: usize, host_dir: &Path, http_port: u16, tcp_port: Option<u16>) -> String {
    let period = PERIOD.as_secs();
    let liveness = match tcp_port {
        Some(port) => format!("tcpSocket:\n        host: 127.0.0.1\n        port: {port}"),
        None => "exec:\n        command: [\"sh\", \"-c\", \"adjtimex >> /probe/live\"]".into(),
    };
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: probes-{i}
spec:
  terminationGracePeriodSeconds: 0
  volumes:
  - name: probe
    hostPath:
      path: {host}
      type: Directory
  containers:
  - name: app
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: [\"sleep\", \"1000000\"]
    volumeMounts:
    - name: probe
      mountPath: /probe
    livenessProbe:
      {liveness}
      periodSeconds: {period}
      failureThreshold: 30
    readinessProbe:
      httpGet:
        host: 127.0.0.1
        path: /ready
        port: {http_port}
      periodSeconds: {period}
",
        host = host_dir.display(),
    )
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
    let shims_before = procfs::shims(socket)?.len();
    let host_dirs = prepare(work)?;
    let http = Listeners::start(PODS, Protocol::Http)?;
    let tcp = Listeners::start(PODS, Protocol::Tcp)?;
    let names: Vec<String> = (0..PODS).map(|i| format!("probes-{i}")).collect();
    for (i, (name, dir)) in names.iter().zip(&host_dirs).enumerate() {
        let tcp_port = (!exec_liveness(i)).then(|| tcp.port(i));
        write_atomically(
            &manifests.join(format!("{name}.yaml")),
            &manifest(i, dir, http.port(i), tcp_port),
        )?;
    }
    let pods = Pods {
        host_dirs: &host_dirs,
        http: &http,
        tcp: &tcp,
    };
    let measured = measure(kubelet, containerd, socket, &pods, window, interrupted);
    for name in &names {
        let _ = fs::remove_file(manifests.join(format!("{name}.yaml")));
    }
    let deadline = Instant::now() + TIMEOUT;
    while procfs::shims(socket)?.len() > shims_before {
        if Instant::now() > deadline {
            bail!("the probe pods were not removed within {TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(200));
    }
    measured
}

/// Where the pods' runs land.
struct Pods<'a> {
    host_dirs: &'a [PathBuf],
    http: &'a Listeners,
    tcp: &'a Listeners,
}

impl Pods<'_> {
    /// Pod `i`'s runs so far: httpGet, then its liveness probe (tcpSocket or exec).
    fn runs(&self, i: usize) -> [Vec<f64>; 2] {
        let liveness = if exec_liveness(i) {
            stamps_in(&self.host_dirs[i].join("live"))
        } else {
            self.tcp.hits(i)
        };
        [self.http.hits(i), liveness]
    }
}

/// Fresh hostPath directories `work/probes/<i>`; returns them.
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
            fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
            Ok(dir)
        })
        .collect()
}

/// Writes `path` through a hidden temporary file and a rename, so the kubelet never reads a
/// half-written manifest.
pub(crate) fn write_atomically(path: &Path, text: &str) -> Result<()> {
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
    pods: &Pods<'_>,
    window: Duration,
    interrupted: &Receiver<()>,
) -> Result<Probes> {
    let deadline = Instant::now() + TIMEOUT;
    println!("    waiting for {PODS} pods' probes to run");
    loop {
        check(interrupted, kubelet)?;
        let running = (0..PODS)
            .filter(|&i| pods.runs(i).iter().all(|r| r.len() >= 3))
            .count();
        if running == PODS {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "only {running} of {PODS} probe pods ran their probes within {TIMEOUT:?}; see {}",
                kubelet.log().display()
            );
        }
        thread::sleep(Duration::from_millis(500));
    }
    sleep_checked(WARM_UP, interrupted, kubelet)?;

    let sampler = wakeup::Sampler::start()?;
    let shim_pids = procfs::shims(socket)?;
    let pids: Vec<u32> = [kubelet.pid(), containerd]
        .into_iter()
        .chain(shim_pids.iter().copied())
        .collect();
    let (t0, wall0) = (unix_now(), Instant::now());
    let cpu0 = pids
        .iter()
        .map(|&p| procfs::cpu_seconds(p))
        .collect::<Vec<_>>();
    sampler.take();
    sleep_checked(window, interrupted, kubelet)?;
    let wakeup_ms = sampler.take();
    drop(sampler);
    let cpu1 = pids
        .iter()
        .map(|&p| procfs::cpu_seconds(p))
        .collect::<Vec<_>>();
    let (t1, wall) = (unix_now(), wall0.elapsed().as_secs_f64());
    // Runs that started within the window have landed a moment later.
    sleep_checked(Duration::from_secs(2), interrupted, kubelet)?;

    let pct = |i: usize| -> Result<f64> {
        match (&cpu0[i], &cpu1[i]) {
            (Ok(a), Ok(b)) => Ok((b - a) / wall * 100.0),
            (Err(e), _) | (_, Err(e)) => bail!("cannot read the CPU of process {}: {e:#}", pids[i]),
        }
    };
    // A shim that went away meanwhile (a pod restarted) is left out rather than failing.
    let shims_pct = (2..pids.len()).filter_map(|i| pct(i).ok()).sum::<f64>();

    let log = fs::read_to_string(kubelet.log())
        .with_context(|| format!("cannot read {}", kubelet.log().display()))?;
    let logged = timeline::logged_runs(&log);
    let logged_runs = |i: usize, probe: &str| -> &[timeline::LoggedRun] {
        logged
            .iter()
            .find(|((pod, p), _)| p == probe && pod_index(pod) == Some(i))
            .map_or(&[], |(_, runs)| runs.as_slice())
    };
    // How late each run in the window started behind its tick, by the kubelet's clock.
    let mut tick_late_ms: [Vec<f64>; 3] = Default::default();
    let mut logged_of = |i: usize, probe: &str, kind: usize| -> Vec<f64> {
        let runs = logged_runs(i, probe);
        tick_late_ms[kind].extend(
            runs.iter()
                .filter(|r| (t0..=t1).contains(&r.at))
                .filter_map(|r| r.late_ms),
        );
        runs.iter().map(|r| r.at).collect()
    };
    let (mut http, mut tcp, mut exec) = (Vec::new(), Vec::new(), Vec::new());
    let (mut k_http, mut k_tcp, mut k_exec) = (Vec::new(), Vec::new(), Vec::new());
    let mut exec_runtime_ms = Vec::new();
    for i in 0..PODS {
        let [ready, live] = pods.runs(i);
        http.push(ready);
        k_http.push(logged_of(i, "Readiness", 0));
        let k_live = logged_of(i, "Liveness", if exec_liveness(i) { 2 } else { 1 });
        if exec_liveness(i) {
            let in_window: Vec<f64> = live
                .iter()
                .copied()
                .filter(|t| (t0..=t1).contains(t))
                .collect();
            exec_runtime_ms.extend(delays_ms(&k_live, &in_window));
            exec.push(live);
            k_exec.push(k_live);
        } else {
            tcp.push(live);
            k_tcp.push(k_live);
        }
    }
    let window = (t0, t1);
    Ok(Probes {
        pods: PODS,
        window_s: wall,
        window_unix_s: (t0, t1),
        kubelet_pct: pct(0)?,
        containerd_pct: pct(1)?,
        shims_pct,
        http: Series::of(&http, window),
        tcp: Series::of(&tcp, window),
        exec: Series::of(&exec, window),
        kubelet: [
            Series::of(&k_http, window),
            Series::of(&k_tcp, window),
            Series::of(&k_exec, window),
        ],
        exec_runtime_ms,
        tick_late_ms,
        wakeup_ms,
        realtime: pods.http.realtime() && pods.tcp.realtime(),
    })
}

/// `i` of a pod named `probes-<i>-<node>_<namespace>` (static pods carry the node's name).
fn pod_index(full_name: &str) -> Option<usize> {
    let rest = full_name.strip_prefix("probes-")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
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

/// The exec probe's start times appended to `file` (none if it does not exist yet).
fn stamps_in(file: &Path) -> Vec<f64> {
    fs::read_to_string(file)
        .map(|t| adjtimex_stamps(&t))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_probe_the_bench_listeners() {
        let exec = manifest(0, Path::new("/x/0"), 4000, None);
        assert!(exec.contains("path: /x/0"));
        assert!(exec.contains("adjtimex >> /probe/live"));
        assert!(exec.contains("port: 4000") && exec.contains("host: 127.0.0.1"));
        assert_eq!(exec.matches("periodSeconds: 1\n").count(), 2);
        let tcp = manifest(1, Path::new("/x/1"), 4001, Some(5001));
        assert!(tcp.contains("tcpSocket:\n        host: 127.0.0.1\n        port: 5001"));
        assert!(!tcp.contains("adjtimex"));
        assert_eq!(pod_index("probes-17-bench-node_default"), Some(17));
        assert_eq!(pod_index("web-1_default"), None);
    }
}
