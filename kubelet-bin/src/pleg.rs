//! Which PLEG runs: the event-driven one over containerd's native events when the runtime is
//! containerd and `--evented-pleg` is on, the generic relisting one otherwise (upstream
//! `pkg/kubelet/kubelet.go`, where `EventedPLEG` is a feature gate).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kubelet_core::runtime::Runtime;
use kubelet_pleg::GenericPleg;
use kubelet_pleg::containerd::ContainerdEvents;
use kubelet_pleg::evented::{self, EventedPleg};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// The runtime name containerd reports in CRI `Version`.
const CONTAINERD: &str = "containerd";

/// How the PLEG is chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// `--evented-pleg`: use containerd's events when the runtime is containerd.
    pub evented: bool,
    /// `--evented-pleg-relist-period`: the safety-net relist period while events flow.
    pub safety_net_period: Duration,
    /// The runtime's socket, where containerd also serves its events.
    pub socket: PathBuf,
}

/// Runs the chosen PLEG over `generic` until `token` is cancelled, and logs which one.
pub async fn run(
    choice: Choice,
    runtime: Arc<dyn Runtime>,
    generic: GenericPleg,
    token: CancellationToken,
) {
    let relist = generic.config().relist_period;
    if !choice.evented {
        info!(every = ?relist, "pleg: generic (relisting); --evented-pleg=false");
        return generic.run(token).await;
    }
    let name = match runtime.version().await {
        Ok(version) => version.runtime_name,
        Err(e) => {
            warn!(error = %e, every = ?relist, "pleg: generic (relisting); cannot tell whether the runtime is containerd");
            return generic.run(token).await;
        }
    };
    if name != CONTAINERD {
        info!(runtime = %name, every = ?relist, "pleg: generic (relisting); runtime events need containerd");
        return generic.run(token).await;
    }
    info!(
        socket = %choice.socket.display(),
        safety_net = ?choice.safety_net_period,
        "pleg: evented (containerd events)"
    );
    let source = Arc::new(ContainerdEvents::new(choice.socket));
    let config = evented::Config::default()
        .safety_net_period(choice.safety_net_period)
        .fallback_period(relist);
    EventedPleg::new(generic, source, config).run(token).await;
}
