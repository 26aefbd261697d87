//! cargo-fuzz target `manifest_dir`: see `harness/manifest_dir.rs`, which the workspace's corpus test runs too.
#![no_main]

#[path = "../harness/manifest_dir.rs"]
mod harness;
#[path = "../harness/scratch.rs"]
#[allow(dead_code)] // clean() is for the corpus tests
mod scratch;
#[path = "../harness/split.rs"]
mod split;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
