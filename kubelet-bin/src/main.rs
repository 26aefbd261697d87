//! The default Rust `kubelet` binary: parses upstream's flags and `KubeletConfiguration` and
//! hands them to the library's [`kubelet::NodeBuilder`] with the CRI runtime, which wires the
//! default implementations (generic or evented PLEG, volume, status and probe managers) into
//! the sync loop, serves the healthz and read-only endpoints, and runs static pods from
//! `--pod-manifest-path` until SIGTERM/SIGINT. Pods keep running when it stops, as upstream.

mod app;
mod async_runtime;
mod cli;
mod cluster_settings;
mod configz;
mod container_log_settings;
mod eviction_settings;
#[cfg(test)]
mod fuzz_corpus;
mod gc_settings;
mod heap_trim;
mod idle_trim;
mod log_format;
mod log_writer;
mod node_allocatable;
mod node_status_flags;
mod shutdown_settings;
use kubelet::duration;
mod pod_runtime;
mod security_settings;
mod server_settings;
mod settings;

use clap::Parser;

fn main() {
    limit_malloc_arenas();
    let flags = match settings::Flags::try_parse() {
        Ok(flags) => flags,
        Err(e) if e.use_stderr() => {
            eprint!("{e}");
            std::process::exit(settings::EXIT_USAGE);
        }
        Err(e) => {
            // --help
            print!("{e}");
            std::process::exit(0);
        }
    };
    if flags.version.as_deref().is_some_and(|v| v != "false") {
        println!("{}", kubelet_core::version::VERSION_LINE);
        std::process::exit(0);
    }
    let settings = match settings::Settings::from_flags(flags) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kubelet: {e}");
            std::process::exit(settings::EXIT_USAGE);
        }
    };
    let _log_writer = init_logging(settings.logging_format, settings.verbosity);
    let runtime = match async_runtime::builder().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kubelet: starting the async runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(app::run(settings)) {
        tracing::error!("kubelet failed: {e:#}");
        drop(_log_writer);
        std::process::exit(1);
    }
}

/// Caps glibc malloc at two arenas unless the operator set `MALLOC_ARENA_MAX`.
///
/// By default glibc gives each thread that allocates concurrently its own arena (up to
/// 8 × cores), and memory freed in one is not reused by another: with tokio's worker and
/// blocking threads the kubelet's RSS crept up with every batch of pods even though nothing
/// leaked (50 pods created and deleted 14 times: 22 → 32 MiB and still rising; with two
/// arenas it levels off at 24 MiB after 6 rounds, and housekeeping's task count and maps are
/// back to idle after each round either way).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    // SAFETY: `mallopt` only sets an allocator tunable; it runs first thing in `main`, before
    // any other thread exists, and its return value (0 on failure) needs no handling.
    #[allow(unsafe_code)]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}

/// Logs to stderr through [`log_writer`]'s thread (stderr directly if it cannot start), in
/// klog's text or upstream's JSON format ([`log_format`]); `RUST_LOG`, when set, replaces the
/// filter that `-v` picks. The guard writes the last lines when dropped.
fn init_logging(format: log_format::Format, verbosity: u8) -> Option<log_writer::Guard> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(log_format::filter_directives(verbosity))
    });
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let (writer, guard) = match log_writer::NonBlocking::new(std::io::stderr()) {
        Ok((writer, guard)) => (
            tracing_subscriber::fmt::writer::BoxMakeWriter::new(writer),
            Some(guard),
        ),
        Err(e) => {
            eprintln!("kubelet: starting the log writer thread: {e}; logging from the caller");
            (
                tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stderr),
                None,
            )
        }
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .event_format(log_format::Klog::new(format))
                .fmt_fields(log_format::Fields::new(format))
                .with_writer(writer),
        )
        .with(kubelet::span_stacks::SpanStacks)
        .init();
    guard
}
