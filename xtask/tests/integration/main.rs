//! xtask's integration tests, linked into one binary
//! (issue 32); a module is a suite: `cargo test -p xtask --test integration <module>::`.

mod apiserver;
mod testbed;
