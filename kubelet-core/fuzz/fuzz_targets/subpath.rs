//! cargo-fuzz target `subpath`: see `harness/subpath.rs`, which the workspace's corpus test runs too.
#![no_main]

#[path = "../harness/subpath.rs"]
mod harness;
#[path = "../harness/scratch.rs"]
#[allow(dead_code)] // clean() is for the corpus tests
mod scratch;
#[path = "../harness/split.rs"]
mod split;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
