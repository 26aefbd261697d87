//! The cargo-fuzz targets of the binary's inputs (`kubelet-bin/fuzz`: the
//! `KubeletConfiguration` file, the API watch-event decoder; and `kubelet-core/fuzz`'s Go
//! duration parser, whose source is here) over their checked-in inputs, as a normal test on
//! stable Rust: CI has no nightly toolchain, so it replays the seeds and every input that
//! once crashed a target instead of fuzzing (see `kubelet-core/tests/integration/fuzz_corpus.rs`).

// The harnesses name the modules they test as `super::…`.
use std::path::Path;

use crate::{duration, settings};

#[path = "../../kubelet-core/fuzz/harness/corpus.rs"]
mod corpus;
#[path = "../../kubelet-core/fuzz/harness/duration.rs"]
mod duration_harness;
#[path = "../fuzz/harness/kubelet_config.rs"]
mod kubelet_config;
#[path = "../../kubelet-core/fuzz/harness/scratch.rs"]
mod scratch;
#[path = "../fuzz/harness/watch_event.rs"]
mod watch_event;

#[test]
fn kubelet_config_inputs() {
    corpus::run_all("kubelet-bin", "kubelet_config", &[], kubelet_config::run);
}

#[test]
fn watch_event_inputs() {
    corpus::run_all("kubelet-bin", "watch_event", &[], watch_event::run);
}

/// The harness does reach the kubelet's pod source: the seed's two added pods come out.
#[test]
fn watch_event_harness_delivers_pods() {
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/watch_event/events");
    let data = std::fs::read(&seed).expect("the seed");
    assert!(watch_event::pods_seen(&data) >= 2);
}

#[test]
fn duration_inputs() {
    corpus::run_all("kubelet-core", "duration", &[], duration_harness::run);
}
