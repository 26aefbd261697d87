//! The top-level fields of upstream's `KubeletConfiguration` (`kubelet.config.k8s.io/v1beta1`,
//! mirrors `staging/src/k8s.io/kubelet/config/v1beta1/types.go` at v1.36 plus `kind` and
//! `apiVersion`; every field of v1.20 is among them), so that a field this kubelet does not
//! read is told apart from one upstream does not know (a typo, or another kind's field).

/// Every top-level field name, sorted.
pub const UPSTREAM_FIELDS: &[&str] = &[
    "address",
    "allowedUnsafeSysctls",
    "apiVersion",
    "authentication",
    "authorization",
    "cgroupDriver",
    "cgroupRoot",
    "cgroupsPerQOS",
    "clusterDNS",
    "clusterDomain",
    "configMapAndSecretChangeDetectionStrategy",
    "containerLogMaxFiles",
    "containerLogMaxSize",
    "containerLogMaxWorkers",
    "containerLogMonitorInterval",
    "containerRuntimeEndpoint",
    "contentType",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "cpuManagerPolicy",
    "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod",
    "crashLoopBackOff",
    "draManagerReconcilePeriod",
    "enableContentionProfiling",
    "enableControllerAttachDetach",
    "enableDebugFlagsHandler",
    "enableDebuggingHandlers",
    "enableProfilingHandler",
    "enableServer",
    "enableSystemLogHandler",
    "enableSystemLogQuery",
    "enforceNodeAllocatable",
    "eventBurst",
    "eventRecordQPS",
    "evictionHard",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "evictionPressureTransitionPeriod",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "failCgroupV1",
    "failSwapOn",
    "featureGates",
    "fileCheckFrequency",
    "hairpinMode",
    "healthzBindAddress",
    "healthzPort",
    "httpCheckFrequency",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "imageMaximumGCAge",
    "imageMinimumGCAge",
    "imagePullCredentialsVerificationPolicy",
    "imageServiceEndpoint",
    "iptablesDropBit",
    "iptablesMasqueradeBit",
    "kernelMemcgNotification",
    "kind",
    "kubeAPIBurst",
    "kubeAPIQPS",
    "kubeReserved",
    "kubeReservedCgroup",
    "kubeletCgroups",
    "localStorageCapacityIsolation",
    "logging",
    "makeIPTablesUtilChains",
    "maxOpenFiles",
    "maxParallelImagePulls",
    "maxPods",
    "memoryManagerPolicy",
    "memoryReservationPolicy",
    "memorySwap",
    "memoryThrottlingFactor",
    "mergeDefaultEvictionSettings",
    "nodeLeaseDurationSeconds",
    "nodeStatusMaxImages",
    "nodeStatusReportFrequency",
    "nodeStatusUpdateFrequency",
    "oomScoreAdj",
    "podCIDR",
    "podHousekeepingPeriod",
    "podLogsDir",
    "podPidsLimit",
    "podsPerCore",
    "port",
    "preloadedImagesVerificationAllowlist",
    "protectKernelDefaults",
    "providerID",
    "qosReserved",
    "readOnlyPort",
    "registerNode",
    "registerWithTaints",
    "registryBurst",
    "registryPullQPS",
    "reservedMemory",
    "reservedSystemCPUs",
    "resolvConf",
    "rotateCertificates",
    "runOnce",
    "runtimeRequestTimeout",
    "seccompDefault",
    "serializeImagePulls",
    "serverTLSBootstrap",
    "showHiddenMetricsForVersion",
    "shutdownGracePeriod",
    "shutdownGracePeriodByPodPriority",
    "shutdownGracePeriodCriticalPods",
    "singleProcessOOMKill",
    "staticPodPath",
    "staticPodURL",
    "staticPodURLHeader",
    "streamingConnectionIdleTimeout",
    "syncFrequency",
    "systemCgroups",
    "systemReserved",
    "systemReservedCgroup",
    "tlsCertFile",
    "tlsCipherSuites",
    "tlsCurvePreferences",
    "tlsMinVersion",
    "tlsPrivateKeyFile",
    "topologyManagerPolicy",
    "topologyManagerPolicyOptions",
    "topologyManagerScope",
    "tracing",
    "userNamespaces",
    "volumePluginDir",
    "volumeStatsAggPeriod",
];

/// The top-level fields the settings modules read (a nested field counts with its parent),
/// sorted.
pub const IMPLEMENTED: &[&str] = &[
    "address",
    "allowedUnsafeSysctls",
    "apiVersion",
    "authentication",
    "authorization",
    "cgroupDriver",
    "cgroupRoot",
    "cgroupsPerQOS",
    "clusterDNS",
    "clusterDomain",
    "containerLogMaxFiles",
    "containerLogMaxSize",
    "containerLogMonitorInterval",
    "containerRuntimeEndpoint",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "crashLoopBackOff",
    "enforceNodeAllocatable",
    "eventBurst",
    "eventRecordQPS",
    "evictionHard",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "evictionPressureTransitionPeriod",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "fileCheckFrequency",
    "healthzBindAddress",
    "healthzPort",
    "httpCheckFrequency",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "imageMaximumGCAge",
    "imageMinimumGCAge",
    "kind",
    "kubeAPIBurst",
    "kubeAPIQPS",
    "kubeReserved",
    "kubeReservedCgroup",
    "kubeletCgroups",
    "localStorageCapacityIsolation",
    "logging",
    "maxPods",
    "nodeLeaseDurationSeconds",
    "nodeStatusMaxImages",
    "nodeStatusReportFrequency",
    "nodeStatusUpdateFrequency",
    "podLogsDir",
    "port",
    "readOnlyPort",
    "registerNode",
    "registerWithTaints",
    "resolvConf",
    "rotateCertificates",
    "runtimeCgroups",
    "runtimeRequestTimeout",
    "seccompDefault",
    "serverTLSBootstrap",
    "shutdownGracePeriod",
    "shutdownGracePeriodByPodPriority",
    "shutdownGracePeriodCriticalPods",
    "staticPodPath",
    "staticPodURL",
    "staticPodURLHeader",
    "syncFrequency",
    "systemCgroups",
    "systemReserved",
    "systemReservedCgroup",
    "tlsCertFile",
    "tlsCipherSuites",
    "tlsMinVersion",
    "tlsPrivateKeyFile",
    "volumeStatsAggPeriod",
];

/// Whether a settings module reads the top-level field `name`.
pub fn is_implemented(name: &str) -> bool {
    IMPLEMENTED.binary_search(&name).is_ok()
}

/// Whether upstream's `KubeletConfiguration` has a top-level field `name`.
pub fn is_upstream_field(name: &str) -> bool {
    UPSTREAM_FIELDS.binary_search(&name).is_ok()
}

/// The warning for a field of the config file that no settings module reads: an upstream
/// field this kubelet does not implement, or an unknown one (upstream's strict decoding
/// warns about those too, and loads the file).
pub fn ignored_field_warning(name: &str) -> String {
    if is_upstream_field(name) {
        format!("KubeletConfiguration field {name:?} is not supported by this kubelet; ignoring it")
    } else {
        format!(
            "unknown KubeletConfiguration field {name:?} (not in kubelet.config.k8s.io/v1beta1); ignoring it"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_sorted_and_knows_kubeadms_fields() {
        assert!(UPSTREAM_FIELDS.windows(2).all(|w| w[0] < w[1]));
        for field in [
            "logging",
            "shutdownGracePeriod",
            "cpuManagerReconcilePeriod",
            "kind",
        ] {
            assert!(is_upstream_field(field), "{field}");
        }
        assert!(!is_upstream_field("syncFrequncy"));
    }

    #[test]
    fn implemented_fields_are_sorted_and_upstreams() {
        assert!(IMPLEMENTED.windows(2).all(|w| w[0] < w[1]));
        for field in IMPLEMENTED {
            assert!(
                is_upstream_field(field) || super::super::config::EXTENSION_FIELDS.contains(field),
                "{field}"
            );
        }
    }

    #[test]
    fn warnings_name_the_field_and_tell_unknown_from_unsupported() {
        assert_eq!(
            ignored_field_warning("syncFrequncy"),
            "unknown KubeletConfiguration field \"syncFrequncy\" (not in kubelet.config.k8s.io/v1beta1); ignoring it"
        );
        assert!(ignored_field_warning("tracing").contains("not supported by this kubelet"));
    }
}
