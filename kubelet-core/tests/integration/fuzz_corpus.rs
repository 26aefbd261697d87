//! The cargo-fuzz targets of `kubelet-core/fuzz` (issue 16) over their checked-in inputs, as
//! a normal test on stable Rust: CI runs no nightly toolchain (a fresh machine has none, and
//! installing one needs the internet), so it replays the seeds and every input that once
//! crashed a target instead of fuzzing. `cargo xtask fuzz` fuzzes.
#![allow(clippy::disallowed_methods)]

use std::path::Path;

#[path = "../../fuzz/harness/corpus.rs"]
mod corpus;
#[path = "../../fuzz/harness/cri_log_line.rs"]
mod cri_log_line;
#[path = "../../fuzz/harness/manifest_decode.rs"]
mod manifest_decode;
#[path = "../../fuzz/harness/manifest_dir.rs"]
mod manifest_dir;
#[path = "../../fuzz/harness/quantity.rs"]
mod quantity;
#[path = "../../fuzz/harness/scratch.rs"]
mod scratch;
#[path = "../../fuzz/harness/split.rs"]
mod split;

#[test]
fn manifest_decode_inputs() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/manifests");
    corpus::run_all(
        "kubelet-core",
        "manifest_decode",
        &[&examples],
        manifest_decode::run,
    );
}

#[test]
fn manifest_dir_inputs() {
    corpus::run_all("kubelet-core", "manifest_dir", &[], manifest_dir::run);
}

#[test]
fn quantity_inputs() {
    corpus::run_all("kubelet-core", "quantity", &[], quantity::run);
}

#[test]
fn cri_log_line_inputs() {
    corpus::run_all("kubelet-core", "cri_log_line", &[], cri_log_line::run);
}
