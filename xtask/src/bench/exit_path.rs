//! G3's breakdown (issue 17): where the milliseconds from a container's exit to `/pods` go,
//! from containerd's events as `ctr events` saw them and the kubelet's own trace events
//! (`kubelet_core::start_path`): the runtime event received, the runtime showing it over CRI
//! (the PLEG's event), the pod worker's sync and the status stored.
//!
//! Each exit is found in the log by its container ID (the PLEG's events) and its pod's name
//! (the sync's steps), at or after the exit's own time.

use serde_json::{Value, json};

use super::{
    exit::Exit,
    kubelet_log,
    stats::{median, percentile},
};

/// A `start path` line of the kubelet's log.
#[derive(Debug, Clone, PartialEq)]
struct Step {
    at: f64,
    step: String,
    pod: Option<String>,
    container: Option<String>,
    kind: Option<String>,
}

fn step(line: &str) -> Option<Step> {
    let line = kubelet_log::Line::parse(line)?;
    if line.msg != "start path" {
        return None;
    }
    Some(Step {
        at: line.at,
        step: line.field("step")?,
        pod: line.field("pod"),
        container: line.field("container"),
        kind: line.field("kind"),
    })
}

/// The stages of the exit path, in the order they happen.
const STAGES: [&str; 8] = [
    "kubelet receives containerd's `/tasks/exit`",
    "containerd's `/tasks/delete` (as `ctr events` saw it)",
    "kubelet receives `/tasks/delete`",
    "the PLEG reports the exit (its event; the status from `/tasks/exit`)",
    "the pod worker's sync starts",
    "the terminated status is stored",
    "`/pods` shows it (polled every 2 ms)",
    "of which after `/tasks/delete` (negative: shown before containerd's delete)",
];

/// Per-stage times of every exit, ms after containerd's `/tasks/exit`.
#[derive(Debug, Default)]
pub(crate) struct ExitPath {
    exits: usize,
    stages: Vec<Vec<f64>>,
}

impl ExitPath {
    /// The path of each of `exits` in the kubelet's `log`.
    pub(crate) fn new(log: &str, exits: &[Exit]) -> ExitPath {
        let steps: Vec<Step> = log.lines().filter_map(step).collect();
        let mut stages = vec![Vec::new(); STAGES.len()];
        for exit in exits {
            let ms = |at: f64| (at - exit.exit_unix_s) * 1e3;
            let first = |after: f64, matches: &dyn Fn(&Step) -> bool| {
                steps
                    .iter()
                    .find(|s| s.at >= after && matches(s))
                    .map(|s| s.at)
            };
            let of_container = |name: &'static str, kinds: &'static [&'static str]| {
                move |s: &Step| {
                    s.step == name
                        && s.container.as_deref() == Some(exit.container.as_str())
                        && s.kind.as_deref().is_some_and(|k| kinds.contains(&k))
                }
            };
            let of_pod = |name: &'static str| {
                move |s: &Step| s.step == name && s.pod.as_deref() == Some(exit.pod.as_str())
            };
            // The log and the bench share the host's clock; a little slack for rounding.
            let since = exit.exit_unix_s - 0.001;
            let received_exit = first(since, &of_container("runtime_event", &["Exited"]));
            let received_delete = first(since, &of_container("runtime_event", &["TaskDeleted"]));
            let shown = first(
                since,
                &of_container("pleg_event", &["Exited", "TaskDeleted"]),
            );
            let sync = shown.and_then(|t| first(t, &of_pod("sync_start")));
            let stored = sync.and_then(|t| first(t, &of_pod("status_stored")));
            let times = [
                received_exit,
                Some(exit.delete_unix_s),
                received_delete,
                shown,
                sync,
                stored,
                Some(exit.shown_unix_s),
            ];
            for (stage, at) in stages.iter_mut().zip(times) {
                if let Some(at) = at {
                    stage.push(ms(at));
                }
            }
            stages[7].push((exit.shown_unix_s - exit.delete_unix_s) * 1e3);
        }
        ExitPath {
            exits: exits.len(),
            stages,
        }
    }

    /// A Markdown section: each stage's p50 and p99, ms after `/tasks/exit`.
    pub(crate) fn markdown(&self) -> String {
        if self.exits == 0 {
            return String::new();
        }
        let mut out = format!(
            "G3 exit path, {} exits, ms after containerd's `/tasks/exit` (as `ctr events` saw \
             it; the kubelet's steps from its log):\n\n\
             | stage | exits | p50 | p99 |\n|---|---|---|---|\n",
            self.exits
        );
        for (name, times) in STAGES.iter().zip(&self.stages) {
            if times.is_empty() {
                out.push_str(&format!("| {name} | 0 | – | – |\n"));
            } else {
                out.push_str(&format!(
                    "| {name} | {} | {:.1} | {:.1} |\n",
                    times.len(),
                    median(times),
                    percentile(times, 99.0)
                ));
            }
        }
        out
    }

    /// The same as JSON: every exit's time per stage.
    pub(crate) fn to_json(&self) -> Value {
        let stages: serde_json::Map<String, Value> = STAGES
            .iter()
            .zip(&self.stages)
            .map(|(name, times)| ((*name).to_owned(), json!(times)))
            .collect();
        json!({ "exits": self.exits, "stages_ms_after_exit": stages })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::probes::timeline::rfc3339_seconds;

    const LOG: &str = r#"{"ts":1795705200000,"caller":"src/x.rs:1","msg":"starting kubelet","v":0}
{"ts":1795705201001,"caller":"src/x.rs:1","msg":"start path","v":5,"kind":"Exited","container":"c1","step":"runtime_event"}
{"ts":1795705201020,"caller":"src/x.rs:1","msg":"start path","v":5,"kind":"TaskDeleted","container":"c2","step":"runtime_event"}
{"ts":1795705201030,"caller":"src/x.rs:1","msg":"start path","v":5,"kind":"TaskDeleted","container":"c1","step":"runtime_event"}
{"ts":1795705201034,"caller":"src/x.rs:1","msg":"start path","v":5,"kind":"TaskDeleted","container":"c1","step":"pleg_event"}
{"ts":1795705201035,"caller":"src/x.rs:1","msg":"start path","v":5,"pod":"other_default","step":"sync_start"}
{"ts":1795705201036,"caller":"src/x.rs:1","msg":"start path","v":5,"pod":"p1_default","step":"sync_start"}
{"ts":1795705201037,"caller":"src/x.rs:1","msg":"start path","v":5,"pod":"p1_default","step":"status_stored"}
{"ts":1795705201038,"caller":"src/x.rs:1","msg":"cri call","v":5,"op":"StopPodSandbox","us":1000}
"#;

    #[test]
    fn follows_one_exit_through_the_log() {
        let t = |s: &str| rfc3339_seconds(s).unwrap_or(f64::NAN);
        let exit = Exit {
            pod: "p1_default".into(),
            container: "c1".into(),
            exit_unix_s: t("2026-11-26T15:00:01.000000Z"),
            delete_unix_s: t("2026-11-26T15:00:01.029000Z"),
            shown_unix_s: t("2026-11-26T15:00:01.040000Z"),
        };
        let path = ExitPath::new(LOG, &[exit]);
        let got: Vec<f64> = path
            .stages
            .iter()
            .map(|s| s.first().copied().unwrap_or(f64::NAN))
            .collect();
        let want = [1.0, 29.0, 30.0, 34.0, 36.0, 37.0, 40.0, 11.0];
        assert!(
            got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-3),
            "{got:?}"
        );
        assert!(
            path.markdown()
                .contains("| the pod worker's sync starts | 1 | 36.0 | 36.0 |")
        );
    }

    #[test]
    fn an_exit_missing_from_the_log_leaves_its_stages_empty() {
        let exit = Exit {
            pod: "gone_default".into(),
            container: "c9".into(),
            exit_unix_s: rfc3339_seconds("2026-11-26T15:00:01.000000Z").unwrap_or(f64::NAN),
            ..Exit::default()
        };
        let path = ExitPath::new(LOG, &[exit]);
        assert!(path.stages[3].is_empty());
        assert!(path.stages[4].is_empty());
        assert_eq!(
            path.stages[1].len(),
            1,
            "the bench's own times are always there"
        );
    }
}
