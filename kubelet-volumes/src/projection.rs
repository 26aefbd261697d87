//! Payloads of the projected volume plugins: configMap, secret, downwardAPI and projected
//! (upstream `pkg/volume/configmap`, `pkg/volume/secret`, `pkg/volume/downwardapi`,
//! `pkg/volume/projected`, `pkg/fieldpath`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, ResourceFieldSelector, Secret,
};
use kubelet_core::objects::{ObjectSource, TokenRequest};

use crate::atomic_writer::{FileProjection, Payload};

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
    kind: &str,
    name: &str,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    optional: bool,
    out: &mut Payload,
) -> Result<(), String> {
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                let Some(value) = data.get(&item.key) else {
                    if optional {
                        continue;
                    }
                    return Err(format!(
                        "{kind} {name:?} references non-existent key {:?}",
                        item.key
                    ));
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
) -> Result<(), String> {
    let cm = objects
        .config_map(namespace, r.name)
        .await
        .map_err(|e| format!("couldn't get configMap {namespace}/{}: {e}", r.name))?;
    match cm {
        Some(cm) => project_keys(
            "configMap",
            r.name,
            &config_map_data(&cm),
            r.items,
            default_mode,
            r.optional,
            out,
        ),
        None if r.optional => Ok(()),
        None => Err(format!(
            "couldn't get configMap {namespace}/{}: configmap {:?} not found",
            r.name, r.name
        )),
    }
}

/// Adds a secret's files to `out`. A missing object is an error unless `optional`.
pub async fn secret(
    objects: &dyn ObjectSource,
    namespace: &str,
    r: ObjectRef<'_>,
    default_mode: Option<i32>,
    out: &mut Payload,
) -> Result<(), String> {
    let s = objects
        .secret(namespace, r.name)
        .await
        .map_err(|e| format!("couldn't get secret {namespace}/{}: {e}", r.name))?;
    match s {
        Some(s) => project_keys(
            "secret",
            r.name,
            &secret_data(&s),
            r.items,
            default_mode,
            r.optional,
            out,
        ),
        None if r.optional => Ok(()),
        None => Err(format!(
            "couldn't get secret {namespace}/{}: secret {:?} not found",
            r.name, r.name
        )),
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
) -> Result<(), String> {
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
        .map_err(|e| format!("fetching token for service account {service_account:?}: {e}"))?
        .ok_or_else(|| format!("service account {service_account:?} has no token"))?;
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

/// Adds downwardAPI files to `out`. `node_allocatable` gives (cpu cores, memory bytes) used
/// for `limits.*` when the container sets no limit, as upstream.
pub fn downward_api(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i32>,
    node_allocatable: (f64, f64),
    out: &mut Payload,
) -> Result<(), String> {
    for item in items {
        let value = if let Some(field) = &item.field_ref {
            field_value(pod, &field.field_path)?
        } else if let Some(res) = &item.resource_field_ref {
            resource_value(pod, res, node_allocatable)?
        } else {
            return Err(format!(
                "downwardAPI item {:?} has neither fieldRef nor resourceFieldRef",
                item.path
            ));
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

/// Upstream `fieldpath.ExtractFieldPathAsString` for the fields a volume may use.
fn field_value(pod: &Pod, path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    let empty = BTreeMap::new();
    let labels = meta.labels.as_ref().unwrap_or(&empty);
    let annotations = meta.annotations.as_ref().unwrap_or(&empty);
    if let Some(k) = subscript(path, "metadata.labels") {
        return Ok(labels.get(k).cloned().unwrap_or_default());
    }
    if let Some(k) = subscript(path, "metadata.annotations") {
        return Ok(annotations.get(k).cloned().unwrap_or_default());
    }
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_else(|| "default".into()),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(labels),
        "metadata.annotations" => format_map(annotations),
        other => return Err(format!("unsupported downwardAPI fieldPath {other:?}")),
    })
}

fn subscript<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    path.strip_prefix(prefix)?
        .strip_prefix("['")?
        .strip_suffix("']")
}

/// Upstream `fieldpath.FormatMap`: `key="value"` lines sorted by key, values quoted as Go's
/// `%q`, no trailing newline.
pub fn format_map(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Go's `strconv.Quote`.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                let n = c as u32;
                if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Parses a Kubernetes quantity (`100m`, `1.5`, `64Mi`, `1G`, `2e3`) into its value.
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let suffixes: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024.0f64.powi(4)),
        ("Pi", 1024.0f64.powi(5)),
        ("Ei", 1024.0f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    for (suffix, mult) in suffixes {
        if let Some(num) = s.strip_suffix(suffix) {
            return num.parse::<f64>().ok().map(|n| n * mult);
        }
    }
    for (suffix, mult) in [("P", 1e15), ("E", 1e18)] {
        if let Some(num) = s.strip_suffix(suffix) {
            return num.parse::<f64>().ok().map(|n| n * mult);
        }
    }
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Upstream `resource.ExtractContainerResourceValue` (limits fall back to node allocatable).
fn resource_value(
    pod: &Pod,
    r: &ResourceFieldSelector,
    (cpu, memory): (f64, f64),
) -> Result<String, String> {
    let name = r.container_name.as_deref().unwrap_or("");
    let container = pod
        .spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .find(|c| c.name == name)
        .ok_or_else(|| format!("resourceFieldRef: container {name:?} not found in the pod"))?;
    let resources = container.resources.as_ref();
    let (map, which) = match r.resource.split_once('.') {
        Some(("limits", res)) => (resources.and_then(|r| r.limits.as_ref()), res),
        Some(("requests", res)) => (resources.and_then(|r| r.requests.as_ref()), res),
        _ => return Err(format!("unsupported resourceFieldRef {:?}", r.resource)),
    };
    let set = map
        .and_then(|m| m.get(which))
        .map(|q| parse_quantity(&q.0).ok_or_else(|| format!("invalid quantity {:?}", q.0)))
        .transpose()?;
    let is_limit = r.resource.starts_with("limits.");
    let value = match (set, which) {
        (Some(v), _) => v,
        (None, "cpu") if is_limit => cpu,
        (None, "memory") if is_limit => memory,
        (None, "cpu" | "memory" | "ephemeral-storage") => 0.0,
        (None, other) => return Err(format!("unsupported resource {other:?}")),
    };
    let divisor = match r.divisor.as_ref() {
        Some(d) => parse_quantity(&d.0).ok_or_else(|| format!("invalid divisor {:?}", d.0))?,
        None => 1.0,
    };
    if divisor <= 0.0 {
        return Err("resourceFieldRef divisor must be positive".into());
    }
    let result = if which == "cpu" {
        // Upstream works in milli-units for CPU.
        ((value * 1000.0).round() / (divisor * 1000.0).round()).ceil()
    } else {
        (value / divisor).ceil()
    };
    Ok(format!("{result:.0}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_map_matches_upstream() {
        let m: BTreeMap<String, String> = [
            ("b".to_owned(), "two \"q\"\n".to_owned()),
            ("a".to_owned(), "one".to_owned()),
        ]
        .into();
        assert_eq!(format_map(&m), "a=\"one\"\nb=\"two \\\"q\\\"\\n\"");
        assert_eq!(format_map(&BTreeMap::new()), "");
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("100m"), Some(0.1));
        assert_eq!(parse_quantity("64Mi"), Some(64.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("1G"), Some(1e9));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("x"), None);
    }
}
