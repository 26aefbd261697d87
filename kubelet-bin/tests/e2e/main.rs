//! kubelet-bin's integration tests, linked into one binary (issue 32): each module is one
//! former test file, `support` their shared code (a node on a private containerd, the real
//! API server). A module is a suite: `cargo test -p kubelet-bin --test e2e <module>::`.
//!
//! Two suites stay binaries of their own because each installs a process-wide log capture
//! and reads it back: `tests/malformed_manifests.rs` and `tests/stall_watchdog.rs`.

mod support;

mod allocatable_containerd;
mod apiserver_fixture;
mod cli;
mod cluster_apiserver;
mod cluster_containerd;
mod cluster_fake_api;
mod cluster_heartbeat;
mod cluster_mode;
mod cluster_node_sync;
mod container_logs;
mod credential_provider_containerd;
mod env_security_containerd;
mod ephemeral_apiserver;
mod ephemeral_fake_api;
mod evented_pleg_containerd;
mod eviction_apiserver;
mod fault_containerd;
mod frozen_runtime_apiserver;
mod gc_containerd;
mod hostport_containerd;
mod image_gc_containerd;
mod lifecycle_containerd;
mod logs_apiserver;
mod logs_containerd;
mod metrics_apiserver;
mod mirror_apiserver;
mod mirror_pods_apiserver;
mod node_shutdown_apiserver;
mod node_status_apiserver;
mod objects_containerd;
mod outage_apiserver;
mod probes_containerd;
mod pull_secrets_containerd;
mod resources_containerd;
mod responsive_containerd;
mod restart_apiserver;
mod runtime_class_apiserver;
mod secure_port;
mod secure_port_apiserver;
mod secure_port_metrics;
mod security_profiles_containerd;
mod standalone_containerd;
mod static_pod_readd;
mod static_pod_readd_containerd;
mod stats_apiserver;
mod stats_containerd;
mod stats_secure_port;
mod status_sync_apiserver;
mod streaming_containerd;
mod streaming_websocket_containerd;
mod systemd_cgroups;
mod termination_containerd;
mod tokens_services_containerd;
mod volumes_containerd;
mod volumes_live_containerd;
mod volumes_sync;
