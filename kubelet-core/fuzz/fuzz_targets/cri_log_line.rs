//! cargo-fuzz target `cri_log_line`: see `harness/cri_log_line.rs`, which the workspace's corpus test runs too.
#![no_main]

#[path = "../harness/cri_log_line.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
