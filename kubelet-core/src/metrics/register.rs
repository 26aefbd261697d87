//! Registration of [`KubeletMetrics`] on a [`Registry`]: upstream's names, help texts and
//! which endpoint serves which family (`pkg/kubelet/metrics/metrics.go` `Register`, the
//! prober's registry of `pkg/kubelet/server/server.go`).

use prometheus_client::registry::Registry;

use super::{KubeletMetrics, help};

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
        kubelet.register(
            "containers_per_pod_count",
            help("The number of containers per pod."),
            self.containers_per_pod.clone(),
        );
        kubelet.register(
            "started_pods",
            help("Cumulative number of pods started"),
            self.started_pods.clone(),
        );
        kubelet.register(
            "started_pods_errors",
            help("Cumulative number of errors when starting pods"),
            self.started_pods_errors.clone(),
        );
        kubelet.register(
            "started_containers",
            help("Cumulative number of containers started"),
            self.started_containers.clone(),
        );
        kubelet.register(
            "started_containers_errors",
            help("Cumulative number of errors when starting containers"),
            self.started_containers_errors.clone(),
        );
        kubelet.register(
            "run_podsandbox_duration_seconds",
            help("Duration in seconds of the run_podsandbox operations. Broken down by RuntimeClass.Handler."),
            self.run_podsandbox_duration.clone(),
        );
        kubelet.register(
            "run_podsandbox_errors",
            help(
                "Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.",
            ),
            self.run_podsandbox_errors.clone(),
        );
        kubelet.register(
            "pleg_last_seen_seconds",
            help("Timestamp in seconds when PLEG was last seen active."),
            self.pleg_last_seen.clone(),
        );
        kubelet.register(
            "restarted_pods",
            help("Number of pods that have been restarted because they were deleted and recreated with the same UID while the kubelet was watching them (common for static pods, extremely uncommon for API pods)"),
            self.restarted_pods.clone(),
        );
        kubelet.register(
            "evictions",
            help("Cumulative number of pod evictions by eviction signal"),
            self.evictions.clone(),
        );
        kubelet.register(
            "image_garbage_collected",
            help("Total number of images garbage collected by the kubelet, whether through disk usage or image age."),
            self.image_garbage_collected.clone(),
        );
        kubelet.register(
            "certificate_manager_client_ttl_seconds",
            help("Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in seconds until certificate expiry (negative if already expired). If client certificate is invalid or unused, the value will be +INF."),
            self.certificate_manager_client_ttl.clone(),
        );
        kubelet.register(
            "certificate_manager_client_expiration_renew_errors",
            help("Counter of certificate renewal errors."),
            self.certificate_manager_client_renew_errors.clone(),
        );
        kubelet.register(
            "certificate_manager_server_ttl_seconds",
            help("Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value is in seconds until certificate expiry (negative if already expired). If serving certificate is invalid or unused, the value will be +INF."),
            self.certificate_manager_server_ttl.clone(),
        );
        kubelet.register(
            "server_expiration_renew_errors",
            help("Counter of certificate renewal errors."),
            self.server_expiration_renew_errors.clone(),
        );
        kubelet.register(
            "cgroup_version",
            help("cgroup version on the hosts."),
            self.cgroup_version.clone(),
        );
        registry.register(
            "rest_client_requests",
            help("Number of HTTP requests, partitioned by status code, method, and host."),
            self.rest_client_requests.clone(),
        );
    }

    /// Registers the prober's families on `registry` (upstream serves them alone on
    /// `/metrics/probes`): `prober_probe_total` and `prober_probe_duration_seconds`.
    pub fn register_probes(&self, registry: &mut Registry) {
        registry.register(
            "prober_probe",
            help("Cumulative number of a liveness, readiness or startup probe for a container by result."),
            self.prober_probe.clone(),
        );
        registry.register(
            "prober_probe_duration_seconds",
            help("Duration in seconds for a probe response."),
            self.prober_probe_duration.clone(),
        );
    }
}
