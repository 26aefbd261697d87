//! The process agent's integration tests, linked into one binary
//! (issue 32); a module is a suite: `cargo test -p process-agent --test integration <module>::`.

mod agent;
mod backend;
