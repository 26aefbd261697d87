//! G1's per-step breakdown (issue 17): where the milliseconds of a kubelet pod start go, from
//! the kubelet's own trace events (`kubelet_core::start_path`: the `start path` steps and every
//! `cri call` with its duration), set against the CRI calls of the raw arms, which the agent
//! times itself (B: the kubelet's requests replayed; C: a bare pod).
//!
//! Each kubelet round is found in the log by its wall-clock window: from the manifest's rename
//! (`t0_unix_s`) to the kubelet's `/pods` saying Running. Rounds run one at a time, so what the
//! kubelet logs in that window is that pod's start (and the odd periodic call, which shows as a
//! method seen in fewer rounds).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{scenario::Runs, stats::median};

/// The tracing filter that turns the start path's events on (`kubelet_core::start_path`).
pub(crate) const LOG_FILTER: &str = "kubelet_start_path=trace";

/// One event of the start path in the kubelet's log.
#[derive(Debug, Clone, PartialEq)]
enum Event {
    /// A step, at its time.
    Step { at: f64, step: String },
    /// A CRI call that returned at `at` after `took` seconds.
    Call { at: f64, op: String, took: f64 },
}

fn event(line: &str) -> Option<Event> {
    let line = super::kubelet_log::Line::parse(line)?;
    match line.msg.as_str() {
        "start path" => Some(Event::Step {
            at: line.at,
            step: line.field("step")?,
        }),
        "cri call" => {
            let us: f64 = line.field("us")?.parse().ok()?;
            Some(Event::Call {
                at: line.at,
                op: line.field("op")?,
                took: us / 1e6,
            })
        }
        _ => None,
    }
}

/// Per-round samples of one named thing (a step or a CRI method), ms.
#[derive(Debug, Default, Clone)]
struct Samples {
    /// When it happened (a call: when it began), from the round's start.
    at: Vec<f64>,
    /// How long it took (calls only).
    took: Vec<f64>,
    /// In how many rounds it was seen.
    rounds: usize,
}

/// The breakdown of arm A (from the log) and the raw arms' calls.
#[derive(Debug, Default)]
pub(crate) struct Breakdown {
    rounds: usize,
    steps: BTreeMap<String, Samples>,
    kubelet_calls: BTreeMap<String, Samples>,
    replay_calls: BTreeMap<String, Samples>,
    minimal_calls: BTreeMap<String, Samples>,
    running: Vec<f64>,
    reported: Vec<f64>,
}

/// Adds one round's first occurrence of each name (steps) or every call (calls, each counted).
fn add_round(into: &mut BTreeMap<String, Samples>, round: &[(String, f64, f64)]) {
    let mut seen = std::collections::BTreeSet::new();
    for (name, at, took) in round {
        let s = into.entry(name.clone()).or_default();
        if seen.insert(name.clone()) {
            s.rounds += 1;
            s.at.push(*at);
            s.took.push(*took);
        } else {
            // A second call of one method in a round: its time counts, its start does not.
            if let Some(last) = s.took.last_mut() {
                *last += took;
            }
        }
    }
}

impl Breakdown {
    /// The breakdown of `g1` with the kubelet's `log`.
    pub(crate) fn new(log: &str, g1: &Runs) -> Breakdown {
        let events: Vec<Event> = log.lines().filter_map(event).collect();
        let mut out = Breakdown {
            rounds: g1.a.len(),
            ..Breakdown::default()
        };
        for start in &g1.a {
            let end_ms = start
                .reported_ms
                .iter()
                .copied()
                .fold(start.total_ms, f64::max);
            let (t0, end) = (start.t0_unix_s, start.t0_unix_s + end_ms / 1e3);
            let mut steps = Vec::new();
            let mut calls = Vec::new();
            for e in &events {
                match e {
                    Event::Step { at, step } if (t0..=end).contains(at) => {
                        steps.push((step.clone(), (at - t0) * 1e3, 0.0));
                    }
                    Event::Call { at, op, took } if (t0..=end).contains(&(at - took)) => {
                        calls.push((op.clone(), (at - took - t0) * 1e3, took * 1e3));
                    }
                    _ => {}
                }
            }
            calls.sort_by(|a, b| a.1.total_cmp(&b.1));
            add_round(&mut out.steps, &steps);
            add_round(&mut out.kubelet_calls, &calls);
            out.running.push(start.total_ms);
            out.reported.extend(start.reported_ms.iter().copied());
        }
        for start in &g1.b {
            add_round(&mut out.replay_calls, &start.timings);
        }
        for start in &g1.c {
            add_round(&mut out.minimal_calls, &start.timings);
        }
        out
    }

    /// Steps and calls of arm A in the order they happen (p50 of `at`).
    fn timeline(&self) -> Vec<(&str, bool, &Samples)> {
        let mut all: Vec<(&str, bool, &Samples)> = self
            .steps
            .iter()
            .map(|(n, s)| (n.as_str(), false, s))
            .chain(
                self.kubelet_calls
                    .iter()
                    .map(|(n, s)| (n.as_str(), true, s)),
            )
            .collect();
        all.sort_by(|a, b| median(&a.2.at).total_cmp(&median(&b.2.at)));
        all
    }

    /// A Markdown section: the kubelet's steps and calls with the raw arms' same calls.
    pub(crate) fn markdown(&self) -> String {
        if self.rounds == 0 {
            return String::new();
        }
        let cell = |m: &BTreeMap<String, Samples>, op: &str| {
            m.get(op).map_or("–".to_owned(), |s| {
                format!("{:.1} (+{:.1})", median(&s.at), median(&s.took))
            })
        };
        let mut out = format!(
            "G1 start path of the kubelet, p50 over {} rounds, ms from the manifest's rename \
             (a CRI call: when it began, +how long it took; the raw arms' calls from their \
             first call):\n\n\
             | step or CRI call | rounds | kubelet (A) | replay (B) | minimal (C) |\n\
             |---|---|---|---|---|\n",
            self.rounds
        );
        for (name, is_call, s) in self.timeline() {
            let (b, c) = if is_call {
                (
                    cell(&self.replay_calls, name),
                    cell(&self.minimal_calls, name),
                )
            } else {
                (String::new(), String::new())
            };
            let a = if is_call {
                format!("{:.1} (+{:.1})", median(&s.at), median(&s.took))
            } else {
                format!("{:.1}", median(&s.at))
            };
            let name = if is_call {
                format!("`{name}`")
            } else {
                name.to_owned()
            };
            out.push_str(&format!("| {name} | {} | {a} | {b} | {c} |\n", s.rounds));
        }
        out.push_str(&format!(
            "| CRI shows the container running | {} | {:.1} | | |\n\
             | `/pods` says Running | {} | {:.1} | | |\n",
            self.running.len(),
            median(&self.running),
            self.reported.len(),
            median(&self.reported),
        ));
        out
    }

    /// The same as JSON.
    pub(crate) fn to_json(&self) -> Value {
        let map = |m: &BTreeMap<String, Samples>| -> Value {
            m.iter()
                .map(|(k, s)| {
                    (
                        k.clone(),
                        json!({ "rounds": s.rounds, "at_ms": s.at, "took_ms": s.took }),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        json!({
            "rounds": self.rounds,
            "steps": map(&self.steps),
            "kubelet_calls": map(&self.kubelet_calls),
            "replay_calls": map(&self.replay_calls),
            "minimal_calls": map(&self.minimal_calls),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::probes::timeline::rfc3339_seconds;
    use crate::bench::scenario::Start;

    const LOG: &str = r#"{"ts":1795705200000,"caller":"src/x.rs:1","msg":"starting kubelet","v":0}
{"ts":1795705201002,"caller":"src/x.rs:1","msg":"start path","v":5,"step":"manifest_event"}
{"ts":1795705201004,"caller":"src/x.rs:1","msg":"start path","v":5,"pod":"g1-a0-bench-node_default","step":"sync_start"}
{"ts":1795705201050,"caller":"src/x.rs:1","msg":"cri call","v":5,"op":"RunPodSandbox","us":40000}
{"ts":1795705201060,"caller":"src/x.rs:1","msg":"cri call","v":5,"op":"CreateContainer","us":5000}
{"ts":1795705201064,"caller":"src/x.rs:1","msg":"cri call","v":5,"op":"ContainerStatus","us":1000}
{"ts":1795705201066,"caller":"src/x.rs:1","msg":"cri call","v":5,"op":"ContainerStatus","us":1500}
{"ts":1795705202500,"caller":"src/x.rs:1","msg":"cri call","v":5,"op":"ListPodSandbox","us":1000}
"#;

    fn round(t0: f64, reported: f64) -> Start {
        Start {
            t0_unix_s: t0,
            total_ms: reported - 5.0,
            reported_ms: vec![reported],
            ..Start::default()
        }
    }

    #[test]
    fn parses_steps_and_calls_in_the_rounds_window() {
        let t0 = rfc3339_seconds("2026-11-26T15:00:01.000000Z").unwrap_or(f64::NAN);
        let g1 = Runs {
            a: vec![round(t0, 100.0)],
            b: vec![Start {
                timings: vec![("RunPodSandbox".into(), 0.5, 38.0)],
                ..Start::default()
            }],
            ..Runs::default()
        };
        let b = Breakdown::new(LOG, &g1);
        let close = |x: f64, y: f64| (x - y).abs() < 1e-3;
        assert!(close(b.steps["manifest_event"].at[0], 2.0));
        assert!(close(b.steps["sync_start"].at[0], 4.0));
        let run = &b.kubelet_calls["RunPodSandbox"];
        assert!(
            close(run.at[0], 10.0) && close(run.took[0], 40.0),
            "{run:?}"
        );
        // Two ContainerStatus calls in a round: one start, both durations.
        let status = &b.kubelet_calls["ContainerStatus"];
        assert_eq!(status.rounds, 1);
        assert!(close(status.took[0], 2.5), "{status:?}");
        // Outside the window (1.5 s later): not this round's.
        assert!(!b.kubelet_calls.contains_key("ListPodSandbox"));
        let md = b.markdown();
        assert!(
            md.contains("| `RunPodSandbox` | 1 | 10.0 (+40.0) | 0.5 (+38.0) | – |"),
            "{md}"
        );
        assert!(md.contains("| sync_start | 1 | 4.0 |"), "{md}");
    }

    #[test]
    fn ignores_other_lines() {
        assert_eq!(
            event(r#"{"ts":1795705200000,"msg":"pod added","v":0,"pod":"x"}"#),
            None
        );
        assert_eq!(event("garbage"), None);
        assert_eq!(
            event(r#"{"ts":1795705200000,"msg":"cri call","v":5,"op":"Version","us":12}"#),
            Some(Event::Call {
                at: rfc3339_seconds("2026-11-26T15:00:00Z").unwrap_or(f64::NAN),
                op: "Version".into(),
                took: 12e-6,
            })
        );
    }
}
