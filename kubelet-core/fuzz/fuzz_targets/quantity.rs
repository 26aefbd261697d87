//! cargo-fuzz target `quantity`: see `harness/quantity.rs`, which the workspace's corpus test runs too.
#![no_main]

#[path = "../harness/quantity.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
