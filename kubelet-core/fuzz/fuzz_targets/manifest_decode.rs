//! cargo-fuzz target `manifest_decode`: see `harness/manifest_decode.rs`, which the workspace's corpus test runs too.
#![no_main]

#[path = "../harness/manifest_decode.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
