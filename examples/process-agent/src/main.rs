//! `process-agent`: a node agent that runs each container of a static pod as a host process,
//! with the whole pod lifecycle from the kubelet library: the pod engine
//! (`KubeRuntimeManager`) over [`ProcessRuntimeService`], assembled by `kubelet::NodeBuilder`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kubelet::{NodeBuilder, RuntimeContext};
use kubelet_core::kuberuntime::{KubeRuntimeManager, Options};
use process_agent::ProcessRuntimeService;

/// Flags, named as the kubelet's.
#[derive(Debug, Parser)]
struct Flags {
    /// File or directory of static pod manifests.
    #[arg(long)]
    pod_manifest_path: PathBuf,
    /// Directory of the agent's state (pods, volumes, container logs under `logs/`).
    #[arg(long, default_value = "/var/lib/process-agent")]
    root_dir: PathBuf,
    /// Port of the read-only endpoints (`/pods`, `/runningpods/`, `/healthz`).
    #[arg(long, default_value_t = 10255)]
    read_only_port: u16,
    /// Node name instead of the hostname.
    #[arg(long)]
    hostname_override: Option<String>,
    /// First container restart back-off window, as the kubelet's hidden flag (default 10s).
    #[arg(long, hide = true, value_parser = kubelet::duration::parse)]
    experimental_crash_loop_initial_backoff: Option<Duration>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let node_name = flags
        .hostname_override
        .unwrap_or_else(kubelet::node::hostname);
    let mut node = NodeBuilder::new(|ctx: &RuntimeContext| {
        let options = Options::default()
            .with_pod_logs_dir(ctx.root_dir.join("logs"))
            .with_root_dir(&ctx.root_dir)
            .with_node_name(&ctx.node_name)
            .with_node_ips(ctx.node_ips.clone());
        let engine = KubeRuntimeManager::new(ProcessRuntimeService::default(), options);
        anyhow::Ok(engine.with_probe_results(ctx.probe_results.clone()))
    })
    .root_dir(flags.root_dir)
    .pod_manifest_path(flags.pod_manifest_path)
    .read_only_addr(SocketAddr::from(([0, 0, 0, 0], flags.read_only_port)))
    .node_name(node_name);
    if let Some(initial) = flags.experimental_crash_loop_initial_backoff {
        node = node.crash_loop_backoff(initial, Duration::from_secs(300));
    }
    let shutdown = async { tokio::signal::ctrl_c().await.unwrap_or_default() };
    node.build().await?.run_until(shutdown).await;
    Ok(())
}
