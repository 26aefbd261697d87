//! Service environment variables (upstream `pkg/kubelet/envvars/envvars.go` `FromServices`,
//! and `getServiceEnvVarMap` in `pkg/kubelet/kubelet_pods.go`).
//!
//! A container learns where the cluster's services are from variables named after each
//! service: `<SVC>_SERVICE_HOST`, `<SVC>_SERVICE_PORT`, `<SVC>_SERVICE_PORT_<NAME>` for
//! named ports, and Docker-link style `<SVC>_PORT`, `<SVC>_PORT_<N>_<PROTO>` with `_PROTO`,
//! `_PORT` and `_ADDR`. The services come from a [`ServiceLister`] (in cluster mode a watch
//! of all Services); a standalone node has none, so it sets no such variable, as upstream's
//! kubelet without an API server.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;

/// Upstream `masterServices`: the services of namespace `default` whose variables every pod
/// gets, even with `enableServiceLinks: false`.
pub const MASTER_SERVICES: &[&str] = &["kubernetes"];

/// The namespace of the master services (upstream `metav1.NamespaceDefault`).
pub const MASTER_NAMESPACE: &str = "default";

/// The cluster's Services as last read (upstream `corelisters.ServiceLister` and the
/// informer's `HasSynced`).
pub trait ServiceLister: Send + Sync + 'static {
    /// Whether the services have been listed at least once (upstream `serviceHasSynced`).
    fn has_synced(&self) -> bool;
    /// Every known Service, in any order.
    fn list(&self) -> Vec<Arc<Service>>;
}

/// Upstream `IsServiceIPSet`: a cluster IP that is neither empty nor `None` (headless).
pub fn is_service_ip_set(service: &Service) -> bool {
    let ip = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .unwrap_or("");
    !ip.is_empty() && ip != "None"
}

/// Upstream `makeEnvVariableName`: upper case, `-` → `_`.
pub fn make_env_variable_name(name: &str) -> String {
    name.replace('-', "_").to_uppercase()
}

/// Go's `net.JoinHostPort`: IPv6 addresses in brackets.
fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv6()) {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Upstream `FromServices`: the variables of `services`, in their order (services without a
/// cluster IP, or without ports, give none).
pub fn from_services(services: &[&Service]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for service in services {
        let Some(spec) = service.spec.as_ref() else {
            continue;
        };
        let ports = spec.ports.as_deref().unwrap_or(&[]);
        // Validation requires a port on every service with a cluster IP; upstream would
        // index out of range without one.
        let (true, Some(first)) = (is_service_ip_set(service), ports.first()) else {
            continue;
        };
        let ip = spec.cluster_ip.as_deref().unwrap_or("");
        let prefix = make_env_variable_name(service.metadata.name.as_deref().unwrap_or(""));
        out.push((format!("{prefix}_SERVICE_HOST"), ip.to_owned()));
        let port_var = format!("{prefix}_SERVICE_PORT");
        out.push((port_var.clone(), first.port.to_string()));
        for port in ports {
            if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((
                    format!("{port_var}_{}", make_env_variable_name(name)),
                    port.port.to_string(),
                ));
            }
        }
        // Docker-compatible link variables (upstream `makeLinkVariables`).
        for (i, port) in ports.iter().enumerate() {
            let protocol = port
                .protocol
                .as_deref()
                .filter(|p| !p.is_empty())
                .unwrap_or("TCP");
            let url = format!(
                "{}://{}",
                protocol.to_lowercase(),
                join_host_port(ip, port.port)
            );
            if i == 0 {
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            let port_prefix = format!("{prefix}_PORT_{}_{}", port.port, protocol.to_uppercase());
            out.push((port_prefix.clone(), url));
            out.push((format!("{port_prefix}_PROTO"), protocol.to_lowercase()));
            out.push((format!("{port_prefix}_PORT"), port.port.to_string()));
            out.push((format!("{port_prefix}_ADDR"), ip.to_owned()));
        }
    }
    out
}

/// Upstream `getServiceEnvVarMap`: the variables of the master services (`kubernetes` in
/// `default`) always, and of the services of `namespace` when `enable_service_links`; with
/// links enabled, a service of `namespace` named like a master service takes its place, as
/// upstream's map does whatever the listing order.
pub fn service_env_var_map(
    services: &[Arc<Service>],
    namespace: &str,
    enable_service_links: bool,
) -> BTreeMap<String, String> {
    let mut chosen: BTreeMap<&str, &Service> = BTreeMap::new();
    for service in services {
        if !is_service_ip_set(service) {
            continue;
        }
        let name = service.metadata.name.as_deref().unwrap_or("");
        let ns = service
            .metadata
            .namespace
            .as_deref()
            .unwrap_or(MASTER_NAMESPACE);
        if ns == MASTER_NAMESPACE && MASTER_SERVICES.contains(&name) {
            chosen.entry(name).or_insert(service);
        } else if ns == namespace && enable_service_links {
            chosen.insert(name, service);
        }
    }
    let chosen: Vec<&Service> = chosen.into_values().collect();
    from_services(&chosen).into_iter().collect()
}

#[cfg(test)]
#[path = "envvars_tests.rs"]
mod tests;
