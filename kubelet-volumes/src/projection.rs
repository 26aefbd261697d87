//! Payloads of the projected volume plugins: configMap, secret, downwardAPI and projected
//! (upstream `pkg/volume/configmap`, `pkg/volume/secret`, `pkg/volume/downwardapi`,
//! `pkg/volume/projected`, `pkg/fieldpath`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret};
use kubelet_core::fieldpath::extract_field_path_as_string;
use kubelet_core::objects::{ObjectSource, TokenRequest};
use kubelet_core::resources::{NodeAllocatable, resource_value_by_container_name};

use crate::atomic_writer::{FileProjection, Payload};
use crate::error::{Error, ObjectKind, Result};

/// Upstream's default mode for configMap, secret, downwardAPI and projected files.
pub const DEFAULT_MODE: i32 = 0o644;

/// Upstream's default `expirationSeconds` of a projected service-account token.
pub const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;

fn mode_of(mode: Option<i32>, default_mode: Option<i32>) -> u32 {
    u32::try_from(mode.or(default_mode).unwrap_or(DEFAULT_MODE) & 0o777).unwrap_or(0o644)
}

/// Maps `data` through `items` (all keys when `items` is empty), as upstream's
/// `MakePayload` for configMaps and secrets. A missing item key is an error unless `optional`.
fn project_keys(
    kind: ObjectKind,
    name: &str,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    optional: bool,
    out: &mut Payload,
) -> Result<()> {
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                let Some(value) = data.get(&item.key) else {
                    if optional {
                        continue;
                    }
                    return Err(Error::MissingKey {
                        kind,
                        name: name.to_owned(),
                        key: item.key.clone(),
                    });
                };
                out.insert(
                    item.path.clone(),
                    FileProjection {
                        data: value.clone(),
                        mode: mode_of(item.mode, default_mode),
                        fs_user: None,
                    },
                );
            }
        }
        _ => {
            for (k, v) in data {
                out.insert(
                    k.clone(),
                    FileProjection {
                        data: v.clone(),
                        mode: mode_of(None, default_mode),
                        fs_user: None,
                    },
                );
            }
        }
    }
    Ok(())
}

fn config_map_data(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    for (k, v) in cm.binary_data.iter().flatten() {
        data.insert(k.clone(), v.0.clone());
    }
    data
}

fn secret_data(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = s
        .string_data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    for (k, v) in s.data.iter().flatten() {
        data.insert(k.clone(), v.0.clone());
    }
    data
}

/// A configMap source: `(name, items, optional)`.
pub struct ObjectRef<'a> {
    /// Object name.
    pub name: &'a str,
    /// `items`.
    pub items: Option<&'a [KeyToPath]>,
    /// `optional`.
    pub optional: bool,
}

/// Adds a configMap's files to `out`. A missing object is an error unless `optional`.
pub async fn config_map(
    objects: &dyn ObjectSource,
    namespace: &str,
    r: ObjectRef<'_>,
    default_mode: Option<i32>,
    out: &mut Payload,
) -> Result<()> {
    let cm = objects
        .config_map(namespace, r.name)
        .await
        .map_err(|source| Error::GetObject {
            kind: ObjectKind::ConfigMap,
            namespace: namespace.to_owned(),
            name: r.name.to_owned(),
            source,
        })?;
    match cm {
        Some(cm) => project_keys(
            ObjectKind::ConfigMap,
            r.name,
            &config_map_data(&cm),
            r.items,
            default_mode,
            r.optional,
            out,
        ),
        None if r.optional => Ok(()),
        None => Err(Error::ObjectNotFound {
            kind: ObjectKind::ConfigMap,
            namespace: namespace.to_owned(),
            name: r.name.to_owned(),
        }),
    }
}

/// Adds a secret's files to `out`. A missing object is an error unless `optional`.
pub async fn secret(
    objects: &dyn ObjectSource,
    namespace: &str,
    r: ObjectRef<'_>,
    default_mode: Option<i32>,
    out: &mut Payload,
) -> Result<()> {
    let s = objects
        .secret(namespace, r.name)
        .await
        .map_err(|source| Error::GetObject {
            kind: ObjectKind::Secret,
            namespace: namespace.to_owned(),
            name: r.name.to_owned(),
            source,
        })?;
    match s {
        Some(s) => project_keys(
            ObjectKind::Secret,
            r.name,
            &secret_data(&s),
            r.items,
            default_mode,
            r.optional,
            out,
        ),
        None if r.optional => Ok(()),
        None => Err(Error::ObjectNotFound {
            kind: ObjectKind::Secret,
            namespace: namespace.to_owned(),
            name: r.name.to_owned(),
        }),
    }
}

/// Adds a bound service-account token at `path`, from `tokens` (refreshed as upstream), with
/// the mode and owner of [`crate::ownership::token_file`].
#[allow(clippy::too_many_arguments)]
pub async fn service_account_token(
    objects: &dyn ObjectSource,
    tokens: &crate::token::TokenCache,
    pod: &Pod,
    audience: Option<&str>,
    expiration_seconds: Option<i64>,
    path: &str,
    default_mode: Option<i32>,
    out: &mut Payload,
) -> Result<()> {
    let (mode, fs_user) = crate::ownership::token_file(pod, mode_of(None, default_mode));
    let meta = &pod.metadata;
    let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
    let service_account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into());
    let request = TokenRequest {
        namespace,
        service_account: service_account.clone(),
        audience: audience.unwrap_or("").to_owned(),
        expiration_seconds: expiration_seconds.unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS),
        pod_name: meta.name.clone().unwrap_or_default(),
        pod_uid: meta.uid.clone().unwrap_or_default(),
    };
    let token = tokens
        .get(objects, &request)
        .await
        .map_err(|source| Error::Token {
            service_account: service_account.clone(),
            source,
        })?
        .ok_or_else(|| Error::NoToken(service_account.clone()))?;
    out.insert(
        path.to_owned(),
        FileProjection {
            data: token.into_bytes(),
            mode,
            fs_user,
        },
    );
    Ok(())
}

/// Adds downwardAPI files to `out`. `node_allocatable` gives the `limits.*` a container does
/// not set, as upstream.
pub fn downward_api(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i32>,
    node_allocatable: &NodeAllocatable,
    out: &mut Payload,
) -> Result<()> {
    for item in items {
        let value = if let Some(field) = &item.field_ref {
            extract_field_path_as_string(pod, &field.field_path)?
        } else if let Some(res) = &item.resource_field_ref {
            resource_value_by_container_name(pod, res, node_allocatable)?
        } else {
            return Err(Error::EmptyDownwardApiItem(item.path.clone()));
        };
        out.insert(
            item.path.clone(),
            FileProjection {
                data: value.into_bytes(),
                mode: mode_of(item.mode, default_mode),
                fs_user: None,
            },
        );
    }
    Ok(())
}
