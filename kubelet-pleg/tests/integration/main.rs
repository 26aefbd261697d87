//! kubelet-pleg's integration tests, linked into one binary
//! (issue 32); a module is a suite: `cargo test -p kubelet-pleg --test integration <module>::`.

mod common;

mod evented;
mod relist_events;
mod relist_loop;
