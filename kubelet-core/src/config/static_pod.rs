//! Decoding, defaulting and validation of one static pod manifest.
//!
//! Mirrors upstream `pkg/kubelet/config/common.go` (`applyDefaults`, `tryDecodeSinglePod`,
//! `generatePodName`) and the manifest reading of `pkg/kubelet/config/file.go`
//! (`extractFromFile`).
//!
//! A manifest is one YAML or JSON document holding a `v1` `Pod`. It is read with a hard size
//! cap ([`MAX_MANIFEST_BYTES`]) *before* parsing, and YAML is parsed with `serde-saphyr`
//! budgets (nesting depth, aliases, anchors, replayed alias events) so that alias bombs and deep
//! nesting are rejected quickly. Parsing never panics; every failure is an [`Error`] that names
//! the file and the reason.
//!
//! # UID
//!
//! As upstream, a manifest without `metadata.uid` gets a UID that is stable across kubelet
//! restarts: the lowercase hex of a 128-bit FNV-1a hash ([`Fnv128a`]) over, in order, the bytes
//! of `host:<node name>`, `file:<manifest path>` and the compact JSON serialisation of the pod
//! as decoded (before defaults). Comments and formatting do not change the UID; any change to
//! the pod's content, the node name or the file path does, so editing a manifest makes a *new*
//! pod (upstream behaves the same way). Upstream hashes with md5/fnv over Go's deep-hash of the
//! object, so the values differ from upstream's, but the properties are the same.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, PodStatus, Toleration};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::validate::{self, FieldError, ValidationErrors};
use super::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, FILE_SOURCE};

/// Largest manifest accepted, in bytes (upstream `maxConfigLength`, 10 MiB).
pub const MAX_MANIFEST_BYTES: u64 = 10 * 1024 * 1024;

/// Longest parser message kept in [`Error::Parse`]; parser messages may quote the input.
const MAX_REASON_LEN: usize = 512;

/// Why a manifest was rejected. Every variant names the manifest file.
///
/// None of these is retryable as such: the file source logs the error, leaves the file out of
/// its snapshot and reads it again when it changes or at the next periodic rescan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened or read.
    #[error("{path}: could not read manifest: {source}", path = path.display())]
    Read {
        /// The manifest file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The file is larger than [`MAX_MANIFEST_BYTES`]; it was not parsed.
    #[error("{path}: manifest is larger than {MAX_MANIFEST_BYTES} bytes", path = path.display())]
    TooLarge {
        /// The manifest file.
        path: PathBuf,
    },
    /// The file is empty or holds only whitespace.
    #[error("{path}: empty manifest", path = path.display())]
    Empty {
        /// The manifest file.
        path: PathBuf,
    },
    /// The file is not valid YAML/JSON for a pod, or it exceeded a parser budget.
    #[error("{path}: couldn't parse as pod: {reason}", path = path.display())]
    Parse {
        /// The manifest file.
        path: PathBuf,
        /// The parser's message, truncated to 512 bytes.
        reason: String,
    },
    /// The document is some other object than a `v1` `Pod`.
    #[error(
        "{path}: couldn't parse as pod: kind {kind:?} apiVersion {api_version:?}, \
         want kind \"Pod\" apiVersion \"v1\"",
        path = path.display()
    )]
    NotAPod {
        /// The manifest file.
        path: PathBuf,
        /// The document's `kind` (empty if missing).
        kind: String,
        /// The document's `apiVersion` (empty if missing).
        api_version: String,
    },
    /// The pod failed validation.
    #[error("{path}: invalid pod: {errors}", path = path.display())]
    Invalid {
        /// The manifest file.
        path: PathBuf,
        /// Every failed check, with its field path.
        errors: ValidationErrors,
    },
    /// The pod references an API object, which static pods may not do (upstream
    /// `PreventStaticPodAPIReferences`).
    #[error("{path}: static pods may not reference {resource}", path = path.display())]
    ApiReference {
        /// The manifest file.
        path: PathBuf,
        /// The referenced resource, e.g. `secrets` (see [`validate::api_object_reference`]).
        resource: &'static str,
    },
    /// The directory entry is not a regular file (a directory, FIFO, socket, device); the file
    /// source does not recurse into directories.
    #[error("{path}: not a regular file ({file_type}), skipping", path = path.display())]
    NotAFile {
        /// The entry.
        path: PathBuf,
        /// What it is instead, e.g. `directory`.
        file_type: &'static str,
    },
    /// Another manifest, earlier in sorted order, already provides a pod with this full name
    /// (`<name>_<namespace>`); the first one wins (upstream `filterInvalidPods`).
    #[error(
        "{path}: duplicate pod name {name:?} (already provided by {first}), ignoring",
        path = path.display(),
        first = first.display()
    )]
    DuplicateName {
        /// The manifest that was ignored.
        path: PathBuf,
        /// The pod's full name, `<name>_<namespace>`.
        name: String,
        /// The manifest that provides the pod.
        first: PathBuf,
    },
    /// Another manifest, earlier in sorted order, already provides a pod with this UID (both
    /// set the same explicit `metadata.uid`); the first one wins.
    #[error(
        "{path}: duplicate pod uid {uid:?} (already provided by {first}), ignoring",
        path = path.display(),
        first = first.display()
    )]
    DuplicateUid {
        /// The manifest that was ignored.
        path: PathBuf,
        /// The UID.
        uid: String,
        /// The manifest that provides the pod.
        first: PathBuf,
    },
}

impl Error {
    /// The manifest file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Error::Read { path, .. }
            | Error::TooLarge { path }
            | Error::Empty { path }
            | Error::Parse { path, .. }
            | Error::NotAPod { path, .. }
            | Error::Invalid { path, .. }
            | Error::ApiReference { path, .. }
            | Error::NotAFile { path, .. }
            | Error::DuplicateName { path, .. }
            | Error::DuplicateUid { path, .. } => path,
        }
    }
}

/// Result of decoding a manifest.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The 128-bit FNV-1a hash (offset basis `0x6c62272e07bb014262b821756295c58d`, prime
/// `2^88 + 0x13b`), as Go's `hash/fnv.New128a`. Deterministic across runs and platforms,
/// unlike `std`'s randomly seeded hasher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv128a(u128);

impl Fnv128a {
    const OFFSET_BASIS: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

    /// A hasher in its initial state.
    pub fn new() -> Self {
        Self(Self::OFFSET_BASIS)
    }

    /// Feeds `bytes` into the hash.
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u128::from(*b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    /// The hash so far.
    pub fn finish(&self) -> u128 {
        self.0
    }

    /// The hash so far as 32 lowercase hex digits.
    pub fn hex(&self) -> String {
        format!("{:032x}", self.0)
    }
}

impl Default for Fnv128a {
    fn default() -> Self {
        Self::new()
    }
}

/// Reads and decodes the manifest at `path` for node `node_name`: at most
/// [`MAX_MANIFEST_BYTES`] + 1 bytes are read, then [`decode`] runs.
///
/// The caller should have checked that `path` is a regular file (opening a FIFO blocks); this
/// function checks again on the opened file and rejects anything else. Blocking.
// Reviewed (issue 16): blocking by contract; `file::scan` calls it, in spawn_blocking.
#[allow(clippy::disallowed_methods)]
pub fn read_manifest(path: &Path, node_name: &str) -> Result<Pod> {
    let read_err = |source| Error::Read {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(Error::NotAFile {
            path: path.to_owned(),
            file_type: file_type_name(&meta.file_type()),
        });
    }
    if meta.len() > MAX_MANIFEST_BYTES {
        return Err(Error::TooLarge {
            path: path.to_owned(),
        });
    }
    let mut data = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(read_err)?;
    decode(&data, path, node_name)
}

/// A short name for a file type, for [`Error::NotAFile`].
pub(crate) fn file_type_name(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "fifo"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "device"
    } else if ft.is_symlink() {
        "symlink"
    } else {
        "unknown file type"
    }
}

/// Decodes one manifest read from `path`, applies the static pod defaults for `node_name`
/// ([`apply_defaults`]) and validates it (upstream `tryDecodeSinglePod`).
///
/// `data` is JSON if its first non-whitespace byte is `{`, YAML otherwise. The document must
/// be a single `kind: Pod` with `apiVersion: v1`.
pub fn decode(data: &[u8], path: &Path, node_name: &str) -> Result<Pod> {
    let path_buf = || path.to_owned();
    if data.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(Error::TooLarge { path: path_buf() });
    }
    let data = data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data);
    let Some(first) = data.iter().find(|b| !b.is_ascii_whitespace()) else {
        return Err(Error::Empty { path: path_buf() });
    };
    let parse_err = |reason: String| Error::Parse {
        path: path_buf(),
        reason: truncate(reason, MAX_REASON_LEN),
    };

    let (meta, pod): (TypeMeta, std::result::Result<Pod, String>) = if *first == b'{' {
        let meta =
            serde_json::from_slice::<TypeMeta>(data).map_err(|e| parse_err(e.to_string()))?;
        (
            meta,
            serde_json::from_slice(data).map_err(|e| e.to_string()),
        )
    } else {
        let meta = serde_saphyr::from_slice_with_options::<TypeMeta>(data, yaml_options())
            .map_err(|e| parse_err(e.to_string()))?;
        let pod = serde_saphyr::from_slice_with_options(data, yaml_options());
        (meta, pod.map_err(|e| e.to_string()))
    };
    let kind = meta.kind.unwrap_or_default();
    let api_version = meta.api_version.unwrap_or_default();
    if kind != "Pod" || api_version != "v1" {
        return Err(Error::NotAPod {
            path: path_buf(),
            kind: truncate(kind, 64),
            api_version: truncate(api_version, 64),
        });
    }
    let mut pod = pod.map_err(parse_err)?;

    if pod.metadata.name.as_deref().is_none_or(str::is_empty) {
        return Err(Error::Invalid {
            path: path_buf(),
            errors: ValidationErrors(vec![FieldError {
                field: "metadata.name".into(),
                detail: "Required value: name is needed for the pod".into(),
            }]),
        });
    }

    apply_defaults(&mut pod, path, node_name);

    validate::validate_pod(&pod).map_err(|errors| Error::Invalid {
        path: path_buf(),
        errors,
    })?;
    if let Some(resource) = validate::api_object_reference(&pod) {
        return Err(Error::ApiReference {
            path: path_buf(),
            resource,
        });
    }
    Ok(pod)
}

/// Applies upstream's static pod defaults (`applyDefaults` with `isFile = true`):
///
/// - `metadata.uid`, if empty, is the stable hash described in the [module docs](self);
/// - `metadata.name` becomes `<name>-<lowercase node name>`;
/// - `metadata.namespace` defaults to `default`;
/// - `spec.nodeName` is `node_name`;
/// - annotations [`CONFIG_HASH_ANNOTATION`] = UID and [`CONFIG_SOURCE_ANNOTATION`] = `file`;
/// - a `NoExecute` / `Exists` toleration is added unless present;
/// - `status.phase` is `Pending`.
///
/// The first-seen annotation ([`super::CONFIG_SEEN_ANNOTATION`]) is left to the file source,
/// which keeps it stable across rescans.
pub fn apply_defaults(pod: &mut Pod, path: &Path, node_name: &str) {
    if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
        pod.metadata.uid = Some(static_pod_uid(pod, path, node_name));
    }
    let name = pod.metadata.name.take().unwrap_or_default();
    pod.metadata.name = Some(format!("{name}-{}", node_name.to_lowercase()));
    if pod.metadata.namespace.as_deref().is_none_or(str::is_empty) {
        pod.metadata.namespace = Some("default".into());
    }

    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node_name.to_owned());
    let toleration = Toleration {
        operator: Some("Exists".into()),
        effect: Some("NoExecute".into()),
        ..Default::default()
    };
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    if !tolerations.contains(&toleration) {
        tolerations.push(toleration);
    }

    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let annotations = pod
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(CONFIG_HASH_ANNOTATION.into(), uid);
    annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), FILE_SOURCE.into());

    pod.status.get_or_insert_with(PodStatus::default).phase = Some("Pending".into());
}

/// The stable UID of a decoded static pod: see the [module docs](self).
fn static_pod_uid(pod: &Pod, path: &Path, node_name: &str) -> String {
    let mut h = Fnv128a::new();
    h.write(b"host:");
    h.write(node_name.as_bytes());
    h.write(b"file:");
    h.write(path.as_os_str().as_encoded_bytes());
    match serde_json::to_vec(pod) {
        Ok(json) => h.write(&json),
        // Serialising a decoded pod cannot fail; keep the UID deterministic regardless.
        Err(_) => h.write(format!("{pod:?}").as_bytes()),
    }
    h.hex()
}

/// Parser options for manifests: tight budgets against alias bombs and deep nesting, and no
/// source snippets in error messages (they could quote a file that is not a manifest, e.g. a
/// symlink to a secret).
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: 64,
            max_documents: 1,
            max_aliases: 1_000,
            max_anchors: 1_000,
            max_recorded_anchor_events: 100_000,
            max_nodes: 250_000,
            max_merge_keys: 1_000,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 100_000,
            max_replay_stack_depth: 16,
            max_alias_expansions_per_anchor: 1_000,
        },
        with_snippet: false,
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

/// `apiVersion` and `kind` of a document, read before the full decode so that a wrong kind
/// gets a clear error. Its visitor never echoes a scalar document (which could be a secret).
#[derive(Debug, Default)]
struct TypeMeta {
    api_version: Option<String>,
    kind: Option<String>,
}

impl<'de> serde::Deserialize<'de> for TypeMeta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_map(TypeMetaVisitor)
    }
}

struct TypeMetaVisitor;

impl<'de> Visitor<'de> for TypeMetaVisitor {
    type Value = TypeMeta;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object (a mapping with apiVersion and kind)")
    }

    fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<TypeMeta, E> {
        Err(E::custom("the document is a scalar, not a mapping"))
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> std::result::Result<TypeMeta, E> {
        Err(E::custom("the document is a scalar, not a mapping"))
    }

    fn visit_unit<E: de::Error>(self) -> std::result::Result<TypeMeta, E> {
        Err(E::custom("the document is null, not a mapping"))
    }

    fn visit_none<E: de::Error>(self) -> std::result::Result<TypeMeta, E> {
        self.visit_unit()
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<TypeMeta, A::Error> {
        let mut meta = TypeMeta::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "apiVersion" => meta.api_version = Some(map.next_value()?),
                "kind" => meta.kind = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PodExt;

    const NODE: &str = "Node-1";

    const MANIFEST: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
  labels:
    tier: control-plane
spec:
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:3.5.15-0
    ports:
    - containerPort: 2379
    resources:
      requests:
        cpu: 100m
";

    fn decode_str(s: &str) -> Result<Pod> {
        decode(
            s.as_bytes(),
            Path::new("/etc/kubernetes/manifests/etcd.yaml"),
            NODE,
        )
    }

    #[test]
    fn fnv128a_known_vectors() {
        // Test vectors of Go's hash/fnv (golden128a) and the FNV reference.
        assert_eq!(Fnv128a::new().hex(), "6c62272e07bb014262b821756295c58d");
        let mut h = Fnv128a::new();
        h.write(b"a");
        assert_eq!(h.hex(), "d228cb696f1a8caf78912b704e4a8964");
    }

    #[test]
    fn decode_applies_upstream_defaults() {
        let pod = decode_str(MANIFEST).expect("valid manifest");
        assert_eq!(pod.name_or_empty(), "etcd-node-1");
        assert_eq!(pod.namespace_or_default(), "kube-system");
        // Golden: the UID must not change between runs, builds or platforms. Cross-checked
        // with an independent FNV-1a implementation over `host:Node-1`,
        // `file:/etc/kubernetes/manifests/etcd.yaml` and the pod's compact JSON.
        assert_eq!(pod.uid().as_str(), "9709df069a050f10f420812fde89a997");
        assert_eq!(
            pod.annotation(CONFIG_HASH_ANNOTATION),
            Some(pod.uid().as_str())
        );
        assert_eq!(pod.annotation(CONFIG_SOURCE_ANNOTATION), Some("file"));
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some(NODE));
        let tolerations = spec.tolerations.as_deref().unwrap_or_default();
        assert_eq!(
            tolerations,
            [Toleration {
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                ..Default::default()
            }]
        );
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        assert_eq!(phase, Some("Pending"));
        assert_eq!(
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("tier"))
                .map(String::as_str),
            Some("control-plane")
        );
    }

    #[test]
    fn uid_depends_on_content_node_and_path_but_not_formatting() {
        let base = decode_str(MANIFEST).expect("valid").uid();
        let reformatted = format!(
            "# a comment\n{}",
            MANIFEST.replace("cpu: 100m", "cpu: \"100m\"")
        );
        assert_eq!(decode_str(&reformatted).expect("valid").uid(), base);
        let edited = MANIFEST.replace("3.5.15-0", "3.5.16-0");
        assert_ne!(decode_str(&edited).expect("valid").uid(), base);
        let other_node = decode(
            MANIFEST.as_bytes(),
            Path::new("/etc/kubernetes/manifests/etcd.yaml"),
            "node-2",
        );
        assert_ne!(other_node.expect("valid").uid(), base);
        let other_path = decode(
            MANIFEST.as_bytes(),
            Path::new("/etc/kubernetes/manifests/x.yaml"),
            NODE,
        );
        assert_ne!(other_path.expect("valid").uid(), base);
    }

    #[test]
    fn explicit_uid_and_toleration_are_kept() {
        let m = MANIFEST
            .replace("  name: etcd\n", "  name: etcd\n  uid: my-uid\n")
            .replace(
                "  containers:\n",
                "  tolerations:\n  - operator: Exists\n    effect: NoExecute\n  containers:\n",
            );
        let pod = decode_str(&m).expect("valid");
        assert_eq!(pod.uid().as_str(), "my-uid");
        assert_eq!(
            pod.spec.and_then(|s| s.tolerations).map(|t| t.len()),
            Some(1)
        );
    }

    #[test]
    fn json_is_decoded_with_serde_json() {
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},
            "spec":{"containers":[{"name":"app","image":"nginx"}]}}"#;
        let pod = decode_str(json).expect("valid json");
        assert_eq!(pod.name_or_empty(), "web-node-1");
        assert_eq!(pod.namespace_or_default(), "default");
        let err = decode_str(r#"{"apiVersion":"v1","kind":"Pod","#).expect_err("truncated");
        assert!(matches!(err, Error::Parse { .. }), "{err}");
    }

    #[test]
    fn rejects_bad_manifests_naming_the_file_and_reason() {
        let cases: &[(&str, &str)] = &[
            ("", "empty manifest"),
            ("  \n\t\n", "empty manifest"),
            (
                "kind: Pod\napiVersion: v1\nmetadata: [unclosed",
                "couldn't parse as pod",
            ),
            (
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
                "kind \"Deployment\"",
            ),
            (
                "apiVersion: v1\nkind: PodList\nitems: []\n",
                "kind \"PodList\"",
            ),
            ("metadata: {name: x}\n", "kind \"\""),
            ("just a string", "couldn't parse as pod: expected mapping"),
            ("- a\n- b\n", "couldn't parse as pod: expected mapping"),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: 5}\n",
                "line 4",
            ),
            (
                "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: a, image: b}]}\n",
                "name is needed",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: []}\n",
                "spec.containers: Required value",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  volumes: [{name: s, secret: {secretName: s}}]\n  containers: [{name: a, image: b}]\n",
                "static pods may not reference secrets",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: a, image: b, envFrom: [{configMapRef: {name: c}}]}]\n",
                "static pods may not reference configmaps",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: a, image: b, env: [{name: K, valueFrom: {configMapKeyRef: {name: c, key: k, optional: true}}}]}]\n",
                "static pods may not reference configmaps",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  initContainers: [{name: i, image: b, env: [{name: K, valueFrom: {secretKeyRef: {name: s, key: k}}}]}]\n  containers: [{name: a, image: b}]\n",
                "static pods may not reference secrets",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  volumes: [{name: c, configMap: {name: c}}]\n  containers: [{name: a, image: b}]\n",
                "static pods may not reference configmaps",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  serviceAccountName: default\n  containers: [{name: a, image: b}]\n",
                "static pods may not reference serviceaccounts",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  volumes: [{name: d, persistentVolumeClaim: {claimName: c}}]\n  containers: [{name: a, image: b}]\n",
                "static pods may not reference persistentvolumeclaims",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  resourceClaims: [{name: gpu}]\n  containers: [{name: a, image: b}]\n",
                "static pods may not reference resourceclaims",
            ),
            (
                "---\napiVersion: v1\nkind: Pod\n---\napiVersion: v1\nkind: Pod\n",
                "couldn't parse as pod",
            ),
            ("\u{0}\u{1}\u{2}", "couldn't parse as pod"),
        ];
        for (input, want) in cases {
            let err = decode_str(input).expect_err(input).to_string();
            assert!(
                err.starts_with("/etc/kubernetes/manifests/etcd.yaml: "),
                "{input:?}: {err}"
            );
            assert!(err.contains(want), "{input:?}: got {err:?}, want {want:?}");
        }
        let err = decode(&[0xff, 0xfe, 0x00], Path::new("/m/bin"), NODE).expect_err("binary");
        assert!(matches!(err, Error::Parse { .. }), "{err}");
    }

    #[test]
    fn oversized_input_is_rejected_before_parsing() {
        let big = vec![b'a'; MAX_MANIFEST_BYTES as usize + 1];
        let err = decode(&big, Path::new("/m/big.yaml"), NODE).expect_err("too large");
        assert_eq!(
            err.to_string(),
            "/m/big.yaml: manifest is larger than 10485760 bytes"
        );
    }

    #[test]
    fn alias_bomb_is_rejected_fast() {
        let bomb = "\
apiVersion: v1
kind: Pod
metadata:
  name: lol
  annotations:
    a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
spec:
  containers: [{name: a, image: b}]
";
        // Refused by a budget, before expanding 9^9 nodes (no timed assertion: under CI load
        // any time limit flakes; the budget is what keeps it fast).
        let err = decode_str(bomb).expect_err("alias bomb");
        assert!(matches!(err, Error::Parse { .. }), "{err}");
        assert!(err.to_string().contains("budget breached"), "{err}");
    }

    #[test]
    fn deep_nesting_is_rejected() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(decode_str(&deep), Err(Error::Parse { .. })));
        // serde_json skips unknown fields iteratively and caps recursion at 128 levels.
        let deep_json = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"x\":{}{}}}",
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        assert!(decode_str(&deep_json).is_err());
        let mut block = String::from("apiVersion: v1\nkind: Pod\nmetadata:\n");
        for depth in 1..200 {
            block.push_str(&" ".repeat(depth * 2));
            block.push_str("a:\n");
        }
        assert!(matches!(decode_str(&block), Err(Error::Parse { .. })));
    }

    #[test]
    fn random_bytes_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
        let alphabet = b"apiVersion: v1\nkind: Pod\n{}[]-&*!|>'\"#%@`,?:\t \\\x00\xff";
        for i in 0..3_000 {
            let len = rng.random_range(0..400);
            let data: Vec<u8> = if i % 2 == 0 {
                (0..len).map(|_| rng.random()).collect()
            } else {
                let mut d = MANIFEST.as_bytes().to_vec();
                for _ in 0..rng.random_range(1..8) {
                    let at = rng.random_range(0..d.len());
                    d[at] = alphabet[rng.random_range(0..alphabet.len())];
                }
                d
            };
            let _ = decode(&data, Path::new("/m/fuzz"), NODE);
        }
    }
}
