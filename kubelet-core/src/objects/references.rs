//! The secrets and configMaps a pod references (upstream `VisitPodSecretNames` and
//! `VisitPodConfigmapNames` in `pkg/api/v1/pod/util.go`): what the object managers register
//! for a pod (`getSecretNames` in `pkg/kubelet/secret/secret_manager.go`,
//! `getConfigMapNames` in `pkg/kubelet/configmap/configmap_manager.go`) and what static pods
//! may not use.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, PodSpec};

type EnvRefs<'a> = (&'a Option<Vec<EnvVar>>, &'a Option<Vec<EnvFromSource>>);

/// `env` and `envFrom` of init, app and ephemeral containers.
fn all_containers(spec: &PodSpec) -> impl Iterator<Item = EnvRefs<'_>> {
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| (&c.env, &c.env_from));
    let app = spec.containers.iter().map(|c| (&c.env, &c.env_from));
    let eph = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|c| (&c.env, &c.env_from));
    init.chain(app).chain(eph)
}

/// Calls `visit` with the name of every secret `spec` references, as upstream
/// `VisitPodSecretNames`: image pull secrets, `secretKeyRef` and `envFrom.secretRef` of every
/// container, and the volume plugins that take a secret (secret, projected, and the secret
/// references of azureFile, cephfs, cinder, flexVolume, iscsi, rbd, scaleIO, storageos and
/// CSI). Names may repeat and may be empty, as in the spec.
pub fn visit_secret_names(spec: &PodSpec, mut visit: impl FnMut(&str)) {
    for r in spec.image_pull_secrets.iter().flatten() {
        visit(&r.name);
    }
    for (env, env_from) in all_containers(spec) {
        for from in env_from.iter().flatten() {
            if let Some(r) = &from.secret_ref {
                visit(&r.name);
            }
        }
        for var in env.iter().flatten() {
            if let Some(r) = var
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
            {
                visit(&r.name);
            }
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(s) = &v.secret {
            visit(s.secret_name.as_deref().unwrap_or(""));
        }
        for s in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(s) = &s.secret {
                visit(&s.name);
            }
        }
        if let Some(s) = &v.azure_file {
            visit(&s.secret_name);
        }
        if let Some(s) = &v.scale_io {
            visit(&s.secret_ref.name);
        }
        let refs = [
            v.cephfs.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.cinder.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.flex_volume.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.iscsi.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.rbd.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.storageos.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.csi
                .as_ref()
                .and_then(|s| s.node_publish_secret_ref.as_ref()),
        ];
        for r in refs.into_iter().flatten() {
            visit(&r.name);
        }
    }
}

/// Calls `visit` with the name of every configMap `spec` references, as upstream
/// `VisitPodConfigmapNames`: `configMapKeyRef` and `envFrom.configMapRef` of every
/// container, configMap volumes and projected configMap sources.
pub fn visit_config_map_names(spec: &PodSpec, mut visit: impl FnMut(&str)) {
    for (env, env_from) in all_containers(spec) {
        for from in env_from.iter().flatten() {
            if let Some(r) = &from.config_map_ref {
                visit(&r.name);
            }
        }
        for var in env.iter().flatten() {
            if let Some(r) = var
                .value_from
                .as_ref()
                .and_then(|v| v.config_map_key_ref.as_ref())
            {
                visit(&r.name);
            }
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(cm) = &v.config_map {
            visit(&cm.name);
        }
        for s in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &s.config_map {
                visit(&cm.name);
            }
        }
    }
}

/// The names of the secrets `spec` references (see [`visit_secret_names`]), empty names left
/// out: an object source watches these.
pub fn secret_names(spec: &PodSpec) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    visit_secret_names(spec, |n| {
        if !n.is_empty() {
            names.insert(n.to_owned());
        }
    });
    names
}

/// The names of the configMaps `spec` references (see [`visit_config_map_names`]), empty
/// names left out.
pub fn config_map_names(spec: &PodSpec) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    visit_config_map_names(spec, |n| {
        if !n.is_empty() {
            names.insert(n.to_owned());
        }
    });
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> PodSpec {
        serde_json::from_value(value).expect("pod spec")
    }

    #[test]
    fn every_reference_is_found() {
        let spec = spec(json!({
            "imagePullSecrets": [{"name": "pull"}],
            "initContainers": [{"name": "i", "env": [
                {"name": "A", "valueFrom": {"secretKeyRef": {"name": "init-env", "key": "k"}}}]}],
            "containers": [{"name": "c",
                "envFrom": [{"secretRef": {"name": "from-s"}}, {"configMapRef": {"name": "from-cm"}}],
                "env": [{"name": "B", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}}]}],
            "ephemeralContainers": [{"name": "e", "env": [
                {"name": "C", "valueFrom": {"secretKeyRef": {"name": "eph", "key": "k"}}}]}],
            "volumes": [
                {"name": "v1", "secret": {"secretName": "vol-s"}},
                {"name": "v2", "configMap": {"name": "vol-cm"}},
                {"name": "v3", "projected": {"sources": [
                    {"secret": {"name": "proj-s"}}, {"configMap": {"name": "proj-cm"}},
                    {"serviceAccountToken": {"path": "t"}}]}},
                {"name": "v4", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi"}}},
                {"name": "v5", "secret": {}},
            ],
        }));
        let secrets: Vec<String> = secret_names(&spec).into_iter().collect();
        assert_eq!(
            secrets,
            [
                "csi", "eph", "from-s", "init-env", "proj-s", "pull", "vol-s"
            ]
        );
        let cms: Vec<String> = config_map_names(&spec).into_iter().collect();
        assert_eq!(cms, ["env-cm", "from-cm", "proj-cm", "vol-cm"]);
        let mut visited = 0;
        visit_secret_names(&spec, |_| visited += 1);
        assert_eq!(
            visited, 8,
            "the empty secretName is visited too, as upstream"
        );
    }

    #[test]
    fn a_self_contained_pod_references_nothing() {
        let spec =
            spec(json!({"containers": [{"name": "c", "env": [{"name": "A", "value": "x"}]}]}));
        assert!(secret_names(&spec).is_empty());
        assert!(config_map_names(&spec).is_empty());
    }
}
