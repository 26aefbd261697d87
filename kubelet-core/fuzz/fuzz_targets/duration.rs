//! cargo-fuzz target `duration`: see `harness/duration.rs`, which the workspace's corpus test runs too.
#![no_main]

#[path = "../../../kubelet-bin/src/duration.rs"]
#[allow(dead_code)]
mod duration;
#[path = "../harness/duration.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
