//! cargo-fuzz target `watch_event`: see `harness/watch_event.rs`, which the workspace's
//! corpus test runs too.
#![no_main]

#[path = "../harness/watch_event.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
