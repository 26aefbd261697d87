//! Wiring: builds the default implementations, spawns every subsystem on one task tracker,
//! waits for SIGTERM/SIGINT and drains (upstream `cmd/kubelet/app/server.go` `RunKubelet`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kubelet_core::backoff::Backoff;
use kubelet_core::cache::PodCache;
use kubelet_core::config::{FILE_SOURCE, FileSource, PodConfig, PodSource};
use kubelet_core::kubelet::env::EnvSource;
use kubelet_core::kubelet::{
    self, Kubelet, KubeletPodSyncer, KubeletRuntimeHelper, Managers, RuntimeState, SourcesReady,
};
use kubelet_core::objects::{InMemoryObjectSource, ObjectSource};
use kubelet_core::pleg::Pleg;
use kubelet_core::pod_manager::PodManager;
use kubelet_core::pod_workers::{self, PodWorkers};
use kubelet_core::resources::NodeAllocatable;
use kubelet_core::runtime::Runtime;
use kubelet_core::status::StatusManager;
use kubelet_core::volume::VolumeManager;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::server::{self, ServerState};
use crate::settings::Settings;

/// How often the runtime's status is checked (upstream: 5 s).
const RUNTIME_STATUS_PERIOD: Duration = Duration::from_secs(5);
/// How long shutdown waits for subsystems to stop.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the kubelet until a termination signal.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    info!(node = %settings.node_name, endpoint = %settings.runtime_endpoint, "starting kubelet");
    for field in &settings.ignored_config_fields {
        warn!(field = %field, "KubeletConfiguration field is not supported by this kubelet; ignoring it");
    }
    // Upstream `setupDataDirs`: the root and pods directories are 0750.
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o750)
        .create(settings.root_dir.join("pods"))
        .with_context(|| format!("creating --root-dir {}", settings.root_dir.display()))?;

    let token = CancellationToken::new();
    let tracker = TaskTracker::new();

    let pr = &settings.pod_runtime;
    let cgroups = pod_cgroups(pr)?;
    let (probe_results, probe_updates) = kubelet_core::probe::Results::new();
    let runtime: Arc<dyn Runtime> = Arc::new(
        kubelet_cri::connect(
            &settings.runtime_endpoint,
            kubelet_cri::Options::default()
                .with_pod_logs_dir(settings.pod_log_dir.clone())
                .with_root_dir(settings.root_dir.clone())
                .with_node_name(settings.node_name.clone())
                .with_seccomp_profile_root(settings.root_dir.join("seccomp"))
                .with_node_ips(settings.node_ips.clone())
                .with_resolv_conf(pr.resolv_conf.clone())
                .with_cluster_dns(kubelet_core::kuberuntime::ClusterDns {
                    servers: pr.cluster_dns.clone(),
                    domain: pr.cluster_domain.clone(),
                })
                .with_cfs_quota(kubelet_cri::resources::CfsQuota {
                    enforce: pr.cpu_cfs_quota,
                    period_us: i64::try_from(pr.cpu_cfs_quota_period_us).unwrap_or(100_000),
                }),
        )
        .with_context(|| format!("--container-runtime-endpoint {}", settings.runtime_endpoint))?
        .with_probe_results(probe_results.clone())
        .with_handler_runner(Arc::new(kubelet_probe::LifecycleHandlerRunner))
        .with_image_pull_backoff(kubelet_core::kuberuntime::ImagePullBackoff::new(
            settings.image_pull_backoff.0,
            settings.image_pull_backoff.1,
        )),
    );
    let cache = PodCache::new();
    let (generic_pleg, pleg_events) = kubelet_pleg::GenericPleg::new(
        runtime.clone(),
        cache.clone(),
        kubelet_pleg::Config::default(),
    );
    let pleg: Arc<dyn Pleg> = Arc::new(generic_pleg.clone());
    let probe_manager = kubelet_probe::Manager::new(
        runtime.clone(),
        cache.clone(),
        probe_results,
        token.child_token(),
    )
    .with_host_ips(settings.node_ips.clone());
    let status_manager = Arc::new(
        kubelet_status::LocalStatusManager::new()
            .with_probe_results(Arc::new(probe_manager.clone())),
    );
    let status: Arc<dyn StatusManager> = status_manager.clone();
    // A standalone node has no API server: no configMaps, secrets or tokens (static pods may
    // not reference them) and no services, hence no service-link env vars.
    let objects: Arc<dyn ObjectSource> = Arc::new(InMemoryObjectSource::new());
    let allocatable = NodeAllocatable::detect();
    let volumes: Arc<dyn VolumeManager> = Arc::new(
        kubelet_volumes::DefaultVolumeManager::new(settings.root_dir.clone())
            .with_object_source(objects.clone())
            .with_node_allocatable(allocatable),
    );
    let helper = KubeletRuntimeHelper::new(volumes.clone()).with_env_source(EnvSource {
        node_name: settings.node_name.clone(),
        host_ips: settings.node_ips.clone(),
        allocatable,
        objects,
    });
    let managers = Managers {
        runtime: runtime.clone(),
        volumes: volumes.clone(),
        status: status.clone(),
        pleg: pleg.clone(),
        cache: cache.clone(),
        helper: Arc::new(
            helper
                .with_cgroups(cgroups.clone())
                .with_hosts_file(settings.root_dir.clone(), pr.cluster_domain.clone()),
        ),
        probes: Arc::new(probe_manager),
        cgroups,
    };

    let (mut pod_config, updates) = PodConfig::new();
    let sources = pod_config.sources_ready();
    let file_updates = pod_config.channel(FILE_SOURCE);
    let sources_ready: SourcesReady = Arc::new(move || sources.seen_all_sources());

    let pod_manager = PodManager::new();
    let runtime_state = RuntimeState::new(pleg.clone());
    let crash_backoff = Arc::new(Backoff::new(
        settings.crash_loop_backoff.0,
        settings.crash_loop_backoff.1,
    ));
    let syncer = Arc::new(KubeletPodSyncer::new(
        managers.clone(),
        pod_manager.clone(),
        runtime_state.clone(),
        crash_backoff.clone(),
        settings.root_dir.clone(),
        settings.node_ips.clone(),
    ));
    let workers = PodWorkers::new(
        syncer,
        pleg,
        cache,
        pod_workers::Config {
            resync_interval: settings.sync_frequency,
            ..Default::default()
        },
        tracker.clone(),
        token.clone(),
    );
    let kubelet = Kubelet::new(
        pod_manager.clone(),
        workers,
        &managers,
        crash_backoff,
        sources_ready,
    );
    let health = kubelet::sync_loop::Health::new(settings.sync_frequency);

    // The runtime is checked before anything syncs; the sync loop stays gated until it is up.
    runtime_state.update(runtime.as_ref()).await;
    tracker.spawn(runtime_state.clone().run(
        runtime.clone(),
        RUNTIME_STATUS_PERIOD,
        token.child_token(),
    ));
    tracker.spawn(crate::pleg::run(
        settings.pleg_choice(),
        runtime.clone(),
        generic_pleg,
        token.child_token(),
    ));
    match &settings.pod_manifest_path {
        Some(path) => {
            let source: Box<dyn PodSource> = Box::new(
                FileSource::new(path.clone(), settings.node_name.clone())
                    .check_frequency(settings.file_check_frequency),
            );
            tracker.spawn(source.run(file_updates, token.child_token()));
        }
        None => {
            info!("no --pod-manifest-path: running with no static pods");
            // An empty snapshot marks the file source as seen, so housekeeping can run.
            let _ = file_updates
                .send(kubelet_core::config::PodUpdate {
                    pods: vec![],
                    op: kubelet_core::config::Operation::Set,
                    source: FILE_SOURCE.into(),
                })
                .await;
        }
    }
    tracker.spawn(pod_config.run(token.child_token()));
    tracker.spawn(kubelet::sync_loop::run(
        kubelet,
        kubelet::sync_loop::Channels {
            updates,
            pleg_events,
            probe_updates,
        },
        runtime_state,
        health.clone(),
        kubelet::sync_loop::Config {
            resync_interval: settings.sync_frequency,
            ..Default::default()
        },
        token.child_token(),
    ));

    let state = ServerState {
        pod_manager,
        status,
        runtime,
        syncloop: health,
    };
    if let Some(addr) = settings.healthz {
        serve(
            &tracker,
            &token,
            addr,
            server::healthz_router(state.clone()),
            "healthz",
        )
        .await?;
    }
    if let Some(addr) = settings.read_only {
        serve(
            &tracker,
            &token,
            addr,
            server::read_only_router(state),
            "read-only",
        )
        .await?;
    }

    wait_for_signal().await?;
    info!("shutting down; pods keep running");
    token.cancel();
    tracker.close();
    if tokio::time::timeout(DRAIN_TIMEOUT, tracker.wait())
        .await
        .is_err()
    {
        warn!("some subsystems did not stop within {DRAIN_TIMEOUT:?}");
    }
    Ok(())
}

async fn serve(
    tracker: &TaskTracker,
    token: &CancellationToken,
    addr: std::net::SocketAddr,
    router: axum::Router,
    name: &'static str,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {name} server to {addr}"))?;
    info!(%addr, "serving {name} endpoints");
    let token = token.child_token();
    tracker.spawn(async move {
        let shutdown = async move { token.cancelled().await };
        if let Err(e) = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
        {
            warn!(error = %e, "{name} server failed");
        }
    });
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => info!("received SIGTERM"),
        _ = int.recv() => info!("received SIGINT"),
    }
    Ok(())
}

/// The pod cgroup manager of the settings: cgroupfs under `--cgroup-root` with
/// `--cgroups-per-qos`, after creating the QoS cgroups (upstream `ContainerManager.Start`).
fn pod_cgroups(
    pr: &crate::pod_runtime::Settings,
) -> anyhow::Result<Arc<dyn kubelet_core::cm::PodContainerManager>> {
    use kubelet_core::cm::cgroupfs::{Cgroupfs, Layout};
    if !pr.cgroups_per_qos {
        let root = if pr.cgroup_root == "/" {
            String::new()
        } else {
            pr.cgroup_root.clone()
        };
        return Ok(Arc::new(kubelet_core::cm::Noop { cgroup_root: root }));
    }
    let layout = Layout::detect().context("--cgroups-per-qos: detecting cgroups")?;
    let cgroups = Cgroupfs::new(layout, pr.cgroup_root.clone())
        .with_cpu_cfs_quota(pr.cpu_cfs_quota, pr.cpu_cfs_quota_period_us);
    cgroups.setup_qos().with_context(|| {
        format!(
            "--cgroups-per-qos: creating the QoS cgroups under {}",
            pr.cgroup_root
        )
    })?;
    tracing::info!(root = %pr.cgroup_root, "pod cgroups enabled (cgroupfs)");
    Ok(Arc::new(cgroups))
}
