//! cargo-fuzz target `kubelet_config`: see `harness/kubelet_config.rs`, which the workspace's
//! corpus test runs too.
#![no_main]

// The binary's settings modules, as `kubelet-bin/src/main.rs` declares them.
#[path = "../../src/cluster_settings.rs"]
mod cluster_settings;
#[path = "../../src/container_log_settings.rs"]
mod container_log_settings;
use kubelet::duration;
#[path = "../../src/eviction_settings.rs"]
mod eviction_settings;
#[path = "../../src/gc_settings.rs"]
mod gc_settings;
#[path = "../../src/node_allocatable.rs"]
#[allow(dead_code)]
mod node_allocatable;
#[path = "../../src/node_status_flags.rs"]
mod node_status_flags;
#[path = "../../src/pod_runtime.rs"]
mod pod_runtime;
#[path = "../../src/server_settings.rs"]
mod server_settings;
#[path = "../../src/settings.rs"]
#[allow(dead_code)]
mod settings;

#[path = "../harness/kubelet_config.rs"]
mod harness;
#[path = "../../../kubelet-core/fuzz/harness/scratch.rs"]
#[allow(dead_code)] // clean() is for the corpus tests
mod scratch;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
