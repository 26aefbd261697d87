//! kubelet-volumes' integration tests, linked into one binary
//! (issue 32); a module is a suite: `cargo test -p kubelet-volumes --test integration <module>::`.

mod fuzz_corpus;
mod volumes_modes;
mod volumes_objects;
