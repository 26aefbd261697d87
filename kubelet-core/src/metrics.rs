//! The kubelet's own metrics (upstream `pkg/kubelet/metrics/metrics.go`, the prober's
//! `pkg/kubelet/prober/prober_manager.go` and client-go's `rest_client_requests_total`), with
//! upstream's names, help texts, labels and buckets.
//!
//! [`KubeletMetrics`] is a set of metric families that every part of the kubelet records
//! into: the PLEG (relist duration and interval, last seen, running pods and containers),
//! the pod workers (sync durations, containers per new pod, pods restarted under the same
//! UID), the syncer (pod start duration), the pod engine (pods and containers started and
//! their errors), the CRI client (runtime operations, `RunPodSandbox` by handler), the
//! probe workers (`prober_probe_total`, `prober_probe_duration_seconds`) and the API client
//! (`rest_client_requests_total`). It is cheap to clone (clones share the values) and lives
//! nowhere global: the binary makes one, hands clones to the parts through the node builder,
//! and registers it with [`KubeletMetrics::register`] (served on `/metrics`) and
//! [`KubeletMetrics::register_probes`] (served on `/metrics/probes`). A part built without
//! one records into a default set nobody serves; tests build their own and read values.
//!
//! Counters are registered without their `_total` suffix: the OpenMetrics text encoding adds
//! it, so `runtime_operations` is exposed as `kubelet_runtime_operations_total` as upstream.
//!
//! ```
//! use std::time::Duration;
//! use kubelet_core::metrics::KubeletMetrics;
//! use kubelet_core::metrics::prometheus_client::registry::Registry;
//!
//! let metrics = KubeletMetrics::default();
//! let mut registry = Registry::default();
//! metrics.register(&mut registry);
//! metrics.record_runtime_operation("list_containers", Duration::from_millis(3), false);
//! assert_eq!(metrics.runtime_operations_total("list_containers"), 1);
//! ```

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::runtime::{ContainerState, RunningPod, SandboxState};

pub use prometheus_client;

/// Prometheus' `DefBuckets`.
pub const DEF_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Upstream `podStartupDurationBuckets`.
pub const POD_STARTUP_DURATION_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// The container states of `kubelet_running_containers` (upstream `kubecontainer.State`),
/// in the order of [`ContainerState`]'s variants.
pub const CONTAINER_STATES: [&str; 4] = ["created", "running", "exited", "unknown"];

/// Counters whose upstream name has no `_total` suffix: OpenMetrics samples of a counter
/// always carry it (as client_golang writes them too), the Prometheus text format 0.0.4 that
/// upstream serves does not (`kubelet_evictions{eviction_signal="memory.available"} 1`).
pub const COUNTERS_WITHOUT_TOTAL: [&str; 3] = [
    "kubelet_evictions",
    "kubelet_certificate_manager_client_expiration_renew_errors",
    "kubelet_server_expiration_renew_errors",
];

/// Upstream `ImageGarbageCollectedTotalReasonAge`: an image unused past `imageMaximumGCAge`.
pub const IMAGE_GC_REASON_AGE: &str = "age";
/// Upstream `ImageGarbageCollectedTotalReasonSpace`: an image removed to free disk space.
pub const IMAGE_GC_REASON_SPACE: &str = "space";

/// A label set of one `&'static str` label.
type OneLabel = [(&'static str, &'static str); 1];

/// A histogram family constructor (families need a `Fn` that builds each histogram).
type HistogramFn = fn() -> Histogram;

fn def_histogram() -> Histogram {
    Histogram::new(DEF_BUCKETS)
}

fn runtime_histogram() -> Histogram {
    // Upstream `ExponentialBuckets(.005, 2.5, 14)`.
    Histogram::new(exponential_buckets(0.005, 2.5, 14))
}

/// The labels of `rest_client_requests_total` (client-go `RequestResult`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestClientLabels {
    /// The HTTP status code, or `<error>` when there was no response.
    pub code: String,
    /// The HTTP method.
    pub method: String,
    /// The API server's host (and port).
    pub host: String,
}

/// The labels of `prober_probe_total` (upstream `proberResults*MetricLabels`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    /// `Liveness`, `Readiness` or `Startup`.
    pub probe_type: &'static str,
    /// `successful`, `failed` or `unknown`.
    pub result: &'static str,
    /// The container's name.
    pub container: String,
    /// The pod's name.
    pub pod: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's UID.
    pub pod_uid: String,
}

/// The labels of `prober_probe_duration_seconds` (upstream `proberDuration*MetricLabels`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeDurationLabels {
    /// `Liveness`, `Readiness` or `Startup`.
    pub probe_type: &'static str,
    /// The container's name.
    pub container: String,
    /// The pod's name.
    pub pod: String,
    /// The pod's namespace.
    pub namespace: String,
}

impl From<&ProbeLabels> for ProbeDurationLabels {
    fn from(l: &ProbeLabels) -> Self {
        Self {
            probe_type: l.probe_type,
            container: l.container.clone(),
            pod: l.pod.clone(),
            namespace: l.namespace.clone(),
        }
    }
}

/// The labels of `kubelet_started_containers_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerErrorLabels {
    /// `container`, `init_container` or `ephemeral_container`.
    pub container_type: &'static str,
    /// The error's reason (`CreateContainerError`, `ErrImagePull`, …).
    pub code: String,
}

/// The kubelet's metric families (see the [module docs](self)). Cheap to clone; clones
/// share the values.
#[derive(Clone, Debug)]
pub struct KubeletMetrics {
    /// `kubelet_node_name{node}`: always 1.
    pub node_name: Family<[(&'static str, String); 1], Gauge>,
    /// `kubelet_pod_start_duration_seconds`: from the kubelet seeing a pod for the first time
    /// to the pod running.
    pub pod_start_duration: Histogram,
    /// `kubelet_pod_worker_duration_seconds{operation_type}`: one sync of one pod.
    pub pod_worker_duration: Family<OneLabel, Histogram, HistogramFn>,
    /// `kubelet_pleg_relist_duration_seconds`.
    pub pleg_relist_duration: Histogram,
    /// `kubelet_pleg_relist_interval_seconds`.
    pub pleg_relist_interval: Histogram,
    /// `kubelet_running_pods`: pods with a running sandbox.
    pub running_pods: Gauge,
    /// `kubelet_running_containers{container_state}`.
    pub running_containers: Family<OneLabel, Gauge>,
    /// `kubelet_runtime_operations_total{operation_type}`.
    pub runtime_operations: Family<OneLabel, Counter>,
    /// `kubelet_runtime_operations_errors_total{operation_type}`.
    pub runtime_operations_errors: Family<OneLabel, Counter>,
    /// `kubelet_runtime_operations_duration_seconds{operation_type}`.
    pub runtime_operations_duration: Family<OneLabel, Histogram, HistogramFn>,
    /// `rest_client_requests_total{code, method, host}`.
    pub rest_client_requests: Family<RestClientLabels, Counter>,
    /// `prober_probe_total{probe_type, result, container, pod, namespace, pod_uid}`
    /// (served on `/metrics/probes`).
    pub prober_probe: Family<ProbeLabels, Counter>,
    /// `prober_probe_duration_seconds{probe_type, container, pod, namespace}`: successful
    /// probes (served on `/metrics/probes`).
    pub prober_probe_duration: Family<ProbeDurationLabels, Histogram, HistogramFn>,
    /// `kubelet_containers_per_pod_count`: observed for each new pod.
    pub containers_per_pod: Histogram,
    /// `kubelet_started_pods_total`: sandboxes the kubelet asked for.
    pub started_pods: Counter,
    /// `kubelet_started_pods_errors_total`.
    pub started_pods_errors: Counter,
    /// `kubelet_started_containers_total{container_type}`.
    pub started_containers: Family<OneLabel, Counter>,
    /// `kubelet_started_containers_errors_total{container_type, code}`.
    pub started_containers_errors: Family<ContainerErrorLabels, Counter>,
    /// `kubelet_run_podsandbox_duration_seconds{runtime_handler}`.
    pub run_podsandbox_duration: Family<[(&'static str, String); 1], Histogram, HistogramFn>,
    /// `kubelet_run_podsandbox_errors_total{runtime_handler}`.
    pub run_podsandbox_errors: Family<[(&'static str, String); 1], Counter>,
    /// `kubelet_pleg_last_seen_seconds`: when the PLEG last listed the runtime (Unix seconds).
    pub pleg_last_seen: Gauge,
    /// `kubelet_cgroup_version`: 1 or 2 (0 when unknown).
    pub cgroup_version: Gauge,
    /// `kubelet_restarted_pods_total{static}`: pods desired again under the same UID after
    /// their termination.
    pub restarted_pods: Family<OneLabel, Counter>,
    /// `kubelet_evictions{eviction_signal}`: pods the eviction manager evicted, by the signal
    /// (`memory.available`, …, or `emptydirfs.limit`, `ephemeralpodfs.limit`,
    /// `ephemeralcontainerfs.limit` for local storage limits).
    pub evictions: Family<OneLabel, Counter>,
    /// `kubelet_image_garbage_collected_total{reason}`: images removed by image GC, by
    /// [`IMAGE_GC_REASON_AGE`] or [`IMAGE_GC_REASON_SPACE`].
    pub image_garbage_collected: Family<OneLabel, Counter>,
    /// `kubelet_certificate_manager_client_ttl_seconds`: seconds until the client
    /// certificate expires, computed when scraped (absent until a certificate is known).
    pub certificate_manager_client_ttl: CertificateTtl,
    /// `kubelet_certificate_manager_client_expiration_renew_errors`: failed renewals of the
    /// client certificate.
    pub certificate_manager_client_renew_errors: Counter,
    /// `kubelet_certificate_manager_server_ttl_seconds`: seconds until the serving
    /// certificate from a CSR (`serverTLSBootstrap`) expires, computed when scraped.
    pub certificate_manager_server_ttl: CertificateTtl,
    /// `kubelet_server_expiration_renew_errors`: failed renewals of the serving certificate.
    pub server_expiration_renew_errors: Counter,
}

/// A gauge of the seconds left until a certificate's `NotAfter`, computed at each scrape
/// (upstream's `GaugeFunc` over the certificate manager's current certificate). Clones share
/// the value.
#[derive(Clone, Debug, Default)]
pub struct CertificateTtl {
    /// The expiry; `None` until a certificate is known.
    not_after: std::sync::Arc<std::sync::Mutex<Option<std::time::SystemTime>>>,
}

impl CertificateTtl {
    /// Sets the current certificate's expiry.
    pub fn set_not_after(&self, not_after: std::time::SystemTime) {
        *self
            .not_after
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(not_after);
    }

    /// Seconds until the expiry (negative once expired); `None` without a certificate.
    pub fn seconds(&self) -> Option<f64> {
        let not_after = (*self
            .not_after
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))?;
        Some(
            match not_after.duration_since(std::time::SystemTime::now()) {
                Ok(left) => left.as_secs_f64(),
                Err(past) => -past.duration().as_secs_f64(),
            },
        )
    }
}

impl prometheus_client::metrics::TypedMetric for CertificateTtl {
    const TYPE: prometheus_client::metrics::MetricType =
        prometheus_client::metrics::MetricType::Gauge;
}

impl prometheus_client::encoding::EncodeMetric for CertificateTtl {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.seconds().unwrap_or(f64::INFINITY))
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Gauge
    }

    fn is_empty(&self) -> bool {
        self.seconds().is_none()
    }
}

impl Default for KubeletMetrics {
    fn default() -> Self {
        Self {
            node_name: Family::default(),
            pod_start_duration: Histogram::new(POD_STARTUP_DURATION_BUCKETS),
            pod_worker_duration: Family::new_with_constructor(def_histogram as HistogramFn),
            pleg_relist_duration: def_histogram(),
            pleg_relist_interval: def_histogram(),
            running_pods: Gauge::default(),
            running_containers: Family::default(),
            runtime_operations: Family::default(),
            runtime_operations_errors: Family::default(),
            runtime_operations_duration: Family::new_with_constructor(
                runtime_histogram as HistogramFn,
            ),
            rest_client_requests: Family::default(),
            prober_probe: Family::default(),
            prober_probe_duration: Family::new_with_constructor(def_histogram as HistogramFn),
            // Upstream `ExponentialBuckets(1, 2, 5)`.
            containers_per_pod: Histogram::new(exponential_buckets(1.0, 2.0, 5)),
            started_pods: Counter::default(),
            started_pods_errors: Counter::default(),
            started_containers: Family::default(),
            started_containers_errors: Family::default(),
            run_podsandbox_duration: Family::new_with_constructor(def_histogram as HistogramFn),
            run_podsandbox_errors: Family::default(),
            pleg_last_seen: Gauge::default(),
            cgroup_version: Gauge::default(),
            restarted_pods: Family::default(),
            evictions: Family::default(),
            image_garbage_collected: Family::default(),
            certificate_manager_client_ttl: CertificateTtl::default(),
            certificate_manager_client_renew_errors: Counter::default(),
            certificate_manager_server_ttl: CertificateTtl::default(),
            server_expiration_renew_errors: Counter::default(),
        }
    }
}

impl KubeletMetrics {
    /// Sets `kubelet_node_name{node="<name>"}` to 1.
    pub fn set_node_name(&self, name: &str) {
        self.node_name
            .get_or_create(&[("node", name.to_owned())])
            .set(1);
    }

    /// Records one runtime (CRI) call: `operation` is upstream's `operation_type`
    /// (`run_podsandbox`, `list_containers`…, see `instrumented_services.go`).
    pub fn record_runtime_operation(&self, operation: &'static str, took: Duration, failed: bool) {
        let labels = [("operation_type", operation)];
        self.runtime_operations.get_or_create(&labels).inc();
        self.runtime_operations_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if failed {
            self.runtime_operations_errors.get_or_create(&labels).inc();
        }
    }

    /// `kubelet_runtime_operations_total{operation_type="<operation>"}`.
    pub fn runtime_operations_total(&self, operation: &'static str) -> u64 {
        counter_value(&self.runtime_operations, &[("operation_type", operation)])
    }

    /// `kubelet_runtime_operations_errors_total{operation_type="<operation>"}`.
    pub fn runtime_operations_errors_total(&self, operation: &'static str) -> u64 {
        counter_value(
            &self.runtime_operations_errors,
            &[("operation_type", operation)],
        )
    }

    /// Records one relist: how long it took, and the time since the previous one started
    /// (`None` for the first relist).
    pub fn record_relist(&self, took: Duration, interval: Option<Duration>) {
        self.pleg_relist_duration.observe(took.as_secs_f64());
        if let Some(interval) = interval {
            self.pleg_relist_interval.observe(interval.as_secs_f64());
        }
    }

    /// Sets `kubelet_running_pods` (pods with a ready sandbox) and
    /// `kubelet_running_containers` (containers by state) from a relist's `pods` (upstream
    /// `updateRunningPodAndContainerMetrics`); a state no container is in is set to 0.
    pub fn set_running(&self, pods: &[RunningPod]) {
        let running = pods
            .iter()
            .filter(|p| p.sandboxes.iter().any(|s| s.state == SandboxState::Ready))
            .count();
        self.running_pods.set(gauge(running));
        let mut counts = [0usize; CONTAINER_STATES.len()];
        for container in pods.iter().flat_map(|p| &p.containers) {
            counts[match container.state {
                ContainerState::Created => 0,
                ContainerState::Running => 1,
                ContainerState::Exited => 2,
                ContainerState::Unknown => 3,
            }] += 1;
        }
        for (state, count) in CONTAINER_STATES.into_iter().zip(counts) {
            self.running_containers
                .get_or_create(&[("container_state", state)])
                .set(gauge(count));
        }
    }

    /// `kubelet_running_containers{container_state="<state>"}`.
    pub fn running_containers(&self, state: &'static str) -> i64 {
        self.running_containers
            .get(&[("container_state", state)])
            .map_or(0, |g| g.get())
    }

    /// Records one unit of pod worker work; `operation` is upstream's `SyncPodType` name
    /// (`create`, `update`, `sync`, `kill`) or `terminated`.
    pub fn record_pod_worker(&self, operation: &'static str, took: Duration) {
        self.pod_worker_duration
            .get_or_create(&[("operation_type", operation)])
            .observe(took.as_secs_f64());
    }

    /// Records that a pod runs `since_first_seen` after the kubelet first saw it.
    pub fn record_pod_start(&self, since_first_seen: Duration) {
        self.pod_start_duration
            .observe(since_first_seen.as_secs_f64());
    }

    /// Counts one probe result; `took` (successful probes) goes to
    /// `prober_probe_duration_seconds` as upstream, which times only those.
    pub fn record_probe(&self, labels: &ProbeLabels, took: Option<Duration>) {
        self.prober_probe.get_or_create(labels).inc();
        if let Some(took) = took {
            self.prober_probe_duration
                .get_or_create(&labels.into())
                .observe(took.as_secs_f64());
        }
    }

    /// `prober_probe_total` of `labels`.
    pub fn probe_total(&self, labels: &ProbeLabels) -> u64 {
        self.prober_probe.get(labels).map_or(0, |c| c.get())
    }

    /// Removes the series of `labels` (a probe worker that stopped, as upstream deletes them),
    /// its duration series included.
    pub fn remove_probe(&self, labels: &ProbeLabels) {
        self.prober_probe.remove(labels);
        self.prober_probe_duration.remove(&labels.into());
    }

    /// The number of successful probes timed in `prober_probe_duration_seconds` for `labels`.
    pub fn probe_duration_count(&self, labels: &ProbeDurationLabels) -> u64 {
        self.prober_probe_duration
            .get(labels)
            .map_or(0, |h| histogram_count(&h))
    }

    /// Observes a new pod's number of (app) containers (upstream `dispatchWork` on
    /// `SyncPodCreate`).
    pub fn record_new_pod(&self, containers: usize) {
        self.containers_per_pod.observe(containers as f64);
    }

    /// Counts one sandbox creation (upstream `SyncPod` step 4) and, with `failed`, its
    /// error.
    pub fn record_pod_started(&self, failed: bool) {
        self.started_pods.inc();
        if failed {
            self.started_pods_errors.inc();
        }
    }

    /// Counts one container start past the restart backoff (`container_type`: `container`,
    /// `init_container` or `ephemeral_container`) and, with `error`, its reason.
    pub fn record_container_started(&self, container_type: &'static str, error: Option<&str>) {
        self.started_containers
            .get_or_create(&[("container_type", container_type)])
            .inc();
        if let Some(code) = error {
            self.started_containers_errors
                .get_or_create(&ContainerErrorLabels {
                    container_type,
                    code: code.to_owned(),
                })
                .inc();
        }
    }

    /// `kubelet_started_containers_total{container_type}`.
    pub fn started_containers_total(&self, container_type: &'static str) -> u64 {
        counter_value(
            &self.started_containers,
            &[("container_type", container_type)],
        )
    }

    /// `kubelet_started_containers_errors_total{container_type, code}`.
    pub fn started_containers_errors_total(&self, container_type: &'static str, code: &str) -> u64 {
        self.started_containers_errors
            .get(&ContainerErrorLabels {
                container_type,
                code: code.to_owned(),
            })
            .map_or(0, |c| c.get())
    }

    /// Records one `RunPodSandbox` call for `runtime_handler` (upstream
    /// `instrumented_services.go`).
    pub fn record_run_podsandbox(&self, runtime_handler: &str, took: Duration, failed: bool) {
        let labels = [("runtime_handler", runtime_handler.to_owned())];
        self.run_podsandbox_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if failed {
            self.run_podsandbox_errors.get_or_create(&labels).inc();
        }
    }

    /// Sets `kubelet_pleg_last_seen_seconds` to `at` (a relist that listed the runtime).
    pub fn set_pleg_last_seen(&self, at: std::time::SystemTime) {
        let secs = at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.pleg_last_seen
            .set(i64::try_from(secs).unwrap_or(i64::MAX));
    }

    /// Counts a pod deleted and recreated with the same UID (upstream
    /// `RestartedPodTotal`, labelled by whether it is a static pod).
    pub fn record_pod_restarted(&self, is_static: bool) {
        let label = if is_static { "true" } else { "false" };
        self.restarted_pods
            .get_or_create(&[("static", label)])
            .inc();
    }

    /// `kubelet_restarted_pods_total{static}`.
    pub fn restarted_pods_total(&self, is_static: bool) -> u64 {
        let label = if is_static { "true" } else { "false" };
        counter_value(&self.restarted_pods, &[("static", label)])
    }

    /// Counts one pod evicted for `signal` (upstream `metrics.Evictions`).
    pub fn record_eviction(&self, signal: &'static str) {
        self.evictions
            .get_or_create(&[("eviction_signal", signal)])
            .inc();
    }

    /// `kubelet_evictions{eviction_signal}`.
    pub fn evictions_total(&self, signal: &'static str) -> u64 {
        counter_value(&self.evictions, &[("eviction_signal", signal)])
    }

    /// Counts one image removed by image GC for `reason` (upstream
    /// `metrics.ImageGarbageCollectedTotal`).
    pub fn record_image_garbage_collected(&self, reason: &'static str) {
        self.image_garbage_collected
            .get_or_create(&[("reason", reason)])
            .inc();
    }

    /// `kubelet_image_garbage_collected_total{reason}`.
    pub fn image_garbage_collected_total(&self, reason: &'static str) -> u64 {
        counter_value(&self.image_garbage_collected, &[("reason", reason)])
    }

    /// Sets `kubelet_cgroup_version`.
    pub fn set_cgroup_version(&self, version: u8) {
        self.cgroup_version.set(i64::from(version));
    }

    /// Counts one API request.
    pub fn record_rest_client_request(&self, labels: &RestClientLabels) {
        self.rest_client_requests.get_or_create(labels).inc();
    }
}

/// Upstream's help text as prometheus-client registers it: the registry appends a period, so
/// one the text ends with goes.
fn help(text: &str) -> &str {
    text.strip_suffix('.').unwrap_or(text)
}

/// The number of observations of `h` (prometheus-client has a getter only under its
/// `test-util` feature): read from its encoding.
pub(crate) fn histogram_count(h: &Histogram) -> u64 {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register("h", "", h.clone());
    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
        return 0;
    }
    text.lines()
        .find_map(|l| l.strip_prefix("h_count "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn counter_value(family: &Family<OneLabel, Counter>, labels: &OneLabel) -> u64 {
    family.get(labels).map_or(0, |c| c.get())
}

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

mod register;
#[cfg(test)]
mod tests;
