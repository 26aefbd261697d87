//! G3, container-exit detection: a container exits on its own (`sleep N; exit 3`); the time
//! from containerd reporting the task exit to the kubelet's `/pods` showing the container
//! `terminated` with exit code 3.
//!
//! The baseline timestamp is the `/tasks/exit` event as a subscriber of containerd's events
//! service sees it: `ctr events` runs for the whole scenario and a reader thread timestamps
//! each line as it arrives. `/pods` is polled every 2 ms meanwhile. The pods of a block start
//! together and exit 250 ms apart, so each exit is detected on its own.
//!
//! containerd 1.6's CRI plugin reports a container exited only once it has deleted the task
//! (`handleContainerExit`: `task.Delete`, then the status update), and the task's
//! `/tasks/delete` event marks that. The time from `/tasks/exit` to `/tasks/delete` is
//! containerd's share (a shim call and `runc delete`); the time from `/tasks/delete` to
//! `/pods` is the kubelet's, and both are reported.

use std::{
    collections::HashMap,
    fs,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc::{self, Receiver},
    thread,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::{
    kubelet::{Kubelet, http_get},
    report::{Row, Verdict},
    scenario::NODE,
    stats::percentile,
};

/// Pods per block.
const PODS: usize = 10;
/// How long a block may take before the bench fails.
const TIMEOUT: Duration = Duration::from_secs(120);
/// The exit code the containers exit with.
const EXIT_CODE: i64 = 3;

/// Exit-detection latencies, ms, one per pod.
#[derive(Debug, Clone, Default)]
pub(crate) struct Exits {
    /// containerd's `/tasks/exit` seen → `/pods` shows the container terminated, ms.
    pub(crate) detect_ms: Vec<f64>,
    /// containerd's `/tasks/delete` seen → `/pods` shows it, ms: containerd's CRI plugin still
    /// finishing the exit (it reports it only after the task delete returns), then the kubelet.
    pub(crate) after_delete_ms: Vec<f64>,
    /// Each exit's wall-clock times, to find its path in the kubelet's log.
    pub(crate) exits: Vec<Exit>,
}

/// One container's exit as the bench saw it, in Unix seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Exit {
    /// The pod's full name as the kubelet logs it (`name_namespace`).
    pub(crate) pod: String,
    /// The container's ID.
    pub(crate) container: String,
    /// containerd's `/tasks/exit` seen.
    pub(crate) exit_unix_s: f64,
    /// containerd's `/tasks/delete` seen.
    pub(crate) delete_unix_s: f64,
    /// `/pods` showed the container terminated.
    pub(crate) shown_unix_s: f64,
}

/// An instant with its wall-clock time.
#[derive(Debug, Clone, Copy)]
struct Seen {
    at: Instant,
    unix_s: f64,
}

impl Seen {
    fn now() -> Seen {
        Seen {
            at: Instant::now(),
            unix_s: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        }
    }
}

/// A task event of an init process that `ctr events` printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Topic {
    /// `/tasks/exit`.
    Exit,
    /// `/tasks/delete`.
    Delete,
}

fn manifest(name: &str, sleep: f64) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: [\"sh\", \"-c\", \"sleep {sleep:.2}; exit {EXIT_CODE}\"]
"
    )
}

/// `ctr events` on the testbed's socket; its `/tasks/exit` and `/tasks/delete` lines arrive
/// on a channel as (topic, container ID, when the line was read).
struct ExitEvents {
    child: Child,
    exits: Receiver<(Topic, String, Seen)>,
}

impl ExitEvents {
    fn start(socket: &Path) -> Result<ExitEvents> {
        let mut child = Command::new("ctr")
            .arg("--address")
            .arg(socket)
            .args(["--namespace", "k8s.io", "events"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot run `ctr events`")?;
        let stdout = child.stdout.take().context("ctr events has no stdout")?;
        let (tx, exits) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let seen = Seen::now();
                if let Some((topic, id)) = task_event(&line)
                    && tx.send((topic, id, seen)).is_err()
                {
                    break;
                }
            }
        });
        Ok(ExitEvents { child, exits })
    }
}

impl Drop for ExitEvents {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The topic and container of a `ctr events` line `<time> <namespace> /tasks/exit {json}` (or
/// `/tasks/delete`) about an init process (an exec'd process has its own `id`).
fn task_event(line: &str) -> Option<(Topic, String)> {
    let (topic, json) = [
        (" /tasks/exit ", Topic::Exit),
        (" /tasks/delete ", Topic::Delete),
    ]
    .into_iter()
    .find_map(|(t, topic)| Some((topic, line.split_once(t)?.1)))?;
    let event: Value = serde_json::from_str(json.trim()).ok()?;
    let container = event["container_id"].as_str()?;
    let process = event["id"].as_str().unwrap_or("");
    (process.is_empty() || process == container).then(|| (topic, container.to_owned()))
}

/// `later − earlier` in ms, negative when `later` came first.
fn signed_ms(later: Instant, earlier: Instant) -> f64 {
    if later >= earlier {
        later.duration_since(earlier).as_secs_f64() * 1000.0
    } else {
        -(earlier.duration_since(later).as_secs_f64() * 1000.0)
    }
}

/// The `/pods` containers of our pods that are terminated with [`EXIT_CODE`]: pod name →
/// container ID.
fn terminated(pods: &Value, names: &[String]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for pod in pods["items"].as_array().into_iter().flatten() {
        let Some(name) = pod["metadata"]["name"].as_str() else {
            continue;
        };
        if !names.iter().any(|n| n == name) {
            continue;
        }
        for c in pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let term = &c["state"]["terminated"];
            if term["exitCode"].as_i64() == Some(EXIT_CODE)
                && let Some(id) = c["containerID"].as_str()
            {
                let id = id.rsplit("://").next().unwrap_or(id);
                out.insert(name.to_owned(), id.to_owned());
            }
        }
    }
    out
}

fn get_pods(kubelet: &Kubelet) -> Result<Value> {
    let body = http_get(kubelet.read_only_port(), "/pods")?;
    Ok(serde_json::from_str(&body)?)
}

/// Runs `blocks` blocks of [`PODS`] pods and returns every latency.
pub(crate) fn run(
    kubelet: &Kubelet,
    socket: &Path,
    manifests: &Path,
    blocks: usize,
    interrupted: &Receiver<()>,
) -> Result<Exits> {
    let events = ExitEvents::start(socket)?;
    // Let `ctr events` subscribe before anything can exit.
    thread::sleep(Duration::from_millis(300));
    let mut exits = Exits::default();
    for block in 0..blocks {
        for exit in run_block(kubelet, &events, manifests, block)? {
            exits
                .detect_ms
                .push((exit.shown_unix_s - exit.exit_unix_s) * 1e3);
            exits
                .after_delete_ms
                .push((exit.shown_unix_s - exit.delete_unix_s) * 1e3);
            exits.exits.push(exit);
        }
        if interrupted.try_recv().is_ok() {
            bail!("interrupted");
        }
    }
    Ok(exits)
}

fn run_block(
    kubelet: &Kubelet,
    events: &ExitEvents,
    manifests: &Path,
    block: usize,
) -> Result<Vec<Exit>> {
    let names: Vec<String> = (0..PODS).map(|i| format!("exit-{block}-{i}")).collect();
    let full: Vec<String> = names.iter().map(|n| format!("{n}-{NODE}")).collect();
    for (i, name) in names.iter().enumerate() {
        let tmp = manifests.join(format!(".{name}.yaml.tmp"));
        fs::write(&tmp, manifest(name, 2.0 + 0.25 * i as f64))?;
        fs::rename(&tmp, manifests.join(format!("{name}.yaml")))?;
    }

    // Poll /pods until every pod shows its container terminated.
    let deadline = Instant::now() + TIMEOUT;
    let mut seen: HashMap<String, (String, Seen)> = HashMap::new();
    while seen.len() < PODS {
        if Instant::now() > deadline {
            bail!(
                "only {} of {PODS} exits showed in /pods within {TIMEOUT:?}",
                seen.len()
            );
        }
        let pods = get_pods(kubelet)?;
        let now = Seen::now();
        for (pod, id) in terminated(&pods, &full) {
            seen.entry(pod).or_insert((id, now));
        }
        thread::sleep(Duration::from_millis(2));
    }

    // containerd's exit and delete events for those containers.
    let mut task_events: HashMap<(Topic, String), Seen> = HashMap::new();
    let wanted: Vec<&String> = seen.values().map(|(id, _)| id).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !wanted.iter().all(|id| {
        [Topic::Exit, Topic::Delete]
            .iter()
            .all(|t| task_events.contains_key(&(*t, (*id).clone())))
    }) {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.exits.recv_timeout(left) {
            Ok((topic, id, at)) => {
                task_events.entry((topic, id)).or_insert(at);
            }
            Err(_) => bail!(
                "containerd reported no /tasks/exit or /tasks/delete for some containers of \
                 block {block}"
            ),
        }
    }
    // Wall-clock differences are signed: /pods showing the exit before containerd's event
    // would be negative. The monotonic clock decides the order; wall-clock times only place
    // the exit in the kubelet's log.
    let exits: Vec<Exit> = seen
        .iter()
        .map(|(pod, (id, shown))| {
            let (exit, delete) = (
                task_events[&(Topic::Exit, id.clone())],
                task_events[&(Topic::Delete, id.clone())],
            );
            let since = |event: Seen| shown.unix_s - signed_ms(shown.at, event.at) / 1e3;
            Exit {
                pod: format!("{pod}_default"),
                container: id.clone(),
                exit_unix_s: since(exit),
                delete_unix_s: since(delete),
                shown_unix_s: shown.unix_s,
            }
        })
        .collect();

    for name in &names {
        fs::remove_file(manifests.join(format!("{name}.yaml")))?;
    }
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let pods = get_pods(kubelet)?;
        let left = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| full.iter().any(|n| p["metadata"]["name"] == n.as_str()))
            .count();
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("the kubelet did not remove {left} exit pods within {TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(100));
    }
    Ok(exits)
}

/// The G3 rows: p50 and p99 of the detection latency against the goal (issue 17: ≤ 15 ms
/// p50, ≤ 40 ms p99), and the time after containerd's task delete event.
pub(crate) fn rows(exits: &Exits) -> Vec<Row> {
    let n = exits.detect_ms.len();
    let mut rows: Vec<Row> = [(50.0, "p50", 100.0, 15.0), (99.0, "p99", 500.0, 40.0)]
        .into_iter()
        .map(|(p, name, must, stretch)| {
            let v = percentile(&exits.detect_ms, p);
            Row::new(
                format!("G3 exit → /pods terminated {name} (n={n})"),
                format!("{v:.1} ms"),
                "containerd /tasks/exit".into(),
                String::new(),
                format!("≤ {must:.0} ms (stretch, issue 17: {stretch:.0} ms)"),
                Verdict::le(v, must, stretch),
            )
        })
        .collect();
    let share = &exits.after_delete_ms;
    rows.push(Row::info(
        format!("G3 /tasks/delete → /pods (n={})", share.len()),
        format!(
            "p50 {:.1} ms, p99 {:.1} ms",
            percentile(share, 50.0),
            percentile(share, 99.0)
        ),
        "negative: /pods showed the exit before containerd deleted the task (the PLEG \
         takes the exit status from /tasks/exit; its CRI shows it only after the delete)",
        String::new(),
        "(info)",
    ));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_ctr_exit_and_delete_lines() {
        let line = r#"2026-11-21 20:33:23.3 +0000 UTC k8s.io /tasks/exit {"container_id":"abc","id":"abc","pid":42,"exit_status":3}"#;
        assert_eq!(task_event(line), Some((Topic::Exit, "abc".into())));
        let exec = r#"2026-11-21 20:33:23.3 +0000 UTC k8s.io /tasks/exit {"container_id":"abc","id":"exec-1","pid":43}"#;
        assert_eq!(task_event(exec), None);
        let start = r#"2026-11-21 20:33:23.3 +0000 UTC k8s.io /tasks/start {"container_id":"abc","pid":42}"#;
        assert_eq!(task_event(start), None);
        let delete = r#"2026-11-21 20:33:23.3 +0000 UTC k8s.io /tasks/delete {"container_id":"abc","pid":42,"exit_status":3}"#;
        assert_eq!(task_event(delete), Some((Topic::Delete, "abc".into())));
    }

    #[test]
    fn finds_terminated_containers_of_our_pods() {
        let pods = json!({"items": [
            {"metadata": {"name": "exit-0-0-n"}, "status": {"containerStatuses": [
                {"containerID": "containerd://c0", "state": {"terminated": {"exitCode": 3}}}]}},
            {"metadata": {"name": "exit-0-1-n"}, "status": {"containerStatuses": [
                {"containerID": "containerd://c1", "state": {"running": {}}}]}},
            {"metadata": {"name": "other"}, "status": {"containerStatuses": [
                {"containerID": "containerd://c2", "state": {"terminated": {"exitCode": 3}}}]}},
        ]});
        let names = vec!["exit-0-0-n".to_owned(), "exit-0-1-n".to_owned()];
        let found = terminated(&pods, &names);
        assert_eq!(found.len(), 1);
        assert_eq!(found["exit-0-0-n"], "c0");
    }

    #[test]
    fn rows_judge_the_median_and_the_tail() {
        let exits = Exits {
            detect_ms: vec![20.0, 40.0, 60.0, 900.0],
            after_delete_ms: vec![1.0, 2.0, 3.0, 4.0],
            ..Exits::default()
        };
        let rows = rows(&exits);
        let json = super::super::report::json(&rows);
        assert_eq!(json[0]["kubelet"], "50.0 ms");
        assert_eq!(json[0]["verdict"], "must");
        assert_eq!(json[1]["verdict"], "miss");
    }
}
