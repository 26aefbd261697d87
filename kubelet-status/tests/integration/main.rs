//! kubelet-status's integration tests, linked into one binary
//! (issue 32); a module is a suite: `cargo test -p kubelet-status --test integration <module>::`.

mod common;

mod api_status_fake_apiserver;
mod api_status_wire;
mod generate_conditions;
mod generate_containers;
mod generate_phase;
mod phase_property;
mod status_manager;
