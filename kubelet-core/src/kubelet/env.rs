//! A container's environment (upstream `makeEnvironmentVariables`,
//! `podFieldSelectorRuntimeValue` and `containerResourceRuntimeValue` in
//! `pkg/kubelet/kubelet_pods.go`).
//!
//! `envFrom` is applied first (configMaps and secrets, with `prefix`; keys that are not valid
//! variable names are skipped with a warning), then `env` in order: a literal `value` has its
//! `$(VAR)` references expanded from the variables defined so far, a `valueFrom` is resolved
//! (`fieldRef`, `resourceFieldRef`, `configMapKeyRef`, `secretKeyRef`) and is itself visible
//! to later references. A variable defined twice keeps its first position and its last value.
//!
//! Service-link variables (`KUBERNETES_SERVICE_HOST`, `<SVC>_SERVICE_PORT`, …; upstream
//! `getServiceEnvVarMap`, see [`crate::envvars`]) come from the [`EnvSource::services`]
//! lister: `$(VAR)` references may name them, and those the container does not define are
//! added after its own. An API pod gets no environment until the services have been listed
//! once (upstream's `serviceHasSynced` check; static pods go ahead). A standalone node has no
//! lister, so there are none, as with upstream's kubelet without a kube client.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvVarSource, ObjectFieldSelector, Pod, Secret,
};

use crate::envvars::{ServiceLister, service_env_var_map};
use crate::expansion::expand;
use crate::fieldpath::{self, extract_field_path_as_string};
use crate::objects::{self, ObjectSource};
use crate::pod::{PodExt, is_static_pod};
use crate::resources::{
    self, NodeAllocatable, container_resource_value, resource_value_by_container_name,
};

/// Why a container's environment cannot be made: the container's
/// `CreateContainerConfigError` message, worded as upstream's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The object source could not answer for a configMap or secret.
    #[error("{source}")]
    Fetch {
        /// `ConfigMap` or `Secret`.
        kind: &'static str,
        /// The object's name.
        name: String,
        /// The source's error.
        #[source]
        source: objects::Error,
    },
    /// A required configMap does not exist.
    #[error("configmap \"{0}\" not found")]
    ConfigMapNotFound(String),
    /// A required secret does not exist.
    #[error("secret \"{0}\" not found")]
    SecretNotFound(String),
    /// A required key is missing from a configMap or secret.
    #[error("couldn't find key {key} in {kind} {namespace}/{name}")]
    MissingKey {
        /// `ConfigMap` or `Secret`.
        kind: &'static str,
        /// The object's namespace.
        namespace: String,
        /// The object's name.
        name: String,
        /// The key.
        key: String,
    },
    /// An API pod's environment was asked before the services were listed once.
    #[error("services have not yet been read at least once, cannot construct envvars")]
    ServicesNotSynced,
    /// A `fieldRef` with an `apiVersion` other than `v1`.
    #[error("unsupported pod version: {0}")]
    UnsupportedPodVersion(String),
    /// A `fieldRef` path that env vars do not support.
    #[error("field label not supported: {0}")]
    UnsupportedFieldLabel(String),
    /// `status.hostIP(s)` asked on a node without an IP.
    #[error("host IP unknown; known addresses: []")]
    NoHostIp,
    /// A metadata `fieldRef` failed.
    #[error(transparent)]
    FieldPath(#[from] fieldpath::Error),
    /// A `resourceFieldRef` failed.
    #[error(transparent)]
    Resource(#[from] resources::Error),
}

/// What the environment of a container is computed from, besides the pod.
#[derive(Clone)]
pub struct EnvSource {
    /// This node's name.
    pub node_name: String,
    /// This node's IPs, primary first (`status.hostIP(s)`).
    pub host_ips: Vec<String>,
    /// Node allocatable, for `limits.*` a container does not set.
    pub allocatable: NodeAllocatable,
    /// ConfigMaps and secrets.
    pub objects: Arc<dyn ObjectSource>,
    /// The cluster's Services, for service-link variables (`None`: a standalone node, no
    /// such variables).
    pub services: Option<Arc<dyn ServiceLister>>,
}

impl std::fmt::Debug for EnvSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvSource")
            .field("node_name", &self.node_name)
            .field("host_ips", &self.host_ips)
            .field("allocatable", &self.allocatable)
            .field("services", &self.services.is_some())
            .finish_non_exhaustive()
    }
}

/// An ordered environment where a redefined variable keeps its position.
#[derive(Default)]
struct Env {
    vars: Vec<(String, String)>,
    index: HashMap<String, usize>,
}

impl Env {
    fn set(&mut self, name: &str, value: String) {
        match self.index.get(name) {
            Some(&i) => self.vars[i].1 = value,
            None => {
                self.index.insert(name.to_owned(), self.vars.len());
                self.vars.push((name.to_owned(), value));
            }
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.index.get(name).map(|&i| self.vars[i].1.as_str())
    }
}

/// ConfigMaps and secrets fetched once per container.
#[derive(Default)]
struct Fetched {
    config_maps: HashMap<String, Option<ConfigMap>>,
    secrets: HashMap<String, Option<Secret>>,
}

impl EnvSource {
    /// The container's environment, in order, with every value resolved and expanded.
    ///
    /// An `Err` (a required configMap, secret or key missing, an unsupported field) is the
    /// container's `CreateContainerConfigError` message, worded as upstream's.
    pub async fn make_environment_variables(
        &self,
        pod: &Pod,
        container: &Container,
        pod_ips: &[String],
    ) -> Result<Vec<(String, String)>, Error> {
        let namespace = pod.namespace_or_default();
        let service_env = self.service_env(pod)?;
        let mut env = Env::default();
        let mut fetched = Fetched::default();
        for from in container.env_from.iter().flatten() {
            let prefix = from.prefix.as_deref().unwrap_or("");
            let (kind, name, data) = if let Some(r) = &from.config_map_ref {
                let optional = r.optional.unwrap_or(false);
                let Some(cm) = self
                    .config_map(&mut fetched, namespace, &r.name, optional)
                    .await?
                else {
                    continue;
                };
                let data: Vec<(String, String)> =
                    cm.data.clone().unwrap_or_default().into_iter().collect();
                ("configMap", &r.name, data)
            } else if let Some(r) = &from.secret_ref {
                let optional = r.optional.unwrap_or(false);
                let Some(s) = self
                    .secret(&mut fetched, namespace, &r.name, optional)
                    .await?
                else {
                    continue;
                };
                let data: Vec<(String, String)> = s
                    .data
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                    .collect();
                ("secret", &r.name, data)
            } else {
                continue;
            };
            let mut invalid = Vec::new();
            for (k, v) in data {
                let key = format!("{prefix}{k}");
                if is_env_var_name(&key) {
                    env.set(&key, v);
                } else {
                    invalid.push(key);
                }
            }
            if !invalid.is_empty() {
                invalid.sort();
                tracing::warn!(
                    pod = %pod.full_name(),
                    reason = "InvalidEnvironmentVariableNames",
                    "Keys [{}] from the EnvFrom {kind} {namespace}/{name} were skipped since they are considered invalid environment variable names.",
                    invalid.join(", ")
                );
            }
        }

        for var in container.env.iter().flatten() {
            let literal = var.value.as_deref().unwrap_or("");
            let value = if !literal.is_empty() {
                expand(literal, |name| {
                    env.get(name)
                        .map(str::to_owned)
                        .or_else(|| service_env.get(name).cloned())
                })
            } else if let Some(from) = &var.value_from {
                match self
                    .value_from(&mut fetched, pod, container, pod_ips, from)
                    .await?
                {
                    Some(v) => v,
                    None => continue,
                }
            } else {
                String::new()
            };
            env.set(&var.name, value);
        }
        // The service variables the container does not define itself.
        for (name, value) in service_env {
            if env.get(&name).is_none() {
                env.set(&name, value);
            }
        }
        Ok(env.vars)
    }

    /// Upstream `getServiceEnvVarMap` for `pod`, after its `serviceHasSynced` check.
    /// `enableServiceLinks` unset counts as `true`, its API default.
    fn service_env(&self, pod: &Pod) -> Result<BTreeMap<String, String>, Error> {
        let Some(services) = &self.services else {
            return Ok(BTreeMap::new());
        };
        if !is_static_pod(pod) && !services.has_synced() {
            return Err(Error::ServicesNotSynced);
        }
        let enable_service_links = pod
            .spec
            .as_ref()
            .and_then(|s| s.enable_service_links)
            .unwrap_or(true);
        Ok(service_env_var_map(
            &services.list(),
            pod.namespace_or_default(),
            enable_service_links,
        ))
    }

    /// One `valueFrom`; `None` when an optional source is missing (the variable is skipped).
    async fn value_from(
        &self,
        fetched: &mut Fetched,
        pod: &Pod,
        container: &Container,
        pod_ips: &[String],
        from: &EnvVarSource,
    ) -> Result<Option<String>, Error> {
        let namespace = pod.namespace_or_default();
        if let Some(f) = &from.field_ref {
            return self
                .pod_field_selector_runtime_value(f, pod, pod_ips)
                .map(Some);
        }
        if let Some(r) = &from.resource_field_ref {
            let value = if r.container_name.as_deref().is_none_or(str::is_empty) {
                container_resource_value(container, r, &self.allocatable)
            } else {
                resource_value_by_container_name(pod, r, &self.allocatable)
            };
            return Ok(Some(value?));
        }
        if let Some(r) = &from.config_map_key_ref {
            let optional = r.optional.unwrap_or(false);
            let Some(cm) = self
                .config_map(fetched, namespace, &r.name, optional)
                .await?
            else {
                return Ok(None);
            };
            return match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
                Some(v) => Ok(Some(v.clone())),
                None if optional => Ok(None),
                None => Err(Error::MissingKey {
                    kind: "ConfigMap",
                    namespace: namespace.to_owned(),
                    name: r.name.clone(),
                    key: r.key.clone(),
                }),
            };
        }
        if let Some(r) = &from.secret_key_ref {
            let optional = r.optional.unwrap_or(false);
            let Some(s) = self.secret(fetched, namespace, &r.name, optional).await? else {
                return Ok(None);
            };
            return match s.data.as_ref().and_then(|d| d.get(&r.key)) {
                Some(v) => Ok(Some(String::from_utf8_lossy(&v.0).into_owned())),
                None if optional => Ok(None),
                None => Err(Error::MissingKey {
                    kind: "Secret",
                    namespace: namespace.to_owned(),
                    name: r.name.clone(),
                    key: r.key.clone(),
                }),
            };
        }
        Ok(Some(String::new()))
    }

    /// Upstream `podFieldSelectorRuntimeValue`.
    fn pod_field_selector_runtime_value(
        &self,
        f: &ObjectFieldSelector,
        pod: &Pod,
        pod_ips: &[String],
    ) -> Result<String, Error> {
        if let Some(v) = f
            .api_version
            .as_deref()
            .filter(|v| !v.is_empty() && *v != "v1")
        {
            return Err(Error::UnsupportedPodVersion(v.to_owned()));
        }
        let spec = pod.spec.as_ref();
        let path = f.field_path.as_str();
        let pod_ips = sort_pod_ips(pod_ips, &self.host_ips);
        Ok(match path {
            "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
            "spec.serviceAccountName" => spec
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_default(),
            "status.hostIP" => self.host_ips()?[0].clone(),
            "status.hostIPs" => self.host_ips()?.join(","),
            "status.podIP" => pod_ips.first().cloned().unwrap_or_default(),
            "status.podIPs" => pod_ips.join(","),
            "metadata.name"
            | "metadata.namespace"
            | "metadata.uid"
            | "metadata.labels"
            | "metadata.annotations" => extract_field_path_as_string(pod, path)?,
            p if (p.starts_with("metadata.labels['")
                || p.starts_with("metadata.annotations['"))
                && p.ends_with("']") =>
            {
                extract_field_path_as_string(pod, path)?
            }
            other => return Err(Error::UnsupportedFieldLabel(other.to_owned())),
        })
    }

    /// Upstream `getHostIPsAnyWay`: an error when the node has no IP.
    fn host_ips(&self) -> Result<&[String], Error> {
        if self.host_ips.is_empty() {
            return Err(Error::NoHostIp);
        }
        Ok(&self.host_ips)
    }

    async fn config_map(
        &self,
        fetched: &mut Fetched,
        namespace: &str,
        name: &str,
        optional: bool,
    ) -> Result<Option<ConfigMap>, Error> {
        if !fetched.config_maps.contains_key(name) {
            let cm = self
                .objects
                .config_map(namespace, name)
                .await
                .map_err(|source| Error::Fetch {
                    kind: "ConfigMap",
                    name: name.to_owned(),
                    source,
                })?;
            fetched.config_maps.insert(name.to_owned(), cm);
        }
        match fetched.config_maps.get(name).cloned().flatten() {
            Some(cm) => Ok(Some(cm)),
            None if optional => Ok(None),
            None => Err(Error::ConfigMapNotFound(name.to_owned())),
        }
    }

    async fn secret(
        &self,
        fetched: &mut Fetched,
        namespace: &str,
        name: &str,
        optional: bool,
    ) -> Result<Option<Secret>, Error> {
        if !fetched.secrets.contains_key(name) {
            let s = self
                .objects
                .secret(namespace, name)
                .await
                .map_err(|source| Error::Fetch {
                    kind: "Secret",
                    name: name.to_owned(),
                    source,
                })?;
            fetched.secrets.insert(name.to_owned(), s);
        }
        match fetched.secrets.get(name).cloned().flatten() {
            Some(s) => Ok(Some(s)),
            None if optional => Ok(None),
            None => Err(Error::SecretNotFound(name.to_owned())),
        }
    }
}

/// Upstream `IsEnvVarName`: `[-._a-zA-Z][-._a-zA-Z0-9]*`.
pub fn is_env_var_name(s: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    s.chars()
        .next()
        .is_some_and(|c| ok(c) && !c.is_ascii_digit())
        && s.chars().all(ok)
}

/// Upstream `sortPodIPs`: the first pod IP of the node's primary family, then the first of
/// the other family.
fn sort_pod_ips(ips: &[String], host_ips: &[String]) -> Vec<String> {
    let parsed: Vec<(IpAddr, &String)> = ips
        .iter()
        .filter_map(|s| s.parse::<IpAddr>().ok().map(|ip| (ip, s)))
        .collect();
    let v6_first = host_ips
        .first()
        .and_then(|h| h.parse::<IpAddr>().ok())
        .is_some_and(|ip| ip.is_ipv6());
    let first_of = |v6: bool| {
        parsed
            .iter()
            .find(|(ip, _)| ip.is_ipv6() == v6)
            .map(|(_, s)| (*s).clone())
    };
    first_of(v6_first)
        .into_iter()
        .chain(first_of(!v6_first))
        .collect()
}

#[cfg(test)]
mod tests;
