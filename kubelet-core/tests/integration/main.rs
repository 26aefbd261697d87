//! kubelet-core's integration tests, linked into one binary (`fake_apiserver` needs the
//! `test-util` feature, which `cargo test --workspace` turns on)
//! (issue 32); a module is a suite: `cargo test -p kubelet-core --test integration <module>::`.

mod config_file_source;
#[cfg(feature = "test-util")]
mod fake_apiserver;
mod fuzz_corpus;
