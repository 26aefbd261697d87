//! Settings → [`NodeBuilder`]: the CRI runtime, the pod cgroups and every flag become builder
//! options; the node runs until SIGTERM/SIGINT and drains (upstream
//! `cmd/kubelet/app/server.go` `RunKubelet`).

use std::sync::Arc;

use anyhow::Context;
use kubelet::{NodeBuilder, RuntimeContext};
use tracing::{info, warn};

use crate::settings::Settings;

/// The secure port's options of `settings` (TLS, authentication, authorization, `/configz`).
pub fn secure_options(settings: &Settings) -> kubelet::server::SecureOptions {
    kubelet::server::SecureOptions {
        addr: settings.secure,
        tls: settings.server.tls.clone(),
        authn: settings.server.authn.clone(),
        authz: settings.server.authz.clone(),
        configz: Arc::new(crate::configz::configz(settings)),
    }
}

/// Runs the kubelet until a termination signal.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    info!(node = %settings.node_name, endpoint = %settings.runtime_endpoint, "starting kubelet");
    for warning in &settings.flag_warnings {
        warn!("{warning}");
    }
    let authn = &settings.server.authn;
    if !authn.anonymous && !authn.webhook && authn.client_ca_file.is_none() {
        warn!(
            port = settings.secure.port(),
            "the secure port authenticates no one and answers every request with 401: give --client-ca-file, --authentication-token-webhook (with --kubeconfig) or --anonymous-auth=true"
        );
    }
    for field in &settings.ignored_config_fields {
        warn!("{}", crate::cli::fields::ignored_field_warning(field));
    }
    let pr = &settings.pod_runtime;
    let (summary, pod_stats) = stats_provider(&settings)?;
    let cgroups = {
        let settings = settings.clone();
        kubelet_core::blocking::unblock(move || pod_cgroups(&settings))
            .await
            .context("setting up pod cgroups")??
    };
    let mut builder = NodeBuilder::new({
        let settings = settings.clone();
        move |ctx: &RuntimeContext| remote_runtime(&settings, ctx)
    })
    .node_name(settings.node_name.clone())
    .max_pods(settings.node_status.max_pods)
    .node_ips(settings.node_ips.clone())
    .root_dir(settings.root_dir.clone())
    .cgroups(cgroups)
    .cluster_domain(pr.cluster_domain.clone())
    .crash_loop_backoff(settings.crash_loop_backoff.0, settings.crash_loop_backoff.1)
    .sync_frequency(settings.sync_frequency)
    .evented_pleg(settings.pleg_choice())
    .stats_provider(summary)
    .eviction(settings.eviction.clone())
    .node_shutdown(settings.node_shutdown.clone())
    .pod_infra_container_image(settings.gc.pod_infra_container_image.clone())
    .sysctl_allowlist(settings.security.sysctls.clone())
    .image_gc_period(settings.gc.image_gc_period);
    if settings.gc.image_gc.is_enabled() {
        builder = builder.image_gc(settings.gc.image_gc, pod_stats);
    } else {
        info!(
            "ImageGCHighThresholdPercent is set 100 and ImageMaximumGCAge is 0, Disable image GC"
        );
    }
    match &settings.pod_manifest_path {
        Some(path) => {
            builder = builder
                .pod_manifest_path(path.clone())
                .file_check_frequency(settings.file_check_frequency);
        }
        None => info!("no --pod-manifest-path: running with no static pods"),
    }
    if let Some(url) = &settings.cluster.manifest_url {
        let source = kubelet::cluster::http_source::HttpSource::new(
            url,
            &settings.cluster.manifest_url_headers,
            settings.node_name.clone(),
        )
        .context("--manifest-url")?
        .check_frequency(settings.cluster.http_check_frequency);
        builder = builder.source(Box::new(source));
    }
    match &settings.cluster.kubeconfig {
        Some(path) => {
            let cert_dir = cert_dir(&settings);
            if let Some(bootstrap) = &settings.cluster.bootstrap_kubeconfig {
                kubelet::cluster::certificate::Bootstrap::new(
                    path,
                    bootstrap,
                    &cert_dir,
                    &settings.node_name,
                )
                .load_client_cert()
                .await
                .with_context(|| {
                    format!(
                        "TLS bootstrap with --bootstrap-kubeconfig {}",
                        bootstrap.display()
                    )
                })?;
            }
            let config = kubelet::cluster::client::load_kubeconfig(path)
                .await
                .context("--kubeconfig")?;
            info!(server = %config.cluster_url, "joining the cluster");
            let mut options = settings
                .cluster
                .options(config.clone())
                .node_status(settings.node_status.clone());
            if settings.cluster.rotate_certificates {
                let auth = &config.auth_info;
                let rotation =
                    kubelet::cluster::certificate::Rotation::client(&cert_dir, &settings.node_name);
                match kubelet::cluster::certificate::bootstrap::client_pair_pem(path, auth) {
                    Ok(Some((cert, key))) => {
                        options = options.rotate_client_certificate(rotation.seed(cert, key));
                    }
                    Ok(None) => warn!(
                        kubeconfig = %path.display(),
                        "--rotate-certificates: the kubeconfig has no client certificate to rotate"
                    ),
                    Err(e) => warn!(error = %e, "--rotate-certificates: not rotating"),
                }
            }
            if settings.cluster.server_tls_bootstrap {
                options = options.rotate_serving_certificate(
                    kubelet::cluster::certificate::Rotation::serving(
                        &cert_dir,
                        &settings.node_name,
                    ),
                );
            }
            builder = builder.cluster(options);
        }
        None => info!("no --kubeconfig: running standalone"),
    }
    if let Some(addr) = settings.healthz {
        builder = builder.healthz_addr(addr);
    }
    if let Some(addr) = settings.read_only {
        builder = builder.read_only_addr(addr);
    }
    builder = if settings.gc.container_gc_period.is_zero() {
        builder.no_container_gc()
    } else {
        builder.container_gc(settings.gc.container_gc, settings.gc.container_gc_period)
    };
    if let Some(policy) = settings.container_logs.policy {
        builder = builder.container_log_rotation(policy, settings.container_logs.monitor_interval);
    }
    builder = builder.secure_server(secure_options(&settings));
    let node = builder.build().await.map_err(|e| {
        let context = match &e {
            kubelet::Error::RootDir { .. } => "--root-dir".to_owned(),
            kubelet::Error::Runtime(_) => {
                format!("--container-runtime-endpoint {}", settings.runtime_endpoint)
            }
            kubelet::Error::Bind { .. } => "starting the endpoints".to_owned(),
            kubelet::Error::Cluster(_) => "--kubeconfig".to_owned(),
            kubelet::Error::Server(_) => "the secure port (--port, TLS and auth flags)".to_owned(),
            kubelet::Error::NodeStatus(_) => "the node status options".to_owned(),
            kubelet::Error::LogRotation(_) => "the container log rotation options".to_owned(),
            kubelet::Error::Watchdog(_) => "starting the stall watchdog".to_owned(),
            kubelet::Error::ImageGc(_) => "the image garbage collection options".to_owned(),
        };
        anyhow::Error::new(e).context(context)
    })?;
    let mut signals = Signals::install()?;
    let trim = tokio_util::sync::CancellationToken::new();
    tokio::spawn(crate::heap_trim::run(trim.clone()));
    tokio::spawn(crate::idle_trim::run(trim.clone()));
    node.run_until(async move { signals.recv().await }).await;
    trim.cancel();
    Ok(())
}

/// Where the client certificates live: `--cert-dir` (default `<root-dir>/pki`, upstream's
/// `/var/lib/kubelet/pki`). With `--tls-cert-file` the secure port's settings keep no
/// directory, and the default is used.
fn cert_dir(settings: &Settings) -> std::path::PathBuf {
    match &settings.server.tls.cert {
        kubelet::server::tls::ServingCert::SelfSigned { cert_dir } => cert_dir.clone(),
        _ => settings.root_dir.join("pki"),
    }
}

/// The CRI runtime of the settings. The one place the binary constructs `RemoteRuntime`.
fn remote_runtime(
    settings: &Settings,
    ctx: &RuntimeContext,
) -> anyhow::Result<kubelet_cri::RemoteRuntime> {
    let pr = &settings.pod_runtime;
    let runtime = kubelet_cri::connect_with_metrics(
        &settings.runtime_endpoint,
        kubelet_cri::Options::default()
            .with_request_timeout(pr.runtime_request_timeout)
            .with_pod_logs_dir(settings.pod_log_dir.clone())
            .with_container_log_links_dir(settings.container_log_links_dir())
            .with_root_dir(ctx.root_dir.clone())
            .with_node_name(ctx.node_name.clone())
            .with_seccomp_profile_root(ctx.root_dir.join("seccomp"))
            .with_seccomp_default(settings.security.seccomp_default)
            .with_sysctls(settings.security.sysctls.clone())
            .with_node_ips(ctx.node_ips.clone())
            .with_resolv_conf(pr.resolv_conf.clone())
            .with_cluster_dns(kubelet_core::kuberuntime::ClusterDns {
                servers: pr.cluster_dns.clone(),
                domain: pr.cluster_domain.clone(),
            })
            .with_cfs_quota(kubelet_cri::resources::CfsQuota {
                enforce: pr.cpu_cfs_quota,
                period_us: i64::try_from(pr.cpu_cfs_quota_period_us).unwrap_or(100_000),
            }),
        ctx.metrics.clone(),
    )?
    .with_probe_results(ctx.probe_results.clone())
    .with_handler_runner(Arc::new(kubelet_probe::LifecycleHandlerRunner))
    .with_event_recorder(ctx.event_recorder.clone())
    .with_image_pull_backoff(kubelet_core::kuberuntime::ImagePullBackoff::new(
        settings.image_pull_backoff.0,
        settings.image_pull_backoff.1,
    ));
    let runtime = match &settings.security.credential_providers {
        Some((config, bin_dir)) => runtime.with_credential_providers(Arc::new(
            kubelet_core::credentialprovider::CredentialProviders::load(config, bin_dir)
                .context("--image-credential-provider-config")?,
        )),
        None => runtime,
    };
    Ok(match &ctx.runtime_classes {
        Some(classes) => runtime.with_runtime_classes(classes.clone()),
        None => runtime,
    })
}

/// The Summary API over the CRI runtime (upstream `NewCRIStatsProvider` in `kubelet.go`):
/// its own CRI client on the same socket, the pod cgroups under `--cgroup-root`; and the pod
/// stats under it, which image GC reads the image filesystem's usage from.
fn stats_provider(
    settings: &Settings,
) -> anyhow::Result<(
    Arc<dyn kubelet_core::stats::SummaryProvider>,
    Arc<dyn kubelet_core::stats::PodStatsProvider>,
)> {
    use kubelet_core::stats::{Summarizer, cgroup, cri};
    let pr = &settings.pod_runtime;
    let service = kubelet_cri::CriRuntimeService::connect(
        &settings.runtime_endpoint,
        kubelet_cri::CriOptions::default().with_request_timeout(pr.runtime_request_timeout),
    )?;
    let reader = cgroup::Reader::detect();
    let pods: Arc<dyn kubelet_core::stats::PodStatsProvider> =
        Arc::new(cri::CriStatsProvider::new(
            service,
            cri::Options::new(settings.root_dir.clone())
                .with_pod_logs_dir(settings.pod_log_dir.clone())
                .with_cgroups(pr.cgroup_root.clone(), reader.clone())
                .with_volume_stats_period(pr.volume_stats_agg_period),
        ));
    let summary = Arc::new(
        Summarizer::new(
            settings.node_name.clone(),
            settings.root_dir.clone(),
            pods.clone(),
        )
        .with_cgroups(pr.cgroup_root.clone(), reader)
        .with_system_containers(kubelet_core::stats::system_containers::Config {
            kubelet: pr.kubelet_cgroups.clone(),
            runtime: pr.runtime_cgroups.clone(),
            runtime_socket: Some(settings.runtime_socket.clone()),
            misc: pr.system_cgroups.clone(),
        }),
    );
    Ok((summary, pods))
}

/// SIGTERM and SIGINT, installed before the node starts.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => info!("received SIGTERM"),
            _ = self.int.recv() => info!("received SIGINT"),
        }
    }
}

/// The pod cgroup manager of the settings (upstream `ContainerManager.Start`): with
/// `--cgroups-per-qos`, cgroupfs or systemd slices under `--cgroup-root` (`--cgroup-driver`),
/// after creating the QoS cgroups. Blocks on the cgroup filesystem and D-Bus: run it on the
/// blocking pool.
fn pod_cgroups(
    settings: &Settings,
) -> anyhow::Result<Arc<dyn kubelet_core::cm::PodContainerManager>> {
    use crate::pod_runtime::CgroupDriver;
    use kubelet_core::cm::cgroupfs::{Cgroupfs, Layout};
    let pr = &settings.pod_runtime;
    if !pr.cgroups_per_qos {
        let root = if pr.cgroup_root == "/" {
            String::new()
        } else {
            pr.cgroup_root.clone()
        };
        return Ok(Arc::new(kubelet_core::cm::Noop { cgroup_root: root }));
    }
    let layout = Layout::detect().context("--cgroups-per-qos: detecting cgroups")?;
    let qos_context = || {
        format!(
            "--cgroups-per-qos: creating the QoS cgroups under {} ({})",
            pr.cgroup_root,
            pr.cgroup_driver.as_str()
        )
    };
    match pr.cgroup_driver {
        CgroupDriver::Cgroupfs => {
            let cgroups = Cgroupfs::new(layout, pr.cgroup_root.clone())
                .with_cpu_cfs_quota(pr.cpu_cfs_quota, pr.cpu_cfs_quota_period_us);
            cgroups.setup_qos().with_context(qos_context)?;
            crate::node_allocatable::enforce(settings, &cgroups)?;
            tracing::info!(root = %pr.cgroup_root, "pod cgroups enabled (cgroupfs)");
            Ok(Arc::new(cgroups))
        }
        CgroupDriver::Systemd => {
            let units = kubelet::systemd::DbusSystemd::connect(kubelet::systemd::Address::System)
                .context("--cgroup-driver=systemd: connecting to systemd over D-Bus")?;
            let cgroups =
                kubelet_core::cm::systemd::Systemd::new(layout, &pr.cgroup_root, Arc::new(units))
                    .with_cpu_cfs_quota(pr.cpu_cfs_quota, pr.cpu_cfs_quota_period_us);
            cgroups.setup_qos().with_context(qos_context)?;
            crate::node_allocatable::enforce(settings, &cgroups)?;
            tracing::info!(root = %pr.cgroup_root, "pod cgroups enabled (systemd)");
            Ok(Arc::new(cgroups))
        }
    }
}
