//! The kubelet's own metrics (upstream `pkg/kubelet/metrics/metrics.go`, the prober's
//! `pkg/kubelet/prober/prober_manager.go` and client-go's `rest_client_requests_total`), with
//! upstream's names, help texts, labels and buckets.
//!
//! [`KubeletMetrics`] is a set of metric families that every part of the kubelet records
//! into: the PLEG (relist duration and interval, running pods and containers), the pod
//! workers (sync durations, pod start duration), the CRI client (runtime operations), the
//! probe workers (`prober_probe_total`) and the API client (`rest_client_requests_total`).
//! It is cheap to clone (clones share the values) and lives nowhere global: the binary makes
//! one, hands clones to the parts through the node builder, and registers it with
//! [`KubeletMetrics::register`] (served on `/metrics`) and
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
use prometheus_client::registry::Registry;

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
        }
    }
}

impl KubeletMetrics {
    /// Registers the families of `/metrics` (everything but `prober_probe_total`) on
    /// `registry`, with upstream's names and help texts.
    pub fn register(&self, registry: &mut Registry) {
        let kubelet = registry.sub_registry_with_prefix("kubelet");
        kubelet.register(
            "node_name",
            help("The node's name. The count is always 1."),
            self.node_name.clone(),
        );
        kubelet.register(
            "pod_start_duration_seconds",
            help("Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run"),
            self.pod_start_duration.clone(),
        );
        kubelet.register(
            "pod_worker_duration_seconds",
            help("Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync"),
            self.pod_worker_duration.clone(),
        );
        kubelet.register(
            "pleg_relist_duration_seconds",
            help("Duration in seconds for relisting pods in PLEG."),
            self.pleg_relist_duration.clone(),
        );
        kubelet.register(
            "pleg_relist_interval_seconds",
            help("Interval in seconds between relisting in PLEG."),
            self.pleg_relist_interval.clone(),
        );
        kubelet.register(
            "running_pods",
            help("Number of pods that have a running pod sandbox"),
            self.running_pods.clone(),
        );
        kubelet.register(
            "running_containers",
            help("Number of containers currently running"),
            self.running_containers.clone(),
        );
        kubelet.register(
            "runtime_operations",
            help("Cumulative number of runtime operations by operation type."),
            self.runtime_operations.clone(),
        );
        kubelet.register(
            "runtime_operations_errors",
            help("Cumulative number of runtime operation errors by operation type."),
            self.runtime_operations_errors.clone(),
        );
        kubelet.register(
            "runtime_operations_duration_seconds",
            help("Duration in seconds of runtime operations. Broken down by operation type."),
            self.runtime_operations_duration.clone(),
        );
        registry.register(
            "rest_client_requests",
            help("Number of HTTP requests, partitioned by status code, method, and host."),
            self.rest_client_requests.clone(),
        );
    }

    /// Registers `prober_probe_total` on `registry` (upstream serves it alone on
    /// `/metrics/probes`).
    pub fn register_probes(&self, registry: &mut Registry) {
        registry.register(
            "prober_probe",
            help("Cumulative number of a liveness, readiness or startup probe for a container by result."),
            self.prober_probe.clone(),
        );
    }

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

    /// Counts one probe result.
    pub fn record_probe(&self, labels: &ProbeLabels) {
        self.prober_probe.get_or_create(labels).inc();
    }

    /// `prober_probe_total` of `labels`.
    pub fn probe_total(&self, labels: &ProbeLabels) -> u64 {
        self.prober_probe.get(labels).map_or(0, |c| c.get())
    }

    /// Removes the series of `labels` (a probe worker that stopped, as upstream deletes them).
    pub fn remove_probe(&self, labels: &ProbeLabels) {
        self.prober_probe.remove(labels);
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

fn counter_value(family: &Family<OneLabel, Counter>, labels: &OneLabel) -> u64 {
    family.get(labels).map_or(0, |c| c.get())
}

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
