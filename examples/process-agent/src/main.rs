//! `process-agent`: a node agent that runs each container of a static pod as a host process.
//!
//! The node builder is not on this branch yet: until it is, this parses the flags and checks
//! the backend answers; the builder call replaces the body of `main`.

use std::path::PathBuf;

use clap::Parser;
use kubelet_core::kuberuntime::RuntimeService;
use process_agent::ProcessRuntimeService;

/// Flags, named as the kubelet's.
#[derive(Debug, Parser)]
struct Flags {
    /// File or directory of static pod manifests.
    #[arg(long)]
    pod_manifest_path: PathBuf,
    /// Directory for the agent's state (pods, logs).
    #[arg(long, default_value = "/var/lib/process-agent")]
    root_dir: PathBuf,
    /// Port of the read-only endpoints (`/pods`, `/healthz`); 0 disables them.
    #[arg(long, default_value_t = 10255)]
    read_only_port: u16,
    /// Node name instead of the hostname.
    #[arg(long)]
    hostname_override: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let runtime = ProcessRuntimeService::default();
    let version = runtime.version().await?;
    anyhow::bail!(
        "{} runtime ready, but no node builder yet to run {flags:?}",
        version.runtime_name
    )
}
