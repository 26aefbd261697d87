//! kubelet-cri's integration tests, linked into one binary
//! (issue 32); a module is a suite: `cargo test -p kubelet-cri --test integration <module>::`.

mod fault_proxy;
mod lifecycle_hooks;
mod pull_secrets;
mod remote_runtime;
mod remote_runtime_resources;
mod runtime_class;
mod stats_provider;
